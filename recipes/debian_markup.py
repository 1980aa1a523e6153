"""The markup of Debian's documentation packages turned into plain text, for recipes/prepare_debian.py: GCIDE's
dictionary markup (`clean_gcide`: pronunciations, respellings, source tags, character codes), reStructuredText
(`rst_paras`: directives, headings, inline roles) and HTML pages (`PageText`: the visible text of a page's body).
Paragraphs come as (is a heading, text)."""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser

Para = tuple[bool, str]  # (is a heading, text)


def collapse(text: str) -> str:
    return " ".join(text.split())


MARKS = {
    "=": "\u0304",
    "-": "\u0304",
    ".": "\u0307",
    "'": "\u0301",
    "`": "\u0300",
    '"': "\u0308",
    "^": "\u0302",
    "~": "\u0303",
    ",": "\u0327",
    "*": "\u030a",
}
NAMED = {
    "ae": "æ",
    "AE": "Æ",
    "oe": "œ",
    "OE": "Œ",
    "imac": "ī",
    "aum": "ä",
    "eth": "ð",
    "thorn": "þ",
    "deg": "°",
    "root": "√",
    "ng": "ŋ",
    "sect": "§",
    "yogh": "ȝ",
    "pounds": "£",
    "add": "a\u0324",
    "udd": "u\u0324",
    "asl": "a",
    "=oo": "o\u035eo",
    "oo^": "o\u035do",
    "=ae": "ǣ",
    "dsdot": "d\u0323",
    "bprime": "″",
    "flat": "♭",
    "sharp": "♯",
}
GREEK = {
    (str.lower if c.islower() else str.capitalize)(unicodedata.name(c).split()[-1]): c
    for c in map(chr, range(0x391, 0x3CA))
    if c.isalpha()
}
SOURCE_TAG = re.compile(r"\[(?:[^\[\]]*(?:Webster|WordNet)[^\[\]]*|PJC\.?|RDH|RHUD|AS|MI11)\]")


def _char_code(m: re.Match[str]) -> str:
    code = m.group(1)
    if code in NAMED:
        return NAMED[code]
    if len(code) == 2 and code[0] in MARKS and code[1].isalpha():
        return code[1] + MARKS[code[0]]
    if len(code) == 2 and code[1] == "^" and code[0].isalpha():
        return code[0] + "\u0306"  # breve
    return GREEK.get(code, m.group(0))  # [alpha], [Delta]; [Obs.], [R.], [2] are real text, kept


def clean_gcide(text: str) -> str:
    text = re.sub(r"\s*\\[^\\\n]*\\", "", text)  # \Ca*lor"ic\ pronunciations
    text = re.sub(r"\([^()\s]*[*`\"][^()\s]*\)", "", text)  # (k[.a]*l[o^]r`...) respellings
    text = SOURCE_TAG.sub("", text).replace("{", "").replace("}", "")  # {cross-refs}
    text = re.sub(r"\[([^\[\]\s]{1,6})\]", _char_code, text)  # [=a] [ae] [alpha] character codes
    return unicodedata.normalize("NFC", collapse(text.replace("\ufffd", "")).replace(" ,", ","))


UNDERLINE = re.compile(r"^\s*([=\-~^\"'`#*+:.])\1{2,}\s*$")
TABLE_BORDER = re.compile(r"^\s*[+|]?(?=.*[-=]{3})[-=+|:\s]+$")
DIRECTIVE = re.compile(r"^(\s*)\.\.(?:\s+([\w:.-]+)::(.*)|\s.*|)$")  # `.. name:: arg`, comment, target
OPTION = re.compile(r"^\s+:[\w -]+:")
DROP_BODY = {
    "toctree",
    "kernel-doc",
    "include",
    "literalinclude",
    "image",
    "figure",
    "raw",
    "contents",
    "tabularcolumns",
    "cssclass",
    "highlight",
    "kernel-abi",
    "kernel-feat",
    "kernel-include",
    "index",
    "only",
    "code-block",
    "code",
    "sourcecode",
    None,
}
INLINE = [
    (re.compile(r":[\w:.+-]+:`([^`]*?)(?:\s+<[^`>]*>)?`"), r"\1"),
    (re.compile(r"``([^`]+)``"), r"\1"),
    (re.compile(r"`([^`<]+?)\s*(?:<[^`>]*>)?`__?"), r"\1"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"\1"),
    (re.compile(r"::$"), ":"),
]


def rst_paras(text: str) -> list[Para]:
    lines, paras, buf, i = text.splitlines() + [""], [], [], 0

    def flush(is_heading: bool = False) -> None:
        para = collapse(" ".join(buf))
        for pat, rep in INLINE:
            para = pat.sub(rep, para)
        if para:
            paras.append((is_heading, para))
        buf.clear()

    while i < len(lines) - 1:
        line, i = lines[i], i + 1
        m = DIRECTIVE.match(line)
        if m:  # drop the directive line and its options; also the body of toctree, comments etc.
            flush()
            base, name = len(m.group(1)), m.group(2)
            if name not in DROP_BODY and (m.group(3) or "").strip():
                buf.append(m.group(3))
                flush()
            while i < len(lines) - 1 and (not lines[i].strip() or lines[i][base : base + 1].isspace()):
                if lines[i].strip() and name not in DROP_BODY and not OPTION.match(lines[i]):
                    break  # body of an admonition etc.: keep it
                i += 1
        elif line.strip() and not UNDERLINE.match(line) and UNDERLINE.match(lines[i]):
            flush()
            buf.append(line)
            flush(is_heading=True)
            i += 1
        elif not line.strip():
            flush()
        elif not (UNDERLINE.match(line) or TABLE_BORDER.match(line)):
            buf.append(line)
    flush()
    return paras


HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})


class PageText(HTMLParser):
    SKIP_TAGS = frozenset({"script", "style", "nav", "head", "noscript", "template", "button"})
    SKIP_CLASSES = frozenset(
        {
            "sphinxsidebar",
            "related",
            "footer",
            "headerlink",
            "mobile-nav",
            "menu-wrapper",
            "inline-search",
            "version_switcher_placeholder",
            "language_switcher_placeholder",
        }
    )
    BLOCK = frozenset(
        {
            "p",
            "div",
            "pre",
            "li",
            "dt",
            "dd",
            "tr",
            "table",
            "section",
            "blockquote",
            "ul",
            "ol",
            "dl",
            "caption",
            *HEADINGS,
        }
    )
    VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "base", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, skipped, inside the main body)
        self.paras: list[tuple[bool, bool, str]] = []  # (in main body, is a heading, text)
        self.buf: list[str] = []
        self.title, self.in_title, self.heading = "", False, False

    def flush(self) -> None:
        if text := collapse("".join(self.buf)):
            self.paras.append((bool(self.stack and self.stack[-1][2]), self.heading, text))
        self.buf.clear()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.in_title |= tag == "title"
        if tag in self.VOID:
            self.buf.append(" ")
            return
        classes = set((dict(attrs).get("class") or "").split())
        skip, main = self.stack[-1][1:] if self.stack else (False, False)
        if tag in self.BLOCK:
            self.flush()
        self.heading |= tag in HEADINGS and not skip
        self.stack.append(
            (
                tag,
                skip or tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES),
                main or (tag == "div" and "body" in classes),
            )
        )

    def handle_endtag(self, tag: str) -> None:
        self.in_title &= tag != "title"
        if tag in self.BLOCK:
            self.flush()
            self.heading &= tag not in HEADINGS
        if any(t == tag for t, _, _ in self.stack):  # pop to the matching open tag
            while self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title += data
        elif not (self.stack and self.stack[-1][1]):
            self.buf.append(data)


ROFF_BREAKS = {"PP", "LP", "P", "TP", "IP", "HP", "sp", "br", "RS", "RE", "TQ", "nf", "fi", "EX", "EE"}
ROFF_FONTS = {"B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB"}


def roff_paras(text: str) -> list[Para]:
    """The visible text of a man page's roff source: `.SH` / `.SS` headings, paragraphs broken at the paragraph
    macros, font macros' words kept, other requests and comments dropped, escapes read (\\fB, \\-, \\(em, ...)."""
    paras: list[Para] = []
    lines: list[str] = []

    def flush() -> None:
        if body := collapse(" ".join(lines)):
            paras.append((False, body))
        lines.clear()

    for raw in text.splitlines():
        line = _roff_escapes(raw)
        if raw.startswith(('.\\"', "'\\\"", '.\\"')):
            continue
        if raw.startswith((".", "'")):
            macro, _, rest = line[1:].strip().partition(" ")
            if macro in ("SH", "SS"):
                flush()
                paras.append((True, collapse(rest.replace('"', ""))))
            elif macro in ROFF_BREAKS:
                flush()
            elif macro in ROFF_FONTS:
                lines.append(rest.replace('"', ""))
            continue
        lines.append(line)
    flush()
    return paras


def _roff_escapes(line: str) -> str:
    line = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", line)  # font changes
    line = re.sub(r"\\\((em|en)", " - ", line)
    line = re.sub(r"\\\((lq|rq|dq)", '"', line)
    line = re.sub(r"\\\(..|\\\[[^\]]*\]|\\[*n]\(..|\\[*n].|\\s[-+]?\d", "", line)  # other named chars, strings, sizes
    line = line.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "").replace("\\ ", " ")
    return line.replace("\\/", "").replace("\\,", "")

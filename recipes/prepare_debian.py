"""Turn installed Debian documentation packages into a JSON-lines corpus for `indexer build`.

    python bench/prepare_debian.py --out data-local/debian/corpus.jsonl \
        [--sources gcide,linux,python,wordnet] [--max-docs N]

Each output line is {"id", "title", "text"}. Sources (apt-get install the package named second):
  gcide    dict-gcide      /usr/share/dictd/gcide.{index,dict.dz}: one document per dictionary entry, markup
                           (\\pro*nun"ci*a`tions\\, {cross-refs}, [1913 Webster] tags, [=a] codes) cleaned
  linux    linux-doc-6.1   /usr/share/doc/linux-doc-6.1/Documentation/**/*.{rst,txt}[.gz] and extension-less
                           ABI files (translations/ skipped): one document per file, reST markup dropped
  python   python3.11-doc  /usr/share/doc/python3.11/html/**/*.html: visible text of the page body
  wordnet  wordnet-base    /usr/share/wordnet/data.{noun,verb,adj,adv}: one document per synset
Texts over 20,000 characters are split at headings, then paragraphs. --max-docs caps each source.
Output order is deterministic; the file is written to OUT.tmp and renamed when complete.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from itertools import islice
from pathlib import Path

log = logging.getLogger("prepare_debian")
Doc = tuple[str, str, str]  # id, title, text
Para = tuple[bool, str]  # (is a heading, text)
MAX_CHARS = 20_000
GCIDE, LINUX = Path("/usr/share/dictd"), Path("/usr/share/doc/linux-doc-6.1/Documentation")
PYTHON, WORDNET = Path("/usr/share/doc/python3.11/html"), Path("/usr/share/wordnet")
PACKAGES = {
    "gcide": ("dict-gcide", GCIDE / "gcide.index", GCIDE / "gcide.dict.dz"),
    "linux": ("linux-doc-6.1", LINUX),
    "python": ("python3.11-doc", PYTHON),
    "wordnet": ("wordnet-base", *(WORDNET / f"data.{pos}" for pos in ("noun", "verb", "adj", "adv"))),
}


def collapse(text: str) -> str:
    return " ".join(text.split())


def pack(paras: list[Para], max_chars: int = MAX_CHARS) -> list[tuple[str, str]]:
    """Group paragraphs into (heading, text) chunks of at most max_chars, preferring heading breaks."""

    def joined(ps: list[str]) -> int:  # length of "\n\n".join(ps)
        return sum(map(len, ps)) + 2 * max(len(ps) - 1, 0)

    pieces: list[tuple[str, list[str]]] = []  # (heading in effect, paragraphs); a heading starts a piece
    heading, new_section = "", True
    for is_heading, text in paras:
        heading, new_section = (text, True) if is_heading else (heading, new_section)
        while len(text) > max_chars:  # hard split a giant paragraph at whitespace
            cut = text.rfind(" ", 0, max_chars) if " " in text[:max_chars] else max_chars
            pieces.append((heading, [text[:cut]]))
            text, new_section = text[cut:].lstrip(), False
        if new_section or joined(pieces[-1][1]) + 2 + len(text) > max_chars:
            pieces.append((heading, []))
        pieces[-1][1].append(text)
        new_section = False
    chunks: list[tuple[str, list[str]]] = []
    for head, ps in pieces:  # merge consecutive pieces (whole sections) while they fit
        if chunks and joined(chunks[-1][1]) + 2 + joined(ps) <= max_chars:
            chunks[-1][1].extend(ps)
        else:
            chunks.append((head, list(ps)))
    return [(head, "\n\n".join(ps)) for head, ps in chunks if any(ps)]


def split_docs(doc_id: str, title: str, paras: list[Para]) -> Iterator[Doc]:
    chunks = pack(paras)
    for k, (head, text) in enumerate(chunks):
        part = f"{title} (part {k + 1})" if head in ("", title) else f"{title} — {head}"
        yield f"{doc_id}#{k}", part if len(chunks) > 1 else title, text


B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
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


def gcide_docs() -> Iterator[Doc]:
    spans: dict[tuple[int, int], str] = {}  # (offset, length) -> first headword; several share an entry
    skip: set[tuple[int, int]] = set()
    with open(GCIDE / "gcide.index", encoding="utf-8", errors="replace") as index:
        for line in index:
            head, *nums = line.rstrip("\n").split("\t")[:3]  # numbers: base 64, most significant first
            off, size = (sum(B64[c] * 64**k for k, c in enumerate(reversed(n))) for n in nums)
            spans.setdefault((off, size), head)
            if head.startswith("00-database-"):
                skip.add((off, size))
    with gzip.open(GCIDE / "gcide.dict.dz") as fh:  # dictzip is gzip-compatible
        data = fh.read()
    for (off, size), head in sorted(spans.items()):
        if (off, size) not in skip:
            raw = data[off : off + size].decode("utf-8", errors="replace")
            m = re.match(r"\s*([^\\\n]+?)\s*\\", raw)  # "Calorie \Cal"o*rie\, n. ..."
            yield f"gcide:{off}", (clean_gcide(m.group(1)) if m else "") or head, clean_gcide(raw)


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


def linux_docs() -> Iterator[Doc]:
    for path in sorted(p for p in LINUX.rglob("*") if p.is_file()):
        rel = path.relative_to(LINUX).as_posix().removesuffix(".gz")
        stem = rel.rsplit("/", 1)[-1]
        if rel.startswith("translations/") or stem in ("Kconfig", "Makefile", "dontdiff"):
            continue
        if rel.endswith((".rst", ".txt")) or "." not in stem:
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
                yield from split_docs(f"linux:{rel}", rel, rst_paras(fh.read()))


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


def python_docs() -> Iterator[Doc]:
    for path in sorted(PYTHON.rglob("*.html")):
        rel = path.relative_to(PYTHON).as_posix()
        if rel.startswith(("_", "genindex", "py-modindex", "search")):
            continue
        page = PageText()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        page.close()
        page.flush()
        paras = [(h, t) for m, h, t in page.paras if m] or [(h, t) for _, h, t in page.paras]
        title = re.sub(r"\s+[—-]\s+Python [\d.]+\S* documentation$", "", collapse(page.title)) or rel
        yield from split_docs(f"python:{rel}", title, paras)


def wordnet_docs() -> Iterator[Doc]:
    for pos in ("noun", "verb", "adj", "adv"):
        with open(WORDNET / f"data.{pos}", encoding="utf-8", errors="replace") as fh:
            lines = [line for line in fh if not line.startswith("  ") and "|" in line]  # no license header
        for line in lines:
            fields, gloss = line.split("|", 1)
            parts = fields.split()  # offset lex_filenum ss_type w_cnt(hex) word lex_id [word lex_id ...] ...
            words = parts[4 : 4 + 2 * int(parts[3], 16) : 2]
            lemmas = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in words]  # drop adj (a)/(p)
            if lemmas and gloss.strip():
                yield f"wordnet:{pos}:{parts[0]}", lemmas[0], f"{', '.join(lemmas)}: {collapse(gloss)}"


READERS = {"gcide": gcide_docs, "linux": linux_docs, "python": python_docs, "wordnet": wordnet_docs}


def write_corpus(out: Path, sources: Iterable[str], max_docs: int | None) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, total = out.with_name(out.name + ".tmp"), 0
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for name in sources:
                log.info("reading %s", name)
                docs = chars = words = 0
                for doc_id, title, text in islice((d for d in READERS[name]() if d[2].strip()), max_docs):
                    row = {"id": doc_id, "title": title, "text": text}
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    docs, chars, words = docs + 1, chars + len(text), words + len(text.split())
                print(f"{name:8s} docs={docs:>9,d} chars={chars:>13,d} words~{words:>12,d}", flush=True)
                total += words
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output .jsonl path")
    ap.add_argument("--sources", default=",".join(READERS), help="comma-separated, from " + ",".join(READERS))
    ap.add_argument("--max-docs", type=int, default=None, metavar="N", help="at most N documents per source")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    if not sources or any(s not in READERS for s in sources):
        ap.error(f"--sources must be a comma-separated subset of {','.join(READERS)}")
    for name in sources:
        package, *needed = PACKAGES[name]
        if missing := [str(p) for p in needed if not p.exists()]:
            log.error("%s: %s not found; install it with `sudo apt-get install %s`", name, missing[0], package)
            return 2
    total = write_corpus(args.out, sources, args.max_docs)
    print(f"total    words~{total:,d} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

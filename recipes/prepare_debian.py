"""Turn installed Debian documentation packages into a JSON-lines corpus for `indexer build`.

    python -m recipes.prepare_debian --out data-local/debian/corpus.jsonl \
        [--sources gcide,linux,python,wordnet] [--max-docs N]

Each output line is {"id", "title", "text"}. Sources (apt-get install the package named second):
  gcide    dict-gcide      /usr/share/dictd/gcide.{index,dict.dz}: one document per dictionary entry, markup
                           (\\pro*nun"ci*a`tions\\, {cross-refs}, [1913 Webster] tags, [=a] codes) cleaned
  linux    linux-doc-6.1   /usr/share/doc/linux-doc-6.1/Documentation/**/*.{rst,txt}[.gz] and extension-less
                           ABI files (translations/ skipped): one document per file, reST markup dropped
  python   python3.11-doc  /usr/share/doc/python3.11/html/**/*.html: visible text of the page body
  wordnet  wordnet-base    /usr/share/wordnet/data.{noun,verb,adj,adv}: one document per synset
  manpages manpages        /usr/share/man/man[1-8]/*.gz (the English pages of every installed package): one
                           document per page, roff requests dropped
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
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from recipes.debian_markup import PageText, Para, clean_gcide, collapse, roff_paras, rst_paras

log = logging.getLogger("prepare_debian")
Doc = tuple[str, str, str]  # id, title, text
MAX_CHARS = 20_000
B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}  # gcide.index
GCIDE, LINUX = Path("/usr/share/dictd"), Path("/usr/share/doc/linux-doc-6.1/Documentation")
PYTHON, WORDNET = Path("/usr/share/doc/python3.11/html"), Path("/usr/share/wordnet")
MAN = Path("/usr/share/man")
PACKAGES = {
    "gcide": ("dict-gcide", GCIDE / "gcide.index", GCIDE / "gcide.dict.dz"),
    "linux": ("linux-doc-6.1", LINUX),
    "python": ("python3.11-doc", PYTHON),
    "wordnet": ("wordnet-base", *(WORDNET / f"data.{pos}" for pos in ("noun", "verb", "adj", "adv"))),
    "manpages": ("manpages", MAN / "man7"),
}


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


def man_docs() -> Iterator[Doc]:
    for path in sorted(MAN.glob("man[1-8]/*.gz")):
        if path.is_symlink():
            continue  # another name of a page read under its own
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        if not text.lstrip().startswith(".so "):  # a page that only includes another
            rel = path.relative_to(MAN).as_posix().removesuffix(".gz")
            yield from split_docs(f"man:{rel}", rel.rsplit("/", 1)[-1], roff_paras(text))


READERS = {
    "gcide": gcide_docs,
    "linux": linux_docs,
    "python": python_docs,
    "wordnet": wordnet_docs,
    "manpages": man_docs,
}


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

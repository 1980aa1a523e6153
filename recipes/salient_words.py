"""A salient-word list for `encoder train --salient-words`: WordNet's one-word adjectives.

    python -m recipes.salient_words --out data-local/salient/adjectives.txt [--wordnet /usr/share/wordnet]

Reads `data.adj` of Debian's `wordnet-base` (WordNet 3.0 License: use, copy and distribution allowed with the
notice kept; the list is written to the work folder, never committed). Every lemma of every adjective synset
(head and satellite) that is one word of letters (hyphens allowed), lower-cased, without WordNet's syntactic
markers ("big(a)" -> "big"), minus English function words. Nationalities, colours and sentiment words (great,
terrible) are answer types of fills that name-like salient spans miss.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from common.files import write_bytes_atomic
from encoder.stopwords import STOPWORD_SET

WORD = re.compile(r"[a-z]+(?:-[a-z]+)*")


def adjectives(data_adj: Path) -> list[str]:
    """The sorted one-word adjective lemmas of a WordNet `data.adj`."""
    out: set[str] = set()
    for line in data_adj.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line or line.startswith(" "):  # the licence header lines start with two spaces
            continue
        fields = line.split(" ")
        count = int(fields[3], 16)  # w_cnt: two hex digits
        for k in range(count):
            lemma = re.sub(r"\([a-z]+\)$", "", fields[4 + 2 * k]).lower()
            if WORD.fullmatch(lemma) and lemma not in STOPWORD_SET:
                out.add(lemma)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--wordnet",
        type=Path,
        default=Path("/usr/share/wordnet"),
        help="folder of WordNet's database files (Debian: wordnet-base)",
    )
    args = ap.parse_args(argv)
    data_adj = args.wordnet / "data.adj"
    if not data_adj.is_file():
        sys.exit(
            f"error: {data_adj} not found: install Debian's wordnet-base (apt-get install wordnet-base) "
            "or pass --wordnet DIR"
        )
    words = adjectives(data_adj)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(args.out, "".join(w + "\n" for w in words).encode("utf-8"))
    print(f"{len(words)} adjectives -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

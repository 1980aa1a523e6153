"""A seeded sample of about --words words from each source of a prepare_debian.py corpus (r7 in
docs/history/QUALITY.md, "The recipes").

    python -m recipes.sample_sources --corpus data-local/debian/corpus.jsonl --words 88000 \
        --out data-local/debian/sample360k.jsonl

The source is the id's prefix before ':' (gcide, linux, python, wordnet). Per source, in sorted order,
the documents are shuffled by one random.Random(seed) and taken while they fit (a document that would
pass words + 2,000 is skipped) until more than --words words are taken.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--words", type=int, default=88_000)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    by_source: dict[str, list[dict]] = {}
    with open(args.corpus, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            by_source.setdefault(row["id"].split(":")[0], []).append(row)
    rng, out = random.Random(args.seed), []
    for source, rows in sorted(by_source.items()):
        rng.shuffle(rows)
        words = 0
        for row in rows:
            n = len(row["text"].split())
            if words + n > args.words + 2000:
                continue
            out.append(row)
            words += n
            if words > args.words:
                break
        print(f"{source}: {words} words")
    tmp = args.out.with_name(args.out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in out:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(out)} documents")


if __name__ == "__main__":
    main()

"""Cloze probes of a corpus written as a fill-eval probe file: a ~24-word window of a document with one word
masked (bench.shared.make_cloze, the queries the benchmarks draw), its masked word the answer. A cloze check on
any corpus (the window itself is in the index, so it measures whether the encoder finds a passage again from its
context, not knowledge):

    python -m bench.probes --corpus data-local/debian/corpus_300k.jsonl --n 300 --out data-local/debian/cloze.jsonl
    fill-eval --index IDX --probes data-local/debian/cloze.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.shared import make_cloze


def main() -> None:
    p = argparse.ArgumentParser(description="Write cloze probes of a corpus as a fill-eval probe file.")
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    rows = [{"relation": "cloze", "query": q, "answers": [a]} for q, a in make_cloze(args.corpus, args.n, args.seed)]
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(args.out)
    print(f"{len(rows)} cloze probes -> {args.out}")


if __name__ == "__main__":
    main()

"""Benchmark queries drawn from a corpus: a ~24-word window of a document with one word masked.

Used by bench_service.py and bench_ann.py (their figures compare systems on the same queries, so the
queries only need to look like real fill queries). As a script it writes them with their masked word
as a fill-eval probe file, a cloze check on any corpus (the window itself is in the index, so it
measures whether the encoder finds a passage again from its context, not knowledge):

    python bench/probes.py --corpus data-local/debian/corpus_300k.jsonl --n 300 --out data-local/debian/cloze.jsonl
    fill-eval --index IDX --probes data-local/debian/cloze.jsonl
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

WORD = re.compile(r"[A-Za-z][a-z]{3,}")


def make_probes(corpus: Path, n: int, seed: int = 0, window: int = 24) -> list[str]:
    """n queries from a JSON-lines corpus: seeded documents, a word window, one alphabetic word -> <mask>."""
    return [query for query, _ in make_cloze(corpus, n, seed, window)]


def make_cloze(corpus: Path, n: int, seed: int = 0, window: int = 24) -> list[tuple[str, str]]:
    """Like make_probes, with the masked word of each query."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    probes: list[tuple[str, str]] = []
    for _ in range(50 * n):
        if len(probes) == n:
            break
        words = json.loads(lines[rng.randrange(len(lines))]).get("text", "").split()
        if len(words) < 8:
            continue
        a = rng.randrange(max(1, len(words) - window))
        chunk = words[a : a + window]
        slots = [i for i, w in enumerate(chunk) if WORD.fullmatch(w)]
        if not slots:
            continue
        slot = rng.choice(slots)
        answer, chunk[slot] = chunk[slot], "<mask>"
        probes.append((" ".join(chunk), answer))
    return probes


def main() -> None:
    import argparse

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

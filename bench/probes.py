"""Benchmark queries drawn from a corpus: a ~24-word window of a document with one word masked.

Used by bench_service.py and bench_ann.py (their figures compare systems on the same queries, so the
queries only need to look like real fill queries; they are not a quality benchmark).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

WORD = re.compile(r"[A-Za-z][a-z]{3,}")


def make_probes(corpus: Path, n: int, seed: int = 0, window: int = 24) -> list[str]:
    """n queries from a JSON-lines corpus: seeded documents, a word window, one alphabetic word -> <mask>."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    probes: list[str] = []
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
        chunk[rng.choice(slots)] = "<mask>"
        probes.append(" ".join(chunk))
    return probes

"""The string path, kept as the oracle of the engine's numpy phrase grouping (fill.phrases): a Python
string per span, grouped with a dict, aggregated and ranked with the engine's own `masses` and
`top_values`. Slow and obviously right; the brute-force and phrase tests compare against it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fill.schemas import AGGREGATIONS
from fill.spans import masses, top_values


@dataclass
class Phrase:
    text: str
    mass: float = 0.0
    tokens: int = 0
    occurrences: np.ndarray = field(  # span indices, ascending
        default_factory=lambda: np.empty(0, dtype=np.int64), compare=False
    )

    def rank_value(self, alpha: float) -> float:
        return self.mass * (self.tokens**alpha if alpha else 1.0)


def aggregate(
    keys: list[str | None], scores: np.ndarray, lengths: np.ndarray, case_sensitive: bool = True, how: str = "sum"
) -> list[Phrase]:
    """Sum (or take the max of) span scores per phrase key; spans whose key is None or empty are dropped.
    Phrases come in the order of their first occurrence, with that occurrence's text and length."""
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")
    index: dict[str, int] = {}
    firsts: list[int] = []
    codes = []
    for idx, key in enumerate(keys):  # the one Python loop: a phrase number per span (-1: dropped)
        if not key:
            codes.append(-1)
            continue
        norm = key if case_sensitive else key.lower()
        code = index.get(norm)
        if code is None:
            code = index[norm] = len(firsts)
            firsts.append(idx)
        codes.append(code)
    n = len(firsts)
    code_of = np.asarray(codes, dtype=np.int64)
    kept = np.flatnonzero(code_of >= 0)
    mass = masses(code_of[kept], np.asarray(scores, dtype=np.float64)[kept], n, how)
    grouped = kept[np.argsort(code_of[kept], kind="stable")]
    bounds = np.searchsorted(code_of[grouped], np.arange(1, n))
    lengths = np.asarray(lengths)
    return [
        Phrase(text=keys[first], mass=float(m), tokens=int(lengths[first]), occurrences=occ)
        for first, m, occ in zip(firsts, mass.tolist(), np.split(grouped, bounds))
    ]


def rank(phrases: list[Phrase], alpha: float, n: int | None = None) -> list[tuple[Phrase, float]]:
    """Phrases sorted by mass * len^alpha (ties: by text), with that value normalised over all phrases;
    only the first `n` when given (the same as the first n of the whole order, without sorting it all)."""
    values = np.array([p.rank_value(alpha) for p in phrases], dtype=np.float64)
    return [(phrases[i], value) for i, value in top_values(values, lambda i: phrases[i].text, n)]

"""Segments of a flat code-point array (`Ragged`), the form in which the fill's phrase texts travel: many
overlapping segments of one buffer, answered from arrays over the buffer computed once; and grouping segments
by exact content (`group_phrases`): a polynomial hash over prefix sums finds the groups, every key is compared
with its group's first element by element, and a group whose keys differ (a hash collision) is split by their
strings, so two phrases are never merged."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.arrays import piece_starts, unique_inverse
from common.packing import reduce_packed

_MULT = np.uint64(0x9E3779B97F4A7C15)
_BASE = 0xD6E8FEB86659FD93  # odd: invertible modulo 2**64


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(BASE**i, BASE**-i) modulo 2**64 for i < n (uint64 arithmetic wraps modulo 2**64). Computed per call:
    two cumulative products of a mask's buffer size cost ~0.1 ms, and nothing is shared between threads."""
    up = np.empty(max(n, 1), dtype=np.uint64)
    down = np.empty(max(n, 1), dtype=np.uint64)
    up[0] = down[0] = 1
    np.cumprod(np.full(up.size - 1, _BASE, dtype=np.uint64), out=up[1:])
    np.cumprod(np.full(up.size - 1, pow(_BASE, -1, 1 << 64), dtype=np.uint64), out=down[1:])
    return up, down


def _hashes(keys: "Ragged") -> np.ndarray:
    """A 64-bit hash of each segment's content: sum of (code + 1) * BASE**rel modulo 2**64, from prefix
    sums over the whole code array (so overlapping segments cost nothing extra), mixed with the length."""
    up, down = _powers(keys.codes.size + 1)
    prefix = np.zeros(keys.codes.size + 1, dtype=np.uint64)
    np.cumsum((keys.codes.astype(np.uint64) + np.uint64(1)) * up[: keys.codes.size], out=prefix[1:])
    h = (prefix[keys.start + keys.length] - prefix[keys.start]) * down[keys.start]
    out: np.ndarray = h ^ keys.length.astype(np.uint64) * _MULT
    return out


@dataclass
class Ragged:
    """Segments of a flat code-point array: segment i is codes[start[i] : start[i] + length[i]]. Segments may
    overlap (the spans of a shard share a buffer of their blocks' text, `shard_span_texts`), so
    every per-segment question below is answered from arrays over `codes` computed once, not per element."""

    codes: np.ndarray
    start: np.ndarray
    length: np.ndarray

    __reduce__ = reduce_packed  # pickled small (inside a shard group's answer on Ray), unpickled as it was

    def flat_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(segment of each element, its position within the segment) over all segments in order."""
        seg = np.repeat(np.arange(self.length.size), self.length)
        first = piece_starts(self.length)
        return seg, np.arange(seg.size) - first[seg]

    def text(self, i: int) -> str:
        a = int(self.start[i])
        return self.codes[a : a + int(self.length[i])].astype("<u4").tobytes().decode("utf-32-le")

    def texts(self, which: np.ndarray) -> list[str]:
        """`text(i)` of each segment i of `which`, from one decode of their codes joined (one str sliced, not a
        decode per segment)."""
        part = Ragged(self.codes, self.start[which], self.length[which])
        seg, rel = part.flat_index()
        joined = self.codes[part.start[seg] + rel].astype("<u4").tobytes().decode("utf-32-le")
        ends = np.cumsum(part.length).tolist()
        return [joined[a:b] for a, b in zip([0] + ends[:-1], ends)]


def next_true(flag: np.ndarray) -> np.ndarray:
    """Per position i (and one past the end): the first j >= i with flag[j], else flag.size."""
    at = np.where(np.append(flag, True), np.arange(flag.size + 1), flag.size)
    return np.minimum.accumulate(at[::-1])[::-1]


def prev_true(flag: np.ndarray) -> np.ndarray:
    """Per position i: the last j <= i with flag[j], else -1."""
    return np.maximum.accumulate(np.where(flag, np.arange(flag.size), -1)) if flag.size else np.empty(0, np.int64)


def group_phrases(keys: Ragged) -> tuple[np.ndarray, np.ndarray]:
    """(group of each segment, numbered in order of first appearance; the first segment of each group) for
    non-empty segments, by exact content: groups by hash, each key checked against its group's first key
    element by element; a group holding different keys (a hash collision) is split by their strings."""
    n = keys.length.size
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    _, first, inverse = unique_inverse(_hashes(keys), first=True)
    order = np.argsort(first, kind="stable")
    number = np.empty(order.size, dtype=np.int64)
    number[order] = np.arange(order.size)
    groups, firsts = number[inverse], first[order]
    rep = firsts[groups]
    differs = keys.length[rep] != keys.length
    others = np.flatnonzero((rep != np.arange(n)) & ~differs)  # compared element by element with their group's first
    seg, rel = Ragged(keys.codes, keys.start[others], keys.length[others]).flat_index()
    unequal = keys.codes[keys.start[rep[others]][seg] + rel] != keys.codes[keys.start[others][seg] + rel]
    differs[others[seg[unequal]]] = True
    if differs.any():
        return _split(keys, groups, np.isin(groups, groups[differs]))
    return groups, firsts


def _split(keys: Ragged, groups: np.ndarray, collided: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`group_phrases` where the groups of the segments marked `collided` hashed different keys alike: those segments
    are grouped by their strings, the others keep their hash group; all renumbered by first appearance."""
    labels: list[int | str] = groups.tolist()
    for i in np.flatnonzero(collided).tolist():
        labels[i] = keys.text(i)  # a str never equals an int label
    number: dict[int | str, int] = {}
    out = np.empty(groups.size, dtype=np.int64)
    for i, label in enumerate(labels):
        out[i] = number.setdefault(label, len(number))
    firsts = np.full(len(number), groups.size, dtype=np.int64)
    np.minimum.at(firsts, out, np.arange(groups.size))
    return out, firsts


def join_ragged(parts: list[Ragged]) -> Ragged:
    """The segments of several buffers as segments of one (buffers one after the other)."""
    if not parts:
        return Ragged(np.zeros(0, dtype=np.uint32), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    shift = piece_starts([p.codes.size for p in parts])
    return Ragged(
        np.concatenate([p.codes for p in parts]),
        np.concatenate([p.start + d for p, d in zip(parts, shift)]),
        np.concatenate([p.length for p in parts]),
    )

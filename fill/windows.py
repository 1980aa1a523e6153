"""The reader's windows, the part of the reader stage that reads a shard (fill.reading does the rest): which
token runs to read around a mask's top phrases, and every valid span inside them, formed by the shards owning
them (`WindowTask`, a fill.shard_group task) with their token ids. Its imports are the shard side's only (no
torch), so a shard group's process (service.ray_group) runs these tasks without loading a model.

  windows  for each of the mask's top `phrases` phrases in the retrieval ranking, its best occurrence with
           `window` tokens either side, inside its block; overlapping windows merged; at most `budget` tokens
  spans    every valid span inside a window (a word start to a word end, at most max_span_tokens long), as
           candidates whose logits the reader's forward pass gives (`reader_parts`)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

import numpy as np

from common.arrays import unique
from fill.candidates import ShardCandidates, span_candidates
from fill.ranker import RankedMask
from fill.shard_group import Shards, by_shard
from fill.spans import spans_from_hits
from indexer.shard import Shard


@dataclass(frozen=True)
class Window:
    """Token positions [a, b) of one shard, inside one block."""

    shard_no: int
    a: int
    b: int


def mask_windows(ranked: RankedMask, phrases: int, window: int, budget: int) -> list[Window]:
    """The windows to read for one mask: around the best occurrence of each of its top `phrases` phrases
    (inside its block: ShardCandidates.bounds_of), merged where they overlap, `budget` tokens at most (the later
    phrases' windows left out)."""
    out: list[Window] = []
    used = 0
    for phrase in ranked.shown[:phrases]:
        part, j = ranked.pool.where(phrase.occurrences[0])
        lo, hi = part.bounds_of(j)
        w = Window(part.shard_no, max(lo, int(part.first[j]) - window), min(hi, int(part.last[j]) + 1 + window))
        overlapping = [o for o in out if o.shard_no == w.shard_no and o.a < w.b and w.a < o.b]
        merged = Window(w.shard_no, min([w.a] + [o.a for o in overlapping]), max([w.b] + [o.b for o in overlapping]))
        grown = (merged.b - merged.a) - sum(o.b - o.a for o in overlapping)
        if used + grown > budget:
            break
        out = [o for o in out if o not in overlapping] + [merged]
        used += grown
    return sorted(out, key=lambda o: (o.shard_no, o.a))


@dataclass
class WindowSpans:
    """Every valid span inside one mask's windows, per shard, and where its ends are among the window tokens."""

    shard_nos: list[int]
    first: list[np.ndarray]  # per shard: spans' first tokens (shard positions), ordered by (first, last)
    last: list[np.ndarray]
    starts: np.ndarray  # window-token shard positions (all windows, in order) and their shard numbers
    shard_of: np.ndarray
    tokens: list[np.ndarray]  # per window: its token ids
    titles: list[str] | None  # per window: its document's title (when asked for: a reader that reads titles)
    parts: list[ShardCandidates]  # per shard: its spans as candidates, their logits still to come (reader_parts)

    def at(self, shard_no: int, positions: np.ndarray) -> np.ndarray:
        """Index among the window tokens of positions of shard `shard_no`."""
        rows = np.flatnonzero(self.shard_of == shard_no)
        return rows[np.searchsorted(self.starts[rows], positions)]


def _no_logits(positions: np.ndarray) -> tuple[np.ndarray, float]:
    return np.zeros(positions.size), 0.0


class WindowRead(NamedTuple):
    """What one shard gives of a mask's windows there (`WindowTask`)."""

    part: ShardCandidates | None  # every valid span inside them (their logits still to come), None for none
    tokens: list[np.ndarray]  # per window: its token ids
    titles: list[str]  # per window: its document's title (empty unless asked for)


@dataclass(frozen=True)
class WindowTask:
    """One shard's windows of one mask (a fill.shard_group task): every valid span inside them as candidates
    (ordered by (first, last); their logits are the reader's, filled in by `reader_parts`), each window's token
    ids and, with `titles`, its document's title."""

    dense: ClassVar[bool] = False  # reads text only: a Ray ingress runs it (fill.scatter)

    shard_no: int
    windows: tuple[tuple[int, int], ...]
    max_len: int
    titles: bool = False

    def compute(self, shard: Shard) -> WindowRead:
        firsts, lasts = [], []
        for a, b in self.windows:
            first, last = spans_from_hits(np.arange(a, b), True, self.max_len, shard.flags, shard.block_of)
            keep = last < b
            firsts.append(first[keep])
            lasts.append(last[keep])
        first, last = np.concatenate(firsts), np.concatenate(lasts)
        order = np.lexsort((last, first))
        tokens = [np.asarray(shard.token_ids[a:b]) for a, b in self.windows]
        titles = []
        if self.titles:
            rows = shard.blocks[shard.block_of(np.array([a for a, _ in self.windows])), 0]
            titles = [shard.doc_title(int(r)) or "" for r in rows]
        if not first.size:
            return WindowRead(None, tokens, titles)
        part = span_candidates(shard, self.shard_no, first[order], last[order], _no_logits, _no_logits, False)
        return WindowRead(part, tokens, titles)


def window_spans(shards: Shards, windows: list[Window], max_len: int, titles: bool = False) -> WindowSpans:
    """The valid spans of the windows (sorted by shard, then position, as mask_windows returns them), formed
    and read by their shards in one call (with `titles`, each window's document title too)."""
    per, _ = by_shard([(w.shard_no, (w.a, w.b)) for w in windows])
    found = shards.gather([WindowTask(s, tuple(own), max_len, titles) for s, own in per.items()])
    tokens = [t for read in found for t in read.tokens]
    parts = [read.part for read in found if read.part is not None]
    starts = np.concatenate([np.arange(w.a, w.b) for w in windows]) if windows else np.empty(0, dtype=np.int64)
    shard_of = np.concatenate([np.full(w.b - w.a, w.shard_no) for w in windows]) if windows else starts
    return WindowSpans(
        [p.shard_no for p in parts],
        [p.first for p in parts],
        [p.last for p in parts],
        starts,
        shard_of,
        tokens,
        [t for read in found for t in read.titles] if titles else None,
        parts,
    )


def reader_parts(spans: WindowSpans, start: np.ndarray, end: np.ndarray) -> list[ShardCandidates]:
    """The window spans as candidates whose logits are the reader's (`start`, `end`: per window token)."""
    out = []
    for part in spans.parts:
        s = start[spans.at(part.shard_no, unique(part.first))]
        e = end[spans.at(part.shard_no, unique(part.last))]
        out.append(replace(part, start_logits=s, end_logits=e, start_max=float(s.max()), end_max=float(e.max())))
    return out

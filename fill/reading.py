"""The reader stage: the windows around a mask's top retrieved phrases read together with the query
(encoder.reader), their spans scored by the reader, and the phrases re-ranked by reader and retrieval.

  windows  for each of the mask's top `card.phrases` phrases in the retrieval ranking, its best occurrence
           with `card.window` tokens either side, inside its block; overlapping windows merged; at most
           `card.max_tokens` tokens per mask (fewer when the query is long)
  read     one reader forward pass for all masks of a request, on the encoder's inference thread
  spans    every valid span inside a window (a word start to a word end, at most max_span_tokens long),
           P(span) = softmax over all the mask's window spans of start(first) + end(last)
  rerank   a phrase's reader mass (the SUM of its spans' P) times its retrieval value to the power `weight`
           (fitted by fill-fit; a phrase outside the retrieval's top PRIOR_PHRASES gets the smallest value
           there), normalised and ranked: a `RankedMask` whose pool is the window spans, so confidence and
           evidence follow as without the reader.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from common.arrays import unique
from encoder.reader import Reader, ReaderInput, ReadingSpec
from fill.candidates import ShardCandidates, span_candidates
from fill.phrases import join, phrase_table
from fill.ranker import CandidatePool, RankedMask
from fill.schemas import FillOptions
from fill.shard_group import Shards, by_shard
from fill.spans import softmax, spans_from_hits, top_values

PRIOR_PHRASES = 50  # retrieval phrases whose values are the prior of the re-ranking


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
    parts: list[ShardCandidates]  # per shard: its spans as candidates, their logits still to come (reader_parts)

    def at(self, shard_no: int, positions: np.ndarray) -> np.ndarray:
        """Index among the window tokens of positions of shard `shard_no`."""
        rows = np.flatnonzero(self.shard_of == shard_no)
        return rows[np.searchsorted(self.starts[rows], positions)]


def _no_logits(positions: np.ndarray) -> tuple[np.ndarray, float]:
    return np.zeros(positions.size), 0.0


@dataclass(frozen=True)
class WindowTask:
    """One shard's windows of one mask (a fill.shard_group task): every valid span inside them as candidates
    (ordered by (first, last); their logits are the reader's, filled in by `reader_parts`), or None when there
    is none, and each window's token ids."""

    shard_no: int
    windows: tuple[tuple[int, int], ...]
    max_len: int

    def run(self, shard) -> tuple[ShardCandidates | None, list[np.ndarray]]:
        fs, ls = [], []
        for a, b in self.windows:
            f, last = spans_from_hits(np.arange(a, b), True, self.max_len, shard.flags, shard.block_of)
            keep = last < b
            fs.append(f[keep])
            ls.append(last[keep])
        f, last = np.concatenate(fs), np.concatenate(ls)
        order = np.lexsort((last, f))
        tokens = [np.asarray(shard.token_ids[a:b]) for a, b in self.windows]
        if not f.size:
            return None, tokens
        return span_candidates(shard, self.shard_no, f[order], last[order], _no_logits, _no_logits, False), tokens


def window_spans(shards: Shards, windows: list[Window], max_len: int) -> WindowSpans:
    """The valid spans of the windows (sorted by shard, then position, as mask_windows returns them), formed
    and read by their shards in one call."""
    per, _ = by_shard([(w.shard_no, (w.a, w.b)) for w in windows])
    found = shards.run([WindowTask(s, tuple(own), max_len) for s, own in per.items()])
    tokens = [t for _, own_tokens in found for t in own_tokens]
    parts = [part for part, _ in found if part is not None]
    starts = np.concatenate([np.arange(w.a, w.b) for w in windows]) if windows else np.empty(0, dtype=np.int64)
    shard_of = np.concatenate([np.full(w.b - w.a, w.shard_no) for w in windows]) if windows else starts
    return WindowSpans([p.shard_no for p in parts], [p.first for p in parts], [p.last for p in parts], starts,
                       shard_of, tokens, parts)


def reader_parts(spans: WindowSpans, start: np.ndarray, end: np.ndarray) -> list[ShardCandidates]:
    """The window spans as candidates whose logits are the reader's (`start`, `end`: per window token)."""
    out = []
    for part in spans.parts:
        s = start[spans.at(part.shard_no, unique(part.first))]
        e = end[spans.at(part.shard_no, unique(part.last))]
        out.append(replace(part, start_logits=s, end_logits=e, start_max=float(s.max()), end_max=float(e.max())))
    return out


def joint_pool(parts: list[ShardCandidates]) -> CandidatePool:
    """The window spans with P(span) = softmax over all spans of start(first) + end(last)."""
    sizes = np.array([p.size for p in parts], dtype=np.int64)
    logits = np.concatenate([p.start_logits[p.start_of] + p.end_logits[p.end_of] for p in parts])
    return CandidatePool(parts, np.cumsum(sizes) - sizes, softmax(logits), max(p.start_max for p in parts),
                         max(p.end_max for p in parts))


def rerank(pool: CandidatePool, retrieval: RankedMask, weight: float, options: FillOptions) -> RankedMask:
    """The window phrases ranked by reader mass * retrieval value ** weight (see the module doc)."""
    parts = pool.parts
    table = phrase_table(join([p.keys for p in parts]), pool.score, np.concatenate([p.last - p.first + 1 for p in parts]),
                         options.case_sensitive, "sum", options.drop_stopwords,
                         options.strict_spans)
    if table.mass.size == 0:
        return RankedMask(pool, [], None)
    values = table.mass
    if weight:  # (weight 0: the reader alone, no phrase text needed)
        fold = (lambda t: t) if options.case_sensitive else str.lower
        prior = {fold(p.text): p.value for p in retrieval.shown[:PRIOR_PHRASES]}
        floor = min(prior.values()) if prior else 1.0
        values = values * np.array([prior.get(fold(table.text(i)), floor) for i in range(values.size)]) ** weight
    return RankedMask.of(pool, table, top_values(values, table.text, max(options.top_k, 2)), options.top_k)


@dataclass
class MaskReading:
    """What the reader reads for one mask: its input, its windows and their spans."""

    item: ReaderInput
    windows: list[Window]
    spans: WindowSpans


def plan_reading(spec: ReadingSpec, shards: Shards, ids: list[int], mask_at: int, ranked: RankedMask,
                 max_span_tokens: int) -> MaskReading | None:
    """The reader's input for one mask (None when there is nothing to read or no room beside the query)."""
    card = spec.card
    budget = min(card.max_tokens, spec.max_length - len(ids) - spec.sep * card.phrases)
    if budget <= 0 or not ranked.shown:
        return None
    windows = mask_windows(ranked, card.phrases, card.window, budget)
    spans = window_spans(shards, windows, max_span_tokens)
    if not spans.shard_nos:
        return None
    return MaskReading(ReaderInput(ids, mask_at, spans.tokens), windows, spans)


def read_masks(reader: Reader, encoder, shards: Shards, ids: list[int], mask_at: list[int], ranked: list[RankedMask],
               weight: float, options: FillOptions) -> list[RankedMask]:
    """Every mask's retrieval ranking re-ranked by the reader (a mask with nothing to read keeps its own),
    all masks read in one forward pass on the encoder's inference thread."""
    plans = [plan_reading(reader.spec, shards, ids, at, r, options.max_span_tokens) for at, r in zip(mask_at, ranked)]
    todo = [p for p in plans if p is not None]
    logits = iter(encoder.on_thread(reader.logits, [p.item for p in todo]))
    out = []
    for plan, retrieval in zip(plans, ranked):
        if plan is None:
            out.append(retrieval)
            continue
        start, end = next(logits)
        out.append(rerank(joint_pool(reader_parts(plan.spans, start, end)), retrieval, weight, options))
    return out

"""The reader stage: the windows around a mask's top retrieved phrases read together with the query
(encoder.reader), their spans scored by the reader, and the phrases re-ranked by reader and retrieval.

  windows  for each of the mask's top `card.phrases` phrases in the retrieval ranking, its best occurrence
           with `card.window` tokens either side, inside its block; overlapping windows merged; at most
           `card.max_tokens` tokens per mask (fewer when the query is long); their spans and tokens (and, for
           a reader of titles, their documents' titles) come from the shards owning them (fill.windows)
  read     reader forward passes of at most READ_BATCH masks each, on the encoder's inference thread, the
           request's deadline checked before each mask is planned, before each pass is queued and when it starts
           (so a timed-out request overshoots by one pass at most)
  spans    every valid span inside a window (a word start to a word end, at most max_span_tokens long),
           P(span) = softmax over all the mask's window spans of start(first) + end(last)
  rerank   a phrase's reader mass (the SUM of its spans' P) times its retrieval value to the power `weight`
           (fitted by fill-fit; a phrase outside the retrieval's top PRIOR_PHRASES gets the smallest value
           there), normalised and ranked: a `RankedMask` whose pool is the window spans, so confidence and
           evidence follow as without the reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.arrays import piece_starts
from encoder.model import Encoder
from encoder.reader import Reader, ReaderInput, ReadingSpec
from fill.candidates import ShardCandidates
from fill.deadline import Deadline
from fill.phrases import phrase_table
from fill.ragged import join_ragged
from fill.ranker import CandidatePool, RankedMask
from fill.schemas import FillOptions
from fill.shard_group import Shards
from fill.spans import softmax, top_values
from fill.windows import Window, WindowSpans, mask_windows, reader_parts, window_spans

PRIOR_PHRASES = 50  # retrieval phrases whose values are the prior of the re-ranking
READ_BATCH = 4  # masks per reader forward pass: the deadline is checked between passes


def joint_pool(parts: list[ShardCandidates]) -> CandidatePool:
    """The window spans with P(span) = softmax over all spans of start(first) + end(last)."""
    sizes = np.array([p.size for p in parts], dtype=np.int64)
    logits = np.concatenate([p.start_logits[p.start_of] + p.end_logits[p.end_of] for p in parts])
    return CandidatePool(
        parts, piece_starts(sizes), softmax(logits), max(p.start_max for p in parts), max(p.end_max for p in parts)
    )


def rerank(pool: CandidatePool, retrieval: RankedMask, weight: float, options: FillOptions) -> RankedMask:
    """The window phrases ranked by reader mass * retrieval value ** weight (see the module doc)."""
    parts = pool.parts
    table = phrase_table(
        join_ragged([p.keys for p in parts]),
        pool.score,
        np.concatenate([p.last - p.first + 1 for p in parts]),
        options.case_sensitive,
        "sum",
        options.drop_stopwords,
        options.strict_spans,
    )
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


def plan_reading(
    spec: ReadingSpec, shards: Shards, ids: list[int], mask_at: int, ranked: RankedMask, max_span_tokens: int
) -> MaskReading | None:
    """The reader's input for one mask (None when there is nothing to read or no room beside the query)."""
    card = spec.card
    budget = min(card.max_tokens, spec.max_length - len(ids) - spec.per_window() * card.phrases)
    if budget <= 0 or not ranked.shown:
        return None
    windows = mask_windows(ranked, card.phrases, card.window, budget)
    title_ids = spec.title_ids if card.title_tokens else None
    spans = window_spans(shards, windows, max_span_tokens, titles=title_ids is not None)
    if not spans.shard_nos:
        return None
    titles = [title_ids(t) for t in spans.titles] if title_ids is not None and spans.titles is not None else None
    return MaskReading(ReaderInput(ids, mask_at, spans.tokens, titles), windows, spans)


def read_masks(
    reader: Reader,
    encoder: Encoder,
    shards: Shards,
    ids: list[int],
    mask_at: list[int],
    ranked: list[RankedMask],
    weight: float,
    options: FillOptions,
    deadline: Deadline | None = None,
) -> list[RankedMask]:
    """Every mask's retrieval ranking re-ranked by the reader (a mask with nothing to read keeps its own), the
    masks read READ_BATCH at a time on the encoder's inference thread; `deadline` checked between steps."""
    check = deadline.check if deadline is not None else (lambda stage: None)
    plans = []
    for at, r in zip(mask_at, ranked):
        check("read")
        plans.append(plan_reading(reader.spec, shards, ids, at, r, options.max_span_tokens))
    todo = [p.item for p in plans if p is not None]

    def forward(items: list[ReaderInput]) -> list[tuple[np.ndarray, np.ndarray]]:
        check("read")  # when the pass starts: it may have waited behind other requests' passes
        return reader.logits(items)

    found = []
    for a in range(0, len(todo), READ_BATCH):
        check("read")
        found += encoder.on_thread(forward, todo[a : a + READ_BATCH])
    logits = iter(found)
    out = []
    for plan, retrieval in zip(plans, ranked):
        if plan is None:
            out.append(retrieval)
            continue
        start, end = next(logits)
        out.append(rerank(joint_pool(reader_parts(plan.spans, start, end)), retrieval, weight, options))
    return out

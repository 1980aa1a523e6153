"""The finish step of a closed-set score (POST /score), as `FillEngine.finish` is a fill's: the BM25 blocks'
tokens join the search's hits (restricted / hybrid), and per mask its retrieved tokens vote for the choices
(fill.choices), with the choices' base rates over the whole index when the request calibrates."""

from __future__ import annotations

import time

import numpy as np

from common.masks import blank_masks
from fill.choices import ChoicePhrases, choice_counts, score_masks
from fill.deadline import Deadline
from fill.hits import blocks_by_shard
from fill.prepared import Prepared
from fill.schemas import SCORE_STAGES, ScoreRequest, ScoreResult
from fill.shard_group import Shards
from fill.stage_clock import StageClock
from indexer.phrase_index import PhraseIndex

PRIORS_KEPT = 256  # distinct choice sets whose base rates are kept


class ScoreFinish:
    """`finish(prepared, deadline)`: the closed-set scores of a prepared ScoreRequest over `index` and its
    `shards`; the choices' base rates are counted once per distinct choice set (a classifier sends the same
    labels request after request; an update opens a new engine, so the counts never go stale)."""

    def __init__(self, index: PhraseIndex, shards: Shards) -> None:
        self.index, self.shards = index, shards
        self._priors: dict[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], np.ndarray] = {}

    def __call__(self, prepared: Prepared[ScoreRequest], deadline: Deadline | None = None) -> ScoreResult:
        planned, phrases = prepared.planned, prepared.planned.phrases
        assert phrases is not None  # a score's plan holds its choices' phrases (FillEngine.plan)
        request, q = planned.request, prepared.queries
        laps = StageClock(prepared.encode_ms, prepared.search_ms, deadline, SCORE_STAGES)
        blocks: dict[int, np.ndarray] = {}
        if planned.mode != "dense":
            assert self.index.bm25 is not None  # plan refuses a BM25 mode on an index without BM25
            found = self.index.bm25.search_scored(blank_masks(request.text), request.blocks)[0]
            blocks = blocks_by_shard(self.index, found)
            laps.lap("search")
        prior = self.prior(phrases) if request.calibrate else None
        masks = []
        for m, hits in enumerate(prepared.hits):  # a mask at a time: the deadline is checked between masks
            scored = score_masks(
                self.shards,
                [hits],
                blocks,
                q.q_start[m : m + 1],
                q.q_end[m : m + 1],
                self.index.scale,
                phrases,
                request.temperature,
                request.scorer == "npm",
                request.evidence,
                prior,
                request.sharpness,
            )[0]
            masks.append(scored.model_copy(update={"index": m}))
            laps.lap("score")
        return ScoreResult(masks=masks, took_ms=(time.perf_counter() - planned.t0) * 1000, timings_ms=laps.timings())

    def prior(self, phrases: ChoicePhrases) -> np.ndarray:
        """fill.choices.choice_counts over every shard, kept per distinct choice set."""
        key = (tuple(phrases.choice), tuple(tuple(ids.tolist()) for ids in phrases.ids))
        if key not in self._priors:
            if len(self._priors) >= PRIORS_KEPT:
                self._priors.clear()
            self._priors[key] = choice_counts(self.shards, list(range(len(self.index.manifest.shards))), phrases)
        return self._priors[key]

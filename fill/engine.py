"""The fill engine: NPM inference over a phrase index, knowing nothing of HTTP, as a library of steps that a
caller drives: `plan` (checked, tokenized) -> `prepare` (one encoder pass and one search for a batch of requests)
-> `finish` (a fill's spans, ranking, reading, answers; a score's votes). `handle` drives them for one request
here; the server drives them itself, batched and on its threads (service.requests). docs/ARCHITECTURE.md, "A fill,
hop by hop", follows a request through every step."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence, overload

import numpy as np

from common.errors import AppError
from common.masks import MASK_PATTERN, blank_masks
from encoder.model import Encoder
from encoder.reader import Reader
from fill.answers import answer_masks
from fill.budget import Budget
from fill.candidates import CandidateForm, CandidateTask, Lexical, LexicalBonus, MaskQuery, ShardCandidates
from fill.choices import ChoicePhrases
from fill.config import EngineConfig
from fill.deadline import Deadline
from fill.hits import Hits, MaskHits, blocks_by_shard
from fill.loading import describe_served, open_shared_parts, shared_reader
from fill.models import Models
from fill.prepared import Planned, Prepared, Req
from fill.ranker import RankedMask, rank_mask
from fill.reading import PRIOR_PHRASES, read_masks
from fill.scatter import kept
from fill.schemas import MODES, FillRequest, FillResult, Mode, ScoreRequest, ScoreResult
from fill.score_finish import ScoreFinish
from fill.scoring import Scoring
from fill.shard_group import ShardGroup, Shards
from fill.spans import BlockPrior
from fill.stage_clock import StageClock
from indexer.phrase_index import PhraseIndex

PRIOR_BLOCKS = 100  # blocks whose BM25 scores make the lexical prior (the others get 0)
_NONE = np.empty(0, dtype=np.int64)


class FillEngine:
    """`index` gives the manifest and BM25; `shards` does every step that reads a shard's files (default: all of
    the index's shards in this process; service.ray_backend.RayShards: shard groups on a Ray cluster)."""

    def __init__(
        self,
        encoder: Encoder,
        index: PhraseIndex,
        scoring: Scoring | None = None,
        reader: Reader | None = None,
        shards: Shards | None = None,
        models: Models | None = None,
    ) -> None:
        self.encoder = encoder
        self.models = models  # the shares of encoder and reader its close releases (`open`'s; None: the caller's)
        self.index = index
        self.shards: Shards = shards if shards is not None else ShardGroup(index)
        self.scoring = scoring if scoring is not None else Scoring()
        self.reader = reader  # fills read with it unless a request says `reader: false`
        self.finish_score = ScoreFinish(index, self.shards)  # a score's finish step, as `finish` is a fill's

    @classmethod
    def open(
        cls,
        config: EngineConfig,
        scoring: Scoring | None = None,
        shards: Callable[[PhraseIndex], Shards] | None = None,
        reuse: "FillEngine | None" = None,
    ) -> "FillEngine":
        """Open the index and the encoder it was built with (refusing a model whose fingerprint differs),
        and the reader (fill.loading.shared_reader); `scoring` replaces the fitted scoring named by the config /
        found beside the model. `shards(index)` gives shards that live elsewhere (the index is then opened
        with its shards' text side only: no FAISS index, no vectors). The encoder and the reader of `reuse` (the
        engine served, at a reload) serve this one too where they were loaded from the same files with the same
        settings (fill.models); each is closed with the last engine using it."""
        shared = reuse.models if reuse is not None else None
        models, index, scoring = open_shared_parts(config, scoring, dense=shards is None, reuse=shared)
        try:
            encoder = models.encoder.model
            models.reader = shared_reader(config, encoder, shared)
            reader = models.reader.model if models.reader is not None else None
            return cls(encoder, index, scoring, reader, shards(index) if shards is not None else None, models)
        except BaseException:
            index.close()
            models.release()
            raise

    def close(self) -> None:
        """Close its index, and release its models (closed with the last engine using them: fill.models)."""
        self.index.close()
        if self.models is not None:
            self.models.release()

    def next_generation(self) -> "FillEngine":
        """This engine over its index's next generation (after a live update: PhraseIndex.next_generation), with
        the same encoder, scoring and reader (shared: closing either engine leaves them to the other)."""
        index = self.index.next_generation()
        models = self.models.share() if self.models is not None else None
        return FillEngine(self.encoder, index, self.scoring, self.reader, models=models)

    @property
    def corpus_encoder(self) -> Encoder:
        """What encodes the index's documents (live adds); `encoder` encodes the queries (a query model may)."""
        corpus = self.models.corpus if self.models is not None else None
        return corpus.model if corpus is not None else self.encoder

    def describe(self) -> dict[str, Any]:
        """What is being served: the index, the models and how they run, the build settings."""
        return describe_served(self.index, self.encoder, self.scoring, self.default_mode(), self.reader)

    def default_mode(self, request: FillRequest | ScoreRequest | None = None) -> Mode:
        """A request's mode when it names none: hybrid for a fill, restricted for a score (docs/QUALITY.md), dense
        without BM25."""
        if self.index.bm25 is None:
            return "dense"
        return "restricted" if isinstance(request, ScoreRequest) else "hybrid"

    @overload
    def handle(
        self, request: FillRequest, budget: Budget | None = ..., deadline: Deadline | None = ...
    ) -> FillResult: ...

    @overload
    def handle(
        self, request: ScoreRequest, budget: Budget | None = ..., deadline: Deadline | None = ...
    ) -> ScoreResult: ...

    def handle(
        self, request: FillRequest | ScoreRequest, budget: Budget | None = None, deadline: Deadline | None = None
    ) -> FillResult | ScoreResult:
        """A fill or a closed-set score, start to end, alone and on this thread: plan (checked against `budget`)
        -> prepare -> finish (`deadline` checked between the steps). The server runs the same steps, batched and
        on its threads (service.requests)."""
        planned: Planned[Any] = self.plan(request, budget)
        prepared = self.prepare([planned])[0]
        if deadline is not None:
            deadline.check("search")
        return self.finish(prepared, deadline)  # type: ignore[no-any-return]

    def fill(self, request: FillRequest) -> FillResult:
        return self.handle(request)  # one fill, start to end, here

    def score(self, request: ScoreRequest) -> ScoreResult:
        return self.handle(request)  # one closed-set score, start to end, here

    def batch(
        self, requests: list[FillRequest | ScoreRequest], shape: Callable[[int, int], tuple[int, int]] | None = None
    ) -> list[FillResult | ScoreResult]:
        """Requests as the server's batcher runs them: each planned, all prepared together (`shape`), each finished."""
        planned: list[Planned[Any]] = [self.plan(r) for r in requests]
        return [self.finish(prepared) for prepared in self.prepare(planned, shape)]

    def fill_detailed(self, request: FillRequest) -> tuple[FillResult, list[np.ndarray]]:
        """The fill, and per mask its candidates' confidence features (before abstention: what fill-fit fits)."""
        return self.finish_detailed(self.prepare([self.plan(request)])[0])

    def plan(self, request: Req, budget: Budget | None = None) -> Planned[Req]:
        """The request (a fill, or a closed-set score) checked against this index (mode, cost budget) and its
        query tokenized; AppError (validation) naming the field otherwise."""
        t0 = time.perf_counter()
        mode = request.mode or self.default_mode(request)
        if mode not in MODES:
            raise AppError(f"mode must be one of {MODES}, got {mode!r}", kind="validation", field="mode")
        if mode != "dense" and self.index.bm25 is None:
            raise AppError(
                f"mode {mode!r} needs a BM25 index; this index has none (rebuild it)", kind="validation", field="mode"
            )
        phrases = None
        if isinstance(request, ScoreRequest):
            phrases = ChoicePhrases.of(self.encoder, request.choice_list(), request.synonyms)
        elif request.reader and self.reader is None:
            raise AppError(
                "this server has no reader (started without one, or with --no-use-reader); leave "
                "`reader` out or set it false",
                kind="validation",
                field="reader",
            )
        block_tokens = self.index.manifest.build.block_tokens
        if budget is not None:
            budget.check(request, mode, block_tokens, phrases)
        ids, mask_at = self.encoder.query_layout(request.text)
        return Planned(request, mode, ids, mask_at, t0, Budget.cost(request, mode, block_tokens, phrases), phrases)

    def prepare(
        self, planned: list[Planned[Any]], shape: Callable[[int, int], tuple[int, int]] | None = None
    ) -> list[Prepared[Any]]:
        """Encode the queries in one forward pass and run one FAISS search per distinct k for all their
        masks (start and end queries of every dense / hybrid request). `shape(rows, width)` gives the
        padded shape of the encoder's batch (Encoder.encode_layouts). Over shards with `one_round` (shard groups
        on Ray) a fill's BM25 side is found first and its candidates are formed in the same call as its search
        (fill.scatter), so `finish` asks the shards nothing more of them."""
        mark = time.perf_counter()
        queries = self.encoder.encode_layouts([(p.ids, p.mask_at) for p in planned], shape)
        encode_ms = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        out = [
            Prepared(p, q, [MaskHits.empty()] * q.q_start.shape[0], encode_ms, 0.0) for p, q in zip(planned, queries)
        ]
        for k in sorted({p.request.k for p in planned if p.mode != "restricted"}):
            members = [out[i] for i, p in enumerate(planned) if p.mode != "restricted" and p.request.k == k]
            sizes = [2 * p.queries.q_start.shape[0] for p in members]  # each request's start and end queries
            queries_k = np.concatenate([np.concatenate([p.queries.q_start, p.queries.q_end]) for p in members])
            if self.shards.one_round:  # the fills' candidates formed with the search (fill.scatter)
                forms = [self._form(p) for p in members]
                found, parts = self.shards.search_forming(queries_k, k, sizes, forms)
            else:
                found, parts = self.shards.search(queries_k, k, groups=sizes), [[] for _ in members]
            at = 0
            for p, n, own_parts in zip(members, sizes, parts):
                own = [Hits(found[at + j].shard_no, found[at + j].positions) for j in range(n)]
                p.hits = [MaskHits(own[m], own[n // 2 + m]) for m in range(n // 2)]
                if own_parts:
                    p.parts = [kept(c, h, p.lexical) for c, h in zip(own_parts, p.hits)]
                at += n
        search_ms = (time.perf_counter() - mark) * 1000
        for p in out:
            p.search_ms = search_ms
        return out

    def _form(self, prepared: Prepared[Any]) -> CandidateForm | None:
        """A fill's candidates to form with its search (shards with `one_round`), its BM25 side found first."""
        request, mode = prepared.planned.request, prepared.planned.mode
        if not isinstance(request, FillRequest):
            return None
        prepared.lexical = self.lexical(request, mode)
        q = prepared.queries
        masks = tuple(
            MaskQuery(q.q_start[m], q.q_end[m], self.index.scale, request.max_span_tokens, None, bool(request.alpha))
            for m in range(q.q_start.shape[0])
        )
        return CandidateForm(masks, prepared.lexical.by_shard if prepared.lexical is not None else {})

    def lexical(self, request: FillRequest, mode: Mode) -> Lexical | None:
        """A fill's BM25 side (None in dense mode): the top blocks' prior, its bonus, the blocks searched."""
        if mode == "dense":
            return None
        assert self.index.bm25 is not None  # plan refuses a BM25 mode on an index without BM25
        weight = self.scoring.weight(mode) if request.lexical_weight is None else request.lexical_weight
        found, bm25 = self.index.bm25.search_scored(blank_masks(request.text), max(request.blocks, PRIOR_BLOCKS))
        prior = BlockPrior.from_bm25(found, bm25)
        blocks = found[: request.blocks]
        return Lexical(
            prior, LexicalBonus(prior, weight) if weight else None, blocks, blocks_by_shard(self.index, blocks)
        )

    @overload
    def finish(self, prepared: Prepared[FillRequest], deadline: Deadline | None = ...) -> FillResult: ...

    @overload
    def finish(self, prepared: Prepared[ScoreRequest], deadline: Deadline | None = ...) -> ScoreResult: ...

    def finish(self, prepared: Prepared[Any], deadline: Deadline | None = None) -> FillResult | ScoreResult:
        """The answer to a prepared request. A fill: BM25 (restricted / hybrid), then per mask its candidates and
        ranking, the reader's re-ranking, confidence and evidence; a score: `finish_score` (fill.score_finish).
        `deadline` is checked between steps and masks (AppError kind timeout)."""
        if isinstance(prepared.planned.request, ScoreRequest):
            return self.finish_score(prepared, deadline)
        return self.finish_detailed(prepared, deadline)[0]

    def finish_detailed(
        self, prepared: Prepared[FillRequest], deadline: Deadline | None = None
    ) -> tuple[FillResult, list[np.ndarray]]:
        """`finish`, and per mask the confidence features of its candidates (`fill_detailed`)."""
        request, mode = prepared.planned.request, prepared.planned.mode
        laps = StageClock(prepared.encode_ms, prepared.search_ms, deadline)
        reader = self.reader if request.reader is not False else None
        read = reader is not None
        ranked, prior = self.retrieve(prepared, read, laps)
        if reader is not None:
            planned, weight = prepared.planned, self.scoring.reader_weight_of(mode)
            ranked = read_masks(
                reader, self.encoder, self.shards, planned.ids, planned.mask_at, ranked, weight, request, deadline
            )
            laps.lap("read")
        terms = self.encoder.content_tokens(prepared.planned.ids)
        masks, features = answer_masks(self.index, self.shards, self.scoring, ranked, request, mode, prior, read, terms)
        laps.lap("rank")
        tops = iter([mf.candidates[0].phrase if mf.candidates else None for mf in masks])
        filled = MASK_PATTERN.sub(lambda match: _or(next(tops), match.group(0)), request.text)
        return FillResult(
            filled=filled,
            masks=masks,
            took_ms=(time.perf_counter() - prepared.planned.t0) * 1000,
            timings_ms=laps.timings(),
        ), features

    def retrieve(
        self, prepared: Prepared[FillRequest], read: bool = False, laps: StageClock | None = None
    ) -> tuple[list[RankedMask], BlockPrior | None]:
        """Per mask, its phrases ranked by retrieval (with `read`: as many as the reader's windows and prior
        come from), and the BM25 block prior (None in dense mode). A mask's candidates in every shard are one
        call to the shards (with `one_round`: every mask's, or none when the search formed them)."""
        request, mode = prepared.planned.request, prepared.planned.mode
        laps = laps if laps is not None else StageClock(prepared.encode_ms, prepared.search_ms, None)
        lexical = prepared.lexical if prepared.parts is not None else self.lexical(request, mode)
        bonus, blocks = (lexical.bonus, lexical.by_shard) if lexical is not None else (None, {})
        laps.lap("search")
        options = (
            request.model_copy(update={"top_k": self._retrieved(request.top_k, prepared.planned.mode)})
            if read
            else request
        )
        masks = range(len(prepared.hits))
        parts_of = prepared.parts  # formed with the search (one round per shard group: fill.scatter)
        if parts_of is None and self.shards.one_round:  # a restricted fill's masks in one call too
            parts_of = self._candidates(prepared, masks, bonus, blocks)
        ranked = []
        for m in masks:  # without one_round, a call per mask: the deadline is checked between masks
            parts = parts_of[m] if parts_of is not None else self._candidates(prepared, [m], bonus, blocks)[0]
            laps.lap("spans")
            ranked.append(rank_mask(parts, options))
            laps.lap("rank")
        return ranked, lexical.prior if lexical is not None else None

    def _candidates(
        self,
        prepared: Prepared[FillRequest],
        masks: Sequence[int],
        bonus: LexicalBonus | None,
        blocks: dict[int, np.ndarray],
    ) -> list[list[ShardCandidates]]:
        """The candidates of each of `masks` in every shard (fill.candidates), in one call to the shards."""
        request, q = prepared.planned.request, prepared.queries
        tasks, of = [], []
        for m in masks:
            hits = prepared.hits[m]
            query = MaskQuery(
                q.q_start[m], q.q_end[m], self.index.scale, request.max_span_tokens, bonus, bool(request.alpha)
            )
            for s in sorted(set(hits.shard_nos()) | set(blocks)):
                tasks.append(
                    CandidateTask(s, hits.start.in_shard(s), hits.end.in_shard(s), blocks.get(s, _NONE), query)
                )
                of.append(m)
        found = self.shards.gather(tasks)
        return [[c for c, o in zip(found, of) if o == m and c is not None] for m in masks]

    def _retrieved(self, top_k: int, mode: Mode) -> int:
        """Phrases to rank by retrieval before reading: the reader's candidates, and the prior's phrases when
        the retrieval value weighs in (PRIOR_PHRASES without a reader: `retrieve` for fill-reader-data)."""
        if self.reader is None:
            return max(top_k, PRIOR_PHRASES)
        prior = PRIOR_PHRASES if self.scoring.reader_weight_of(mode) else 0
        return max(top_k, self.reader.card.phrases, prior)


def _or(top: str | None, mask: str) -> str:
    return top if top is not None else mask

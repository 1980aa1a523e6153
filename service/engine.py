"""The fill engine: NPM inference over a phrase index. Knows nothing of HTTP."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from common.arrays import unique
from common.errors import AppError
from common.masks import MASK_PATTERN, blank_masks
from encoder.model import Encoder, model_fingerprint
from encoder.stopwords import poor_fill
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex
from service.budget import Budget, Deadline
from service.config import Settings
from service.schemas import MODES, STAGES, Candidate, Evidence, FillRequest, FillResult, MaskFill
from service.scoring import SCORING_NAME, Scoring, mask_features
from service.prepared import Planned, Prepared
from service.phrases import Collision, phrase_table, rank_table, span_texts
from service.spans import BlockPrior, Bonus, SpanScores, aggregate, rank, score_spans, spans_from_hits, strip_phrase

logger = logging.getLogger(__name__)

CONTEXT_CHARS = 80
PRIOR_BLOCKS = 100  # blocks whose BM25 scores make the lexical prior (the others get 0)


@dataclass
class _Occurrence:
    doc_id: str
    block: int
    start: int
    end: int
    text: str


def single_thread_blas() -> None:
    """One BLAS thread for the process. A fill's matrix products are small (hits x dim by dim x 2), so a
    second BLAS thread gains nothing, and its spin-waiting after each product took a core from the
    encoder and FAISS (docs/BENCHMARKS.md, "The latency issue at 10.5M tokens"). The last bits of a score
    depend on the BLAS thread count, so fills are now those of OMP_NUM_THREADS=1 everywhere."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def context_window(text: str, start: int, end: int, width: int = CONTEXT_CHARS) -> str:
    """The phrase with up to `width` chars either side, cut at white space, '...' marking cuts."""
    a, b = max(0, start - width), min(len(text), end + width)
    if a > 0:
        space = text.find(" ", a, start)
        a = space + 1 if space != -1 else a
    if b < len(text):
        space = text.rfind(" ", end, b)
        b = space if space != -1 else b
    snippet = " ".join(text[a:b].split())
    return ("... " if a > 0 else "") + snippet + (" ..." if b < len(text) else "")


class FillEngine:
    def __init__(self, encoder: Encoder, index: PhraseIndex, scoring: Scoring | None = None) -> None:
        self.encoder = encoder
        self.index = index
        self.scoring = scoring if scoring is not None else Scoring()
        self._block_bases = [sh.info.block_base for sh in index.shards]

    @classmethod
    def open(cls, settings: Settings, scoring: Scoring | None = None) -> "FillEngine":
        """Open the index and the encoder it was built with; refuse a model whose fingerprint differs.
        `scoring` replaces the fitted scoring read from the settings / the model directory."""
        manifest = Manifest.load(settings.index_dir())
        model_dir = Path(settings.model) if settings.model else Path(manifest.model.path)
        if not model_dir.is_dir():
            if settings.model:
                raise AppError(f"model directory {model_dir} (--model / FILL_MODEL) does not exist")
            raise AppError(f"the index was built with the model at {model_dir}, which does not exist here; pass "
                           "--model (FILL_MODEL) with that model's directory")

        def load_encoder() -> Encoder:
            if model_fingerprint(model_dir) != manifest.model.fingerprint:
                raise AppError(
                    f"model {model_dir} differs from the model the index {settings.index} was built with "
                    f"(fingerprint {manifest.model.fingerprint[:12]}); pass the right --model or rebuild"
                )
            return Encoder(model_dir, device=settings.device, dtype=settings.dtype)

        # the encoder loads (mostly Python imports) while the index opens (mostly file mapping, GIL released)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-encoder") as pool:
            loading = pool.submit(load_encoder)
            index = PhraseIndex(
                settings.index_dir(), verify=settings.verify, nprobe=settings.nprobe, ef_search=settings.ef_search,
                refine=settings.refine,
            )
            try:
                encoder = loading.result()
            except BaseException:
                index.close()
                raise
        single_thread_blas()
        if scoring is None:
            scoring = Scoring.beside(model_dir, settings.scoring)
            if not scoring.lexical_weight:
                logger.warning("no fitted scoring for model %s (no %s there, no --scoring): lexical weight 0, so "
                               "hybrid fills as dense does, and confidence is the uncalibrated score; see fill-fit",
                               model_dir.name, SCORING_NAME)
        return cls(encoder, index, scoring)

    def close(self) -> None:
        self.index.close()

    def describe(self) -> dict:
        """What is being served: the index, the model and how it runs, the build settings."""
        m, enc = self.index.manifest, self.encoder
        return {
            "index": self.index.root.name,  # names, not the server's absolute paths
            "created_at": m.created_at,
            "model": {"name": enc.model_dir.name, "fingerprint": m.model.fingerprint, "type": m.model.model_type,
                      "device": str(enc.device), "dtype": str(enc.dtype).replace("torch.", "")},
            "dim": m.dim,
            "index_type": m.index_type,
            "factories": sorted({s.factory for s in m.shards}),
            "vector_dtype": m.vector_dtype,
            "counts": m.counts.model_dump(),
            "build": {k: Path(v).name if isinstance(v, str) and Path(v).is_absolute() else v
                      for k, v in m.build.items()},
            "default_mode": self.default_mode,
            "scoring": {"lexical_weight": {mode: self.scoring.weight(mode) for mode in MODES},
                        "calibrated": {mode: mode in self.scoring.confidence for mode in MODES},
                        "fitted": self.scoring.fitted},
        }

    @property
    def block_tokens(self) -> int:
        """Corpus tokens per block of this index (what restricted / hybrid add per BM25 block)."""
        return int(self.index.manifest.build.get("block_tokens", 256))

    @property
    def default_mode(self) -> str:
        """The mode of a request that names none: hybrid, or dense on an index without BM25."""
        return "hybrid" if self.index.bm25 is not None else "dense"

    def fill(self, request: FillRequest) -> FillResult:
        return self.fill_detailed(request)[0]

    def fill_detailed(self, request: FillRequest) -> tuple[FillResult, list[np.ndarray]]:
        """The fill, and per mask the confidence features of its candidates (service.scoring.FEATURES;
        before abstention), which `fill-fit` fits the calibration on."""
        return self.finish(self.prepare([self.plan(request)])[0])

    # A fill in three steps, so that a server can batch the middle one over concurrent requests
    # (service.batcher): plan (validate, tokenize) -> prepare (encode, FAISS search; many at once) ->
    # finish (BM25, spans, rank; one request).

    def plan(self, request: FillRequest, budget: Budget | None = None) -> Planned:
        """The request checked against this index (mode, cost budget) and its query tokenized; AppError
        (validation) naming the field otherwise."""
        t0 = time.perf_counter()
        mode = self.default_mode if request.mode is None else request.mode
        if mode not in MODES:
            raise AppError(f"mode must be one of {MODES}, got {mode!r}", kind="validation", field="mode")
        if mode != "dense" and self.index.bm25 is None:
            raise AppError(f"mode {mode!r} needs a BM25 index; this index has none (rebuild it)",
                           kind="validation", field="mode")
        if budget is not None:
            budget.check(request, mode, self.block_tokens)
        ids, positions = self.encoder.query_layout(request.text)
        return Planned(request, mode, ids, positions, t0)

    def prepare(self, planned: list[Planned], shape: Callable[[int, int], tuple[int, int]] | None = None
                ) -> list[Prepared]:
        """Encode the queries in one forward pass and run one FAISS search per distinct k for all their
        masks (start and end queries of every dense / hybrid request). `shape(rows, width)` gives the
        padded shape of the encoder's batch (Encoder.encode_layouts)."""
        mark = time.perf_counter()
        vectors = self.encoder.encode_layouts([(p.ids, p.positions) for p in planned], shape)
        encode_ms = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        hits: list[list | None] = [None] * len(planned)
        for k in sorted({p.request.k for p in planned if p.mode != "restricted"}):
            members = [i for i, p in enumerate(planned) if p.mode != "restricted" and p.request.k == k]
            sizes = [2 * vectors[i].starts.shape[0] for i in members]  # each request's start and end queries
            found = self.index.search(np.concatenate([np.concatenate([vectors[i].starts, vectors[i].ends])
                                                      for i in members]), k, groups=sizes)
            at = 0
            for i, n in zip(members, sizes):
                hits[i] = found[at : at + n]
                at += n
        search_ms = (time.perf_counter() - mark) * 1000
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        return [Prepared(p, qv, h if h is not None else [empty] * (2 * qv.starts.shape[0]), encode_ms, search_ms)
                for p, qv, h in zip(planned, vectors, hits)]

    def finish(self, prepared: Prepared, deadline: Deadline | None = None) -> tuple[FillResult, list[np.ndarray]]:
        """The fill of a prepared request: BM25 (restricted / hybrid), candidate spans and their ranking.
        `deadline` is checked between steps and masks (AppError kind timeout once it has passed)."""
        request, mode, qv = prepared.planned.request, prepared.planned.mode, prepared.vectors
        text = request.text
        spent = dict.fromkeys(STAGES, 0.0)
        spent["encode"], spent["search"] = prepared.encode_ms, prepared.search_ms
        mark = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            spent[stage] += (now - mark) * 1000
            mark = now
            if deadline is not None:
                deadline.check(stage)

        if deadline is not None:
            deadline.check("queue")
        n_masks = qv.starts.shape[0]
        hits = prepared.hits
        prior, bonus = None, None
        if mode != "dense":
            weight = self.scoring.weight(mode) if request.lexical_weight is None else request.lexical_weight
            blocks, bm25 = self.index.bm25.search_scored(blank_masks(text), max(request.blocks, PRIOR_BLOCKS))
            prior = BlockPrior.from_bm25(blocks, bm25)
            bonus = self._bonus(prior, weight) if weight else None
            block_hits = self.index.block_hits(blocks[: request.blocks])
            hits = [(np.concatenate([h[0], block_hits[0]]), np.concatenate([h[1], block_hits[1]])) for h in hits]
        lap("search")
        masks, features = [], []
        for m in range(n_masks):
            spans = self._candidates(hits[m], hits[n_masks + m], request.max_span_tokens)
            scored = score_spans(*spans, qv.starts[m], qv.ends[m], self.index.vectors, self.index.scale, bonus)
            lap("spans")
            candidates, feats = self._rank(scored, request, mode, prior)
            if not candidates or candidates[0].confidence < request.min_confidence:
                masks.append(MaskFill(index=m, candidates=[], abstained=True))
            else:
                masks.append(MaskFill(index=m, candidates=candidates))
            features.append(feats)
            lap("rank")
        tops = iter([mf.candidates[0].phrase if mf.candidates else None for mf in masks])

        def sub(match):
            top = next(tops)
            return top if top is not None else match.group(0)

        filled = MASK_PATTERN.sub(sub, text)
        result = FillResult(filled=filled, masks=masks, took_ms=(time.perf_counter() - prepared.planned.t0) * 1000,
                            timings_ms={k: round(v, 3) for k, v in spent.items()})
        return result, features

    def _bonus(self, prior: BlockPrior, weight: float) -> Bonus:
        def bonus(shard: int, positions: np.ndarray) -> np.ndarray:
            blocks = self.index.shards[shard].block_of(positions) + self._block_bases[shard]
            return weight * prior(blocks)

        return bonus

    def _candidates(self, start_hits, end_hits, max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shards, starts, ends = [], [], []
        for (sh_s, pos_s), forward in ((start_hits, True), (end_hits, False)):
            for s in unique(sh_s):
                shard = self.index.shards[int(s)]
                a, b = spans_from_hits(pos_s[sh_s == s], forward, max_len, shard.flags, shard.block_of)
                shards.append(np.full(a.shape, s, dtype=np.int64))
                starts.append(a)
                ends.append(b)
        if not shards:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(shards), np.concatenate(starts), np.concatenate(ends)

    def _occurrences(self, scored: SpanScores) -> tuple[list[str | None], Callable[[int], _Occurrence]]:
        """Each span's phrase text (None for spans of only punctuation / white space), and a function
        giving where span i lies in its document (built only for the spans shown as evidence)."""
        n = scored.shard.size
        block = np.empty(n, dtype=np.int64)
        row = np.empty(n, dtype=np.int64)
        char_a = np.empty(n, dtype=np.int64)
        char_b = np.empty(n, dtype=np.int64)
        for s in unique(scored.shard):
            shard = self.index.shards[int(s)]
            sel = np.flatnonzero(scored.shard == s)
            block[sel] = shard.block_of(scored.start[sel])
            row[sel] = shard.blocks[block[sel], 0]
            char_a[sel] = shard.offsets[scored.start[sel], 0]
            char_b[sel] = shard.offsets[scored.end[sel], 1]
        texts: dict[tuple[int, int], str] = {}
        keys: list[str | None] = []
        leads = np.zeros(n, dtype=np.int64)
        shards, rows, starts = scored.shard.tolist(), row.tolist(), char_a.tolist()
        for i, (s, r, a, b) in enumerate(zip(shards, rows, starts, char_b.tolist())):
            text = texts.get((s, r))
            if text is None:
                text = texts[(s, r)] = self.index.shards[s].doc_text(r)
            lead, end = strip_phrase(text[a:b])
            keys.append(text[a + lead : a + end] if end > lead else None)
            leads[i] = lead

        def locate(i: int) -> _Occurrence:
            s, r = shards[i], rows[i]
            start = starts[i] + int(leads[i])
            return _Occurrence(self.index.shards[s].doc_id(r), self._block_bases[s] + int(block[i]), start,
                               start + len(keys[i]), texts[(s, r)])

        return keys, locate

    def _rank_strings(self, scored: SpanScores, params: FillRequest):
        """`_rank`'s phrases by Python strings (the reference of service.phrases; used on a hash collision)."""
        keys, locate = self._occurrences(scored)
        if params.drop_stopwords:  # "in", "of the", "in London", "c": never the answer
            poor = {k for k in set(keys) if k is not None and poor_fill(k)}  # far fewer distinct keys than spans
            keys = [None if k is None or k in poor else k for k in keys]
        phrases = aggregate(keys, scored.score, scored.end - scored.start + 1, params.case_sensitive, params.aggregate)
        if params.alpha:  # len^alpha counts the tokens of the stripped phrase, not of the raw span
            for phrase in phrases:
                idx = phrase.occurrences[0]
                o, shard = locate(idx), self.index.shards[int(scored.shard[idx])]
                offs = np.asarray(shard.offsets[int(scored.start[idx]) : int(scored.end[idx]) + 1])
                phrase.tokens = int(((offs[:, 0] < o.end) & (offs[:, 1] > o.start)).sum())
        ranked = rank(phrases, params.alpha, max(params.top_k, 2))  # the shown phrases and the runner-up
        return [(p.text, value, np.asarray(p.occurrences, dtype=np.int64)) for p, value in ranked], locate

    def _table(self, scored: SpanScores, params: FillRequest):
        """The phrase table of the spans and a function locating span i in its document."""
        raw, block, row, char_a = span_texts(self.index.shards, scored.shard, scored.start, scored.end)
        table = phrase_table(raw, scored.score, scored.end - scored.start + 1, params.case_sensitive,
                             params.aggregate, params.drop_stopwords)
        if params.alpha:  # len^alpha counts the tokens of the stripped phrase, not of the raw span
            table.tokens = self._stripped_tokens(scored, table.first, char_a + table.lead,
                                                 char_a + table.lead + table.keys.length)
        texts: dict[tuple[int, int], str] = {}

        def locate(i: int) -> _Occurrence:
            s, r = int(scored.shard[i]), int(row[i])
            text = texts.get((s, r))
            if text is None:
                text = texts[(s, r)] = self.index.shards[s].doc_text(r)
            start = int(char_a[i] + table.lead[i])
            return _Occurrence(self.index.shards[s].doc_id(r), self._block_bases[s] + int(block[i]), start,
                               start + int(table.keys.length[i]), text)

        return table, locate

    def _stripped_tokens(self, scored: SpanScores, spans: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per span in `spans`: its tokens whose chars overlap [a, b) of the span."""
        out = np.zeros(spans.size, dtype=np.int64)
        steps = np.arange(int((scored.end - scored.start).max(initial=0)) + 1)
        for s in unique(scored.shard[spans]).tolist():
            sel = np.flatnonzero(scored.shard[spans] == s)
            i = spans[sel]
            pos = scored.start[i][:, None] + steps[None, :]
            inside = pos <= scored.end[i][:, None]
            offs = self.index.shards[s].offsets[np.where(inside, pos, scored.start[i][:, None]).ravel()]
            offs = offs.reshape(pos.shape + (2,))
            overlap = inside & (offs[..., 0] < b[i][:, None]) & (offs[..., 1] > a[i][:, None])
            out[sel] = overlap.sum(axis=1)
        return out

    def _rank(
        self, scored: SpanScores, params: FillRequest, mode: str, prior: BlockPrior | None
    ) -> tuple[list[Candidate], np.ndarray]:
        try:
            table, locate = self._table(scored, params)
            ranked = [(table.text(p), value, table.occurrences(p))
                      for p, value in rank_table(table, params.alpha, max(params.top_k, 2))]
        except Collision:  # two phrases hashed alike: group by strings
            ranked, locate = self._rank_strings(scored, params)
        shown = []  # (phrase text, value, its occurrences best first)
        for text, value, occ_idx in ranked[: params.top_k]:
            shown.append((text, value, occ_idx[np.argsort(-scored.score[occ_idx], kind="stable")].tolist()))
        # the lexical prior of the block of the top phrase's best occurrence
        lexical = float(prior(np.array([locate(shown[0][2][0]).block]))[0]) if prior is not None and shown else 0.0
        runner_up = ranked[1][1] if len(ranked) > 1 else None
        feats = mask_features(np.array([v for _, v, _ in shown]), runner_up, lexical, scored.start_max,
                              scored.end_max)
        confidence = self.scoring.confidence_of(mode, feats)
        out = []
        for (phrase, value, order), conf in zip(shown, confidence.tolist()):
            evidence, seen = [], set()
            for idx in order:
                o = locate(idx)
                where = (o.doc_id, o.start, o.end)
                if where in seen:
                    continue
                seen.add(where)
                if len(evidence) >= params.evidence:
                    break
                evidence.append(Evidence(doc_id=o.doc_id, block=o.block, start=o.start, end=o.end,
                                         context=context_window(o.text, o.start, o.end), score=float(scored.score[idx])))
            out.append(Candidate(phrase=phrase, score=value, confidence=min(1.0, max(0.0, conf)),
                                 evidence=evidence))
        return out, feats

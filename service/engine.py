"""The fill engine: NPM inference over a phrase index. Knows nothing of HTTP."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from encoder.stopwords import poor_fill
from encoder.tokens import MASK_PATTERN
from service.index import PhraseIndex
from service.spans import SpanScores, aggregate, rank, score_spans, spans_from_hits, strip_phrase

logger = logging.getLogger(__name__)

CONTEXT_CHARS = 80


@dataclass(frozen=True)
class FillParams:
    top_k: int = 5
    k: int = 1024
    max_span_tokens: int = 10
    alpha: float = 0.0
    evidence: int = 3
    case_sensitive: bool = True
    mode: str = "dense"  # dense (FAISS top-k), restricted (every token of the top BM25 blocks) or hybrid (both)
    blocks: int = 3  # BM25 blocks for restricted / hybrid
    drop_stopwords: bool = True  # drop phrases of only stopwords, or starting / ending with a lower-case one
    aggregate: str = "max"  # a phrase's mass: the max (best occurrence) or the sum (NPM) of its occurrences' scores


MODES = ("dense", "restricted", "hybrid")


class ModeError(ValueError):
    """The requested mode cannot be served by this index."""


@dataclass
class Evidence:
    doc_id: str
    block: int
    start: int
    end: int
    context: str
    score: float


@dataclass
class Candidate:
    phrase: str
    score: float
    evidence: list[Evidence] = field(default_factory=list)


@dataclass
class MaskFill:
    index: int
    candidates: list[Candidate]


STAGES = ("encode", "search", "spans", "rank")


@dataclass
class FillResult:
    filled: str
    masks: list[MaskFill]
    took_ms: float
    # ms per stage: encode the query, search (FAISS and/or BM25 blocks), spans (candidates + exact
    # scoring), rank (phrase text, aggregation, evidence)
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class _Occurrence:
    doc_id: str
    block: int
    start: int
    end: int
    text: str


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
    def __init__(self, encoder, index: PhraseIndex) -> None:
        self.encoder = encoder
        self.index = index

    def fill(self, text: str, params: FillParams = FillParams()) -> FillResult:
        t0 = time.perf_counter()
        if params.mode not in MODES:
            raise ModeError(f"mode must be one of {MODES}, got {params.mode!r}")
        if params.mode != "dense" and self.index.bm25 is None:
            raise ModeError(f"mode {params.mode!r} needs a BM25 index; this index has none (rebuild it)")
        spent = dict.fromkeys(STAGES, 0.0)
        mark = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            spent[stage] += (now - mark) * 1000
            mark = now

        qv = self.encoder.encode_queries([text])[0]
        lap("encode")
        n_masks = qv.starts.shape[0]
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        if params.mode == "restricted":
            hits = [empty] * (2 * n_masks)
        else:
            hits = self.index.search(np.concatenate([qv.starts, qv.ends]), params.k)
        if params.mode != "dense":
            block_hits = self.index.block_hits(self.index.bm25.search(MASK_PATTERN.sub(" ", text), params.blocks))
            hits = [(np.concatenate([h[0], block_hits[0]]), np.concatenate([h[1], block_hits[1]])) for h in hits]
        lap("search")
        masks = []
        for m in range(n_masks):
            spans = self._candidates(hits[m], hits[n_masks + m], params.max_span_tokens)
            scored = score_spans(*spans, qv.starts[m], qv.ends[m], self.index.vectors, self.index.scale)
            lap("spans")
            masks.append(MaskFill(index=m, candidates=self._rank(scored, params)))
            lap("rank")
        tops = iter([mf.candidates[0].phrase if mf.candidates else None for mf in masks])

        def sub(match):
            top = next(tops)
            return top if top is not None else match.group(0)

        filled = MASK_PATTERN.sub(sub, text)
        return FillResult(filled=filled, masks=masks, took_ms=(time.perf_counter() - t0) * 1000,
                          timings_ms={k: round(v, 3) for k, v in spent.items()})

    def _candidates(self, start_hits, end_hits, max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shards, starts, ends = [], [], []
        for (sh_s, pos_s), forward in ((start_hits, True), (end_hits, False)):
            for s in np.unique(sh_s):
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
        for s in np.unique(scored.shard):
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
        bases = [sh.info.block_base for sh in self.index.shards]

        def locate(i: int) -> _Occurrence:
            s, r = shards[i], rows[i]
            start = starts[i] + int(leads[i])
            return _Occurrence(self.index.shards[s].doc_id(r), bases[s] + int(block[i]), start, start + len(keys[i]),
                               texts[(s, r)])

        return keys, locate

    def _rank(self, scored: SpanScores, params: FillParams) -> list[Candidate]:
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
        ranked = rank(phrases, params.alpha)
        out = []
        for phrase, value in ranked[: params.top_k]:
            evidence, seen = [], set()
            occ_idx = np.asarray(phrase.occurrences, dtype=np.int64)
            for idx in occ_idx[np.argsort(-scored.score[occ_idx], kind="stable")].tolist():
                o = locate(idx)
                where = (o.doc_id, o.start, o.end)
                if where in seen:
                    continue
                seen.add(where)
                if len(evidence) >= params.evidence:
                    break
                evidence.append(
                    Evidence(o.doc_id, o.block, o.start, o.end, context_window(o.text, o.start, o.end), float(scored.score[idx]))
                )
            out.append(Candidate(phrase=phrase.text, score=value, evidence=evidence))
        return out

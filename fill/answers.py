"""A fill's last step for its masks: each mask's shown phrases with their calibrated confidence (fill.scoring),
abstention below the request's `min_confidence`, and their evidence (fill.evidence), read from the shards in one
call together with the tokens of each top phrase's block (the query-overlap feature)."""

from __future__ import annotations

import numpy as np

from fill.evidence import gather, pool_want
from fill.ranker import RankedMask
from fill.schemas import Candidate, FillRequest, MaskFill, Mode
from fill.scoring import Scoring, mask_features, query_overlap
from fill.shard_group import BlockTokensTask, Shards
from fill.spans import BlockPrior
from indexer.phrase_index import PhraseIndex


def answer_masks(
    index: PhraseIndex,
    shards: Shards,
    scoring: Scoring,
    ranked: list[RankedMask],
    request: FillRequest,
    mode: Mode,
    prior: BlockPrior | None,
    read: bool,
    terms: frozenset[int],
) -> tuple[list[MaskFill], list[np.ndarray]]:
    """Each mask's shown phrases with confidence and evidence, and each mask's confidence features (`terms`: the
    query's content tokens; `prior`: the BM25 block prior, None in dense mode; `read`: ranked by the reader)."""
    blocks = [np.array([r.pool.block(r.shown[0].occurrences[0])]) if r.shown else None for r in ranked]
    tops = [(m, b, int(index.block_shards(b)[0][0])) for m, b in enumerate(blocks) if b is not None]
    extra = [BlockTokensTask(s, int(b[0])) for _, b, s in tops]
    wants = [pool_want(r.pool, p.occurrences, request.evidence) for r in ranked for p in r.shown[: request.top_k]]
    evidence, block_tokens = gather(shards, wants, along=extra)
    overlaps = {
        m: query_overlap(terms, tokens) if tokens.size else 0.0 for (m, _, _), tokens in zip(tops, block_tokens)
    }
    masks, features, found = [], [], iter(evidence)
    for m, r in enumerate(ranked):
        shown = r.shown[: request.top_k]
        top_block = blocks[m]  # None exactly when nothing is shown (top_k >= 1)
        lexical = float(prior(top_block)[0]) if top_block is not None and prior is not None else 0.0
        feats = mask_features(
            np.array([p.value for p in shown]),
            r.runner_up,
            lexical,
            r.pool.start_max,
            r.pool.end_max,
            overlaps.get(m, 0.0),
        )
        confidence = scoring.confidence_of(mode, feats, read).tolist()
        candidates = [
            Candidate(phrase=p.text, score=p.value, confidence=min(1.0, max(0.0, conf)), evidence=next(found))
            for p, conf in zip(shown, confidence)
        ]
        abstained = not candidates or candidates[0].confidence < request.min_confidence
        masks.append(MaskFill(index=m, candidates=[] if abstained else candidates, abstained=abstained))
        features.append(feats)
    return masks, features

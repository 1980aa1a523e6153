"""Restricted (BM25 blocks) and hybrid fill modes over the tiny index."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import AppError
from fill.engine import FillEngine
from fill.schemas import FillRequest
from fill.spans import spans_from_hits
from indexer.bm25 import match_query
from indexer.phrase_index import PhraseIndex
from tests.manifests import resealed


@pytest.fixture(scope="module")
def engine(tiny_index, tiny_bert_dir):
    from encoder.model import Encoder

    return FillEngine(Encoder(tiny_bert_dir), PhraseIndex(tiny_index))


def _block_doc(index: PhraseIndex, g: int) -> str:
    s = int(np.searchsorted([sh.info.block_base for sh in index.shards], g, side="right") - 1)
    shard = index.shards[s]
    return shard.doc_id(int(shard.blocks[g - shard.info.block_base, 0]))


def test_bm25_ranks_the_block_that_shares_the_rare_words(engine):
    top = engine.index.bm25.search_scored("Marie Curie was born in <mask> Warsaw", 2)[0]
    assert top.size >= 1
    assert _block_doc(engine.index, int(top[0])) == "d3"


def test_match_query_quotes_words_and_ignores_syntax():
    assert match_query('AND OR "x" NEAR(') == '"and" OR "near" OR "or" OR "x"'
    assert match_query("?? !!") is None


def test_restricted_scores_exactly_the_tokens_of_the_chosen_block(engine):
    text = "Marie Curie was born in <mask> ."
    params = dict(mode="restricted", blocks=1, top_k=100, max_span_tokens=3, evidence=20, drop_stopwords=False)
    result = engine.fill(FillRequest(text=text, **params))
    chosen = int(engine.index.bm25.search_scored(text.replace("<mask>", " "), 1)[0][0])
    evidence_blocks = {e.block for c in result.masks[0].candidates for e in c.evidence}
    assert evidence_blocks == {chosen}
    # the phrases are exactly those of every valid span of that block
    sh, pos = engine.index.block_hits(np.array([chosen]))
    shard = engine.index.shards[int(sh[0])]
    a, b = spans_from_hits(pos, True, 3, shard.flags, shard.block_of)
    doc = shard.doc_text(int(shard.blocks[int(shard.block_of(pos[:1])[0]), 0]))
    expected = set()
    for i, j in zip(a.tolist(), b.tolist()):
        phrase = doc[int(shard.offsets[i, 0]) : int(shard.offsets[j, 1])].strip(" .,()")
        if phrase:
            expected.add(phrase)
    assert {c.phrase for c in result.masks[0].candidates} == expected
    assert np.isclose(sum(c.score for c in result.masks[0].candidates), 1.0)


def test_hybrid_candidates_include_restricted_and_dense(engine):
    text = "Paris is the capital of <mask> ."
    common = dict(top_k=100, max_span_tokens=2, k=8, blocks=1, drop_stopwords=False)
    restricted = {
        c.phrase for c in engine.fill(FillRequest(text=text, mode="restricted", **common)).masks[0].candidates
    }
    dense = {c.phrase for c in engine.fill(FillRequest(text=text, mode="dense", **common)).masks[0].candidates}
    hybrid = {c.phrase for c in engine.fill(FillRequest(text=text, mode="hybrid", **common)).masks[0].candidates}
    assert restricted and dense
    assert restricted | dense == hybrid


def test_unknown_mode_and_missing_bm25_are_refused(engine, tiny_index, fresh_copy, tiny_bert_dir):
    with pytest.raises(AppError):
        engine.fill(FillRequest.model_construct(text="a <mask>", mode="sparse"))  # past the validator
    copy = fresh_copy(tiny_index)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["bm25"] = None
    (copy / "manifest.json").write_text(json.dumps(resealed(manifest)))
    no_bm25 = FillEngine(engine.encoder, PhraseIndex(copy))
    with pytest.raises(AppError, match="BM25"):
        no_bm25.fill(FillRequest(text="a <mask>", mode="restricted"))
    assert no_bm25.fill(FillRequest(text="a <mask>", mode="dense")).masks
    # a request that names no mode: hybrid where there is BM25, dense where there is none (not an error)
    assert no_bm25.default_mode() == "dense" and engine.default_mode() == "hybrid"
    dense = no_bm25.fill(FillRequest(text="Paris is the capital of <mask> .", mode="dense"))
    unnamed = no_bm25.fill(FillRequest(text="Paris is the capital of <mask> ."))
    assert unnamed.masks == dense.masks
    hybrid = engine.fill(FillRequest(text="Paris is the capital of <mask> .", mode="hybrid"))
    assert engine.fill(FillRequest(text="Paris is the capital of <mask> .")).masks == hybrid.masks


def test_api_mode_validation(tiny_index):
    from fastapi.testclient import TestClient

    from service.api import create_app
    from service.config import Settings
    from service.state import ServiceState

    settings = Settings(index=tiny_index)
    client = TestClient(create_app(settings, ServiceState(settings, engine=FillEngine.open(settings.engine_config()))))
    r = client.post("/fill", json={"text": "Paris is the capital of <mask> .", "mode": "sparse"})
    assert r.status_code == 422 and "mode" in r.json()["error"]
    r = client.post("/fill", json={"text": "Paris is the capital of <mask> .", "mode": "restricted", "blocks": 0})
    assert r.status_code == 422 and "blocks" in r.json()["error"]
    r = client.post("/fill", json={"text": "Paris is the capital of <mask> .", "mode": "restricted", "blocks": 2})
    assert r.status_code == 200 and r.json()["masks"][0]["candidates"]


# ---------------------------------------------------------------- the lexical prior (hybrid scoring)


@pytest.mark.parametrize("mode", ["restricted", "hybrid"])
def test_a_large_lexical_weight_takes_the_top_fill_from_the_best_bm25_block(engine, mode):
    text = "Paris is the capital of <mask> ."
    opts = dict(mode=mode, top_k=20, max_span_tokens=3, k=64, blocks=3, drop_stopwords=False)
    best = int(engine.index.bm25.search_scored(text.replace("<mask>", " "), 1)[0][0])
    plain = engine.fill(FillRequest(text=text, lexical_weight=0.0, **opts)).masks[0].candidates
    lexical = engine.fill(FillRequest(text=text, lexical_weight=50.0, **opts)).masks[0].candidates
    assert lexical[0].evidence[0].block == best
    # the phrases of the best block take more of the mass
    share = lambda cands: sum(c.score for c in cands if c.evidence[0].block == best)  # noqa: E731
    assert share(lexical) > share(plain)


def test_the_fitted_weight_is_the_default_and_a_request_overrides_it(engine):
    from fill.scoring import Scoring

    text = "Marie Curie was born in <mask> ."
    opts = dict(mode="hybrid", top_k=10, k=64, drop_stopwords=False)
    fitted = FillEngine(engine.encoder, engine.index, Scoring(lexical_weight={"hybrid": 8.0}))
    by_default = fitted.fill(FillRequest(text=text, **opts)).masks[0].candidates
    explicit = engine.fill(FillRequest(text=text, lexical_weight=8.0, **opts)).masks[0].candidates
    assert [(c.phrase, c.score) for c in by_default] == [(c.phrase, c.score) for c in explicit]
    unweighted = fitted.fill(FillRequest(text=text, lexical_weight=0.0, **opts)).masks[0].candidates
    assert [(c.phrase, c.score) for c in unweighted] == [
        (c.phrase, c.score) for c in engine.fill(FillRequest(text=text, **opts)).masks[0].candidates
    ]
    assert [(c.phrase, c.score) for c in unweighted] != [(c.phrase, c.score) for c in by_default]


def test_calibrated_confidence_is_monotone_in_the_score_and_abstains(engine):
    from fill.scoring import FEATURES, Calibration, Confidence, Scoring

    n = len(FEATURES)
    cal = Confidence(
        top=Calibration(coef=[1.5, 0.0, 0.3, 0.2, 0.1, 0.1, 0.0], intercept=-0.5, mean=[0.0] * n, scale=[1.0] * n),
        rest=Calibration(coef=[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], intercept=0.0, mean=[0.0] * n, scale=[1.0] * n),
    )
    calibrated = FillEngine(engine.encoder, engine.index, Scoring(confidence={"hybrid": cal, "dense": cal}))
    text = "Marie Curie was born in <mask> ."
    for mode in ("dense", "hybrid"):
        result, feats = calibrated.fill_detailed(FillRequest(text=text, mode=mode, top_k=20, k=64))
        cands = result.masks[0].candidates
        assert len(cands) > 2
        conf = [c.confidence for c in cands]
        scores = [c.score for c in cands]
        assert all(0 < p < 1 for p in conf)
        assert all(a >= b for a, b in zip(conf, conf[1:])) and scores == sorted(scores, reverse=True)
        np.testing.assert_allclose(conf, cal(feats[0]))
        top = conf[0]
        kept = calibrated.fill(FillRequest(text=text, mode=mode, top_k=20, k=64, min_confidence=top))
        assert kept.masks[0].candidates == cands and not kept.masks[0].abstained
        refused = calibrated.fill(
            FillRequest(text=text, mode=mode, top_k=20, k=64, min_confidence=min(1.0, top + 1e-6))
        )
        assert refused.masks[0].abstained and refused.masks[0].candidates == [] and refused.filled == text


@pytest.mark.parametrize("options", [{}, {"alpha": 0.5, "aggregate": "sum", "case_sensitive": False, "top_k": 20}])
def test_hash_collisions_are_split_inside_the_grouping_with_the_same_fills(engine, monkeypatch, options):
    import fill.ragged as ragged

    request = FillRequest(text="Allan Peiper was born in <mask> .", mode="hybrid", **options)
    want = engine.fill(request).model_dump(exclude={"took_ms", "timings_ms"})
    calls = []

    def split(*args):
        calls.append(1)
        return original(*args)

    original = ragged._split
    monkeypatch.setattr(ragged, "_split", split)
    monkeypatch.setattr(ragged, "_hashes", lambda keys: np.zeros(keys.length.size, dtype=np.uint64))  # all keys alike
    assert engine.fill(request).model_dump(exclude={"took_ms", "timings_ms"}) == want
    assert calls  # the collision was seen and the group split


def test_the_overlap_feature_is_the_share_of_query_tokens_in_the_top_block(engine):
    from fill.scoring import FEATURES, query_overlap

    col = FEATURES.index("overlap")
    params = dict(mode="restricted", blocks=1, top_k=3, evidence=1)

    def overlap_of(text: str) -> tuple[float, float]:
        result, feats = engine.fill_detailed(FillRequest(text=text, **params))
        top = result.masks[0].candidates[0].evidence[0]
        sh, pos = engine.index.block_hits(np.array([top.block]))
        tokens = np.asarray(engine.index.shards[int(sh[0])].token_ids[pos])
        terms = engine.encoder.content_tokens(engine.encoder.query_layout(text)[0])
        return float(feats[0][0, col]), query_overlap(terms, tokens)

    seen, expected = overlap_of("Marie Curie was born in <mask> .")
    assert seen == pytest.approx(expected) and seen > 0.5
    diluted, expected = overlap_of("Zorblax Quintavelle Marie Curie was born in <mask> .")
    assert diluted == pytest.approx(expected) and diluted < seen


def test_strict_spans_drop_fills_with_a_stopword_or_punctuation_inside(engine):
    from encoder.stopwords import broken_span

    common = dict(mode="hybrid", top_k=100, max_span_tokens=6, k=64, blocks=2)
    loose = [
        c.phrase
        for c in engine.fill(FillRequest(text="Marie Curie was born in <mask> .", **common)).masks[0].candidates
    ]
    strict = [
        c.phrase
        for c in engine.fill(FillRequest(text="Marie Curie was born in <mask> .", strict_spans=True, **common))
        .masks[0]
        .candidates
    ]
    assert any(broken_span(p) for p in loose)
    assert strict and not any(broken_span(p) for p in strict)
    assert [p for p in loose if not broken_span(p)][:5] == strict[:5]  # the kept rank among themselves as before

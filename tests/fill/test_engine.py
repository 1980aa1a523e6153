"""fill.engine.FillEngine's own API beyond the fill steps (those: test_engine_bruteforce, test_modes): the steps
driven by hand as the server drives them, `handle` for one request, `batch`, the budget, the next generation."""

from __future__ import annotations

import pytest

from common.errors import AppError
from corpus.readers import Document
from fill.budget import Budget
from fill.config import EngineConfig
from fill.deadline import Deadline
from fill.engine import FillEngine
from fill.schemas import FillRequest, FillResult, ScoreRequest, ScoreResult
from indexer.update import IndexUpdate


def test_the_next_generation_serves_an_update_with_the_same_models(tiny_index, fresh_copy, tiny_bert_dir):
    root = fresh_copy(tiny_index)
    engine = FillEngine.open(EngineConfig(index=root, device="cpu", dtype="fp32", reader_dir=None, use_reader=False))
    text = "Zorblax Quint was born in <mask> ."
    request = FillRequest(text=text, mode="restricted", top_k=100, evidence=1)

    def docs(result) -> set[str]:
        return {e.doc_id for m in result.masks for c in m.candidates for e in c.evidence}

    before = engine.fill(request)
    IndexUpdate(root, encoder=engine.encoder).add(
        [Document(0, "zq", "Zorblax Quint", "Zorblax Quint was born in Vexmoor harbour.")]
    )
    following = engine.next_generation()
    try:
        assert (following.encoder, following.scoring, following.reader) == (
            engine.encoder,
            engine.scoring,
            engine.reader,
        )
        assert following.index.manifest.generation == engine.index.manifest.generation + 1
        assert "zq" not in docs(before) and "zq" in docs(following.fill(request))  # BM25 finds the new block
    finally:
        following.close()
        engine.close()


def test_the_steps_driven_by_hand_give_what_handle_gives(tiny_index):
    """plan -> prepare -> finish, as service.requests drives them, for a fill and a score: the same results as
    `handle` (and `fill` / `score`); `finish` answers each kind with its own result type."""
    engine = FillEngine.open(
        EngineConfig(index=tiny_index, device="cpu", dtype="fp32", reader_dir=None, use_reader=False)
    )
    try:
        deadline = Deadline(60)
        fill = FillRequest(text="Marie Curie was born in <mask> .", evidence=2)
        score = ScoreRequest(text="Marie Curie was born in <mask> .", choices=["Warsaw", "Paris"])
        through = engine.finish(engine.prepare([engine.plan(fill)])[0], deadline)
        scored = engine.finish(engine.prepare([engine.plan(score)])[0], deadline)
        assert isinstance(through, FillResult) and isinstance(scored, ScoreResult)
        skip = {"took_ms", "timings_ms"}
        alone = engine.fill(fill)
        assert through.model_dump(exclude=skip) == alone.model_dump(exclude=skip)
        assert through.model_dump(exclude=skip) == engine.handle(fill, deadline=deadline).model_dump(exclude=skip)
        assert scored.model_dump(exclude=skip) == engine.score(score).model_dump(exclude=skip)
        result, features = engine.fill_detailed(fill)  # the same steps, finishing with the features
        assert result.filled == alone.filled and len(features) == 1 and features[0].shape[0] > 0
    finally:
        engine.close()


def test_a_deadline_passed_before_the_finish_step_times_out(tiny_index):
    engine = FillEngine.open(
        EngineConfig(index=tiny_index, device="cpu", dtype="fp32", reader_dir=None, use_reader=False)
    )
    try:
        with pytest.raises(AppError, match="search") as caught:
            engine.handle(FillRequest(text="Marie Curie was born in <mask> ."), deadline=Deadline(0.0))
        assert caught.value.kind == "timeout"
    finally:
        engine.close()


def test_a_batch_gives_each_request_the_result_it_gets_alone(tiny_index):
    """`batch`: fills of several modes and k and a score, prepared in one batch, each as it is alone."""
    engine = FillEngine.open(
        EngineConfig(index=tiny_index, device="cpu", dtype="fp32", reader_dir=None, use_reader=False)
    )
    try:
        requests = [
            FillRequest(text="Marie Curie was born in <mask> .", evidence=2),
            FillRequest(text="Paris is the capital of <mask> .", mode="restricted"),
            FillRequest(text="<mask> was a physicist . She moved to <mask> .", mode="dense", k=64),
            ScoreRequest(text="Marie Curie was born in <mask> .", choices=["Warsaw", "Paris"]),
        ]
        batched = engine.batch(requests)
        assert [type(r) for r in batched] == [FillResult, FillResult, FillResult, ScoreResult]
        for request, result in zip(requests, batched):
            assert result.model_dump(exclude={"took_ms", "timings_ms"}) == engine.handle(request).model_dump(
                exclude={"took_ms", "timings_ms"}
            )
        assert len(batched[2].masks) == 2
    finally:
        engine.close()


def test_the_budget_is_checked_when_the_request_is_planned(tiny_index):
    engine = FillEngine.open(
        EngineConfig(index=tiny_index, device="cpu", dtype="fp32", reader_dir=None, use_reader=False)
    )
    try:
        with pytest.raises(AppError, match="FILL_MAX_SEARCH"):
            engine.plan(FillRequest(text="<mask>", k=4096), Budget(10**9, 10**9, max_search=100))
        with pytest.raises(AppError, match="FILL_MAX_SEARCH"):
            engine.handle(FillRequest(text="<mask>", k=4096), budget=Budget(10**9, 10**9, max_search=100))
    finally:
        engine.close()

"""service.requests: the request path drives the engine's steps itself, in three execution contexts (the event
loop plans, the encoder's thread prepares the batch, a worker of the lane finishes, in the request's context),
and answers as the engine alone does."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from contextlib import contextmanager

import pytest

from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest, ScoreRequest
from service.config import Settings
from service.metrics import Metrics
from service.requests import RequestPath
from service.serving import Serving

REQUEST_ID = contextvars.ContextVar("request_id", default=None)


class State:
    """The service state the path needs (service.state.ServiceState's Admitting part) over one engine."""

    def __init__(self, engine: FillEngine, settings: Settings) -> None:
        self.settings, self.metrics = settings, Metrics()
        self.serving = Serving(engine, settings, self.metrics)

    @contextmanager
    def using(self):
        yield self.serving

    def ready_engine(self) -> FillEngine:
        return self.serving.engine


@pytest.fixture(scope="module")
def engine(tiny_index):
    engine = FillEngine.open(EngineConfig(index=tiny_index, device="cpu", dtype="fp32", use_reader=False))
    yield engine
    engine.close()


def test_a_fill_and_a_score_pass_through_three_contexts_and_answer_as_alone(engine, tmp_path):
    steps: list[tuple[str, str, str | None]] = []

    def recorded(name, step):
        def wrapper(*args, **kwargs):
            steps.append((name, threading.current_thread().name.split("_")[0], REQUEST_ID.get()))
            return step(*args, **kwargs)

        return wrapper

    state = State(engine, Settings(index=tmp_path, fill_workers=1))
    path = RequestPath(state)
    fill = FillRequest(text="Marie Curie was born in <mask> .", evidence=1)
    score = ScoreRequest(text="Marie Curie was born in <mask> .", choices=["Warsaw", "Paris"])

    async def main():
        REQUEST_ID.set("req-7")
        loop = threading.current_thread().name
        return loop, await path.fill(fill), await path.score(score)

    try:
        for name in ("plan", "prepare", "finish"):
            setattr(engine, name, recorded(name, getattr(engine, name)))
        loop, filled, scored = asyncio.run(main())
    finally:
        for name in ("plan", "prepare", "finish"):
            delattr(engine, name)
        state.serving.batcher.close()
        state.serving.heavy.close()
        path.close()
    want = [("plan", loop, "req-7"), ("prepare", "encoder", None), ("finish", "fill", "req-7")]
    assert steps == want + want
    skip = {"took_ms", "timings_ms"}
    assert filled.model_dump(exclude=skip) == engine.fill(fill).model_dump(exclude=skip)
    assert scored.model_dump(exclude=skip) == engine.score(score).model_dump(exclude=skip)

"""Micro-batching: the batcher's grouping rules (with a stand-in engine whose batches are recorded), and
the real engine's batched fills against fills made one at a time."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.prepared import Planned
from fill.schemas import FillRequest
from service.batcher import Batcher, bucket_shape


class RecordingEngine:
    """prepare() records each batch's texts; the first batch waits for `release` (so others queue up)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.shapes: list = []
        self.release = threading.Event()
        self.started = threading.Event()
        self.fail_on = fail_on

    def prepare(self, planned: list[Planned], shape=None) -> list[str]:
        texts = [p.request.text for p in planned]
        self.shapes.append(shape)
        self.batches.append(texts)
        self.started.set()
        self.release.wait(10)
        if self.fail_on is not None and self.fail_on in texts:
            raise ValueError(f"bad request {self.fail_on}")
        return [f"prepared {t}" for t in texts]


def planned(text: str, tokens: int = 4) -> Planned:
    return Planned(FillRequest(text=text), "dense", [0] * tokens, [1], time.perf_counter(), 1.0)


def test_requests_waiting_during_a_batch_form_the_next_batch():
    engine = RecordingEngine()
    batcher = Batcher(engine, max_batch=32)
    try:
        first = batcher.submit(planned("a <mask>"))
        assert engine.started.wait(5)
        rest = [batcher.submit(planned(f"q{i} <mask>")) for i in range(5)]
        assert batcher.depth == 5
        engine.release.set()
        assert first.result(5) == "prepared a <mask>"
        assert [f.result(5) for f in rest] == [f"prepared q{i} <mask>" for i in range(5)]
        assert engine.batches == [["a <mask>"], [f"q{i} <mask>" for i in range(5)]]
        assert engine.shapes == [bucket_shape, bucket_shape]  # a batch of one is left as it is by bucket_shape
    finally:
        batcher.close()


@pytest.mark.parametrize(
    "max_batch, max_tokens, sizes", [(2, 4096, [1, 2, 2, 1]), (32, 10, [1, 2, 2, 1]), (32, 9, [1, 1, 1, 1, 1, 1])]
)
def test_batches_keep_to_max_batch_and_max_tokens(max_batch, max_tokens, sizes):
    engine = RecordingEngine()
    batcher = Batcher(engine, max_batch=max_batch, max_tokens=max_tokens)
    try:
        futures = [batcher.submit(planned("first <mask>", tokens=5))]
        assert engine.started.wait(5)
        futures += [batcher.submit(planned(f"q{i} <mask>", tokens=5)) for i in range(5)]
        engine.release.set()
        for f in futures:
            f.result(5)
        assert [len(b) for b in engine.batches] == sizes
    finally:
        batcher.close()


def test_a_query_longer_than_the_token_budget_is_a_batch_of_its_own():
    engine = RecordingEngine()
    engine.release.set()
    batcher = Batcher(engine, max_tokens=8)
    try:
        assert batcher.submit(planned("long <mask>", tokens=50)).result(5) == "prepared long <mask>"
    finally:
        batcher.close()


def test_a_cancelled_request_is_not_computed():
    engine = RecordingEngine()
    batcher = Batcher(engine)
    try:
        first = batcher.submit(planned("a <mask>"))
        assert engine.started.wait(5)
        gone = batcher.submit(planned("gone <mask>"))
        kept = batcher.submit(planned("kept <mask>"))
        assert gone.cancel()
        engine.release.set()
        first.result(5)
        assert kept.result(5) == "prepared kept <mask>"
        with pytest.raises(CancelledError):
            gone.result(0)
        assert all("gone <mask>" not in b for b in engine.batches)
    finally:
        batcher.close()


def test_a_failing_request_fails_alone():
    engine = RecordingEngine(fail_on="bad <mask>")
    batcher = Batcher(engine)
    try:
        first = batcher.submit(planned("a <mask>"))
        assert engine.started.wait(5)
        others = [batcher.submit(planned(t)) for t in ("x <mask>", "bad <mask>", "y <mask>")]
        engine.release.set()
        first.result(5)
        assert others[0].result(5) == "prepared x <mask>" and others[2].result(5) == "prepared y <mask>"
        with pytest.raises(ValueError, match="bad request"):
            others[1].result(5)
    finally:
        batcher.close()


def test_max_wait_gathers_requests_arriving_soon_after():
    engine = RecordingEngine()
    engine.release.set()
    batcher = Batcher(engine, max_wait=0.5)
    try:
        futures = [batcher.submit(planned("a <mask>"))]
        time.sleep(0.05)
        futures.append(batcher.submit(planned("b <mask>")))
        for f in futures:
            f.result(5)
        assert engine.batches == [["a <mask>", "b <mask>"]]
    finally:
        batcher.close()


def test_close_fails_the_waiting_requests():
    engine = RecordingEngine()
    batcher = Batcher(engine)
    first = batcher.submit(planned("a <mask>"))
    assert engine.started.wait(5)
    waiting = batcher.submit(planned("b <mask>"))
    closer = threading.Thread(target=batcher.close)
    closer.start()
    engine.release.set()
    closer.join(5)
    assert first.result(5) == "prepared a <mask>"
    with pytest.raises(RuntimeError, match="closed"):
        waiting.result(5)
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(planned("c <mask>"))


@pytest.mark.parametrize(
    "rows, width, want",
    [
        (1, 23, (1, 23)),
        (2, 16, (2, 16)),
        (3, 17, (4, 32)),
        (5, 40, (8, 48)),
        (16, 1, (16, 16)),
        (17, 33, (32, 48)),
        (32, 64, (32, 64)),
    ],
)
def test_bucket_shape(rows, width, want):
    assert bucket_shape(rows, width) == want


def test_bucketing_bounds_the_shapes_a_batcher_meets():
    shapes = {bucket_shape(rows, width) for rows in range(2, 33) for width in range(8, 65)}
    assert len(shapes) == 5 * 4  # rows 2..32 -> 2, 4, 8, 16, 32; widths 8..64 -> 16, 32, 48, 64
    assert all(r >= 2 and w >= 8 for r, w in shapes)


# ---------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def engine(tiny_index) -> FillEngine:
    return FillEngine.open(EngineConfig(index=tiny_index, device="cpu", dtype="fp32"))


@pytest.mark.parametrize("shape", [None, bucket_shape])
def test_batched_fills_equal_fills_one_at_a_time(engine, shape):
    requests = [
        FillRequest(text=t, **opts)
        for t, opts in [
            ("Marie Curie was born in <mask> .", {}),
            ("The Seine flows through <mask> .", {"k": 64}),
            ("<mask> is the capital of France and <mask> of Poland .", {"mode": "hybrid"}),
            ("Warsaw <mask>", {"mode": "restricted"}),
            (
                "a much longer query about the river that flows through the city of <mask> in the north .",
                {"k": 64, "top_k": 3},
            ),
        ]
    ]
    alone = [engine.fill(r) for r in requests]
    prepared = engine.prepare([engine.plan(r) for r in requests], shape)
    together = [engine.finish(p) for p in prepared]
    for a, b in zip(alone, together):
        assert b.filled == a.filled
        assert [[c.phrase for c in m.candidates] for m in b.masks] == [
            [c.phrase for c in m.candidates] for m in a.masks
        ]
        for ma, mb in zip(a.masks, b.masks):
            assert [c.score for c in mb.candidates] == pytest.approx([c.score for c in ma.candidates], rel=1e-4)

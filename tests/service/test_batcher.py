"""Micro-batching: the batching loop's grouping rules (with a stand-in engine whose batches are recorded, run on the
encoder's thread), a request's wait ending at its deadline, and the real engine's batched fills against fills made
one at a time."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from common.errors import AppError
from fill.config import EngineConfig
from fill.deadline import Deadline
from fill.engine import FillEngine
from fill.prepared import Planned
from fill.schemas import FillRequest
from service.batcher import Batcher, bucket_shape


class StandInEncoder:
    def __init__(self) -> None:
        self.runner = ThreadPoolExecutor(1, thread_name_prefix="encoder")


class RecordingEngine:
    """prepare() records each batch's texts and thread; the first batch waits for `release` (so others queue up)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.encoder = StandInEncoder()
        self.batches: list[list[str]] = []
        self.shapes: list = []
        self.threads: set[str] = set()
        self.release = threading.Event()
        self.started = threading.Event()
        self.fail_on = fail_on

    def prepare(self, planned: list[Planned], shape=None) -> list[str]:
        texts = [p.request.text for p in planned]
        self.shapes.append(shape)
        self.batches.append(texts)
        self.threads.add(threading.current_thread().name.split("_")[0])
        self.started.set()
        self.release.wait(30)
        if self.fail_on is not None and self.fail_on in texts:
            raise ValueError(f"bad request {self.fail_on}")
        return [f"prepared {t}" for t in texts]


def planned(text: str, tokens: int = 4) -> Planned:
    return Planned(FillRequest(text=text), "dense", [0] * tokens, [1], time.perf_counter(), 1.0)


def run(body, engine: RecordingEngine, **options):
    """`body(batcher)` on an event loop, the batcher closed after it."""

    async def main():
        batcher = Batcher(engine, **options)
        try:
            return await body(batcher)
        finally:
            batcher.close()

    try:
        return asyncio.run(main())
    finally:
        engine.release.set()
        engine.encoder.runner.shutdown()


async def started(engine: RecordingEngine) -> None:
    assert await asyncio.to_thread(engine.started.wait, 30)


def test_requests_waiting_during_a_batch_form_the_next_batch_computed_on_the_encoders_thread():
    engine = RecordingEngine()

    async def body(batcher):
        first = batcher.submit(planned("a <mask>"))
        await started(engine)
        rest = [batcher.submit(planned(f"q{i} <mask>")) for i in range(5)]
        assert batcher.depth == 5
        engine.release.set()
        assert await first == "prepared a <mask>"
        assert await asyncio.gather(*rest) == [f"prepared q{i} <mask>" for i in range(5)]

    run(body, engine, max_batch=32)
    assert engine.batches == [["a <mask>"], [f"q{i} <mask>" for i in range(5)]]
    assert engine.shapes == [bucket_shape, bucket_shape]  # a batch of one is left as it is by bucket_shape
    assert engine.threads == {"encoder"}


@pytest.mark.parametrize(
    "max_batch, max_tokens, sizes", [(2, 4096, [1, 2, 2, 1]), (32, 10, [1, 2, 2, 1]), (32, 9, [1, 1, 1, 1, 1, 1])]
)
def test_batches_keep_to_max_batch_and_max_tokens(max_batch, max_tokens, sizes):
    engine = RecordingEngine()

    async def body(batcher):
        futures = [batcher.submit(planned("first <mask>", tokens=5))]
        await started(engine)
        futures += [batcher.submit(planned(f"q{i} <mask>", tokens=5)) for i in range(5)]
        engine.release.set()
        await asyncio.gather(*futures)

    run(body, engine, max_batch=max_batch, max_tokens=max_tokens)
    assert [len(b) for b in engine.batches] == sizes


def test_a_query_longer_than_the_token_budget_is_a_batch_of_its_own():
    engine = RecordingEngine()
    engine.release.set()

    async def body(batcher):
        return await batcher.submit(planned("long <mask>", tokens=50))

    assert run(body, engine, max_tokens=8) == "prepared long <mask>"


def test_a_cancelled_request_is_not_computed():
    engine = RecordingEngine()

    async def body(batcher):
        first = batcher.submit(planned("a <mask>"))
        await started(engine)
        gone = batcher.submit(planned("gone <mask>"))
        kept = batcher.submit(planned("kept <mask>"))
        assert gone.cancel()
        engine.release.set()
        await first
        assert await kept == "prepared kept <mask>"
        assert gone.cancelled()

    run(body, engine)
    assert all("gone <mask>" not in b for b in engine.batches)


def test_a_request_not_batched_by_its_deadline_times_out_in_the_queue_and_is_dropped():
    engine = RecordingEngine()

    async def body(batcher):
        first = batcher.submit(planned("a <mask>"))
        await started(engine)
        t0 = time.perf_counter()
        with pytest.raises(AppError, match="queue stage") as caught:
            await batcher.prepared(planned("late <mask>"), Deadline(0.2))
        assert caught.value.kind == "timeout" and time.perf_counter() - t0 >= 0.15
        engine.release.set()
        await first
        assert await batcher.prepared(planned("b <mask>"), Deadline(60)) == "prepared b <mask>"

    run(body, engine)
    assert engine.batches == [["a <mask>"], ["b <mask>"]]  # the late one was never computed


def test_a_failing_request_fails_alone():
    engine = RecordingEngine(fail_on="bad <mask>")

    async def body(batcher):
        first = batcher.submit(planned("a <mask>"))
        await started(engine)
        others = [batcher.submit(planned(t)) for t in ("x <mask>", "bad <mask>", "y <mask>")]
        engine.release.set()
        await first
        assert await others[0] == "prepared x <mask>" and await others[2] == "prepared y <mask>"
        with pytest.raises(ValueError, match="bad request"):
            await others[1]

    run(body, engine)


def test_max_wait_gathers_requests_arriving_soon_after():
    engine = RecordingEngine()
    engine.release.set()

    async def body(batcher):
        futures = [batcher.submit(planned("a <mask>"))]
        await asyncio.sleep(0.05)
        futures.append(batcher.submit(planned("b <mask>")))
        await asyncio.gather(*futures)

    run(body, engine, max_wait=0.5)
    assert engine.batches == [["a <mask>", "b <mask>"]]


def test_close_fails_the_waiting_requests():
    engine = RecordingEngine()

    async def body(batcher):
        first = batcher.submit(planned("a <mask>"))
        await started(engine)
        waiting = batcher.submit(planned("b <mask>"))
        closer = asyncio.create_task(asyncio.to_thread(batcher.close))  # from another thread, as a reload does
        await asyncio.sleep(0.05)
        engine.release.set()
        await closer
        assert await first == "prepared a <mask>"
        with pytest.raises(RuntimeError, match="closed"):
            await waiting
        with pytest.raises(RuntimeError, match="closed"):
            batcher.submit(planned("c <mask>"))

    run(body, engine)


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

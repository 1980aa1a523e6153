"""What batching saves, on the engine alone (no HTTP):

    python -m bench.bench_batch --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl \
        [--probes 256] [--batches 1,4,16,32] [--mode hybrid] [--repeats 2]

The same --probes cloze probes (bench.shared.make_probes) run through `FillEngine.batch` in batches of each
size, as the server's batcher runs concurrent requests (each planned, the batch prepared in one encoder pass padded
to its bucketed shape and one search, each finished; best of --repeats passes). Printed per batch size, in ms per
request: the whole run (plan, prepare, finish; wall time) and its batched stage, encode + search (each result's
`timings_ms`, the batch's own), split into encode / search; and the speed-up of each against batches of 1 measured
in the same run. The batched stage is what batching shares; the finish (spans, rank, read) is per request, so the
whole run's speed-up is the smaller one.

Before FillEngine.batch this script drove `plan` / `prepare` by hand and timed `prepare` alone (its wall
time): the batched stage's figures compare with those, the whole run's are new.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.shared import make_probes
from common.process import single_thread_blas
from fill.engine import FillEngine
from fill.schemas import FillRequest
from service.batcher import bucket_shape
from service.config import Settings


def one_pass(engine: FillEngine, requests: list[FillRequest], size: int) -> tuple[float, float, float]:
    """(wall, encode, search) ms per request of running `requests` in batches of `size`."""
    wall = encode = search = 0.0
    for i in range(0, len(requests), size):
        chunk = requests[i : i + size]
        t0 = time.perf_counter()
        results = engine.batch(chunk, bucket_shape)
        wall += (time.perf_counter() - t0) * 1000
        encode += results[0].timings_ms["encode"]  # the batch's: the same in every result of it
        search += results[0].timings_ms["search"]
    n = len(requests)
    return wall / n, encode / n, search / n


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--probes", type=int, default=256)
    ap.add_argument("--batches", default="1,4,16,32")
    ap.add_argument("--mode", default="hybrid", choices=["dense", "hybrid"])
    ap.add_argument("--repeats", type=int, default=2)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    single_thread_blas()
    engine = FillEngine.open(Settings(index=args.index).engine_config())  # FILL_* variables apply, as in the server
    requests = [FillRequest(text=t, mode=args.mode) for t in make_probes(args.corpus, args.probes, seed=7)]
    engine.batch(requests[:8])  # warm-up
    base = None
    print(f"{len(requests)} {args.mode} probes, {engine.index.total_tokens:,} tokens, ms per request:")
    for size in [int(b) for b in args.batches.split(",")]:
        wall, encode, search = min((one_pass(engine, requests, size) for _ in range(args.repeats)), key=lambda r: r[0])
        base = base or (wall, encode + search)
        print(
            f"batch {size:3d}: run {wall:7.2f} ms, {base[0] / wall:5.2f}x batch 1; batched stage "
            f"{encode + search:7.2f} ms (encode {encode:6.2f}, search {search:6.2f}), "
            f"{base[1] / (encode + search):5.2f}x batch 1",
            flush=True,
        )
    engine.close()


if __name__ == "__main__":
    main()

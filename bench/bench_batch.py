"""What batching saves in the batched stage (encode + FAISS search + exact re-scoring), on the engine
alone (no HTTP, no finish):

    python bench/bench_batch.py --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl \
        [--probes 256] [--batches 1,4,16,32] [--mode hybrid] [--repeats 2]

The same --probes cloze probes (bench/probes.py) go through `FillEngine.prepare` in batches of each
size, as the server's batcher thread does (bucketed shapes; best of --repeats passes). Printed per batch
size: milliseconds of prepare per request (encode / search split), and the speed-up against batches of 1
measured in the same run."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probes import make_probes  # noqa: E402

from common.process import single_thread_blas  # noqa: E402
from fill.engine import FillEngine  # noqa: E402
from fill.schemas import FillRequest  # noqa: E402
from service.batcher import bucket_shape  # noqa: E402
from service.config import Settings  # noqa: E402


def one_pass(engine: FillEngine, planned: list, size: int) -> tuple[float, float, float]:
    """(wall, encode, search) ms per request of preparing `planned` in batches of `size`."""
    wall = encode = search = 0.0
    for i in range(0, len(planned), size):
        chunk = planned[i : i + size]
        t0 = time.perf_counter()
        prepared = engine.prepare(chunk, bucket_shape)
        wall += (time.perf_counter() - t0) * 1000
        encode += prepared[0].encode_ms
        search += prepared[0].search_ms
    n = len(planned)
    return wall / n, encode / n, search / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--probes", type=int, default=256)
    ap.add_argument("--batches", default="1,4,16,32")
    ap.add_argument("--mode", default="hybrid", choices=["dense", "hybrid"])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    single_thread_blas()
    engine = FillEngine.open(Settings(index=args.index).engine_config())  # FILL_* variables apply, as in the server
    planned = [engine.plan(FillRequest(text=t, mode=args.mode)) for t in make_probes(args.corpus, args.probes, seed=7)]
    engine.prepare(planned[:8])  # warm-up
    base = None
    print(f"{len(planned)} {args.mode} probes, {engine.index.total_tokens:,} tokens, prepare ms per request:")
    for size in [int(b) for b in args.batches.split(",")]:
        wall, encode, search = min((one_pass(engine, planned, size) for _ in range(args.repeats)), key=lambda r: r[0])
        base = base or wall
        print(
            f"batch {size:3d}: {wall:7.2f} ms (encode {encode:6.2f}, search {search:6.2f}), "
            f"{base / wall:5.2f}x batch 1",
            flush=True,
        )
    engine.close()


if __name__ == "__main__":
    main()

"""Anonymous memory of a fill process over its first fills (in one process, as the server's engine fills):

    python -m bench.bench_fill_memory --index data-local/bench/idx_3m --probes data-local/bench/cloze_3m.jsonl \
        [--fills 200] [--mode hybrid] [--no-reader] [--engine auto] [--pad both|reader|queries|none]
        [--ov-cache-capacity N] [--no-trim] [--json OUT]

Opens the index, the encoder and the reader as the server does (fill.loading), warms every shard (the mapped
pages are file-backed, not anonymous), then fills the probes' queries one at a time and prints RssAnon
(/proc/self/status) after 1, 10, 50, 100, 200, ... fills. What grows here is not the index's (it is mapped):
kernel caches and allocator fragments per new input shape, buffers kept by the libraries. Python's own
objects are not the cause (tracemalloc finds < 1 MB kept over 150 fills).

The levers of docs/BENCHMARKS.md's table, in this one script: `--pad` which serving passes round their length up
(encoder.model.padded_width; `none` is the behaviour before 2026-11-27), `--ov-cache-capacity` OpenVINO's
CPU_RUNTIME_CACHE_CAPACITY (its kernels kept per input shape), and glibc's allocator: its free memory is handed
back before each reading (common.process.trim_malloc, as the server does once idle; `--no-trim`: not), and its
settings through the environment (e.g. MALLOC_ARENA_MAX=2)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

MARKS = (1, 10, 50, 100, 200, 400, 800, 1600)


def anonymous_mb(trim: bool = False) -> float:
    if trim:
        from common.process import trim_malloc

        trim_malloc()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


def set_levers(pad: str, ov_cache_capacity: int | None) -> None:
    """Patch the serving code for a measurement: the passes not named by `pad` keep their own length, and
    OpenVINO compiles with the given kernel cache capacity."""
    import encoder.model
    import encoder.reader

    def unpadded(width: int, limit: int) -> int:
        return width

    if pad in ("queries", "none"):
        encoder.reader.padded_width = unpadded
    if pad in ("reader", "none"):
        encoder.model.padded_width = unpadded
    if ov_cache_capacity is not None:
        import openvino

        compile_model = openvino.Core.compile_model

        def capped(core, model, device, config):
            return compile_model(core, model, device, {**config, "CPU_RUNTIME_CACHE_CAPACITY": ov_cache_capacity})

        openvino.Core.compile_model = capped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--probes", type=Path, required=True, help="JSON lines with a `query` holding <mask>")
    ap.add_argument("--fills", type=int, default=200)
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--no-reader", action="store_true")
    ap.add_argument("--engine", default="auto")
    ap.add_argument(
        "--pad",
        choices=("both", "reader", "queries", "none"),
        default="both",
        help="which passes pad their length to a multiple of encoder.model.WIDTH_STEP (default: both)",
    )
    ap.add_argument(
        "--ov-cache-capacity", type=int, help="OpenVINO's CPU_RUNTIME_CACHE_CAPACITY for the compiled models"
    )
    ap.add_argument("--no-trim", action="store_true", help="keep the allocator's free memory (no malloc_trim)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    set_levers(args.pad, args.ov_cache_capacity)

    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.loading import open_parts, open_reader
    from fill.schemas import FillRequest

    config = EngineConfig(index=args.index, engine=args.engine)
    encoder, index, scoring = open_parts(config)
    engine = FillEngine(encoder, index, scoring, open_reader(config, encoder))
    for shard in index.shards:
        shard.warm()
    queries = [json.loads(line)["query"] for line in args.probes.read_text(encoding="utf-8").splitlines() if line]
    if not queries:
        sys.exit(f"{args.probes} holds no probes")
    trim = not args.no_trim
    rows = [{"fills": 0, "anon_mb": round(anonymous_mb(trim), 1), "seconds": 0.0}]
    t0 = time.perf_counter()
    for n in range(1, args.fills + 1):
        engine.fill(
            FillRequest(text=queries[(n - 1) % len(queries)], mode=args.mode, reader=False if args.no_reader else None)
        )
        if n in MARKS or n == args.fills:
            rows.append(
                {"fills": n, "anon_mb": round(anonymous_mb(trim), 1), "seconds": round(time.perf_counter() - t0, 2)}
            )
    for row in rows:
        print(f"after {row['fills']:5d} fills: anonymous {row['anon_mb']:8.1f} MB ({row['seconds']:.1f} s)")
    print(f"growth over {args.fills} fills: {rows[-1]['anon_mb'] - rows[0]['anon_mb']:.1f} MB")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"mode": args.mode, "reader": not args.no_reader, "pad": args.pad, "trim": trim, "rows": rows}, indent=2
            )
            + "\n"
        )


if __name__ == "__main__":
    main()

"""Where a fill's time goes on a given index, and opening that index's, by cProfile, in one process:

    python -m bench.profile_fills --index data-local/scale_none/idx_100m --corpus data-local/trex_dev/corpus.jsonl \
        [--fills 30] [--warm] [--top 18]

Opens the index alone under the profiler (indexer.phrase_index.PhraseIndex: shards, FAISS, BM25) and prints its
seconds and costliest functions (cumulative), then opens the engine as the server does (fill.loading), with
`--warm` maps every page a fill reads (PhraseIndex.warm, as the server's background warm-up does), fills 10 cloze
queries of the corpus (bench.shared.make_probes) to warm up and profiles the next --fills: ms a fill and the
functions by their own time (`acquire` of a lock: the time the calling thread waited on the shard pool or the
encoder's thread)."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from bench.shared import make_probes
from common.process import single_thread_blas


def profiled(fn, top: int, order: str):
    """fn() under cProfile: its result, after printing its seconds and its `top` functions by `order`."""
    profile = cProfile.Profile()
    t = time.perf_counter()
    profile.enable()
    out = fn()
    profile.disable()
    print(f"{time.perf_counter() - t:.2f} s")
    pstats.Stats(profile).sort_stats(order).print_stats(top)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus the cloze queries come from")
    p.add_argument("--fills", type=int, default=30)
    p.add_argument("--warm", action="store_true", help="map every page a fill reads first, as a warmed server has")
    p.add_argument("--top", type=int, default=18)
    args = p.parse_args()
    single_thread_blas()
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.loading import open_parts, open_reader
    from fill.schemas import FillRequest
    from indexer.phrase_index import PhraseIndex

    print("open the index: ", end="")
    profiled(lambda: PhraseIndex(args.index), args.top, "cumulative").close()
    config = EngineConfig(index=args.index)
    encoder, index, scoring = open_parts(config)
    engine = FillEngine(encoder, index, scoring, open_reader(config, encoder))
    if args.warm:
        index.warm(pages=True)
    probes = make_probes(args.corpus, 10 + args.fills, seed=0)
    for text in probes[:10]:
        engine.fill(FillRequest(text=text))
    t = time.perf_counter()
    print(f"{args.fills} fills: ", end="")
    profiled(lambda: [engine.fill(FillRequest(text=text)) for text in probes[10:]], args.top, "tottime")
    print(f"ms a fill (profiled) {(time.perf_counter() - t) * 1000 / max(1, args.fills):.1f}")
    engine.close()


if __name__ == "__main__":
    main()

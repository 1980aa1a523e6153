"""Batched fills against fills made one at a time, on the engine (no HTTP):

    OMP_NUM_THREADS=1 python -m bench.batch_agreement --index data-local/bench/idx_10m \
        --corpus data-local/debian/corpus_10m.jsonl [--probes 100] [--batch 16]

Each cloze probe (bench.shared.make_probes) is filled in dense and in hybrid mode alone, then again in batches of
--batch (`FillEngine.run_batch`: each planned, the batch prepared together padded to its bucketed shape, each
finished, as the server's batcher does).
Printed: responses equal field for field (timings aside) and with the same `filled` text (top-1)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.shared import make_probes
from common.process import single_thread_blas
from fill.engine import FillEngine
from fill.schemas import FillRequest
from service.batcher import bucket_shape
from service.config import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    single_thread_blas()
    engine = FillEngine.open(Settings(index=args.index).engine_config())  # FILL_* variables apply, as in the server
    requests = [
        FillRequest(text=t, mode=m) for t in make_probes(args.corpus, args.probes, seed=7) for m in ("dense", "hybrid")
    ]
    alone = [engine.fill(r) for r in requests]
    same = top1 = 0
    skip = {"took_ms", "timings_ms"}
    for i in range(0, len(requests), args.batch):
        chunk = requests[i : i + args.batch]
        for j, result in enumerate(engine.run_batch(chunk, bucket_shape)):
            same += result.model_dump(exclude=skip) == alone[i + j].model_dump(exclude=skip)
            top1 += result.filled == alone[i + j].filled
    print(
        f"{len(requests)} requests in batches of {args.batch}: equal field for field {same}, same filled "
        f"text (top-1) {top1}"
    )


if __name__ == "__main__":
    main()

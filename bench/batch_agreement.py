"""Batched fills against fills made one at a time, on the engine (no HTTP):

    OMP_NUM_THREADS=1 python bench/batch_agreement.py --index data-local/bench/idx_10m \
        --corpus data-local/debian/corpus_10m.jsonl [--probes 100] [--batch 16]

Each cloze probe (bench/probes.py) is filled in dense and in hybrid mode alone, then again in batches of
--batch (`FillEngine.plan` -> `prepare` on the batch, padded to its bucketed shape -> `finish` each, as the
server's batcher does).
Printed: responses equal field for field (timings aside) and with the same `filled` text (top-1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probes import make_probes  # noqa: E402

from common.process import single_thread_blas  # noqa: E402
from fill.engine import FillEngine  # noqa: E402
from fill.schemas import FillRequest  # noqa: E402
from service.batcher import bucket_shape  # noqa: E402
from service.config import Settings  # noqa: E402


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
        for j, prepared in enumerate(engine.prepare([engine.plan(r) for r in chunk], bucket_shape)):
            result = engine.finish(prepared)
            same += result.model_dump(exclude=skip) == alone[i + j].model_dump(exclude=skip)
            top1 += result.filled == alone[i + j].filled
    print(
        f"{len(requests)} requests in batches of {args.batch}: equal field for field {same}, same filled "
        f"text (top-1) {top1}"
    )


if __name__ == "__main__":
    main()

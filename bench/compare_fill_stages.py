"""Median engine time per stage (encode, search, spans, rank; read with the reader) of one source tree, in
process, so that two commits can be compared on the same index (run each from its own tree, alternating, on a
quiet machine):

    git worktree add /tmp/old COMMIT
    for tree in /tmp/old . /tmp/old .; do
        OMP_NUM_THREADS=1 .venv/bin/python bench/compare_fill_stages.py --tree $tree \
            --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl
    done

Trees from before the fill/ package (2026-11-24) are opened through their service.engine. Prints, per
option set (hybrid, dense, dense with alpha 0.5), the median ms of each stage over --n cloze probes and the
median of their sum.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

OPTIONS = {"hybrid": {}, "dense": {"mode": "dense"}, "dense_alpha": {"mode": "dense", "alpha": 0.5}}
STAGES = ("encode", "search", "spans", "rank", "read")  # read: with the reader (trees since issue 24)


def open_engine(tree: Path, index: Path):
    """(engine, FillRequest) of the tree's own code."""
    sys.path[:0] = [str(tree), str(tree / "bench")]
    from service.config import Settings

    if (tree / "fill").is_dir():
        from common.process import single_thread_blas
        from fill.engine import FillEngine
        from fill.schemas import FillRequest

        single_thread_blas()
        return FillEngine.open(Settings(index=index).engine_config()), FillRequest
    from service.engine import FillEngine  # the engine before fill/ set its BLAS threads itself
    from service.schemas import FillRequest

    return FillEngine.open(Settings(index=index)), FillRequest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", type=Path, required=True, help="source tree whose engine is timed")
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus to draw cloze probes from")
    p.add_argument("--n", type=int, default=300)
    args = p.parse_args()
    engine, request = open_engine(args.tree.resolve(), args.index)
    from probes import make_probes

    texts = make_probes(args.corpus, args.n)
    for text in texts[:20]:  # warm-up
        engine.fill(request(text=text))
    out = {}
    for name, options in OPTIONS.items():
        timings = [engine.fill(request(text=t, **options)).timings_ms for t in texts]
        stages = [s for s in STAGES if s in timings[0]]
        ms = [[t[s] for s in stages] + [sum(t[s] for s in stages)] for t in timings]
        out[name] = dict(zip(stages + ["sum"], np.round(np.median(np.array(ms), axis=0), 2).tolist()))
    print(args.tree, json.dumps(out))


if __name__ == "__main__":
    main()

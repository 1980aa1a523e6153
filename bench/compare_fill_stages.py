"""Median engine time per stage (encode, search, spans, rank; read with the reader) of one source tree, so that
two commits can be compared on the same index (run each from its own tree, alternating, on a quiet machine):

    git worktree add /tmp/old COMMIT
    for tree in /tmp/old . /tmp/old .; do
        OMP_NUM_THREADS=1 .venv/bin/python -m bench.compare_fill_stages --tree $tree \
            --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl
    done

The probes are drawn here; the tree's engine runs in a child Python started in the tree (its own packages come
first on the child's import path, this checkout's are not imported there). Trees from before the fill/ package
(2026-11-24) are opened through their service.engine. Prints, per option set (hybrid, dense, dense with alpha 0.5),
the median ms of each stage over --n cloze probes and the median of their sum.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.shared import make_probes

OPTIONS = {"hybrid": {}, "dense": {"mode": "dense"}, "dense_alpha": {"mode": "dense", "alpha": 0.5}}
STAGES = ("encode", "search", "spans", "rank", "read")  # read: with the reader (trees with a reader)


def time_stages(index: str, texts: list[str], options: dict[str, dict], stages: list[str]) -> dict[str, dict]:
    """In the child, whose working directory is the tree: per option set, the median ms of each stage and of their
    sum. Self-contained (its source is what the child runs): every import here is the tree's."""
    from pathlib import Path

    import numpy as np

    from service.config import Settings

    if Path("fill").is_dir():
        from common.process import single_thread_blas
        from fill.engine import FillEngine
        from fill.schemas import FillRequest

        single_thread_blas()
        engine = FillEngine.open(Settings(index=Path(index)).engine_config())
    else:  # the engine before fill/ set its BLAS threads itself
        from service.engine import FillEngine
        from service.schemas import FillRequest

        engine = FillEngine.open(Settings(index=Path(index)))
    for text in texts[:20]:  # warm-up
        engine.fill(FillRequest(text=text))
    out = {}
    for name, opts in options.items():
        timings = [engine.fill(FillRequest(text=t, **opts)).timings_ms for t in texts]
        have = [s for s in stages if s in timings[0]]
        ms = [[t[s] for s in have] + [sum(t[s] for s in have)] for t in timings]
        out[name] = dict(zip(have + ["sum"], np.round(np.median(np.array(ms), axis=0), 2).tolist()))
    return out


def in_tree(tree: Path, index: Path, texts: list[str]) -> dict[str, dict]:
    """time_stages run by a child Python in `tree` (the probes on its stdin, the figures the last line it prints)."""
    code = inspect.getsource(time_stages) + (
        "\nimport json, sys\n"
        "print(json.dumps(time_stages(sys.argv[1], json.load(sys.stdin), json.loads(sys.argv[2]), sys.argv[3:])))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the tree's packages, nothing else first
    done = subprocess.run(
        [sys.executable, "-c", code, str(index.resolve()), json.dumps(OPTIONS), *STAGES],
        input=json.dumps(texts),
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the child in {tree} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", type=Path, required=True, help="source tree whose engine is timed")
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus to draw cloze probes from")
    p.add_argument("--n", type=int, default=300)
    args = p.parse_args()
    print(args.tree, json.dumps(in_tree(args.tree.resolve(), args.index, make_probes(args.corpus, args.n))))


if __name__ == "__main__":
    main()

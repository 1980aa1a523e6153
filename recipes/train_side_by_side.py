"""Several `encoder train` runs at once on one machine (a lent GPU), their weights packed small to come back.

    python -m recipes.train_side_by_side run --init encoder/default_model --work /tmp/runs --out $OUT \\
        --run "adj_qv2=--query-views 2 ..." --run "adj_qv3=--query-views 3 ..." [--common "ARGS"]
    python -m recipes.train_side_by_side unpack --init encoder/default_model --parts OUT/adj_qv2.part*.safetensors \\
        --out data-local/models/adj_qv2

A training step of this small encoder is bound by Python on one CPU core, not by the GPU, so N runs side by
side, one process each, take about the time of one. `run` starts every run (`encoder train ARGS --init INIT
--out WORK/NAME --resume`, each run's output in OUT/NAME.log), waits for all, then writes each run's last
checkpoint as its CHANGES from INIT: the tensors that differ, in fp16, split into files of at most --part-mb
(a lent machine returns a few files of at most 16 MiB; with the word embeddings frozen a 6-layer MiniLM's
changes are ~21 MB, two parts). `unpack` rebuilds a model directory (INIT's files, the changed tensors in)
that `indexer build --model` and `fill-eval --model` take.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from recipes.blend_models import WEIGHTS, write_model


def changed_tensors(init: Path, checkpoint: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors (fp16) that differ from INIT's at fp16 precision."""
    before = load_file(str(init / WEIGHTS))
    after = load_file(str(checkpoint / WEIGHTS))
    out = {}
    for name, tensor in after.items():
        new = tensor.to(torch.float16).contiguous()
        if name not in before or not torch.equal(before[name].to(torch.float16), new):
            out[name] = new
    return out


def write_parts(tensors: dict[str, torch.Tensor], out: Path, name: str, part_mb: float) -> list[Path]:
    """`tensors` in files OUT/NAME.partK.safetensors of at most `part_mb` MiB each (a tensor is never split)."""
    parts: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * tensors[key].element_size()
        if parts[-1] and size + nbytes > part_mb * 2**20:
            parts.append({})
            size = 0
        parts[-1][key] = tensors[key]
        size += nbytes
    paths = []
    for k, part in enumerate(parts):
        path = out / f"{name}.part{k}.safetensors"
        save_file(part, str(path))
        paths.append(path)
    return paths


def last_checkpoint(run_dir: Path) -> Path | None:
    latest = run_dir / "latest.json"
    return run_dir / json.loads(latest.read_text())["checkpoint"] if latest.is_file() else None


def cmd_run(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    procs = []
    for spec in args.run:
        name, _, flags = spec.partition("=")
        log = open(args.out / f"{name}.log", "w")  # noqa: SIM115 (closed below)
        cmd = [
            sys.executable,
            "-m",
            "training",
            "train",
            *shlex.split(args.common),
            *shlex.split(flags),
            "--init",
            str(args.init),
            "--out",
            str(args.work / name),
            "--resume",
        ]
        log.write(" ".join(map(shlex.quote, cmd)) + "\n")
        log.flush()
        procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
    failed = 0
    for name, proc, log in procs:
        code = proc.wait()
        log.close()
        ckpt = last_checkpoint(args.work / name)
        if ckpt is None:
            print(f"{name}: exit {code}, no checkpoint (see {name}.log)")
            failed += 1
            continue
        paths = write_parts(changed_tensors(args.init, ckpt), args.out, name, args.part_mb)
        print(f"{name}: exit {code}, {ckpt.name} -> {', '.join(p.name for p in paths)}")
        failed += code != 0
    return 1 if failed else 0


def cmd_unpack(args: argparse.Namespace) -> int:
    tensors = load_file(str(args.init / WEIGHTS))
    for part in args.parts:
        tensors.update(load_file(str(part)))
    write_model(args.init, tensors, args.out)
    print(f"{len(tensors)} tensors -> {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--init", type=Path, required=True)
    run.add_argument("--work", type=Path, required=True, help="folder of the runs' checkpoints")
    run.add_argument("--out", type=Path, required=True, help="folder of the logs and packed weights")
    run.add_argument("--run", action="append", required=True, help="NAME=ARGS of one `encoder train` run")
    run.add_argument("--common", default="", help="arguments of every run")
    run.add_argument("--part-mb", type=float, default=15.0)
    unpack = sub.add_parser("unpack")
    unpack.add_argument("--init", type=Path, required=True)
    unpack.add_argument("--parts", type=Path, nargs="+", required=True)
    unpack.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_unpack(args)


if __name__ == "__main__":
    raise SystemExit(main())

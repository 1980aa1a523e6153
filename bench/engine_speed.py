"""One pass of the encoder and of the reader per engine, on the CPU (docs/BENCHMARKS.md "Engines"):

    .venv/bin/python -m bench.engine_speed [--threads 1] [--rounds 3] [--engines torch openvino ...] [--compile]

Per engine (torch with its autocast dtype, the reference; OpenVINO in the same precision; ONNX Runtime
fp32; ONNX Runtime with int8 weights; torch.compile with --compile), the median milliseconds of: a query pass (one
18-token query, the
fill's encoder pass), a block pass (8 blocks of 128 tokens, the index build's unit), and a reader pass (one
mask with 16 windows, ~200 tokens, the reader's input). The engines run in alternating rounds, so a shared
machine's noise falls on all of them alike; each figure is also given as a ratio to torch's in the same round.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from encoder.model import BlockInput, Encoder
from encoder.reader import BUNDLED_READER, Reader, ReaderInput

QUERY = "Marie Curie, the physicist who discovered polonium, was born in <mask> ."


def timed(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def workloads(encoder: Encoder, reader: Reader):
    rng = np.random.default_rng(0)
    vocab = encoder.tokenizer.vocab_size
    blocks = [BlockInput(ids=rng.integers(1000, vocab, 128)) for _ in range(8)]
    ids, at = encoder.query_layout(QUERY)
    windows = [rng.integers(1000, vocab, 12) for _ in range(16)]
    item = ReaderInput(ids, at[0], windows)
    return {
        "query": lambda: encoder.encode_queries([QUERY]),
        "blocks": lambda: encoder.encode_blocks(blocks, here=True),
        "reader": lambda: reader.logits([item]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument(
        "--engines",
        nargs="+",
        default=["torch", "openvino", "onnx", "onnx-int8"],
        help="engines to time (torch, the reference, always)",
    )
    ap.add_argument("--compile", action="store_true", help="also torch.compile (slow to start)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp())  # copies, so the exports land in a scratch directory
    model, reader_dir = tmp / "model", tmp / "reader"
    shutil.copytree("encoder/default_model", model, ignore=shutil.ignore_patterns("onnx"))
    shutil.copytree(BUNDLED_READER, reader_dir, ignore=shutil.ignore_patterns("onnx"))
    engines = {}
    for engine in ["torch"] + [e for e in args.engines if e != "torch"]:
        t0 = time.perf_counter()
        enc = Encoder(model, device="cpu", engine=engine).for_inference()
        rd = Reader(reader_dir, device="cpu", engine=engine)
        engines[engine] = workloads(enc, rd)
        print(f"{engine}: ready in {time.perf_counter() - t0:.1f} s (exports included)", flush=True)
    if args.compile:
        enc = Encoder(model, device="cpu").for_inference()
        enc.model = torch.compile(enc.model)
        rd = Reader(reader_dir, device="cpu")
        rd.model = torch.compile(rd.model)
        engines["torch.compile"] = workloads(enc, rd)
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for engine, work in engines.items():
            for name, fn in work.items():
                results.setdefault((engine, name), []).append(timed(fn, args.repeat))
    print(
        f"\n{args.threads} thread(s), {args.rounds} alternating rounds of {args.repeat}; median ms "
        "(ratio to torch in the same round)"
    )
    print(f"{'engine':<14}" + "".join(f"{name:>20}" for name in ("query", "blocks", "reader")))
    for engine in engines:
        cells = []
        for name in ("query", "blocks", "reader"):
            ms = results[(engine, name)]
            ratio = statistics.median(a / b for a, b in zip(ms, results[("torch", name)]))
            cells.append(f"{statistics.median(ms):>11.2f} ({ratio:.2f}x)")
        print(f"{engine:<14}" + "".join(f"{c:>20}" for c in cells))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

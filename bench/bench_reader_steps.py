"""Reader training steps with and without batches of similar length (`encoder train-reader --bucket`):

    .venv/bin/python -m bench.bench_reader_steps --examples data-local/reader_v2/examples{0,1,2,3}.jsonl \
        --init data-local/models/r15 [--steps 12] [--threads 2]

Alternating rounds of --bucket 0 and 50: the mean padded row length of the run's batches (window and query
tokens, the CPU's cost) and the seconds per training step (forward, backward, optimiser) over the first --steps
batches, 4 layers, batch 32, word embeddings fixed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from training.reader_train import ReaderTrainConfig, ReaderTrainer, example_length


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=Path, nargs="+", required=True)
    ap.add_argument("--init", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    size = 32
    for bucket in [0, 50] * args.rounds:
        cfg = ReaderTrainConfig(
            examples=args.examples,
            out=Path("/tmp/bench_reader_steps"),
            init=args.init,
            layers=4,
            epochs=3,
            batch_size=size,
            lr=1e-4,
            freeze_embeddings=True,
            bucket=bucket,
            device="cpu",
        )
        trainer = ReaderTrainer(cfg)
        rows = [trainer.examples[i] for i in trainer.order]
        lengths = [example_length(ex) for ex in rows]
        padded = np.mean([max(lengths[at : at + size]) for at in range(0, len(lengths), size)])
        start = time.monotonic()
        for step in range(args.steps):
            loss = trainer.loss(rows[step * size : (step + 1) * size])
            trainer.optimizer.zero_grad()
            loss.backward()
            trainer.optimizer.step()
        print(
            f"bucket {bucket}: mean padded row length {padded:.1f}, "
            f"{(time.monotonic() - start) / args.steps:.2f} s per step of {size}",
            flush=True,
        )


if __name__ == "__main__":
    main()

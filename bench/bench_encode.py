"""Encoder throughput of the build's batching loop by batch token budget and precision.

    python -m bench.bench_encode --corpus data-local/debian/corpus_10m.jsonl [--tokens 150000] \
        [--batch-tokens 2048,16384] [--dtypes fp32,bf16]

Takes the corpus's first blocks (the build's blocking: 256 tokens, 32 title tokens) until --tokens,
prints their length distribution, then tokens/s of `indexer.encode.encode_shard` (the build's own
encoder loop, nothing else) for each budget and autocast precision. This is where the CPU defaults
come from (2,048-token batches, fp32 on CPUs without native bf16).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=150_000)
    p.add_argument("--batch-tokens", default="2048,16384")
    p.add_argument("--dtypes", default="fp32")
    p.add_argument("--model", type=Path, default=None)
    args = p.parse_args()
    from corpus.blocking import iter_blocks
    from corpus.readers import read_corpus
    from encoder.model import Encoder
    from indexer.build import BuildConfig
    from indexer.encode import encode_shard

    cfg = BuildConfig(corpus=args.corpus, out=Path("unused"), model=args.model)
    blocks, n = [], 0
    for dtype in args.dtypes.split(","):
        encoder = Encoder(cfg.model, device=cfg.device, dtype=dtype)
        if not blocks:
            for block in iter_blocks(read_corpus(cfg.corpus), encoder.tokenizer, cfg.block_tokens, cfg.title_tokens):
                blocks.append(block)
                n += len(block)
                if n >= args.tokens:
                    break
            sizes = np.array([len(b) for b in blocks])
            print(
                f"{len(blocks):,} blocks, {n:,} tokens: block length median {np.median(sizes):.0f}, "
                f"mean {sizes.mean():.0f}, {100 * (sizes < 32).mean():.0f}% under 32 tokens"
            )
        encode_shard(encoder, blocks[:8], 2048, tqdm(disable=True))  # warm-up
        for budget in (int(b) for b in args.batch_tokens.split(",")):
            t = time.perf_counter()
            encode_shard(encoder, blocks, budget, tqdm(disable=True))
            print(
                f"{dtype:>5} batch {budget:>6} tokens: {n / (time.perf_counter() - t):,.0f} tokens/s ({encoder.device})"
            )


if __name__ == "__main__":
    main()

"""Build throughput against the bare encoder forward on the same batches.

    python -m bench.bench_build --corpus data-local/debian/corpus_10m.jsonl --out data-local/bench/idx_10m \
        [--model DIR] [--device auto] [--forward-tokens 1000000] [--json data-local/bench/build.json]

1. `indexer build` with DEFAULT settings (only corpus, out, model given), timed end to end: reading,
   tokenizing, encoding, int8 vectors, FAISS training/adding, BM25, manifest.
   The build logs, per shard, the seconds of its encoder loop (`indexer.encode.encode_shard`: the batches of that
   shard through the encoder, nothing else) and of the rest (int8 vectors, FAISS, files); so the bare
   forward rate over exactly the build's batches is tokens / sum(encode seconds), from the same run,
   and the ratio (target >= 0.9) is sum(encode seconds) / build seconds.
2. A cross-check that in-build encoding is not slower than standalone: the same loop run alone over
   the first --forward-tokens tokens' blocks (the first shard's batches when it is the shard size),
   against the in-build rate of the first shard.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from pathlib import Path

from tqdm import tqdm


class _Collect(logging.Handler):
    """Sums the per-stage seconds the build logs."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = self.index = self.bm25 = 0.0
        self.first: tuple[int, float] | None = None  # (tokens, encode seconds) of shard 0

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if m := re.search(r"shard (\d+): (\d+) tokens, encode ([\d.]+) s, index and write ([\d.]+) s", msg):
            self.encode += float(m[3])
            self.index += float(m[4])
            if m[1] == "0":
                self.first = (int(m[2]), float(m[3]))
        elif m := re.search(r"bm25 over \d+ blocks in ([\d.]+) s", msg):
            self.bm25 += float(m[1])


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="index directory (replaced)")
    p.add_argument("--model", type=Path, default=None, help="encoder directory (default: the bundled default)")
    p.add_argument("--forward-tokens", type=int, default=1_000_000, help="tokens for the bare-forward rate")
    p.add_argument("--device", default="auto", help="the build's --device: auto, cpu, cuda or cuda:N")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return p.parse_args()


def timed_build(args: argparse.Namespace):
    """`indexer build` with default settings, timed: (its config, its summary, seconds, the seconds it logged)."""
    from indexer.build import BuildConfig, build_index

    collect = _Collect()
    logging.getLogger("indexer.build").addHandler(collect)
    cfg = BuildConfig(corpus=args.corpus, out=args.out, model=args.model, overwrite=True, device=args.device)
    t0 = time.perf_counter()
    summary = build_index(cfg)
    return cfg, summary, time.perf_counter() - t0, collect


def forward_alone(cfg, tokens: int):
    """The build's encoder loop alone over the corpus's first `tokens` tokens' blocks: (encoder, tokens, seconds)."""
    from corpus.blocking import iter_blocks
    from corpus.readers import read_corpus
    from encoder.model import Encoder
    from indexer.encode import default_batch_tokens, encode_shard

    encoder = Encoder(cfg.model, device=cfg.device, dtype=cfg.dtype)
    blocks, n = [], 0
    for block in iter_blocks(read_corpus(cfg.corpus), encoder.tokenizer, cfg.block_tokens, cfg.title_tokens):
        blocks.append(block)
        n += len(block)
        if n >= tokens:
            break
    t1 = time.perf_counter()
    encode_shard(encoder, blocks, cfg.batch_tokens or default_batch_tokens(encoder.device), tqdm(disable=True))
    return encoder, n, time.perf_counter() - t1


def figures_of(summary, build_s: float, collect: _Collect, encoder, n: int, forward_s: float) -> dict:
    build_rate, forward_rate = summary.tokens / build_s, summary.tokens / max(collect.encode, 1e-9)
    first_rate = collect.first[0] / collect.first[1] if collect.first else float("nan")
    return {
        "tokens": summary.tokens,
        "documents": summary.documents,
        "blocks": summary.blocks,
        "shards": summary.shards,
        "device": str(encoder.device),
        "dtype": str(encoder.dtype).replace("torch.", ""),
        "build_seconds": round(build_s, 1),
        "build_tokens_per_s": round(build_rate),
        "forward_tokens_per_s_same_batches": round(forward_rate),
        "ratio": round(build_rate / forward_rate, 3),
        "seconds_encode": round(collect.encode, 1),
        "seconds_index_and_write": round(collect.index, 1),
        "seconds_bm25": round(collect.bm25, 1),
        "seconds_other": round(build_s - collect.encode - collect.index - collect.bm25, 1),
        "standalone_forward_tokens": n,
        "standalone_forward_tokens_per_s": round(n / forward_s),
        "first_shard_in_build_tokens_per_s": round(first_rate),
    }


def print_figures(fig: dict, build_s: float, collect: _Collect) -> None:
    print(
        f"build   {fig['tokens']:,} tokens in {build_s:.1f} s = {fig['build_tokens_per_s']:,} tokens/s "
        f"({fig['shards']} shards, {fig['device']} {fig['dtype']})"
    )
    print(
        f"forward the same batches: {collect.encode:.1f} s = {fig['forward_tokens_per_s_same_batches']:,} tokens/s "
        "(the build's encoder loop)"
    )
    print(f"ratio   {fig['ratio']:.3f} (target >= 0.9)")
    other = build_s - collect.encode - collect.index - collect.bm25
    print(
        f"build time: encode {collect.encode:.1f} s, int8 + FAISS + shard files {collect.index:.1f} s, "
        f"BM25 {collect.bm25:.1f} s, reading/tokenizing/loading/other {other:.1f} s"
    )
    print(
        f"cross-check: encoder loop alone on the first {fig['standalone_forward_tokens']:,} tokens "
        f"{fig['standalone_forward_tokens_per_s']:,} tokens/s; in the build, first shard "
        f"{fig['first_shard_in_build_tokens_per_s']:,} tokens/s"
    )


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg, summary, build_s, collect = timed_build(args)
    encoder, n, forward_s = forward_alone(cfg, args.forward_tokens)
    figures = figures_of(summary, build_s, collect, encoder, n, forward_s)
    print_figures(figures, build_s, collect)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""BM25's top blocks by MaxScore (indexer.bm25_top) against adding every posting of the query's words, on one index:

    python -m bench.bench_bm25 --index data-local/scale_auto/idx_100m --corpus data-local/trex_dev/corpus.jsonl \
        [--probes 100] [--blocks 100] [--rounds 2]

The queries are cloze probes of the corpus with their masks blanked (bench.shared.make_probes, as a fill asks BM25),
`--blocks` the top blocks asked for (the engine's PRIOR_BLOCKS, 100). Prints ms a query of each way for each round
(alternating, so that both see the same machine) and how many queries got the same blocks and scores from both."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.shared import make_probes
from common.masks import blank_masks
from indexer.bm25 import BM25, BM25_NAME, query_words
from indexer.bm25_top import top_blocks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus the cloze queries come from")
    p.add_argument("--probes", type=int, default=100)
    p.add_argument("--blocks", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    bm25 = BM25(args.index / BM25_NAME)
    if bm25.rows is None:
        raise SystemExit(f"{args.index / BM25_NAME} has no postings (an index built before them): nothing to compare")
    texts = [blank_masks(t) for t in make_probes(args.corpus, args.probes, seed=0)]

    def every_posting(text: str) -> tuple[np.ndarray, np.ndarray]:
        return top_blocks(bm25.block_scores(query_words(text)), args.blocks)

    print(f"{bm25.rows} blocks, {len(texts)} queries, top {args.blocks}")
    for r in range(args.rounds):
        times = {}
        for name, fn in (("maxscore", lambda t: bm25.search_scored(t, args.blocks)), ("every posting", every_posting)):
            t0 = time.perf_counter()
            for text in texts:
                fn(text)
            times[name] = (time.perf_counter() - t0) / len(texts) * 1000
        print(f"round {r + 1}: maxscore {times['maxscore']:.1f} ms a query, every posting {times['every posting']:.1f}")
    same = 0
    for text in texts:
        a, b = bm25.search_scored(text, args.blocks), every_posting(text)
        same += bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))
    print(f"the same blocks and scores: {same} of {len(texts)}")


if __name__ == "__main__":
    main()

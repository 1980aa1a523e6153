"""The two searches of a fill against their slower reference paths, on the same queries:

    python -m bench.bench_search --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl \
        [--probes 300]

- BM25: `BM25.search_scored` (numpy over the postings copied out of FTS5) against `search_fts5` (the FTS5
  query) for the top 100 blocks of each probe (masks blanked) and of as many random 1-6 word queries made
  of the probes' words: how many answers are identical (blocks and scores), and ms per query of each;
- FAISS, on one thread: each shard's own `index.search` against one shared IVF assignment followed by
  `search_preassigned` per shard (`PhraseIndex.assign` / `faiss_search`), for refine * k hits (k = 1024)
  of the probes' start and end vectors: identical hits, ms per query of each, and of the assignment alone
  done per shard (what sharing saves);
- the whole search (`PhraseIndex.search_scored`, k = 1024, the shard pool) with the shards asked in two rounds
  (indexer.shard_hits) against asking each for all: identical hits, ms per query of each;
- with `--nprobes A,B,...`: per nprobe, the codes a query scans (its lists' sizes over every shard) and the
  recall of its top k against the last nprobe given (the share of those hits it finds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import numpy as np

from bench.shared import make_probes


def _ms(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def bm25(index, texts: list[str]) -> None:
    from common.masks import blank_masks

    queries = [blank_masks(t) for t in texts]
    words = " ".join(queries).split()
    rng = random.Random(1)
    queries += [" ".join(rng.sample(words, rng.randint(1, 6))) for _ in range(len(texts))]
    fast_ms, fts5_ms, same = [], [], 0
    for q in queries:
        a_ms, a = _ms(lambda: index.bm25.base.search_scored(q, 100))
        b_ms, b = _ms(lambda: index.bm25.base.search_fts5(q, 100))
        same += np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        fast_ms.append(a_ms)
        fts5_ms.append(b_ms)
    print(
        f"BM25 top 100, {len(queries)} queries: identical blocks and scores {same}/{len(queries)}; "
        f"postings {statistics.mean(fast_ms):.2f} ms/query, FTS5 {statistics.mean(fts5_ms):.2f} ms/query"
    )


def faiss_once(index, vectors: list[np.ndarray], k: int) -> None:
    import faiss

    faiss.omp_set_num_threads(1)
    if index.assign(vectors[0]) is None:
        print("FAISS: the shards share no IVF quantizer; nothing to compare")
        return
    own, shared, assign, same = [], [], [], 0
    shards = range(len(index.shards))
    for q in vectors:
        a_ms, a = _ms(lambda: [index.faiss_search(s, q, k) for s in shards])
        b_ms, b = _ms(
            lambda: (lambda assigned: [index.faiss_search(s, q, k, assigned) for s in shards])(index.assign(q))
        )
        q_ms, _ = _ms(lambda: [index.assign(q) for _ in shards])
        same += all(np.array_equal(x[1], y[1]) for x, y in zip(a, b))
        own.append(a_ms)
        shared.append(b_ms)
        assign.append(q_ms)
    print(
        f"FAISS on one thread, {len(vectors)} queries x {len(index.shards)} shards: "
        f"identical hits {same}/{len(vectors)}; "
        f"per-shard search p50 {statistics.median(own):.2f} ms, shared assignment + search_preassigned p50 "
        f"{statistics.median(shared):.2f} ms; the assignment done once per shard p50 {statistics.median(assign):.2f} ms"
    )


def rounds(index, vectors: list[np.ndarray], k: int) -> None:
    from indexer import shard_hits

    one_ms, two_ms, same = [], [], 0
    real = shard_hits.first_round
    for q in vectors:
        b_ms, b = _ms(lambda: index.search_scored(q, k))
        shard_hits.first_round = lambda want, shards: want  # every shard asked for all
        try:
            a_ms, a = _ms(lambda: index.search_scored(q, k))
        finally:
            shard_hits.first_round = real
        same += all(
            np.array_equal(x.positions, y.positions) and np.array_equal(x.shard_no, y.shard_no) for x, y in zip(a, b)
        )
        one_ms.append(a_ms)
        two_ms.append(b_ms)
    print(
        f"search_scored, {len(vectors)} queries: identical hits {same}/{len(vectors)}; every shard asked for all p50 "
        f"{statistics.median(one_ms):.2f} ms, two rounds p50 {statistics.median(two_ms):.2f} ms"
    )


def scan_and_recall(index, vectors: list[np.ndarray], k: int, nprobes: list[int]) -> None:
    from indexer.ann import unwrap

    ivfs = [ivf for ivf in (unwrap(s.index)[1] for s in index.shards) if hasattr(ivf, "nprobe")]
    sizes = np.sum([[ivf.invlists.list_size(i) for i in range(ivf.nlist)] for ivf in ivfs], axis=0)
    found, scanned = {}, {}
    for nprobe in nprobes:
        for ivf in ivfs:
            ivf.nprobe = nprobe
        if index._lists is not None:
            index._lists.nprobe = nprobe
        found[nprobe] = [index.search_scored(q, k) for q in vectors]
        lists = [index._lists.assign(q).lists for q in vectors] if index._lists is not None else []
        scanned[nprobe] = statistics.mean([sizes[x].sum(axis=1).mean() for x in lists] or [0.0])  # 0: not shared
    ref = found[nprobes[-1]]
    for nprobe in nprobes:
        shares = [
            len(
                set(zip(a.shard_no.tolist(), a.positions.tolist()))
                & set(zip(b.shard_no.tolist(), b.positions.tolist()))
            )
            / max(1, b.positions.size)
            for hits, refs in zip(found[nprobe], ref)
            for a, b in zip(hits, refs)
        ]
        print(
            f"nprobe {nprobe}: {scanned[nprobe]:,.0f} codes scanned a query, recall@{k} against nprobe "
            f"{nprobes[-1]}: {statistics.mean(shares):.3f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--probes", type=int, default=300)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--nprobes", help="comma-separated nprobe values: codes scanned and recall against the last")
    args = p.parse_args()
    from encoder.model import Encoder
    from indexer.phrase_index import PhraseIndex

    index = PhraseIndex(args.index)
    texts = make_probes(args.corpus, args.probes)
    if index.bm25 is not None:
        bm25(index, texts)
    encoder = Encoder(Path(index.manifest.model.path))
    vectors = [
        np.ascontiguousarray(np.concatenate([v.q_start, v.q_end]), dtype=np.float32)
        for v in (encoder.encode_queries([t])[0] for t in texts)
    ]
    faiss_once(index, vectors, args.k)
    rounds(index, vectors, args.k)
    if args.nprobes:
        scan_and_recall(index, vectors, args.k, [int(n) for n in args.nprobes.split(",")])


if __name__ == "__main__":
    main()

"""Top-1 fill agreement of ANN index types with exact (flat) search, and recall@k of the start/end searches.

    python -m bench.bench_ann --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl \
        [--types "built;ivfsq"] [--refine 1,2,4] [--shards N] [--probes 500] [--k 1024] [--json OUT]

All systems answer the same --probes queries through the real fill engine (dense mode, API defaults);
only the start/end token search differs:
- exact: brute-force inner product over every stored vector (what `--index-type flat` searches);
- built: the FAISS indexes in the index directory (default build: IVF-PQ fast-scan);
- ivfsq / ivfpq / hnsw / a factory string: FAISS indexes built here from the stored vectors of each
  shard, IVF/PQ trained once on the first shard like `indexer build` does.
--refine: each ANN shard returns refine * k hits that are re-scored exactly from the stored vectors
before the top k are kept (the service's FILL_REFINE); one row per value. --shards N restricts every system to the
first N shards (HNSW takes ~7 min per 1M vectors to build on
2 cores). Agreement = the top-1 phrase equals exact search's top-1. Recall@k = share of the exact
top-k tokens that the ANN search returns in its top-k (and of the exact top-10), per start/end query.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from bench.shared import make_probes

CHUNK = 131_072


class _Searcher:
    """A PhraseIndex view whose `search` is replaced (exact lookup or other FAISS indexes)."""

    def __init__(self, index, search) -> None:
        self._index, self.search = index, search

    def __getattr__(self, name):
        return getattr(self._index, name)


def exact_topk(shards, queries: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Exact top-k (shard numbers, positions, scores) per query by brute force over the stored vectors."""
    nq = queries.shape[0]
    best_s = np.full((nq, 0), -np.inf, dtype=np.float32)
    best_sh = np.zeros((nq, 0), dtype=np.int64)
    best_pos = np.zeros((nq, 0), dtype=np.int64)
    for s, shard in enumerate(shards):
        for a in range(0, len(shard), CHUNK):
            b = min(len(shard), a + CHUNK)
            scores = queries @ shard.vectors[np.arange(a, b)].T
            cat_s = np.concatenate([best_s, scores], 1)
            cat_sh = np.concatenate([best_sh, np.full(scores.shape, s, dtype=np.int64)], 1)
            cat_pos = np.concatenate([best_pos, np.broadcast_to(np.arange(a, b, dtype=np.int64), scores.shape)], 1)
            keep = np.argpartition(-cat_s, min(k, cat_s.shape[1]) - 1, axis=1)[:, :k]
            best_s = np.take_along_axis(cat_s, keep, 1)
            best_sh, best_pos = np.take_along_axis(cat_sh, keep, 1), np.take_along_axis(cat_pos, keep, 1)
    return [(best_sh[i], best_pos[i], best_s[i]) for i in range(nq)]


def _restrict(index, n: int | None):
    if n:
        index.shards = index.shards[:n]
    return index


def _rebuild(index, kind: str) -> tuple[list, list[str]]:
    """FAISS indexes of `kind` for the index's shards, from the stored vectors; trained once like the build."""
    from indexer.ann import build_faiss_index, resolve_factory, set_search_params, train_faiss_index
    from indexer.templates import needs_training

    out, templates, factories = [], {}, []
    for number, shard in enumerate(index.shards):
        vecs = shard.vectors[np.arange(len(shard))]
        factory = resolve_factory(kind, len(shard), vecs.shape[1])
        if needs_training(factory, vecs.shape[1]) and factory not in templates:
            templates[factory] = train_faiss_index(vecs, factory, seed=number)
        built = build_faiss_index(vecs, factory, trained=templates.get(factory))
        set_search_params(built)  # the service's defaults (nprobe, efSearch)
        out.append(built)
        factories.append(factory)
        logging.info("%s: shard %d of %d rebuilt as %s", kind, number + 1, len(index.shards), factory)
    return out, factories


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True, help="corpus the probe queries are drawn from")
    p.add_argument(
        "--types", default="built;ivfsq", help="semicolon-separated: built, ivfsq, ivfpq, hnsw, FAISS factory"
    )
    p.add_argument("--refine", default="1,2,4", help="comma-separated refine factors to measure (service default 2)")
    p.add_argument("--shards", type=int, default=None, help="use only the first N shards")
    p.add_argument("--probes", type=int, default=500)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--aggregates", default="max", help="comma-separated phrase aggregations of the fills: max, sum")
    p.add_argument("--model", type=Path, default=None, help="encoder directory (default: the manifest's)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if not set(args.aggregates.split(",")) <= {"max", "sum"}:
        p.error(f"--aggregates: use max and/or sum, got {args.aggregates!r}")
    return args


def _encoder(index, args: argparse.Namespace):
    """The encoder the index was built with (--model, or the manifest's)."""
    from encoder.model import Encoder
    from encoder.model_files import model_fingerprint

    model_dir = args.model or Path(index.manifest.model.path)
    if model_fingerprint(model_dir) != index.manifest.model.fingerprint:
        raise SystemExit(f"error: {model_dir} is not the model {args.index} was built with; pass that one with --model")
    return Encoder(model_dir)


def _exact(index, encoder, probes: list[str], k: int):
    """The probes' start/end query vectors (as the engine computes them, one query at a time), their exact top-k,
    and a `search` that looks the exact hits up (groups change nothing)."""
    qvecs = [encoder.encode_queries([t])[0] for t in probes]
    queries = np.concatenate([np.concatenate([q.q_start, q.q_end]) for q in qvecs]).astype(np.float32)
    t0 = time.perf_counter()
    exact = exact_topk(index.shards, queries, k)
    tokens = sum(len(s) for s in index.shards)
    logging.info(
        "exact top-%d of %d queries over %d tokens in %.0f s", k, len(queries), tokens, time.perf_counter() - t0
    )
    lookup = {queries[i].tobytes(): exact[i][:2] for i in range(len(queries))}

    def exact_search(q: np.ndarray, k: int, groups=None):
        return [lookup[row.astype(np.float32).tobytes()] for row in q]

    return queries, exact, exact_search


def _filler(encoder, probes: list[str], params: dict[str, dict]):
    """run(searcher): the top-1 fill of every probe per aggregation over `searcher`, and ms per fill."""
    from fill.engine import FillEngine
    from fill.schemas import FillRequest

    def run(searcher) -> tuple[dict[str, list[str]], float]:
        engine, tops, t = FillEngine(encoder, searcher), {agg: [] for agg in params}, time.perf_counter()
        for text in probes:
            for agg, prm in params.items():
                cands = engine.fill(FillRequest(text=text, **prm)).masks[0].candidates
                tops[agg].append(cands[0].phrase if cands else "")
        return tops, (time.perf_counter() - t) / len(probes) / len(params) * 1000

    return run


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from indexer.phrase_index import PhraseIndex, is_exact

    index = _restrict(PhraseIndex(args.index), args.shards)
    encoder = _encoder(index, args)
    probes = make_probes(args.corpus, args.probes)
    params = {agg: dict(k=args.k, aggregate=agg, mode="dense") for agg in args.aggregates.split(",")}  # tokens alone
    queries, exact, exact_search = _exact(index, encoder, probes, args.k)
    run = _filler(encoder, probes, params)
    ref, ref_ms = run(_Searcher(index, exact_search))
    tokens = sum(len(s) for s in index.shards)
    report = {
        "tokens": tokens,
        "shards": len(index.shards),
        "probes": len(probes),
        "k": args.k,
        "exact_fill_ms": round(ref_ms, 1),
        "types": {},
    }
    print(f"{len(probes)} probes, {tokens:,} tokens in {len(index.shards)} shards, k = {args.k}")
    originals = [shard.index for shard in index.shards]
    built_factories = [shard.info.factory for shard in index.shards]
    for kind in args.types.split(";"):
        rebuilt, factories = (originals, built_factories) if kind == "built" else _rebuild(index, kind)
        for shard, ann_index, f in zip(index.shards, rebuilt, factories):
            shard.index, shard.info.factory = ann_index, f
        if all(is_exact(f) for f in factories):  # nothing to refine
            _measure(index, run, queries, exact, ref, ref_ms, args.k, report, f"{kind} ({factories[0]})")
            continue
        for refine in (int(r) for r in args.refine.split(",")):
            index.refine = refine
            _measure(
                index, run, queries, exact, ref, ref_ms, args.k, report, f"{kind} ({factories[0]}) refine {refine}"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _measure(index, run, queries, exact, ref, ref_ms, k, report, name) -> None:
    """Agreement with the exact fills and recall of the start/end searches of one configuration."""
    tops, ms = run(index)
    ann = index.search(queries, k)
    rec_k, rec_10 = np.zeros(len(queries)), np.zeros(len(queries))
    for i, ((sh, pos), (esh, epos, escore)) in enumerate(zip(ann, exact)):
        got = set(zip(sh.tolist(), pos.tolist()))
        want = list(zip(esh.tolist(), epos.tolist()))
        top10 = [want[j] for j in np.argsort(-escore)[:10]]
        rec_k[i] = len(got & set(want)) / max(1, len(want))
        rec_10[i] = len(got & set(top10)) / max(1, len(top10))
    agree = {agg: float(np.mean([a == b for a, b in zip(tops[agg], ref[agg])])) for agg in ref}
    figures = {f"agreement_top1_{agg}": a for agg, a in agree.items()} | {"fill_ms": round(ms, 1)}
    for side, sl in (("start", slice(0, None, 2)), ("end", slice(1, None, 2))):  # one mask: start, end, ...
        figures[f"recall_at_k_{side}"] = float(rec_k[sl].mean())
        figures[f"recall_top10_in_k_{side}"] = float(rec_10[sl].mean())
    report["types"][name] = figures
    agreement = ", ".join(f"{100 * a:5.1f}% ({agg})" for agg, a in agree.items())
    print(
        f"{name:<44} top-1 agreement {agreement}  recall@{k} start/end "
        f"{100 * figures['recall_at_k_start']:5.1f}/{100 * figures['recall_at_k_end']:5.1f}%  exact top-10 in "
        f"top-{k} {100 * figures['recall_top10_in_k_start']:5.1f}/{100 * figures['recall_top10_in_k_end']:5.1f}%  "
        f"fill {ms:6.1f} ms (exact lookup {ref_ms:.1f} ms)"
    )


if __name__ == "__main__":
    main()

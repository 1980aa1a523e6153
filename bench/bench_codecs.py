"""Compact codecs for the re-scoring vectors measured on real fills: bytes per token, agreement, EM.

    python -m bench.bench_codecs --index IDX --probes P.jsonl [--per-relation 200] [--mode dense] [--no-reader] \\
        --codec PQ48 --codec OPQ48,PQ48 --codec SQ4 [--json out.json]

The index is opened once, as fill-eval opens it (its stored vectors as built: int8 by default); its fills are
the baseline. For each codec (a FAISS factory string of a standalone codec: PQm, PQmx4, OPQm,PQm, SQ4, SQ6,
SQ8, RQ..., LSQ...) the codec is trained on a sample of the index's stored vectors (decoded), every stored
vector is encoded and the shards then re-score from the decoded codes (the engine's two readers of stored
vectors: FAISS hits re-scored exactly, and candidate spans); the same probes are filled again. Printed per
codec: code bytes per token (what vectors.npy would hold), top-1 fill agreement with the baseline, macro EM@1
(baseline and codec), the paired micro EM difference with its standard error, and the mean squared error of
the decoded vectors relative to their mean squared norm. The ANN index is left as it is: only the stored
vectors change (a flat index searches the float vectors exactly, so its fills measure the re-scoring codec alone).
RaBitQ codecs (RaBitQ, RaBitQ2, PCAR256,RaBitQ2, ...) re-score with RaBitQ's own product estimates
(`EstimatedVectors`: its decoding is the 1-bit one; their MSE column is that decoding's).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from bench.shared import compare
from common.process import single_thread_blas
from evaluation.evaluate import EvalConfig, evaluate, select_probes
from fill.engine import FillEngine


class DecodedVectors:
    """A shard's stored vectors replaced by codes of `codec`: `vectors[rows]` decodes them (float32)."""

    def __init__(self, codes: np.ndarray, codec: faiss.Index, dim: int) -> None:
        self.codes, self.codec, self.dim = codes, codec, dim

    @property
    def shape(self) -> tuple[int, int]:
        return (self.codes.shape[0], self.dim)

    def __len__(self) -> int:
        return self.codes.shape[0]

    def warm(self) -> None:
        pass

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.asarray(rows)
        flat = np.ascontiguousarray(self.codes[rows.reshape(-1)])
        return self.codec.sa_decode(flat).reshape(*rows.shape, self.dim)

    def dot(self, rows, queries: np.ndarray) -> np.ndarray:
        """StoredVectors.dot over the decoded codes."""
        q = np.asarray(queries, dtype=np.float32)
        return self[rows] @ (q if q.ndim == 1 else q.T)


class EstimatedVectors(DecodedVectors):
    """A shard's stored vectors as a RaBitQ index (FAISS's IndexRaBitQ with every row added): products with a query
    are RaBitQ's own estimates (a search restricted to the rows by an ID selector), because its `sa_decode` gives
    the 1-bit reconstruction only (multi-bit codes decode alike)."""

    def __init__(self, codes: np.ndarray, codec: faiss.Index, dim: int, index: faiss.Index) -> None:
        super().__init__(codes, codec, dim)
        self.index = index

    def dot(self, rows, queries: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        distinct, inverse = np.unique(rows, return_inverse=True)
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        out = np.empty((distinct.size, q.shape[0]), dtype=np.float32)
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(distinct))
        for j in range(q.shape[0]):
            scores, ids = self.index.search(q[j : j + 1], int(distinct.size), params=params)
            found = ids[0] >= 0
            out[np.searchsorted(distinct, ids[0][found]), j] = scores[0][found]
        out = out[inverse]
        return out[:, 0] if np.ndim(queries) == 1 else out


def chunks(shard, chunk: int = 65_536):
    """A shard's stored vectors, decoded (float32, contiguous), `chunk` rows at a time."""
    n = len(shard.vectors)
    for a in range(0, n, chunk):
        yield np.ascontiguousarray(shard.vectors[np.arange(a, min(n, a + chunk))], dtype=np.float32)


def estimated(codec: faiss.Index, shards: list, codes: list[np.ndarray]) -> list:
    """Per shard, its vectors added to a copy of the trained RaBitQ `codec` (EstimatedVectors)."""
    out = []
    for s, c in zip(shards, codes):
        index = faiss.clone_index(codec)
        for v in chunks(s):
            index.add(v)
        out.append(EstimatedVectors(c, codec, s.vectors.shape[1], index))
    return out


def train_codec(factory: str, shards: list, sample: int, seed: int = 0) -> tuple[faiss.Index, list[np.ndarray], float]:
    """The codec trained on `sample` stored vectors drawn from all shards; each shard's codes; the relative MSE
    (squared error over squared norm, summed over every vector). Shards are read a chunk at a time."""
    dim = shards[0].vectors.shape[1]
    sizes = [len(s.vectors) for s in shards]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    rng = np.random.default_rng(seed)
    take = np.sort(rng.choice(int(starts[-1]), min(sample, int(starts[-1])), replace=False))
    train = np.concatenate(
        [s.vectors[take[(take >= a) & (take < b)] - a] for s, a, b in zip(shards, starts, starts[1:])]
    )
    codec = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    codec.train(np.ascontiguousarray(train, dtype=np.float32))
    codes, err, norm = [], 0.0, 0.0
    for s in shards:
        parts = []
        for v in chunks(s):
            parts.append(codec.sa_encode(v))
            err += float(((codec.sa_decode(parts[-1]) - v) ** 2).sum())
            norm += float((v**2).sum())
        codes.append(np.concatenate(parts))
    return codec, codes, err / norm


def fills(engine: FillEngine, probes: list[dict], cfg: EvalConfig) -> tuple[dict, list[dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pred.jsonl"
        report = evaluate(engine, probes, cfg, out)
        return report, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--probes", type=Path, required=True)
    ap.add_argument("--per-relation", type=int)
    ap.add_argument("--mode", default="hybrid", choices=("hybrid", "restricted", "dense"))
    ap.add_argument("--no-reader", action="store_true")
    ap.add_argument("--model", type=Path)
    ap.add_argument("--codec", action="append", required=True, help="FAISS factory string of a standalone codec")
    ap.add_argument("--sample", type=int, default=65_536, help="vectors the codecs are trained on")
    ap.add_argument("--json", type=Path)
    return ap.parse_args(argv)


def check_codecs(factories: list[str], dim: int) -> None:
    """Every codec is a FAISS factory string for `dim` (checked before the first fill)."""
    for factory in factories:
        try:
            faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError:
            raise SystemExit(
                f"error: --codec {factory!r} is not a FAISS factory string for dimension {dim} "
                "(e.g. SQ8, SQ4, PQ48, OPQ48,PQ48, PCAR128,SQ8)"
            ) from None


def baseline_row(shards: list, report: dict) -> dict:
    """The stored vectors' row: their bytes per token (int8 rows carry a 2-byte scale)."""
    dtype = shards[0].info.vector_dtype
    size = shards[0].vectors.data.dtype.itemsize * shards[0].vectors.shape[1] + (2 if dtype == "int8" else 0)
    return {
        "codec": f"stored ({dtype})",
        "bytes": size,
        "agreement": 100.0,
        "macro_em": report["macro_em@1"],
        "micro_em_diff": 0.0,
        "micro_em_diff_se": 0.0,
        "rel_mse": 0.0,
    }


def codec_row(factory: str, engine: FillEngine, probes: list[dict], cfg: EvalConfig, args, base: list[dict]) -> dict:
    """The shards re-scoring from `factory`'s decoded codes (trained on --sample stored vectors), filled again."""
    shards = engine.index.shards
    t0 = time.perf_counter()
    codec, codes, rel = train_codec(factory, shards, args.sample)
    seconds = time.perf_counter() - t0
    stored = (
        estimated(codec, shards, codes)
        if "RaBitQ" in factory
        else [DecodedVectors(c, codec, s.vectors.shape[1]) for s, c in zip(shards, codes)]
    )
    for s, v in zip(shards, stored):
        s.vectors = v
    report, other = fills(engine, probes, cfg)
    return {
        "codec": factory,
        "bytes": int(codec.sa_code_size()),
        "macro_em": report["macro_em@1"],
        "rel_mse": rel,
        "train_encode_s": seconds,
        **compare(base, other),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = EvalConfig(
        index=args.index,
        probes=args.probes,
        per_relation=args.per_relation,
        mode=args.mode,
        model=args.model,
        reader=False if args.no_reader else None,
        use_reader=not args.no_reader,
    )
    probes = select_probes(cfg.probes, None, "all", cfg.per_relation, cfg.seed)
    single_thread_blas()
    engine = FillEngine.open(cfg.engine_config())
    shards = engine.index.shards
    check_codecs(args.codec, shards[0].vectors.shape[1])
    originals = [s.vectors for s in shards]
    base_report, base = fills(engine, probes, cfg)
    rows = [baseline_row(shards, base_report)]
    for factory in args.codec:
        for s, v in zip(shards, originals):
            s.vectors = v
        rows.append(codec_row(factory, engine, probes, cfg, args, base))
    print(f"{len(probes)} probes, mode {args.mode}{' (no reader)' if args.no_reader else ''}, {args.index}")
    print("| codec | bytes/token | top-1 agreement % | macro EM@1 | micro EM diff (SE) | rel. MSE |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['codec']} | {r['bytes']} | {r['agreement']:.1f} | {r['macro_em']:.1f} | "
            f"{r['micro_em_diff']:+.1f} ({r['micro_em_diff_se']:.1f}) | {r['rel_mse']:.4f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

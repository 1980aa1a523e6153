"""A linear projection of the token space trained to keep the start / end logits, with a code behind it.

    python -m bench.bench_projection --train-index IDX --train-probes P.jsonl [--train-cloze C.jsonl] \\
        --eval-index DEV_IDX --eval-probes DEV.jsonl --per-relation 50 --dims 64,96 --out DIR \\
        [--recode-from DEV_IDX --recode-dim 96 --recode-inner IVF4096,PQ48]

Training (never on the evaluation probes): the queries are `--train-probes` (cloze probes of our own text) and
`--train-cloze` N random one-word cloze queries of a corpus of our own text, encoded as a fill encodes them
(MASK_s MASK_e: start and end queries); the keys are the stored vectors of `--train-index` (int8 or float16).
Per query the exact top 256 keys (and 64 random ones) are the candidates; a matrix P [dim, d] is fitted with
Adam so that softmax over them of (Pq).(Pk) / sqrt(d) matches softmax of q.k / sqrt(d) (KL), plus `--lam` times
the squared error of the top 32 logits (their level matters: the engine adds lexical bonuses to them). P starts
from the principal directions of keys and queries. A symmetric map is a FAISS LinearTransform: the index
applies it to the tokens it adds and to the queries it searches, and indexer.ann_codes scores in its space.

Fidelity, on the first shard of `--eval-index` and its probes' queries: per query the exact top 256 tokens of
the shard, how often the approximation keeps the exact best first, and the mean absolute error of the top 16
logits; for the exact projection, and for each code of `--codes` trained on the projected tokens (an IVF code,
its residuals decoded as the index decodes them). Printed and written to DIR/results.json with P (DIR/P{dim}.npy).

`--recode-from` writes DIR/index_p{dim}: that index re-coded without stored vectors (`indexer recode`) behind
the projection: the pre-transformed, trained index is put where recode looks for its shards' template, so every
shard adds its tokens through it. Then `bash recipes/eval_trex_dev.sh` with IDX=DIR/index_p{dim} fills with it.
Such an index cannot be compacted (`indexer compact` re-adds decoded tokens, and a LinearTransform that is not
orthonormal has no reverse): re-code it again from the int8 index instead.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

import faiss
import numpy as np
import torch

from encoder.model import Encoder
from evaluation.evaluate import load_probes, subsample
from indexer.manifest import Manifest
from indexer.recode import RecodeConfig, run_recode
from indexer.shard import shard_name
from indexer.templates import Templates
from indexer.vectors import StoredVectors

CANDIDATES, NEGATIVES, TOP_LOGITS = 256, 64, 32


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


def cloze_texts(corpus: Path, n: int, seed: int) -> list[str]:
    """n sentences of the corpus with one random word (or number) masked."""
    rng = random.Random(seed)
    docs = [json.loads(line)["text"] for line in corpus.open(encoding="utf-8")]
    texts: list[str] = []
    for _ in range(50 * n):
        if len(texts) == n:
            break
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", rng.choice(docs)) if 40 <= len(s) <= 300]
        words = list(re.finditer(r"[A-Za-z][\w-]{2,}|\d+", rng.choice(sentences))) if sentences else []
        if len(words) >= 4:
            w = rng.choice(words)
            texts.append(w.string[: w.start()] + "<mask>" + w.string[w.end() :])
    return texts


def queries(encoder: Encoder, texts: list[str]) -> np.ndarray:
    """float32 [2 n, d]: the first mask's start queries, then its end queries."""
    starts, ends = [], []
    for a in range(0, len(texts), 64):
        for v in encoder.encode_queries(texts[a : a + 64]):
            starts.append(v.q_start[0])
            ends.append(v.q_end[0])
    return np.stack(starts + ends).astype(np.float32)


def keys(index: Path, first_only: bool = False) -> np.ndarray:
    """The stored vectors (decoded to float32) of the index's shards, or of its first shard."""
    m = Manifest.load(index)
    if m.vector_dtype == "none":
        raise SystemExit(f"{index} keeps no stored vectors; pass an index built with --vector-dtype int8")
    shards = m.shards[:1] if first_only else m.shards
    return np.concatenate([StoredVectors(index / shard_name(i), m.vector_dtype)[:] for i in range(len(shards))])


def exact_top(q: np.ndarray, k: np.ndarray, top: int = CANDIDATES, rows: int = 2048, cols: int = 50_000):
    """(scores, ids) [len(q), top] of each query's best keys (all when fewer), best first; in blocks."""
    top = min(top, len(k))
    out_s, out_i = [], []
    for a in range(0, len(q), rows):
        best_s = np.full((min(rows, len(q) - a), top), -np.inf, np.float32)
        best_i = np.zeros(best_s.shape, np.int64)
        for b in range(0, len(k), cols):
            s = q[a : a + rows] @ k[b : b + cols].T
            i = np.argsort(-s, axis=1)[:, :top] if s.shape[1] <= top else np.argpartition(-s, top - 1, axis=1)[:, :top]
            cs = np.concatenate([best_s, np.take_along_axis(s, i, 1)], 1)
            ci = np.concatenate([best_i, i + b], 1)
            j = np.argpartition(-cs, top - 1, axis=1)[:, :top]
            best_s, best_i = np.take_along_axis(cs, j, 1), np.take_along_axis(ci, j, 1)
        order = np.argsort(-best_s, 1)
        out_s.append(np.take_along_axis(best_s, order, 1))
        out_i.append(np.take_along_axis(best_i, order, 1))
    return np.concatenate(out_s), np.concatenate(out_i)


def fit_projection(q: np.ndarray, k: np.ndarray, top, dim: int, steps: int, lam: float, seed: int = 0) -> np.ndarray:
    """P [dim, d] keeping the softmax of the logits over each query's candidates (module docstring)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(q.shape[1])
    both = np.concatenate([k[rng.choice(len(k), min(len(k), 50_000), replace=False)], q[:50_000]])
    p = torch.nn.Parameter(torch.tensor(np.linalg.svd(both, full_matrices=False)[2][:dim].copy()))
    opt = torch.optim.Adam([p], lr=2e-3)
    qt, kt = torch.tensor(q), torch.tensor(k)
    top_s, top_i = torch.tensor(top[0] * scale), torch.tensor(top[1])
    batch = min(256, len(q))
    for step in range(steps):
        b = torch.tensor(rng.choice(len(q), batch, replace=False))
        kv = kt[torch.cat([top_i[b], torch.tensor(rng.choice(len(k), (batch, NEGATIVES)))], 1)]
        teacher = torch.cat([top_s[b], (kv[:, top_i.shape[1] :] @ qt[b][:, :, None]).squeeze(-1) * scale], 1)
        student = ((kv @ p.T) @ (qt[b] @ p.T)[:, :, None]).squeeze(-1) * scale
        kl = torch.nn.functional.kl_div(
            student.log_softmax(1), teacher.log_softmax(1), reduction="batchmean", log_target=True
        )
        mse = ((student[:, :TOP_LOGITS] - teacher[:, :TOP_LOGITS]) ** 2).mean()
        opt.zero_grad()
        (kl + lam * mse).backward()
        opt.step()
        if step % 250 == 0 or step == steps - 1:
            log(f"  dim {dim} step {step}: KL {kl.item():.4f}, top-{TOP_LOGITS} logit MSE {mse.item():.4f}")
    return p.detach().numpy().copy()


def fidelity(q: np.ndarray, top, approx_keys, qmap=None) -> dict:
    """How often the approximation keeps each query's exact best token first among its exact top 256, and the
    mean absolute error of its top 16 logits (the exact ones as the engine scales them)."""
    scale = 1 / np.sqrt(q.shape[1])
    qa = q if qmap is None else q @ qmap.T
    approx = np.einsum("mnd,md->mn", approx_keys(top[1]), qa)
    return {
        "top1_kept": round(float((approx.argmax(1) == 0).mean()), 4),
        "logit_mae_top16": round(float(np.abs(approx[:, :16] - top[0][:, :16]).mean() * scale), 4),
    }


def coded(factory: str, train: np.ndarray, p: np.ndarray | None):
    """A function: key rows -> their vectors as `factory` (trained on `train`, projected by p) decodes them."""
    x = train if p is None else train @ p.T
    index = faiss.index_factory(x.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(x, dtype=np.float32))
    return (
        index,
        lambda k: (
            lambda rows: index.sa_decode(
                index.sa_encode(np.ascontiguousarray(k[rows.reshape(-1)] if p is None else k[rows.reshape(-1)] @ p.T))
            ).reshape(*rows.shape, -1)
        ),
    )


def projected_template(p: np.ndarray, inner: str, vectors: np.ndarray, seed: int = 0) -> faiss.Index:
    """An empty IndexPreTransform: the projection, then `inner` (on dim dimensions) trained on projected tokens."""
    dim, d = p.shape
    lt = faiss.LinearTransform(d, dim, False)
    faiss.copy_array_to_vector(np.ascontiguousarray(p, dtype=np.float32).reshape(-1), lt.A)
    faiss.copy_array_to_vector(np.zeros(dim, np.float32), lt.b)
    lt.is_trained = True
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), min(len(vectors), 300_000), replace=False))
    index = faiss.index_factory(dim, inner, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(vectors[rows] @ p.T, dtype=np.float32))
    return faiss.IndexPreTransform(lt, index)


def recode_projected(src: Path, out: Path, p: np.ndarray, inner: str) -> None:
    """`indexer recode` of src without stored vectors, its every shard behind the projection (module docstring)."""
    template = projected_template(p, inner, keys(src, first_only=True))
    templates = Templates(out)
    templates.dir.mkdir(parents=True, exist_ok=True)
    faiss.write_index(template, str(templates.path(inner)))
    log(run_recode(RecodeConfig(index=src, out=out, vector_dtype="none", index_type=inner)).line())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="the encoder of both indexes (default: the bundled one)")
    ap.add_argument("--train-index", type=Path, required=True)
    ap.add_argument("--train-probes", type=Path, required=True)
    ap.add_argument("--train-cloze", type=Path, help="corpus of own text: random cloze queries of it")
    ap.add_argument("--cloze", type=int, default=10_000, help="how many cloze queries of --train-cloze")
    ap.add_argument("--eval-index", type=Path, required=True)
    ap.add_argument("--eval-probes", type=Path, required=True)
    ap.add_argument("--per-relation", type=int, default=50)
    ap.add_argument("--dims", default="64,96")
    ap.add_argument("--codes", default="IVF1024,SQ8;IVF1024,PQ{half};IVF1024,SQ4", help="';'-separated")
    ap.add_argument("--baseline", default="OPQ48,IVF1024,PQ48", help="a code of the unprojected tokens")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--recode-from", type=Path)
    ap.add_argument("--recode-dim", type=int, default=96)
    ap.add_argument("--recode-inner", default="IVF4096,PQ48")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    encoder = Encoder(a.model, dtype="fp32")
    texts = [p["query"] for p in load_probes(a.train_probes)]
    texts += cloze_texts(a.train_cloze, a.cloze, seed=3) if a.train_cloze else []
    q_train, k_train = queries(encoder, texts), keys(a.train_index)
    eval_texts = [p["query"] for p in subsample(load_probes(a.eval_probes), a.per_relation, 0)]
    q_eval, k_eval = queries(encoder, eval_texts), keys(a.eval_index, first_only=True)
    log(f"train: {len(q_train)} queries, {len(k_train)} tokens; eval: {len(q_eval)} queries, {len(k_eval)} tokens")
    top_train, top_eval = exact_top(q_train, k_train), exact_top(q_eval, k_eval)
    sample = k_eval[np.random.default_rng(0).choice(len(k_eval), min(len(k_eval), 200_000), replace=False)]
    results = {}
    if a.baseline:
        index, decode = coded(a.baseline, sample, None)
        results[a.baseline] = fidelity(q_eval, top_eval, decode(k_eval)) | {"code_bytes": index.sa_code_size()}
        log(f"{a.baseline}: {results[a.baseline]}")
    for dim in [int(x) for x in a.dims.split(",")]:
        p = fit_projection(q_train, k_train, top_train, dim, a.steps, a.lam)
        np.save(a.out / f"P{dim}.npy", p)
        results[f"P{dim}"] = fidelity(q_eval, top_eval, lambda rows, p=p: k_eval[rows] @ p.T, p)
        log(f"P{dim}: {results[f'P{dim}']}")
        for factory in a.codes.replace("{half}", str(dim // 2)).split(";"):
            index, decode = coded(factory, sample, p)
            results[f"P{dim} {factory}"] = fidelity(q_eval, top_eval, decode(k_eval), p) | {
                "code_bytes": index.sa_code_size()
            }
            log(f"P{dim} {factory}: {results[f'P{dim} {factory}']}")
    (a.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    if a.recode_from:
        recode_projected(
            a.recode_from, a.out / f"index_p{a.recode_dim}", np.load(a.out / f"P{a.recode_dim}.npy"), a.recode_inner
        )


if __name__ == "__main__":
    main()

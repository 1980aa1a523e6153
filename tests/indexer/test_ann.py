"""ANN index choice: factory strings, budgets, and sharded ANN search against the exact IndexFlatIP."""

from __future__ import annotations

import math
from pathlib import Path

import faiss
import numpy as np
import pytest

import indexer.ann as ann_mod
from common.errors import AppError
from indexer.ann import (
    MAX_NLIST,
    FaissDevice,
    build_faiss_index,
    bytes_per_vector,
    check_index_type,
    fastscan_m,
    gpu_count,
    nlist_for,
    pq_bytes_for,
    resolve_factory,
    scaled_nprobe,
    set_search_params,
    train_faiss_index,
)
from indexer.manifest import BuildSettings, Counts, Manifest, ModelInfo
from indexer.phrase_index import PhraseIndex, is_exact
from indexer.shard_writer import ShardContent, ShardPlan, write_shard

DIM = 32


def test_nlist_in_recommended_range_and_trainable():
    for n in (100_000, 1_000_000):
        nlist = nlist_for(n)
        assert 4 * math.sqrt(n) <= nlist <= 16 * math.sqrt(n)
        assert nlist & (nlist - 1) == 0  # a power of two
    assert nlist_for(1_048_576) == nlist_for(8_000_000) == MAX_NLIST == 4096  # a CPU build's adds kept affordable
    for n in (1, 38, 100, 5000):
        assert 1 <= nlist_for(n) and n // max(1, nlist_for(n)) >= min(n, 39)


def test_pq_bytes_divide_dim():
    assert pq_bytes_for(384) == 32
    for d in (32, 64, 100, 256, 768, 1024):
        assert d % pq_bytes_for(d) == 0


def test_fastscan_has_the_same_code_bytes():
    assert fastscan_m(384) == 64  # 64 x 4 bits = 32 bytes = PQ32x8
    for d in (32, 64, 100, 256, 768, 1024):
        m = fastscan_m(d)
        assert m is None or (d % m == 0 and m * 4 == pq_bytes_for(d) * 8)
    assert fastscan_m(7) is None  # odd sub-quantizer counts cannot be fast-scanned: 8-bit PQ instead
    assert resolve_factory("ivfpq", 10**5, 7).endswith(",PQ1x8")


@pytest.mark.parametrize(
    ("kind", "n", "expect"),
    [
        ("flat", 10**6, "Flat"),
        ("hnsw", 10**6, "HNSW32,Flat"),
        ("ivfsq", 10**6, "IVF4096,SQ8"),
        ("ivfpq", 10**6, "IVF4096,PQ64x4fs"),
        ("ivfpq", 2000, "IVF51,PQ32x8"),  # small: 8-bit PQ, >= 39 points per list
        ("auto", 1000, "Flat"),
        ("auto", 10**6, "IVF4096,RaBitQ"),  # mapped from the file; more recall than fast-scan PQ
        ("ivfrabitq", 2000, "IVF51,RaBitQ"),
        ("IVF64,Flat", 10**6, "IVF64,Flat"),
    ],
)
def test_resolve_factory(kind, n, expect):
    assert resolve_factory(kind, n, 384) == expect


def test_auto_picks_most_accurate_type_within_budget():
    n, d = 10**6, 384
    assert resolve_factory("auto", n, d, memory_budget=int(bytes_per_vector("flat", d) * n)) == "Flat"
    assert resolve_factory("auto", n, d, memory_budget=int(bytes_per_vector("ivfsq", d) * n)).endswith(",SQ8")
    assert resolve_factory("auto", n, d, memory_budget=int(bytes_per_vector("ivfrabitq", d) * n)).endswith(",RaBitQ")
    assert ",PQ" in resolve_factory("auto", n, d, memory_budget=int(bytes_per_vector("ivfpq", d) * n))
    assert ",PQ" in resolve_factory("auto", n, d, memory_budget=1)  # nothing fits: the smallest


def test_check_index_type():
    assert check_index_type("IVFPQ", 384) == "ivfpq"
    assert check_index_type("IVF16,SQ8", 384) == "IVF16,SQ8"
    with pytest.raises(AppError, match="neither one of auto, flat"):
        check_index_type("bogus", 384)
    with pytest.raises(AppError, match="dimension 384"):
        check_index_type("PQ7", 384)  # 7 does not divide 384


def test_faiss_cpu_has_no_gpu_and_builds_on_cpu(caplog):
    assert gpu_count() == 0  # faiss-cpu: the device check says CPU
    vecs = np.random.default_rng(0).standard_normal((500, DIM)).astype(np.float16)
    with caplog.at_level("INFO", logger="indexer.ann"):
        index = build_faiss_index(vecs, "IVF4,Flat")
    assert "on CPU" in caplog.text and index.ntotal == 500


def _clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    centres = rng.standard_normal((20, DIM)) * 3
    return (centres[rng.integers(0, 20, n)] + rng.standard_normal((n, DIM))).astype(np.float16)


def _index(root, shards: list[np.ndarray], kind: str, template: bool = False) -> None:
    """An index of the given shards, one block each; `kind` an index type or a factory string; with `template`,
    every shard copies one trained index (as a build does)."""
    infos, base = [], 0
    trained = train_faiss_index(shards[0].astype(np.float32), kind) if template else None
    for number, vecs in enumerate(shards):
        n = len(vecs)
        content = ShardContent(
            vectors=vecs,
            token_ids=np.zeros(n, np.int32),
            offsets=np.zeros((n, 2), np.int32),
            flags=np.full(n, 3, np.uint8),
            blocks=np.array([[0, 0, n]], np.int64),
            doc_ids=[f"d{number}"],
            doc_titles=[""],
            doc_texts=["x"],
        )
        plan = ShardPlan(number, n, 1, base, number, resolve_factory(kind, n, DIM))
        infos.append(write_shard(root, plan, content, trained=trained))
        base += n
    Manifest(
        created_at="2024-01-01T00:00:00+00:00",
        model=ModelInfo(
            path="fake", fingerprint="0", model_type="fake", tokenizer="Fake", vocab_size=1, mask_token=None
        ),
        dim=DIM,
        index_type=kind,
        similarity_scale=1.0,
        corpus={},
        build=BuildSettings(corpus=Path("synthetic"), out=root),
        counts=Counts(documents=len(shards), empty_documents=0, blocks=len(shards), tokens=base, shards=len(shards)),
        shards=infos,
    ).save(root)


def test_write_shard_refuses_content_other_than_its_plan(tmp_path):
    vecs = _clustered(np.random.default_rng(0), 10)
    content = ShardContent(
        vectors=vecs,
        token_ids=np.zeros(10, np.int32),
        offsets=np.zeros((10, 2), np.int32),
        flags=np.full(10, 3, np.uint8),
        blocks=np.array([[0, 0, 10]], np.int64),
        doc_ids=["d"],
        doc_titles=[""],
        doc_texts=["x"],
    )
    with pytest.raises(ValueError, match="planned with 11 tokens in 1 blocks, its content holds 10 in 1"):
        write_shard(tmp_path, ShardPlan(0, 11, 1, 0, 0, "Flat"), content)
    assert not list(tmp_path.iterdir())
    assert write_shard(tmp_path, ShardPlan(0, 10, 1, 0, 0, "Flat"), content).name == "shard_00000"


def _exact_topk(shards: list[np.ndarray], queries: np.ndarray, k: int) -> list[set[tuple[int, int]]]:
    where = [(s, p) for s, v in enumerate(shards) for p in range(len(v))]
    scores = queries @ np.concatenate(shards).astype(np.float32).T
    return [{where[i] for i in np.argsort(-row, kind="stable")[:k]} for row in scores]


def test_sharded_ivf_with_all_lists_equals_flat(tmp_path):
    rng = np.random.default_rng(1)
    shards = [_clustered(rng, n) for n in (900, 700, 1100)]
    _index(tmp_path, shards, "IVF8,Flat")
    queries = rng.standard_normal((6, DIM)).astype(np.float32)
    index = PhraseIndex(tmp_path, nprobe=8)  # nprobe covers all lists: exact
    assert all(s.index.nprobe == 8 for s in index.shards)
    flat = faiss.IndexFlatIP(DIM)
    flat.add(np.concatenate(shards).astype(np.float32))
    _, ref = flat.search(queries, 25)
    bases = np.cumsum([0] + [len(v) for v in shards])
    for row, (sh, pos) in enumerate(index.search(queries, 25)):
        assert set((bases[sh] + pos).tolist()) == set(ref[row].tolist())
    index.close()


def test_refine_rescores_ann_hits_exactly_and_merges_shards_by_exact_score(tmp_path):
    """PQ scores are coarse; with every list probed and refine * k >= shard size, the merged top-k is the exact one."""
    rng = np.random.default_rng(3)
    shards = [_clustered(rng, n) for n in (600, 500)]
    _index(tmp_path, shards, "IVF4,PQ8x4")
    queries = rng.standard_normal((8, DIM)).astype(np.float32)
    k = 30
    truth = _exact_topk(shards, queries, k)
    refined = PhraseIndex(tmp_path, nprobe=4, refine=20)  # 600 hits per shard: all of them
    assert all(not is_exact(s.info.factory) for s in refined.shards)
    for (sh, pos), want in zip(refined.search(queries, k), truth):
        assert set(zip(sh.tolist(), pos.tolist())) == want
    coarse = PhraseIndex(tmp_path, nprobe=4, refine=1)
    overlap = [
        len(set(zip(sh.tolist(), pos.tolist())) & want) for (sh, pos), want in zip(coarse.search(queries, k), truth)
    ]
    assert np.mean(overlap) < k  # without refining, PQ's own ranking misses some of the exact top-k
    with pytest.raises(AppError, match="refine"):
        PhraseIndex(tmp_path, refine=0)
    refined.close()
    coarse.close()


@pytest.mark.parametrize("kind", ["IVF8,Flat", "IVF8,PQ8x4fs", "OPQ8,IVF8,PQ8"])
def test_shards_sharing_centroids_are_assigned_once_with_the_same_hits(tmp_path, kind):
    rng = np.random.default_rng(5)
    shards = [_clustered(rng, n) for n in (900, 700, 1100)]
    _index(tmp_path / "shared", shards, kind, template=True)
    _index(tmp_path / "own", shards, kind)
    queries = rng.standard_normal((6, DIM)).astype(np.float32)
    shared = PhraseIndex(tmp_path / "shared", nprobe=3)
    assert shared._lists is not None and shared._lists.members == {0, 1, 2}
    assert len(shared._lists.chain) == kind.count("OPQ")  # the rotation applied once too
    once = shared.search(queries, 40)
    shared._lists = None  # each shard rotates and assigns the queries itself
    for (s1, p1), (s2, p2) in zip(once, shared.search(queries, 40)):
        assert np.array_equal(s1, s2) and np.array_equal(p1, p2) and s1.size == 40
    own = PhraseIndex(tmp_path / "own", nprobe=3)  # trained one by one: different centroids, nothing shared
    assert own._lists is None
    shared.close()
    own.close()


def test_is_exact():
    assert is_exact("Flat") and is_exact("IDMap,Flat")
    assert not is_exact("IVF8,Flat") and not is_exact("HNSW32") and not is_exact("IVF64,PQ16x4fs")


@pytest.mark.parametrize("kind", ["ivfrabitq", "ivfpq", "ivfsq", "hnsw"])
def test_ann_types_recall_after_exact_rescoring(tmp_path, kind):
    """Compressed ANN codes only pick candidates: re-scored exactly, the true top-1 is found."""
    rng = np.random.default_rng(2)
    shards = [_clustered(rng, 3000), _clustered(rng, 2000)]
    _index(tmp_path, shards, kind)
    index = PhraseIndex(tmp_path)
    assert {s.info.factory for s in index.shards} == {resolve_factory(kind, len(v), DIM) for v in shards}
    queries = rng.standard_normal((40, DIM)).astype(np.float32)
    truth = _exact_topk(shards, queries, 1)
    found = 0
    for q, (sh, pos), best in zip(queries, index.search(queries, 100), truth):
        exact = np.array([index.shards[s].vectors[p] @ q for s, p in zip(sh.tolist(), pos.tolist())])
        top = (int(sh[exact.argmax()]), int(pos[exact.argmax()]))
        found += top in best
    assert found >= 38, found  # >= 95% top-1 agreement with exact search
    index.close()


def test_set_search_params_applies_to_ivf_and_hnsw():
    vecs = np.random.default_rng(3).standard_normal((2000, DIM)).astype(np.float16)
    ivf = build_faiss_index(vecs, "IVF32,Flat")
    set_search_params(ivf)
    assert ivf.nprobe == 16
    set_search_params(ivf, nprobe=1000)
    assert ivf.nprobe == 32  # never more than the lists
    hnsw = build_faiss_index(vecs, "HNSW16,Flat")
    set_search_params(hnsw, ef_search=77)
    assert hnsw.hnsw.efSearch == 77
    flat = build_faiss_index(vecs, "Flat")
    set_search_params(flat, nprobe=5)  # no such parameter: ignored


def _stand_in_gpu(monkeypatch, calls: list) -> None:
    """Replace only the FAISS device check: a 'GPU' whose copies are CPU indexes (faiss-cpu has no GPU)."""

    def to_device(index):
        calls.append(("to_device", type(index).__name__))
        return faiss.clone_index(index)

    def to_cpu(index):
        calls.append(("to_cpu", index.ntotal, index.is_trained))
        return faiss.clone_index(index)

    monkeypatch.setattr(ann_mod, "faiss_device", lambda: FaissDevice("1 GPU(s)", to_device, to_cpu))


def test_faiss_gpu_path_trains_and_adds_on_the_device_copy(monkeypatch, caplog):
    vecs = _clustered(np.random.default_rng(1), 2000)
    reference = build_faiss_index(vecs, "IVF16,Flat")
    calls = []
    _stand_in_gpu(monkeypatch, calls)
    with caplog.at_level("INFO", logger="indexer.ann"):
        index = build_faiss_index(vecs, "IVF16,Flat")
    # trained on the device and copied back (empty), then filled on the device and copied back
    assert calls == [
        ("to_device", "IndexIVFFlat"),
        ("to_cpu", 0, True),
        ("to_device", "IndexIVFFlat"),
        ("to_cpu", 2000, True),
    ]
    assert "on 1 GPU(s)" in caplog.text and index.ntotal == 2000 and index.is_trained
    queries = vecs[:20].astype(np.float32)
    faiss.extract_index_ivf(index).nprobe = faiss.extract_index_ivf(reference).nprobe = 16
    assert np.array_equal(index.search(queries, 5)[1], reference.search(queries, 5)[1])
    calls.clear()
    hnsw = build_faiss_index(vecs, "HNSW8")  # FAISS has no GPU HNSW: stays on the CPU
    assert calls == [] and hnsw.ntotal == 2000


def test_faiss_gpu_path_fastscan_runs_kmeans_on_the_device(monkeypatch, caplog):
    vecs = _clustered(np.random.default_rng(2), 5000)
    calls = []
    _stand_in_gpu(monkeypatch, calls)
    with caplog.at_level("INFO", logger="indexer.ann"):
        index = build_faiss_index(vecs, "IVF16,PQ16x4fs")
    assert calls == [("to_device", "IndexFlatIP")]  # only the IVF k-means; fast-scan adds on the CPU
    assert "k-means on 1 GPU(s)" in caplog.text and index.ntotal == 5000
    assert faiss.extract_index_ivf(index).clustering_index is None  # no device object kept in the index


def test_shared_trained_index_equals_training_per_build():
    vecs = _clustered(np.random.default_rng(3), 6000)
    trained = train_faiss_index(vecs, "IVF16,PQ16x4fs", seed=0)
    assert trained.is_trained and trained.ntotal == 0
    a = build_faiss_index(vecs, "IVF16,PQ16x4fs", seed=0)
    b = build_faiss_index(vecs, "IVF16,PQ16x4fs", trained=trained)
    assert trained.ntotal == 0  # the template is copied, never filled
    assert faiss.serialize_index(a).tobytes() == faiss.serialize_index(b).tobytes()


@pytest.mark.parametrize(
    "nlist, tokens, nprobe",
    [(4096, 3_000_000, 256), (4096, 10_000_000, 108), (4096, 30_000_000, 36), (4096, 10**9, 16), (76, 3000, 16)],
)
def test_nprobe_scales_down_as_the_lists_fill(nlist, tokens, nprobe):
    """About SCAN_TOKENS tokens scanned a query: at most 1/16 of the lists, at least 16 (never more than all)."""
    assert scaled_nprobe(nlist, tokens) == nprobe
    assert scaled_nprobe(8, 100) == 8

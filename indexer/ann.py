"""ANN index choice per shard: index types, FAISS factory strings, training and search parameters.

Every index uses the INNER-PRODUCT metric. With stored vectors (int8, float16) the ANN codes only choose
candidates and every candidate is re-scored exactly, so ANN error costs recall, never score; without them
(vector_dtype "none", indexer.ann_codes) the ANN's own codes score every token: 8-bit IVF-PQ behind an OPQ
rotation, or Flat.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import faiss
import numpy as np

from common.errors import AppError

logger = logging.getLogger(__name__)

INDEX_TYPES = ("auto", "flat", "ivfrabitq", "ivfpq", "ivfsq", "hnsw")
CODELESS_TYPES = ("hnsw", "ivfrabitq")  # types whose codes cannot give a token's score (no --vector-dtype none)
FLAT_MAX_TOKENS = 65_536  # `auto` keeps small shards exact
ANN_ORDER = ("flat", "ivfsq", "ivfrabitq", "ivfpq")  # `auto` with a memory budget: the first that fits
TRAIN_POINTS_PER_LIST = 64  # IVF centroids / PQ codebooks are trained on a sample of this many vectors per list
ADD_CHUNK = 65_536
FASTSCAN_MIN_TOKENS = 4096  # below this, 8-bit PQ (fast-scan k-means wants many points per code)
# Lists of a shard the `auto` types make (a 1M-token shard's 4096; shards of more tokens keep it, indexer.shard_size):
# each added vector is compared with every centroid, so 16384 lists would make a CPU build's adds 4x slower and
# their training ~16x; a factory string sets more (e.g. IVF16384_HNSW32,... assigns through a graph)
MAX_NLIST = 4096
SCAN_TOKENS = 262_144  # the tokens a query's probed IVF lists hold, over all shards (scaled_nprobe)


def same_chain(a: list[faiss.VectorTransform], b: list[faiss.VectorTransform]) -> bool:
    """Whether two chains of linear pre-transforms map every vector alike (the same matrices and biases)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(x, faiss.LinearTransform) or not isinstance(y, faiss.LinearTransform):
            return False
        if (x.d_in, x.d_out, x.have_bias) != (y.d_in, y.d_out, y.have_bias):
            return False
        if not np.array_equal(faiss.vector_to_array(x.A), faiss.vector_to_array(y.A)):
            return False
        if not np.array_equal(faiss.vector_to_array(x.b), faiss.vector_to_array(y.b)):
            return False
    return True


def check_index_type(value: str, dim: int, vector_dtype: str = "int8") -> str:
    """The index type, or an AppError naming the choices (factory strings are tried on FAISS). Without stored
    vectors (`vector_dtype` "none") the index must score from its own codes: Flat, IVF-SQ or 8-bit IVF-PQ."""
    if value.lower() in INDEX_TYPES:
        if vector_dtype == "none" and value.lower() in CODELESS_TYPES:
            raise AppError(
                f"--index-type {value} cannot score tokens from its own codes; with --vector-dtype none use auto, "
                "flat, ivfpq, ivfsq or an IVF-PQ factory string (or store vectors: --vector-dtype int8)",
                kind="validation",
            )
        return value.lower()
    try:
        faiss.index_factory(dim, value, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError:
        raise AppError(
            f"--index-type {value!r} is neither one of {', '.join(INDEX_TYPES)} nor a FAISS factory string valid for "
            f"dimension {dim}",
            kind="validation",
        ) from None
    problem = codes_problem(value, dim) if vector_dtype == "none" else None
    if problem:
        raise AppError(
            f"--index-type {problem}: with --vector-dtype none the index scores every token from its own codes "
            "(or store vectors: --vector-dtype int8)",
            kind="validation",
        )
    return value


def unwrap(index: faiss.Index) -> tuple[list[faiss.VectorTransform], faiss.Index]:
    """(the pre-transforms, in order, the index behind them) of an index, downcast."""
    index = faiss.downcast_index(index)
    chain: list[faiss.VectorTransform] = []
    if isinstance(index, faiss.IndexPreTransform):
        # index.chain is a SWIG std::vector (at, size), which faiss's stubs call a list
        chain = [faiss.downcast_VectorTransform(index.chain.at(i)) for i in range(index.chain.size())]  # type: ignore[attr-defined]
        index = faiss.downcast_index(index.index)
    return chain, index


def codes_problem(factory: str, dim: int) -> str | None:
    """None when a shard of FAISS `factory` can score from its own codes; else what it lacks."""
    return index_codes_problem(faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT), repr(factory))


def index_codes_problem(index: faiss.Index, name: str) -> str | None:
    """None when `index` can score any of its tokens from its own codes (indexer.ann_codes); else what it lacks."""
    chain, inner = unwrap(index)  # views into `index`, alive while it is
    if not all(isinstance(t, faiss.LinearTransform) for t in chain):
        return f"{name} has a pre-transform that is not linear"
    if type(inner) in (faiss.IndexFlat, faiss.IndexFlatIP):
        return None
    ivf_kind = type(inner) in (faiss.IndexIVFFlat, faiss.IndexIVFScalarQuantizer)
    if isinstance(inner, faiss.IndexIVF) and (ivf_kind or (type(inner) is faiss.IndexIVFPQ and inner.pq.nbits == 8)):
        residual = inner.by_residual  # the codes are residuals to the list centroids, read as a Flat's rows
        if residual and not isinstance(faiss.downcast_index(inner.quantizer), faiss.IndexFlat):
            return f"{name} has a coarse quantizer that is not Flat (e.g. IVF4096,PQ48, not IVF4096_HNSW32,PQ48)"
        return None
    return f"{name} is neither Flat nor IVF-Flat, IVF-SQ or IVF-PQ with 8-bit codes (e.g. OPQ48,IVF4096,PQ48)"


def nlist_for(n: int) -> int:
    """IVF lists for n vectors: the power of two nearest above 4*sqrt(n) (the low end of the usual
    4..16*sqrt(n): each added vector is compared with every list centroid), >= 39 points each, at most MAX_NLIST."""
    target = 4 * math.sqrt(max(1, n))
    nlist = 2 ** max(0, math.ceil(math.log2(target)))
    return int(max(1, min(nlist, n // 39, MAX_NLIST)))


def pq_bytes_for(dim: int) -> int:
    """PQ sub-quantizers (one byte each): the divisor of dim closest to dim / 12 (32 for d = 384)."""
    divisors = [m for m in range(1, dim + 1) if dim % m == 0]
    return min(divisors, key=lambda m: (abs(m - dim / 12), -m))


def fastscan_m(dim: int) -> int | None:
    """Sub-quantizers of 4-bit fast-scan PQ with the code size of `pq_bytes_for` (64 for d = 384), or None."""
    m = 2 * pq_bytes_for(dim)
    return m if dim % m == 0 else None


def bytes_per_vector(index_type: str, dim: int) -> float:
    """Approximate in-memory / on-disk bytes per vector of each type (IVF adds an 8-byte id per vector)."""
    return {
        "flat": 4.0 * dim,
        "ivfsq": dim + 8.0,
        "ivfrabitq": dim / 8 + 8.0 + 14.0,  # one bit a dimension, the id, RaBitQ's factors (70 B measured at d 384)
        "ivfpq": pq_bytes_for(dim) + 8.0,
        "hnsw": 4.0 * dim + 32 * 8,
    }[index_type]


def resolve_factory(
    index_type: str, n: int, dim: int, memory_budget: int | None = None, vector_dtype: str = "int8"
) -> str:
    """A FAISS factory string for a shard of n vectors. `index_type` may also be a factory string.

    `auto`: exact Flat for small shards; otherwise the most accurate of Flat > IVF-SQ8 > IVF-RaBitQ > IVF-PQ whose
    index fits `memory_budget` bytes (IVF-RaBitQ when no budget is given: more recall than fast-scan PQ, and its
    lists map from the file where fast-scan's are read into memory; docs/OPERATIONS.md). Without stored vectors
    (`vector_dtype` "none"): Flat for small shards, else IVF-SQ8 for `ivfsq` and `codes_factory` for the others.
    """
    kind = index_type.lower()
    if kind not in INDEX_TYPES:
        return index_type  # a FAISS factory string, used as given
    if vector_dtype == "none":
        small = n <= FLAT_MAX_TOKENS if kind == "auto" else n < 256 * TRAIN_POINTS_PER_LIST
        if kind == "flat" or small:
            return "Flat"
        return f"IVF{nlist_for(n)},SQ8" if kind == "ivfsq" else codes_factory(n, dim)
    if kind == "auto":
        if n <= FLAT_MAX_TOKENS:
            kind = "flat"
        else:  # no budget: IVF-RaBitQ; a budget: the first type of ANN_ORDER that fits it, else the smallest
            fits = [t for t in ANN_ORDER if memory_budget and bytes_per_vector(t, dim) * n <= memory_budget]
            kind = "ivfrabitq" if memory_budget is None else (fits[0] if fits else "ivfpq")
    if kind == "flat":
        return "Flat"
    if kind == "hnsw":
        return "HNSW32,Flat"
    nlist = nlist_for(n)
    if kind == "ivfsq":
        return f"IVF{nlist},SQ8"
    if kind == "ivfrabitq":
        return f"IVF{nlist},RaBitQ"
    fast = fastscan_m(dim)
    if fast is not None and n >= FASTSCAN_MIN_TOKENS:  # same code bytes as PQ{m}x8; trains, adds, searches faster
        return f"IVF{nlist},PQ{fast}x4fs"
    nbits = min(8, max(1, int(math.log2(max(2, n)))))  # k-means needs >= 2**nbits training points
    return f"IVF{nlist},PQ{pq_bytes_for(dim)}x{nbits}"


def codes_factory(n: int, dim: int) -> str:
    """The index of a shard without stored vectors: OPQ-rotated IVF-PQ with 8-bit codes of `codes_m` bytes,
    the codes search and score alike (indexer.ann_codes)."""
    m = codes_m(dim)
    return f"OPQ{m},IVF{nlist_for(n)},PQ{m}"


def codes_m(dim: int) -> int:
    """Bytes of a token's code without stored vectors: the divisor of dim closest to dim / 8 (48 for d = 384)."""
    divisors = [m for m in range(1, dim + 1) if dim % m == 0]
    return min(divisors, key=lambda m: (abs(m - dim / 8), -m))


def scaled_nprobe(nlist: int, tokens: int) -> int:
    """nprobe for IVF shards of `nlist` lists holding `tokens` tokens together (a build's shards share one quantizer,
    a query scans the same lists of each): the lists holding ~SCAN_TOKENS tokens, in [16, nlist / 16], so a query's
    scan stops growing with the index (docs/OPERATIONS.md "Large corpora")."""
    wanted = math.ceil(SCAN_TOKENS / max(1.0, tokens / max(1, nlist)))
    return int(min(nlist, max(16, nlist // 16), max(16, wanted)))


def set_search_params(
    index: faiss.Index, nprobe: int | None = None, ef_search: int | None = None, tokens: int | None = None
) -> None:
    """Search-time parameters where the index type has them (others ignored); without `nprobe`, an IVF index
    probes `scaled_nprobe` of `tokens` (those of every shard sharing its lists; default its own)."""
    ivf = _ivf(index)
    if ivf is not None:
        ivf.nprobe = int(min(ivf.nlist, nprobe or scaled_nprobe(ivf.nlist, ivf.ntotal if tokens is None else tokens)))
    hnsw = getattr(index, "hnsw", None)
    if hnsw is not None:
        hnsw.efSearch = int(ef_search or 256)


def search_params(index: faiss.Index, selector: faiss.IDSelector) -> faiss.SearchParameters:
    """Search parameters that keep the index's own nprobe / efSearch and search only `selector`'s ids. (faiss's
    Python wrapper takes the fields as keywords, and has SearchParametersHNSW: its stubs have neither.)"""
    ivf = _ivf(index)
    if ivf is not None:
        return faiss.SearchParametersIVF(sel=selector, nprobe=ivf.nprobe)  # type: ignore[call-arg]
    hnsw = getattr(index, "hnsw", None)
    if hnsw is not None:
        return faiss.SearchParametersHNSW(sel=selector, efSearch=hnsw.efSearch)  # type: ignore[attr-defined]
    return faiss.SearchParameters(sel=selector)  # type: ignore[call-arg]


def _ivf(index: faiss.Index) -> faiss.IndexIVF | None:
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def gpu_count() -> int:
    """GPUs FAISS can use (0 with faiss-cpu, which has no GPU resources)."""
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None and hasattr(faiss, "StandardGpuResources") else 0


IndexCopy = Callable[[faiss.Index], faiss.Index]


@dataclass(frozen=True)
class FaissDevice:
    """Where FAISS trains and adds: `to_device` clones a CPU index there, `to_cpu` brings it back."""

    name: str
    to_device: IndexCopy | None = None  # None: work on the CPU index itself
    to_cpu: IndexCopy | None = None


def faiss_device() -> FaissDevice:
    """The FAISS device check: all GPUs when faiss-gpu sees any, else the CPU."""
    gpus = gpu_count()
    if gpus:
        return FaissDevice(f"{gpus} GPU(s)", faiss.index_cpu_to_all_gpus, faiss.index_gpu_to_cpu)
    return FaissDevice("CPU")


def gpu_capable(factory: str) -> bool:
    """FAISS has no GPU HNSW, fast-scan PQ or RaBitQ: those train (k-means aside) and add on the CPU."""
    last = factory.split(",")[-1]
    return not factory.startswith("HNSW") and "fs" not in last and "RaBitQ" not in last


def train_faiss_index(vectors: np.ndarray, factory: str, seed: int = 0) -> faiss.Index:
    """An empty CPU index of `factory` trained on a seeded sample of `vectors` (IVF centroids, PQ codebooks)."""
    n, d = vectors.shape
    index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    if index.is_trained:
        return index
    ivf = _ivf(index)
    want = (ivf.nlist if ivf is not None else 256) * TRAIN_POINTS_PER_LIST
    want = max(want, 256 * 64) if "PQ" in factory else want  # PQ codebooks: many points per centroid
    rows = np.sort(np.random.default_rng(seed).choice(n, size=min(n, want), replace=False))
    sample = np.asarray(vectors[rows], dtype=np.float32)
    device = faiss_device()
    if device.to_device is not None and gpu_capable(factory):
        logger.info("faiss %s: training on %d vectors on %s", factory, len(rows), device.name)
        work = device.to_device(index)
        work.train(sample)
        assert device.to_cpu is not None  # faiss_device sets it with to_device
        return device.to_cpu(work)
    if device.to_device is not None and ivf is not None:  # the k-means of the IVF lists still runs on the GPU
        ivf.clustering_index = device.to_device(faiss.IndexFlatIP(d))
        logger.info("faiss %s: training on %d vectors, k-means on %s, the rest on CPU", factory, len(rows), device.name)
    else:
        logger.info("faiss %s: training on %d vectors on CPU", factory, len(rows))
    index.train(sample)
    if ivf is not None:
        ivf.clustering_index = None  # type: ignore[assignment]  # a SWIG pointer, None clears it (stubs: Index)
    return index


def build_faiss_index(
    vectors: np.ndarray, factory: str, seed: int = 0, trained: faiss.Index | None = None
) -> faiss.Index:
    """Fill an inner-product index with `vectors`: a copy of `trained` (an empty trained index of the same
    factory, e.g. shared by the shards of a build) or one trained here on a seeded sample; on GPU when
    faiss-gpu sees one."""
    n, d = vectors.shape
    index = faiss.clone_index(trained) if trained is not None else train_faiss_index(vectors, factory, seed)
    device = faiss_device()
    on_gpu = device.to_device is not None and gpu_capable(factory)
    work = cast(IndexCopy, device.to_device)(index) if on_gpu else index  # (on_gpu: set)
    logger.info("faiss %s: adding %d vectors on %s", factory, n, device.name if on_gpu else "CPU")
    for a in range(0, n, ADD_CHUNK):
        work.add(np.asarray(vectors[a : a + ADD_CHUNK], dtype=np.float32))
    return cast(IndexCopy, device.to_cpu)(work) if on_gpu else index  # (set with to_device)


def is_exact(factory: str) -> bool:
    """Whether a FAISS factory scores with the full vectors (its top-k needs no exact re-scoring)."""
    return factory.replace("IDMap,", "").replace("IDMap2,", "") == "Flat"

"""Scoring from the ANN index's own codes (vector_dtype "none"): the products are FAISS's own search scores for
any token, read from the mapped index file or from lists in RAM; which indexes can do it; the factory chosen."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from common.errors import AppError
from indexer.ann import check_index_type, codes_problem, resolve_factory
from indexer.ann_codes import AnnCodes, code_slots, needs_slots

DIM = 32


@pytest.fixture(scope="module")
def coded(tmp_path_factory):
    """(directory with index.faiss + code_slots.npy of an OPQ-IVF-PQ index, the vectors, the index)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, DIM)).astype(np.float32)
    x[:, :4] *= 3  # unequal variances: OPQ has something to rotate
    index = faiss.index_factory(DIM, "OPQ8,IVF16,PQ8", faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    directory = tmp_path_factory.mktemp("coded")
    faiss.write_index(index, str(directory / "index.faiss"))
    np.save(directory / "code_slots.npy", code_slots(index))
    return directory, x, index


@pytest.mark.parametrize(
    "flag", [faiss.IO_FLAG_MMAP_IFC, faiss.IO_FLAG_MMAP, 0], ids=["mapped-views", "mapped-on-disk", "in-ram"]
)
def test_products_are_the_ivfpq_search_scores_of_the_same_tokens(coded, flag):
    directory, x, built = coded
    index = faiss.read_index(str(directory / "index.faiss"), flag)
    lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)
    assert isinstance(lists, faiss.OnDiskInvertedLists) == (flag == faiss.IO_FLAG_MMAP)  # both paths are taken
    codes = AnnCodes(directory, index)
    assert codes.shape == (3000, DIM) and len(codes) == 3000 and not codes.rescores
    q = x[:4] + 0.1
    faiss.extract_index_ivf(built).nprobe = 16  # every list: the search scores every token it returns
    scores, ids = built.search(q, 50)
    for j in range(4):
        np.testing.assert_allclose(codes.dot(ids[j], q[j]), scores[j], rtol=1e-5, atol=1e-4)
    many = codes.dot(ids[0], q)  # several queries at once: one column each
    assert many.shape == (50, 4)
    np.testing.assert_allclose(many[:, 0], scores[0], rtol=1e-5, atol=1e-4)


def test_rows_decode_near_the_vectors_in_the_original_space(coded):
    directory, x, _ = coded
    codes = AnnCodes(directory, faiss.read_index(str(directory / "index.faiss"), faiss.IO_FLAG_MMAP))
    rows = np.array([[5, 17], [2999, 0]])
    decoded = codes[rows]
    assert decoded.shape == (2, 2, DIM) and decoded.dtype == np.float32
    err = ((decoded - x[rows]) ** 2).sum() / (x[rows] ** 2).sum()
    assert err < 0.2  # a 8-byte code of 32 dimensions: close, not exact
    other = ((decoded - x[rows[::-1]]) ** 2).sum() / (x[rows] ** 2).sum()
    assert other > 1.0  # and each row is its own token's


def test_code_slots_place_every_token_once_list_after_list(coded):
    _, _, index = coded
    slots = code_slots(index)
    assert slots.dtype == np.uint32 and np.array_equal(np.sort(slots), np.arange(3000))
    ivf = faiss.extract_index_ivf(index)
    first_list = next(i for i in range(ivf.nlist) if ivf.invlists.list_size(i))
    ids = faiss.rev_swig_ptr(ivf.invlists.get_ids(first_list), ivf.invlists.list_size(first_list)).copy()
    assert sorted(slots[ids].tolist()) == list(range(len(ids)))  # the first list's tokens come first


@pytest.mark.parametrize("factory", ["IVF4,SQ8", "IVF4,Flat", "IVF4_HNSW8,Flat"])
def test_ivf_sq_and_ivf_flat_products_are_their_search_scores(tmp_path, factory):
    x = np.random.default_rng(2).standard_normal((500, DIM)).astype(np.float32)
    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    faiss.write_index(index, str(tmp_path / "index.faiss"))
    np.save(tmp_path / "code_slots.npy", code_slots(index))
    codes = AnnCodes(tmp_path, faiss.read_index(str(tmp_path / "index.faiss"), faiss.IO_FLAG_MMAP))
    index.nprobe = 4
    scores, ids = index.search(x[:1], 20)
    np.testing.assert_allclose(codes.dot(ids[0], x[0]), scores[0], rtol=1e-5, atol=1e-4)


def test_a_flat_index_scores_exactly_from_its_own_vectors(tmp_path):
    x = np.random.default_rng(1).standard_normal((100, DIM)).astype(np.float32)
    index = faiss.IndexFlatIP(DIM)
    index.add(x)
    assert not needs_slots(index)
    codes = AnnCodes(tmp_path, index)
    np.testing.assert_allclose(codes.dot(np.array([3, 7]), x[0]), x[[3, 7]] @ x[0], rtol=1e-6)
    np.testing.assert_array_equal(codes[np.array([9])], x[[9]])


@pytest.mark.parametrize(
    ("factory", "ok"),
    [
        ("Flat", True),
        ("IVF16,PQ8", True),
        ("OPQ8,IVF16,PQ8", True),
        ("IVF16,PQ8x4", False),  # 4-bit codes
        ("IVF16,PQ16x4fs", False),  # fast-scan: its lists are not memory-mapped, and not decoded here
        ("HNSW32,Flat", False),
        ("IVF16,SQ8", True),
        ("IVF16,Flat", True),
        ("IVF16_HNSW8,PQ8", False),  # residual codes: the centroids are read from a Flat quantizer
        ("IVF16(PQ4),SQ8", False),
        ("IVF16_HNSW8,Flat", True),  # not residual: no centroid is read
    ],
)
def test_which_indexes_can_score_from_their_codes(factory, ok):
    problem = codes_problem(factory, DIM)
    assert (problem is None) == ok
    if ok:
        assert check_index_type(factory, DIM, "none") in (factory, factory.lower())  # "flat" is also a type name
    else:
        assert factory in problem
        with pytest.raises(AppError, match="--vector-dtype none"):
            check_index_type(factory, DIM, "none")
        assert check_index_type(factory, DIM, "int8") == factory  # with stored vectors any index will do


@pytest.mark.parametrize("name", ["hnsw", "ivfrabitq", "IVFRaBitQ"])
def test_types_that_cannot_score_from_their_codes_are_refused_by_name_without_stored_vectors(name):
    with pytest.raises(AppError, match=f"--index-type {name} cannot score"):
        check_index_type(name, DIM, "none")
    assert check_index_type(name, DIM, "int8") == name.lower()


def test_ivfsq_without_stored_vectors_is_the_ivf_sq8_it_names():
    """Not a silent OPQ-IVF-PQ: the type asked for, which can score from its codes."""
    assert check_index_type("ivfsq", DIM, "none") == "ivfsq"
    factory = resolve_factory("ivfsq", 1_000_000, 384, vector_dtype="none")
    assert factory == "IVF4096,SQ8" and codes_problem(factory, 384) is None
    assert resolve_factory("ivfsq", 1_000, 384, vector_dtype="none") == "Flat"  # too few tokens to train lists


def test_without_stored_vectors_auto_is_flat_when_small_else_opq_ivfpq():
    assert resolve_factory("auto", 10_000, 384, vector_dtype="none") == "Flat"
    assert resolve_factory("auto", 1_000_000, 384, vector_dtype="none") == "OPQ48,IVF4096,PQ48"
    assert resolve_factory("ivfpq", 1_000_000, 384, vector_dtype="none") == "OPQ48,IVF4096,PQ48"
    assert resolve_factory("auto", 1_000_000, 384) == "IVF4096,RaBitQ"  # with stored vectors (int8, the default)
    assert codes_problem(resolve_factory("auto", 100_000, 768, vector_dtype="none"), 768) is None


@pytest.mark.parametrize("dtype", ["none", "int8"])
def test_the_shards_reader_maps_the_lists_its_scorer_reads_in_place(coded, dtype):
    """indexer.integrity.read_faiss: with IO_FLAG_MMAP_IFC every list's codes and the coarse centroids are views into
    the file FAISS mapped (page cache, not anonymous memory), and a shard without stored vectors scores from one
    view spanning those lists, no copy, the same products as reading the file into memory."""
    from types import SimpleNamespace

    from indexer.integrity import read_faiss

    directory, x, _ = coded
    info = SimpleNamespace(tokens=len(x), vector_dtype=dtype)
    index = read_faiss(directory / "index.faiss", info, DIM)  # type: ignore[arg-type]
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    assert isinstance(lists, faiss.ArrayInvertedLists)
    assert not any(lists.codes.at(i).is_owned for i in range(ivf.nlist) if lists.list_size(i))
    assert not faiss.downcast_index(ivf.quantizer).codes.is_owned
    if dtype == "none":
        codes = AnnCodes(directory, index)
        assert not codes.data.flags.owndata and codes.data.size <= (directory / "index.faiss").stat().st_size
        in_ram = AnnCodes(directory, faiss.read_index(str(directory / "index.faiss")))
        assert in_ram.data.flags.owndata  # the copy this avoids
        rows = np.arange(0, len(x), 3)
        np.testing.assert_array_equal(codes.codes(rows)[0], in_ram.codes(rows)[0])
        np.testing.assert_array_equal(codes.dot(rows, x[:2]), in_ram.dot(rows, x[:2]))


def test_shards_of_one_template_decode_with_one_codec_and_the_same_products(coded, tmp_path):
    """AnnCodes.share_codec: a second shard copied from the same trained index (as a build writes its shards) decodes
    with the first one's codebooks, centroids and rotation, and its products do not change; a shard trained apart
    keeps its own."""
    from indexer.ann_codes import share_codecs

    directory, x, built = coded
    second = faiss.clone_index(built)  # the same template and codes: another shard of the build
    second.reset()
    second.add(x[::-1].copy())
    (tmp_path / "b").mkdir()
    faiss.write_index(second, str(tmp_path / "b" / "index.faiss"))
    np.save(tmp_path / "b" / "code_slots.npy", code_slots(second))
    apart = faiss.index_factory(DIM, "OPQ8,IVF16,PQ8", faiss.METRIC_INNER_PRODUCT)
    apart.train(x[::2].copy())
    apart.add(x)
    (tmp_path / "c").mkdir()
    faiss.write_index(apart, str(tmp_path / "c" / "index.faiss"))
    np.save(tmp_path / "c" / "code_slots.npy", code_slots(apart))
    opened = [
        AnnCodes(d, faiss.read_index(str(d / "index.faiss"), faiss.IO_FLAG_MMAP))
        for d in (directory, tmp_path / "b", tmp_path / "c")
    ]
    rows, q = np.arange(0, 3000, 7), x[:3] + 0.1
    before = [c.dot(rows, q) for c in opened]
    assert share_codecs([None, *opened]) == 1  # the copy shares; the index trained apart does not
    assert opened[1].centroids is opened[0].centroids and opened[2].centroids is not opened[0].centroids
    for c, b in zip(opened, before):
        np.testing.assert_allclose(c.dot(rows, q), b, rtol=1e-6, atol=1e-5)
    fresh = AnnCodes(tmp_path / "b", faiss.read_index(str(tmp_path / "b" / "index.faiss"), faiss.IO_FLAG_MMAP))
    assert fresh.share_codec(opened[0]) and fresh.tables is opened[0].tables
    fresh.dot(rows, q + 1.0)  # a query never asked: computed with the lent tables, its own codebooks never copied
    assert fresh._own is not None and fresh._own[3]._codebooks is None and opened[0].tables._codebooks is not None
    # a later generation led by the shard trained apart: the copy decodes with its own codec again (it no longer
    # holds the first shard's index alive), and its products stay
    assert share_codecs([opened[2], opened[1]]) == 0
    assert opened[1].centroids is not opened[0].centroids and opened[1]._codec_owner is None
    np.testing.assert_allclose(opened[1].dot(rows, q), before[1], rtol=1e-6, atol=1e-5)

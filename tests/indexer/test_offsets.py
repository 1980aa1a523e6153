import numpy as np
import pytest

from indexer.offsets import OFFSET_FILES, CharOffsets, pack_offsets


def _doc_offsets(rng, n_docs=5, max_tokens=300, max_len=12):
    """Offsets of consecutive documents' tokens (each document restarts at 0) and block starts every <=128 tokens."""
    offsets, block_starts, pos = [], [], 0
    for _ in range(n_docs):
        n = int(rng.integers(1, max_tokens))
        lens = rng.integers(1, max_len, n)
        gaps = rng.integers(0, 3, n)
        starts = np.cumsum(gaps + np.concatenate([[0], lens[:-1]]))
        offsets.append(np.stack([starts, starts + lens], axis=1))
        block_starts.extend(range(pos, pos + n, 128))
        pos += n
    return np.concatenate(offsets), np.array(block_starts)


def _roundtrip(tmp_path, offsets, block_starts):
    for name, array in pack_offsets(offsets, block_starts).items():
        np.save(tmp_path / name, array, allow_pickle=False)
    return CharOffsets(tmp_path, block_starts)


def test_roundtrip_and_indexing_forms(tmp_path):
    offsets, block_starts = _doc_offsets(np.random.default_rng(0))
    co = _roundtrip(tmp_path, offsets, block_starts)
    assert co.shape == offsets.shape and len(co) == len(offsets)
    np.testing.assert_array_equal(co[:], offsets)
    np.testing.assert_array_equal(co[10:200], offsets[10:200])
    pos = np.array([0, 5, len(offsets) - 1, 127, 128, 129])
    np.testing.assert_array_equal(co[pos], offsets[pos])
    np.testing.assert_array_equal(co[pos, 0], offsets[pos, 0])
    np.testing.assert_array_equal(co[pos, 1], offsets[pos, 1])
    assert co[3].tolist() == offsets[3].tolist()
    assert int(co[7, 1]) == int(offsets[7, 1])
    assert co[-1].tolist() == offsets[-1].tolist()


def test_ordinary_text_takes_three_bytes_per_token():
    offsets, block_starts = _doc_offsets(np.random.default_rng(1), n_docs=20)
    packed = pack_offsets(offsets, block_starts)
    assert set(packed) == set(OFFSET_FILES)
    assert packed["char_starts.npy"].dtype == np.uint16 and packed["char_lengths.npy"].dtype == np.uint8


def test_unusual_values_widen_the_type_instead_of_failing(tmp_path):
    # one 70,000-character token (an unsplittable run of text) in a long document
    offsets = np.array([[0, 5], [6, 70006], [70007, 70010], [200000, 200004]], dtype=np.int64)
    block_starts = np.array([0, 3])
    packed = pack_offsets(offsets, block_starts)
    assert packed["char_lengths.npy"].dtype == np.uint32 and packed["char_starts.npy"].dtype == np.uint32
    np.testing.assert_array_equal(_roundtrip(tmp_path, offsets, block_starts)[:], offsets)


def test_empty_blocks_and_empty_shard(tmp_path):
    offsets = np.array([[0, 3], [4, 8], [0, 2]], dtype=np.int64)
    block_starts = np.array([0, 2, 2])  # the middle block is empty
    np.testing.assert_array_equal(_roundtrip(tmp_path, offsets, block_starts)[:], offsets)
    packed = pack_offsets(np.empty((0, 2), np.int64), np.empty(0, np.int64))
    assert all(a.size == 0 for a in packed.values())


def test_out_of_range_and_bad_input(tmp_path):
    offsets, block_starts = _doc_offsets(np.random.default_rng(2), n_docs=2)
    co = _roundtrip(tmp_path, offsets, block_starts)
    with pytest.raises(IndexError):
        co[np.array([len(offsets)])]
    with pytest.raises(ValueError):
        pack_offsets(offsets, block_starts[1:])  # does not start at token 0
    with pytest.raises(ValueError):
        pack_offsets(np.array([[5, 3]]), np.array([0]))  # end before start

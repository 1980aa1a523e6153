"""indexer.checksums: every shard carries block checksums of its files, and a read that meets bytes changed in place
(size and mtime kept) raises IndexDamaged naming the file, whatever was read before."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from common.errors import IndexDamaged
from indexer import checksums
from indexer.checksums import BLOCK_BYTES, SUMS_FILE, CheckedArray, file_sums, shard_sums
from indexer.manifest import MANIFEST_NAME, Manifest
from indexer.phrase_index import PhraseIndex


@pytest.fixture()
def mapped(monkeypatch):
    """Every checked file memory-mapped and checked on read (the tiny index's files are small enough to be read
    whole and checked when a shard opens otherwise)."""
    monkeypatch.setattr(checksums, "IN_MEMORY_BELOW", 0)


@pytest.fixture()
def index_copy(tmp_path, tiny_index) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(tiny_index, dst)
    return dst


def xor_in_place(path: Path, at: int, count: int = 16) -> None:
    """Flip `count` bytes from `at`, keeping the file's size and modification time."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        data = f.read(count)
        f.seek(at)
        f.write(bytes(b ^ 0x5A for b in data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_every_shard_has_the_block_sums_of_its_files(tiny_index):
    manifest = Manifest.load(tiny_index)
    for info in manifest.shards:
        sums = shard_sums(tiny_index / info.name, info.files)
        assert set(sums) == {name for name in checksums.CHECKED if name in info.files} and "docs.arrow" in sums
        for name, found in sums.items():
            assert np.array_equal(found, file_sums(tiny_index / info.name / name)), name


def test_a_checked_array_indexes_like_the_array(tiny_index, mapped):
    index = PhraseIndex(tiny_index)
    try:
        data = index.shards[0].vectors.data
        assert isinstance(data, CheckedArray)
        n = len(data)
        keys = [3, -1, slice(2, 7), slice(None), slice(None, None, -2), Ellipsis, (Ellipsis, 0), np.array([5, 1, 5])]
        keys += [np.arange(n) % 2 == 0, (np.array([1, 2]), 4)]
        keys.append(np.array([[0, 1], [n - 1, 2]]))
        for key in keys:
            assert np.array_equal(data[key], data.raw[key]), key
        assert np.array_equal(np.asarray(data), data.raw)
        with pytest.raises(IndexError):
            data[n]
    finally:
        index.close()


@pytest.mark.parametrize("fname", ["vectors.npy", "scales.npy", "token_ids.npy", "flags.npy", "char_starts.npy"])
def test_bytes_changed_after_open_are_refused_when_read(index_copy, mapped, fname):
    index = PhraseIndex(index_copy)
    try:
        shard = index.shards[1]
        arrays = {
            "vectors.npy": shard.vectors.data,
            "scales.npy": shard.vectors.scales,
            "token_ids.npy": shard.token_ids,
            "flags.npy": shard.flags,
            "char_starts.npy": shard.offsets.starts,
        }
        array = arrays[fname]
        last = len(array) - 1
        before = np.array(array[[0, last]])  # read and found right before the damage
        xor_in_place(shard.dir / fname, array.offset + last * array.row_bytes, array.row_bytes)
        with pytest.raises(IndexDamaged, match=f"{shard.dir / fname} has bytes .* do not match their checksum"):
            array[[last]]
        with pytest.raises(IndexDamaged, match=fname):
            shard.warm()  # reading every page finds it too
        if (array.offset + last * array.row_bytes) // BLOCK_BYTES > array.offset // BLOCK_BYTES:
            assert np.array_equal(array[[0]], before[:1])  # other blocks still read
    finally:
        index.close()


def test_document_text_changed_after_open_is_refused_when_read(index_copy, mapped):
    index = PhraseIndex(index_copy)
    try:
        shard = index.shards[0]
        text = shard.doc_text(0)
        raw = (shard.dir / "docs.arrow").read_bytes()
        at = raw.index(text.encode("utf-8"))
        xor_in_place(shard.dir / "docs.arrow", at, 4)
        with pytest.raises(IndexDamaged, match="docs.arrow has bytes"):
            shard.doc_text(0)
        block = int(np.flatnonzero(shard.blocks[:, 0] == 0)[0])
        with pytest.raises(IndexDamaged, match="docs.arrow"):
            shard.text.ascii_bytes(np.array([block]), np.array([int(shard.offsets.block_chars[block])]))
    finally:
        index.close()


def test_a_damaged_sums_file_is_refused_when_the_shard_opens(index_copy):
    path = index_copy / "shard_00000" / SUMS_FILE
    xor_in_place(path, path.stat().st_size - 8, 8)
    with pytest.raises(IndexDamaged, match=f"{path} does not match the manifest's sha256"):
        PhraseIndex(index_copy)


def as_built_before_sums(root: Path) -> None:
    """`root` as an index built before the checksums: no sums file, no manifest checksum."""
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    del manifest["checksum"]  # an older manifest has none
    for shard in manifest["shards"]:
        del shard["files"][SUMS_FILE]
        (root / shard["name"] / SUMS_FILE).unlink()
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))


def test_a_shard_written_without_sums_opens_unchecked(index_copy, mapped):
    """An index built before the checksums: served as before (its sha256 checks still apply)."""
    as_built_before_sums(index_copy)
    index = PhraseIndex(index_copy, verify=True)
    try:
        shard = index.shards[0]
        assert not shard.checked and not isinstance(shard.vectors.data, CheckedArray)
        assert shard.doc_text(0) and shard.vectors[[0]].shape[0] == 1
    finally:
        index.close()


def test_a_block_trusted_once_is_checked_again_after_its_file_is_written(index_copy, mapped):
    """Found right, then trusted: until the kernel reports a write to its file (indexer.write_events)."""
    index = PhraseIndex(index_copy)
    try:
        shard = index.shards[0]
        shard.warm()  # every block checked and trusted
        data = shard.vectors.data
        assert data.check.trusting and data.check.ok.all()
        xor_in_place(shard.dir / "vectors.npy", data.offset, 8)
        with pytest.raises(IndexDamaged, match="vectors.npy has bytes 0-"):
            shard.vectors[[0]]
    finally:
        index.close()


def test_without_write_events_every_read_is_checked(index_copy, mapped, monkeypatch):
    from indexer import write_events

    silent = write_events.WriteEvents()
    silent._inotify = None  # as on a system without inotify
    monkeypatch.setattr(checksums, "write_events", lambda: silent)
    index = PhraseIndex(index_copy)
    try:
        data = index.shards[0].vectors.data
        data[[0]]
        assert not data.check.trusting and not data.check.ok.any()
        path = index.shards[0].dir / "vectors.npy"
        with open(path, "r+b") as f:  # even a write no one would report
            f.seek(data.offset)
            f.write(bytes(8))
        with pytest.raises(IndexDamaged, match="vectors.npy"):
            data[[0]]
    finally:
        index.close()


@pytest.mark.parametrize("byte", [b"\xc3", b"\x80"])  # a lead byte before an ASCII one; a continuation byte first
def test_text_that_is_no_longer_utf8_in_a_shard_without_sums_is_named_not_a_500(index_copy, mapped, byte):
    as_built_before_sums(index_copy)
    index = PhraseIndex(index_copy)
    try:
        shard = index.shards[0]
        shard.text.load()
        block = 0
        at = shard.columns["text"]._data_at + int(shard.text.block_bytes[block])  # the block's first byte in the file
        with open(shard.dir / "docs.arrow", "r+b") as f:
            f.seek(at)
            f.write(byte)  # not UTF-8 any more
        with pytest.raises(IndexDamaged, match="docs.arrow holds text that is not UTF-8"):
            shard.text.blocks_codes(np.array([block]))
    finally:
        index.close()


def test_a_mapped_file_holds_no_descriptor(index_copy, mapped):
    """Every checked file mapped (`mapped`: none read into memory) and docs.arrow hold no descriptor once their
    shard is open (indexer.checksums.map_file): a server with many (delta) shards keeps none per file."""
    index = PhraseIndex(index_copy)
    try:
        shard = index.shards[0]
        assert isinstance(shard.vectors.data, CheckedArray) and shard.columns["text"].check is not None
        inside = f"{index_copy.resolve()}{os.sep}shard_"
        held = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                held.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the listing's own descriptor, closed since
                pass
        assert not [path for path in held if path.startswith(inside)]
        assert shard.vectors[np.arange(len(shard))].shape[0] == len(shard) and shard.doc_text(0)  # read, checked
    finally:
        index.close()

"""Tests for common.files: atomic file and directory writes, checksums."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import common.files as files_mod
from common.files import atomic_path, file_record, hash_file, sha256_file, write_bytes_atomic, write_json_atomic


def test_file_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    write_json_atomic(path, {"x": 1})
    write_json_atomic(path, {"x": 2})
    assert json.loads(path.read_text()) == {"x": 2}
    with atomic_path(tmp_path / "v.npy") as tmp, open(tmp, "wb") as f:
        np.save(f, np.arange(5), allow_pickle=False)
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), np.arange(5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "v.npy"]
    rec = file_record(path)
    assert rec == {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_file_hashes_cover_every_byte_and_extend_a_running_hash(tmp_path):
    path = tmp_path / "big.bin"
    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 17)  # several of file_digest's reads
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    running = hashlib.sha256(b"name")
    assert hash_file(path, into=running) is running
    assert running.hexdigest() == hashlib.sha256(b"name" + data).hexdigest()


def test_failed_write_keeps_the_old_content(tmp_path):
    path = tmp_path / "model.bin"
    write_bytes_atomic(path, b"old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_directory_replaces_directory_and_fsyncs(tmp_path, monkeypatch):
    synced = []
    real = files_mod.os.fsync
    monkeypatch.setattr(files_mod.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    out = tmp_path / "model"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "weights").write_bytes(b"w")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "x").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["sub", "weights"]
    assert (out / "sub" / "x").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert len(synced) >= 5  # two files, two directories, the parent


def _open_fds_to(path) -> int:
    import os

    return sum(
        1 for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve())
    )


def _mapped(path) -> bool:
    import os

    real = os.path.realpath(path)
    return any(line.rstrip().endswith(real) for line in open("/proc/self/maps", encoding="utf-8"))


def test_small_arrays_are_read_and_large_ones_mapped_holding_no_descriptor(tmp_path):
    small, large = tmp_path / "small.npy", tmp_path / "large.npy"
    np.save(small, np.arange(1000, dtype=np.int32))
    np.save(large, np.arange(files_mod.IN_MEMORY_BELOW // 4 + 10, dtype=np.int32))
    a, b = files_mod.load_mapped(small), files_mod.load_mapped(large)
    assert a.base is None or not isinstance(a.base, np.memmap)
    assert not _mapped(small) and _mapped(large)  # the large one's bytes stay in the page cache, not anonymous
    assert _open_fds_to(small) == 0 and _open_fds_to(large) == 0  # a mapping keeps no descriptor (map_file)
    assert int(a[999]) == 999 and int(b[-1]) == b.size - 1 and not a.flags.writeable and not b.flags.writeable

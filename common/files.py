"""Atomic writes and checksums: the one way this project puts a file or a directory on disk.

A write goes to a temporary name in the same directory, is fsynced, renamed over the final name,
and the directory is fsynced, so a reader (or a resumed job) sees the old content or the new one,
never a torn file, and a crash never leaves a moment with neither.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

TMP_SUFFIX = ".tmp"


def tmp_path(path: Path) -> Path:
    """The temporary name used while `path` is written."""
    return path.with_name(path.name + TMP_SUFFIX)


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            fsync_dir(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path` (a file or a directory: the caller decides); on success
    fsync it, rename it over `path` and fsync the parent; on failure remove it and leave `path` alone.

    A directory replaces an existing directory in two renames (old -> `.old`, new -> final), so the
    final name is missing only between them and `.old` is removed afterwards."""
    path = Path(path)
    tmp = tmp_path(path)
    _remove(tmp)
    try:
        yield tmp
        _fsync_tree(tmp)
        if tmp.is_dir() and path.exists():
            old = path.with_name(path.name + ".old")
            _remove(old)
            os.replace(path, old)
            os.replace(tmp, path)
            _remove(old)
        else:
            os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        _remove(tmp)
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json_atomic(path: Path, data: Any) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode("utf-8"))


# .npy files smaller than this are read into memory (load_mapped, indexer.checksums.load_checked), larger ones
# mapped: a shard's per-token arrays are mapped whatever its size (a 64k-token shard's uint8 flags are 64 KiB), so
# that the server's anonymous memory does not grow with the index; a small update's arrays cost no mapping
IN_MEMORY_BELOW = 64 << 10


def map_file(path: Path) -> np.ndarray:
    """A file's bytes memory-mapped read-only and shared (a write to the file shows through it, as through np.memmap),
    as a read-only uint8 array that holds no file descriptor: Arrow's mapping outlives its file, closed here, while
    Python's mmap (np.memmap's) keeps a duplicate descriptor as long as the mapping lives."""
    import pyarrow as pa  # here: common/ is imported by light processes that never map a file

    with pa.memory_map(str(path), "r") as source:
        mapped = source.read_buffer(source.size())
    return np.frombuffer(mapped, dtype=np.uint8)


def npy_layout(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """A .npy file's shape, Fortran order, dtype and the byte offset of its data, from its header (ValueError for a
    format version other than 1.0 and 2.0)."""
    from numpy.lib import format as npy_format

    with open(path, "rb") as f:
        version = npy_format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unsupported .npy format version {version}")
        read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        return shape, fortran, dtype, f.tell()


def view_npy(data: np.ndarray, path: Path) -> tuple[np.ndarray, int]:
    """The array of the .npy file at `path` over `data`, the file's bytes (mapped: `map_file`), and the byte offset
    of its data."""
    shape, fortran, dtype, offset = npy_layout(path)
    count = int(np.prod(shape, dtype=np.int64))
    array = data[offset : offset + count * dtype.itemsize].view(dtype).reshape(shape, order="F" if fortran else "C")
    return array, offset


def load_mapped(path: Path) -> np.ndarray:
    """A .npy file memory-mapped read-only (`map_file`: no descriptor held), as a plain ndarray over the mapping (it
    keeps the mapping alive): an np.memmap adds Python overhead to every indexing, and a fill indexes the shards'
    arrays about a hundred times. A file under IN_MEMORY_BELOW bytes is read instead."""
    if path.stat().st_size < IN_MEMORY_BELOW:
        array = np.load(path)
        array.flags.writeable = False  # read-only like a mapping
        return array
    return view_npy(map_file(path), path)[0]


def hash_file(path: Path, into: hashlib._Hash | None = None) -> hashlib._Hash:
    """`into` (a new sha256 when None) updated with every byte of `path`, read in chunks (hashlib.file_digest)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256" if into is None else lambda: into)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    return hash_file(path).hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}

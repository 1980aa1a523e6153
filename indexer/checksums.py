"""Per-block checksums of a shard's stored files, verified when a fill reads them (what ZFS, RocksDB's block
checksums and Parquet's page CRCs do), so a byte changed in place, the file keeping its size and mtime, is never
served: the read that meets it raises IndexDamaged naming the file and the block.

A shard's `checksums.npy` holds the xxh3-64 of every BLOCK_BYTES bytes of each file of CHECKED (those the shard has,
in that order; a file's last block may be short), written with the shard (indexer.shard_writer) and listed in its
manifest entry like its other files (its own sha256 is checked when the shard is opened: it is small, 1/512 of the
files it covers). A shard written before these checksums has no such file: its reads are not checked (the
sha256 of every file at start, `check_hashes`, still is).

What is checked per read: every block under the bytes read that is not trusted. A block found right is trusted
until the kernel reports a write to its file (indexer.write_events, whose queued events are read before a read
trusts anything): a block can be changed on disk the second after its check, and the page cache serves the
change, so trusting it longer would serve the change. Warming (Shard.warm) checks and trusts every block; a file
whose blocks are all trusted costs a read one ioctl. Without write events nothing is trusted: every read hashes
its blocks. `CheckedArray` wraps a memory-mapped array and checks the rows each indexing reads; `FileCheck.ranges`
checks byte ranges (docs.arrow's text, see indexer.doc_text). Files small enough to be read into memory when the
shard opens are checked once, then. A mapped file holds no descriptor (`map_file`): a server with many delta shards
(live updates) would run out of them.
Not covered: index.faiss, read inside FAISS (a damaged one changes which tokens a search finds, not the scores
or text served: those come from the checked vectors and docs.arrow), and BM25's SQLite files (indexer.integrity).
The cost per fill is in docs/BENCHMARKS.md ("Checksums on read").
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import numpy as np
import xxhash

from common.files import IN_MEMORY_BELOW, load_mapped, map_file, sha256_file, view_npy
from indexer.integrity import damaged
from indexer.write_events import write_events

BLOCK_BYTES = 4096
SUMS_FILE = "checksums.npy"
# the files a shard's checksums cover, in the order of their sums in SUMS_FILE
CHECKED = (
    "vectors.npy",
    "scales.npy",
    "token_ids.npy",
    "char_starts.npy",
    "char_lengths.npy",
    "block_chars.npy",
    "flags.npy",
    "blocks.npy",
    "docs.arrow",
    "code_slots.npy",
)
_digest = xxhash.xxh3_64_intdigest


def blocks_of(size: int) -> int:
    return -(-size // BLOCK_BYTES)


def sums_of(data) -> np.ndarray:
    """uint64 [blocks]: the xxh3-64 of each BLOCK_BYTES of `data` (bytes or a uint8 array)."""
    view = memoryview(data).cast("B")
    return np.fromiter(
        (_digest(view[a : a + BLOCK_BYTES]) for a in range(0, len(view), BLOCK_BYTES)),
        dtype=np.uint64,
        count=blocks_of(len(view)),
    )


def file_sums(path: Path, chunk: int = 1 << 24) -> np.ndarray:
    """The block sums of a file, read a chunk (a multiple of BLOCK_BYTES) at a time."""
    out = []
    with open(path, "rb") as f:
        while data := f.read(chunk):
            out.append(sums_of(data))
    return np.concatenate(out) if out else np.empty(0, dtype=np.uint64)


def write_sums(directory: Path, names: list[str]) -> str:
    """Write `directory`/SUMS_FILE for the files of CHECKED among `names`; returns its name."""
    sums = [file_sums(directory / name) for name in CHECKED if name in names]
    np.save(directory / SUMS_FILE, np.concatenate(sums) if sums else np.empty(0, np.uint64), allow_pickle=False)
    return SUMS_FILE


def split_sums(path: Path, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Each checked file's sums out of a shard's SUMS_FILE (mapped, as common.files.load_mapped maps arrays: 8 B
    per 4 KiB of the shard's files, ~0.9 B a token, is page cache, not the server's memory), given every file's
    byte size."""
    sums = load_mapped(path)
    names = [name for name in CHECKED if name in sizes]
    counts = [blocks_of(sizes[name]) for name in names]
    if sums.dtype != np.uint64 or sums.shape != (sum(counts),):
        raise damaged(path, f"holds {sums.dtype} {sums.shape}, expected uint64 ({sum(counts)},)")
    return dict(zip(names, np.split(sums, np.cumsum(counts)[:-1])))


class FileCheck:
    """One file's bytes (memory-mapped, or `data` already read) and block sums: `ranges` checks byte ranges.

    A block found right is trusted (`ok`) until the file is written again (indexer.write_events: the events are
    read before each read that trusts a block); without those events nothing is trusted."""

    def __init__(self, path: Path, sums: np.ndarray, data: np.ndarray | None = None) -> None:
        self.path = path
        self.sums = sums
        self.data = map_file(path) if data is None else data
        if blocks_of(self.data.size) != sums.size:
            raise damaged(path, f"has {self.data.size} bytes, its checksums cover {sums.size} blocks")
        self.ok = np.zeros(sums.size, dtype=bool)
        self.trusted = 0  # blocks in `ok`: all of them (after warming), and a read needs no block numbers at all
        self._lock = threading.Lock()
        self.epoch = 0  # bumped by `forget`: a check that began before it marks nothing
        self.events = write_events()
        self.trusting = data is None and self.events.watch(self)  # bytes read into memory never change

    def forget(self) -> None:
        with self._lock:
            self.epoch += 1
            self.ok[:] = False
            self.trusted = 0

    def all_trusted(self) -> bool:
        """Whether every block is trusted, once the write events queued so far are read (a read then checks
        nothing: the common case of a warmed index, at the cost of one ioctl)."""
        if not self.trusting:
            return False
        self.events.poll()
        return self.trusted == self.sums.size

    def blocks(self, blocks: np.ndarray) -> None:
        """Check the blocks (block numbers) not trusted yet: hash and compare; IndexDamaged naming the first
        that differs."""
        if self.trusting:
            self.events.poll()
        blocks = blocks[~self.ok[blocks]]
        if not blocks.size:
            return
        blocks = np.unique(blocks)
        epoch, data = self.epoch, self.data
        found = np.fromiter(
            # an ndarray is a buffer; numpy's stubs declare __buffer__ from Python 3.12 only
            (_digest(data[b * BLOCK_BYTES : (b + 1) * BLOCK_BYTES]) for b in blocks.tolist()),  # type: ignore[arg-type]
            dtype=np.uint64,
            count=blocks.size,
        )
        bad = np.flatnonzero(found != self.sums[blocks])
        if bad.size:
            b = int(blocks[bad[0]])
            raise damaged(
                self.path,
                f"has bytes {b * BLOCK_BYTES}-{min((b + 1) * BLOCK_BYTES, data.size) - 1} that do not match their "
                f"checksum (block {b}; changed or corrupted since it was written)",
            )
        with self._lock:  # another thread may have checked some of them meanwhile, or forgotten them all
            if self.trusting and epoch == self.epoch:
                new = blocks[~self.ok[blocks]]
                self.ok[new] = True
                self.trusted += new.size

    def ranges(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Check every block under the byte ranges [starts, ends) (empty ranges read nothing)."""
        if self.all_trusted():
            return
        starts, ends = np.asarray(starts, np.int64).ravel(), np.asarray(ends, np.int64).ravel()
        keep = ends > starts
        first, last = starts[keep] // BLOCK_BYTES, (ends[keep] - 1) // BLOCK_BYTES
        if not first.size:
            return
        span = int((last - first).max())
        if span <= 1:  # each range within one block or across one boundary (a row of at most BLOCK_BYTES)
            self.blocks(first if span == 0 else np.concatenate([first, last]))
            return
        counts = last - first + 1
        steps = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        self.blocks(np.repeat(first, counts) + steps)

    def everything(self) -> None:
        self.blocks(np.arange(self.sums.size))


class CheckedArray:
    """A memory-mapped .npy array whose indexing checks the blocks under the rows it reads (see the module doc).
    Indexes like the array (an int, a slice, an int or bool array, a tuple led by one of those), returning plain
    arrays; `np.asarray(checked)` checks the whole file; `raw` is the array unchecked (for touching pages)."""

    def __init__(self, raw: np.ndarray, check: FileCheck, offset: int) -> None:
        self.raw = raw
        self.check = check
        self.offset = offset  # where the data starts in the file (after the .npy header)
        self.row_bytes = raw.itemsize * int(np.prod(raw.shape[1:], dtype=np.int64))

    shape = property(lambda self: self.raw.shape)
    dtype = property(lambda self: self.raw.dtype)
    ndim = property(lambda self: self.raw.ndim)
    size = property(lambda self: self.raw.size)

    def __len__(self) -> int:
        return self.raw.shape[0]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        self.check.everything()
        if dtype is not None:
            return self.raw.astype(dtype)
        return self.raw.copy() if copy else self.raw

    def __getitem__(self, key):
        out = self.raw[key]  # first: a bad key raises as the array's own indexing does
        if self.check.all_trusted():
            return out
        rows = key[0] if isinstance(key, tuple) else key
        n = self.raw.shape[0]
        if rows is Ellipsis:
            rows = slice(None)
        if isinstance(rows, slice):
            picked = range(n)[rows]  # O(1): the rows between the first and the last picked, whatever the step
            lo, hi = (min(picked[0], picked[-1]), max(picked[0], picked[-1]) + 1) if len(picked) else (0, 0)
            starts, ends = np.array([lo]), np.array([hi])
        elif isinstance(rows, (int, np.integer)):
            r = int(rows) % n
            starts, ends = np.array([r]), np.array([r + 1])
        else:
            r = np.asarray(rows)
            r = np.flatnonzero(r) if r.dtype == bool else r.astype(np.int64, copy=False) % max(n, 1)
            starts, ends = r, r + 1
        self.check.ranges(self.offset + starts * self.row_bytes, self.offset + ends * self.row_bytes)
        return out


def shard_sums(directory: Path, files: dict) -> dict[str, np.ndarray]:
    """Each checked file's block sums out of the shard's SUMS_FILE, after its sha256 matched the manifest's
    record (`files`: the shard's file records); {} for a shard written without checksums."""
    record = files.get(SUMS_FILE)
    if record is None:
        return {}
    path = directory / SUMS_FILE
    if sha256_file(path) != record.sha256:
        raise damaged(path, "does not match the manifest's sha256 (corrupted)")
    return split_sums(path, {name: rec.bytes for name, rec in files.items()})


def load_checked(path: Path, sums: np.ndarray | None) -> np.ndarray | CheckedArray:
    """A shard's .npy file: without sums, as common.files.load_mapped reads it; with them, a small file read,
    checked whole and kept in memory, a larger one memory-mapped as a CheckedArray."""
    if sums is None:
        return load_mapped(path)
    if path.stat().st_size < IN_MEMORY_BELOW:
        data = np.frombuffer(path.read_bytes(), dtype=np.uint8)
        FileCheck(path, sums, data).everything()
        array = np.load(io.BytesIO(data.tobytes()), allow_pickle=False)
        array.flags.writeable = False
        return array
    check = FileCheck(path, sums)
    raw, offset = view_npy(check.data, path)  # the header, checked when the shard opened (integrity.check_npy)
    return CheckedArray(raw, check, offset)

"""One writer at a time: `writer_lock` holds an exclusive lock on `<index>/writer.lock` (flock) for the length
of a build, add, delete or compact; a second writer, in any process or thread, gets an AppError (kind conflict,
HTTP 409) naming the holder. Readers take no lock: a writer never changes a file a reader may have open, it adds
files and then replaces the manifest (indexer.update). The lock is the kernel's, so a killed writer leaves
no stale lock behind (the file stays, unlocked)."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.errors import AppError
from indexer.manifest import MANIFEST_NAME

LOCK_NAME = "writer.lock"


def require_index(root: Path, option: str = "--index") -> None:
    """A validation AppError naming `root` unless it is a finished index: a change (add, delete, compact) must not
    create a lock file in, or write to, a directory that is not one."""
    root = Path(root)
    if not root.is_dir():
        raise AppError(
            f"{root} ({option}) does not exist or is not a directory: pass the directory `indexer build` wrote",
            kind="validation",
        )
    if not (root / MANIFEST_NAME).is_file():
        raise AppError(
            f"{root} ({option}) is not a finished index (no {MANIFEST_NAME}): pass the directory `indexer build` wrote",
            kind="validation",
        )


@contextmanager
def writer_lock(root: Path, what: str) -> Iterator[None]:
    """Hold the index's writer lock while `what` (e.g. "indexer add") runs, or raise a conflict AppError."""
    path = Path(root) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another process"
            raise AppError(
                f"index {Path(root).name} is being changed by another writer ({holder}); wait for it "
                "to finish and retry",
                kind="conflict",
            ) from None
        since = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{what}, pid {os.getpid()}, since {since}".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

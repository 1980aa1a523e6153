"""Writes to the served index files as the kernel reports them (Linux inotify, through inotify_simple), so that a
block checked once (indexer.checksums) is trusted only until its file is written again: a write or a change of
attributes (`touch`, restoring an mtime) to a checked file forgets every block of it that was found right, and
the next read checks the bytes again. The events are read (one ioctl when there are none) before each read that
would trust a checked block, so a write that returned before a fill began is seen by that fill.

What inotify cannot report: a write through another process's shared memory map (no event; its mtime changes,
which the service's watch sees: IndexFiles.changed forgets the file's blocks too) and bytes rotting under the
page cache (the sha256 checks at start and reload). Where inotify is missing (not Linux, no instance left: see
/proc/sys/fs/inotify/max_user_instances), nothing is trusted: every read checks its blocks each time.
"""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

try:  # Linux only
    from inotify_simple import INotify
    from inotify_simple import flags as inotify_flags

    _MASK = inotify_flags.MODIFY | inotify_flags.ATTRIB | inotify_flags.CLOSE_WRITE
except (ImportError, OSError):  # pragma: no cover - other systems
    INotify = None


class Forgetful(Protocol):
    path: Path

    def forget(self) -> None: ...


class WriteEvents:
    """The process's one inotify instance over the directories of the checked files (`watch`), and `poll`, which
    makes every registered file that was written since forget its checked blocks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: dict[int, Path] = {}  # watch descriptor -> directory
        self._watched: dict[Path, int] = {}
        self._files: dict[Path, weakref.WeakSet] = {}
        self._inotify = None
        if INotify is not None:
            try:
                self._inotify = INotify(nonblocking=True)
            except OSError as exc:
                logger.warning("no inotify instance (%s): every checksummed read is checked each time", exc)

    @property
    def available(self) -> bool:
        return self._inotify is not None

    def watch(self, check: Forgetful) -> bool:
        """Tell `check` when its file is written (False: cannot; the caller must trust nothing)."""
        if self._inotify is None:
            return False
        real = check.path.resolve()  # a linked file is written where it lies: its events come from there
        directory = real.parent
        with self._lock:
            if directory not in self._watched:
                try:
                    wd = self._inotify.add_watch(directory, _MASK)
                except OSError as exc:
                    logger.warning("cannot watch %s (%s): its reads are checked each time", directory, exc)
                    return False
                self._watched[directory], self._dirs[wd] = wd, directory
            self._files.setdefault(real, weakref.WeakSet()).add(check)
        return True

    def poll(self) -> None:
        """Read the events queued so far (none: one ioctl) and make the written files forget their blocks."""
        if self._inotify is None:
            return
        with self._lock:
            events = self._inotify.read(timeout=0)
            for event in events:
                directory = self._dirs.get(event.wd)
                if event.mask & inotify_flags.IGNORED and directory is not None:  # the directory is gone
                    del self._dirs[event.wd], self._watched[directory]
                    continue
                if event.wd < 0 or directory is None:  # the queue overflowed: any file may have been written
                    targets = [c for checks in self._files.values() for c in checks]
                else:
                    targets = list(self._files.get(directory / event.name, ()))
                for check in targets:
                    check.forget()

    def forget(self, path: Path) -> None:
        """Make the checks of `path` forget their blocks (a change found another way, IndexFiles.changed)."""
        with self._lock:
            targets = list(self._files.get(path.resolve(), ()))
        for check in targets:
            check.forget()


_events: WriteEvents | None = None
_events_lock = threading.Lock()


def write_events() -> WriteEvents:
    """The process's WriteEvents, made on first use."""
    global _events
    with _events_lock:
        if _events is None:
            _events = WriteEvents()
        return _events

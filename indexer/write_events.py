"""Writes to the served index files as the kernel reports them (Linux inotify, through inotify_simple), so that a
block checked once (indexer.checksums) is trusted only until its file is written again: a write or a change of
attributes (`touch`, restoring an mtime, a name linked or removed) to a checked file, through any of its names,
forgets every block of it that was found right, and the next read checks the bytes again. The events are read (one
ioctl when there are none) before each read that would trust a checked block, so a write that returned before a
fill began is seen by that fill.

What inotify cannot report: a write through another process's shared memory map (no event; its mtime changes,
which the service's watch sees: IndexFiles.changed forgets the file's blocks too) and bytes rotting under the
page cache (the sha256 checks at start and reload). Where inotify is missing (not Linux, no instance left: see
/proc/sys/fs/inotify/max_user_instances) or a file cannot be watched (no watch left: max_user_watches, one per
checked file), nothing of it is trusted: every read checks its blocks each time.
"""

from __future__ import annotations

import functools
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
    """One inotify instance over the inodes of the checked files (`watch`), and `poll`, which makes every registered
    file that was written since forget its checked blocks. The watch is on each file itself, not its directory: a
    file's inode reports a write through any of its names (a hard link of `indexer merge`, another directory's),
    where a directory reports only writes through the names it holds."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # reentrant: a check released by the garbage collector inside a locked region
        self._paths: dict[int, set[Path]] = {}  # watch descriptor -> the names of its inode registered here
        self._files: dict[Path, weakref.WeakSet] = {}  # name -> the checks of the file
        self._held: dict[Path, tuple[int, int]] = {}  # name -> (its watch descriptor, checks registered and alive)
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
        """Tell `check` when its file is written, through whatever name (False: cannot, e.g. no watch left, see
        /proc/sys/fs/inotify/max_user_watches; the caller must trust nothing)."""
        if self._inotify is None:
            return False
        real = check.path.resolve()
        with self._lock:
            try:  # the same inode again (another name, another generation) gives the same descriptor
                wd = self._inotify.add_watch(real, _MASK)
            except OSError as exc:
                logger.warning("cannot watch %s (%s): its reads are checked each time", real, exc)
                return False
            self._paths.setdefault(wd, set()).add(real)
            self._files.setdefault(real, weakref.WeakSet()).add(check)
            self._held[real] = (wd, self._held.get(real, (wd, 0))[1] + 1)
        weakref.finalize(check, self._release, real)  # the watch ends with the last check of the file
        return True

    def _release(self, real: Path) -> None:
        """A check of `real` is gone: with the last one, the file is no longer watched (a server reloaded across
        many builds would otherwise keep a watch per file it ever served, up to max_user_watches)."""
        with self._lock:
            wd, alive = self._held.get(real, (-1, 0))
            if alive > 1:
                self._held[real] = (wd, alive - 1)
                return
            self._held.pop(real, None)
            self._files.pop(real, None)
            names = self._paths.get(wd, set())
            names.discard(real)
            if names or wd not in self._paths:
                return
            del self._paths[wd]
            try:
                self._inotify.rm_watch(wd)  # type: ignore[union-attr]  # set: a watch was added
            except OSError:  # already gone with its file (IN_IGNORED)
                pass

    def poll(self) -> None:
        """Read the events queued so far (none: one ioctl) and make the written files forget their blocks."""
        if self._inotify is None:
            return
        with self._lock:  # held until the checks forgot: a poll meanwhile waits, and then trusts nothing written
            targets, overflowed = [], False
            for event in self._inotify.read(timeout=0):
                if event.wd < 0:  # the queue overflowed: any file may have been written
                    overflowed = True
                    continue
                paths = self._paths.get(event.wd, ())
                if event.mask & inotify_flags.IGNORED:  # the inode is gone (its last name removed): no more events
                    paths = self._paths.pop(event.wd, ())
                targets += [c for path in paths for c in self._files.get(path, ())]
            if overflowed:
                targets = [c for checks in self._files.values() for c in checks]
            for check in targets:
                check.forget()

    def forget(self, path: Path) -> None:
        """Make the checks of `path` forget their blocks (a change found another way, IndexFiles.changed)."""
        with self._lock:
            targets = list(self._files.get(path.resolve(), ()))
        for check in targets:
            check.forget()


@functools.cache
def write_events() -> WriteEvents:
    """The process's WriteEvents (one inotify instance, whose watches every opened index shares), made on first
    use."""
    return WriteEvents()

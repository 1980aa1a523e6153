"""The served index's files, checked: every file's sha256 before an index is first served (`check_before_ready`,
for an index of at most Settings.check_before_ready_max_gb), its pages mapped (when they fit in half the memory)
and its hashes checked in the background once it is served (`warm`), and every Settings.recheck_seconds the files
written since their check hashed again (`recheck`). A file that differs from the manifest turns the service not
ready, naming the file (the state's `unserve`)."""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from common.errors import AppError
from fill.engine import FillEngine
from service.config import Settings
from service.metrics import Metrics
from service.serving import Serving

logger = logging.getLogger(__name__)


class Watched(Protocol):
    """What the watch needs of the service's state (service.state.ServiceState)."""

    settings: Settings
    metrics: Metrics

    def held(self) -> AbstractContextManager[Serving | None]: ...

    def unserve(self, engine: FillEngine, message: str) -> bool: ...


def index_bytes(engine: FillEngine) -> int:
    """The bytes of every file of `engine`'s index (the manifest's records)."""
    return sum(rec.bytes for _, rec in engine.index.files.all())


def check_before_ready(engine: FillEngine, max_gb: float = float("inf")) -> None:
    """Hash every file of `engine`'s index before it is first served (Settings.check_before_ready), when it holds at
    most `max_gb` GB (else the background warm-up hashes them); a file that differs closes it and raises the AppError
    naming the file."""
    size = index_bytes(engine)
    if size > max_gb * 1e9:
        logger.info(
            "index %s: %.1f GB, over check_before_ready_max_gb (%g): its files are hashed in the background",
            engine.index.root.name,
            size / 1e9,
            max_gb,
        )
        return
    t = time.perf_counter()
    try:
        engine.index.warm(pages=False, hashes=True)
    except BaseException:
        engine.close()
        raise
    logger.info(
        "index %s: every file's sha256 checked before ready in %.1f s", engine.index.root.name, time.perf_counter() - t
    )


def memory_bytes() -> int | None:
    """The memory this process may use: the machine's, or its cgroup's limit when lower (a container's)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - not a POSIX system
        return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # cgroup v2, v1
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def pages_fit(engine: FillEngine, fraction: float = 0.5) -> bool:
    """Whether the index's files fit in `fraction` of the memory this process may use (`memory_bytes`): only then
    are all their pages mapped in at start (Settings.warm); a larger index is read on demand, through the page
    cache."""
    total = memory_bytes()
    return total is None or index_bytes(engine) <= fraction * total


class IndexWatch:
    def __init__(self, state: Watched) -> None:
        self.state = state
        self.closed = threading.Event()  # set by `close`: ends the watching thread

    def warm(self, engine: FillEngine) -> None:
        """Map the pages of `engine`'s index and check its files' sha256 (Settings.warm, check_hashes); a file
        that differs from the manifest turns the service not ready, naming it, while `engine` is still served.
        With `warm`, the encoder's word table for `/score`'s synonyms is built too (~0.8 s, else the first score's)."""
        settings = self.state.settings
        pages = settings.warm and pages_fit(engine)
        if settings.warm and not pages:
            logger.info(
                "index %s is over half the memory: its pages are read on demand, not warmed", engine.index.root.name
            )
        try:
            engine.index.warm(pages=pages, hashes=settings.check_hashes)
            if settings.warm:
                engine.encoder.word_neighbours  # noqa: B018 (a cached property: built here, once)
        except AppError as exc:
            self.state.unserve(engine, exc.message)
        except Exception:  # noqa: BLE001 - a warm-up that fails (e.g. a closed index) changes nothing served
            logger.exception("warming index %s failed", engine.index.root.name)
        with self.state.held() as serving:
            if serving is not None and serving.engine is engine:  # (a reload meanwhile has its own warm-up)
                self.state.metrics.index_warm.set(1)

    def warm_in_background(self, engine: FillEngine) -> None:
        threading.Thread(target=self.warm, args=(engine,), name="warm-pages", daemon=True).start()

    def recheck(self, full: bool = False) -> bool:
        """Read the served index's manifest again (its own checksum: IndexFiles.check_manifest), and hash again its
        files written since they were checked (IndexFiles.changed), or every file (`full`); a manifest or a file
        that differs turns the service not ready. True when it did."""
        with self.state.held() as serving:  # a reload meanwhile cannot close the files being read
            if serving is None:
                return False
            try:
                index = serving.engine.index
                listed = index.files
                listed.check_manifest()
                files = [(p, rec) for p, rec in listed.all() if p.is_file()] if full else listed.changed()  # gone: gc'd
                if files:
                    logger.warning(
                        "index %s: re-checking %d files (%s)",
                        index.root.name,
                        len(files),
                        "every file" if full else "written since their check",
                    )
                    listed.verify(files)
            except AppError as exc:
                return self.state.unserve(serving.engine, exc.message)
        return False

    def start(self) -> None:
        """Watch the served files from now on, every Settings.recheck_seconds (none when it is 0)."""
        if self.state.settings.recheck_seconds > 0:
            threading.Thread(target=self._watch, name="recheck-files", daemon=True).start()

    def close(self) -> None:
        self.closed.set()

    def _watch(self) -> None:
        while not self.closed.wait(self.state.settings.recheck_seconds):
            try:
                self.recheck()
            except Exception:  # noqa: BLE001 - a check that cannot run (e.g. a closed index) is tried again later
                logger.exception("re-checking the served index failed")

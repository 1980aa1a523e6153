"""The service's state: the engine being served (loaded in the background, so the process answers
/healthz at once; swapped by `reload` without failing a request; its files checked: service.index_watch), and
the metrics. The request path (admission, budget, deadline, lanes): service.requests (`requests`); live document
changes of the served index: service.updates (`documents`)."""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from common.errors import AppError, IndexDamaged
from fill.engine import FillEngine
from fill.schemas import FillRequest
from service.config import Settings
from service.index_watch import IndexWatch, check_before_ready
from service.metrics import Metrics
from service.requests import RequestPath
from service.serving import Serving
from service.updates import DocumentChanges

logger = logging.getLogger(__name__)

WARMUP = FillRequest(text="<mask>", top_k=1, k=1, max_span_tokens=1, evidence=0)


def ray_backend() -> ModuleType:
    """service.ray_backend, imported only for FILL_BACKEND=ray; an AppError saying how to install Ray without it."""
    try:
        from service import ray_backend as module
    except ImportError as exc:
        raise AppError(f"FILL_BACKEND=ray needs Ray Serve: pip install '.[ray]' ({exc})") from None
    return module


def reload_target(settings: Settings, index: str, configured: Path) -> Path:
    """The directory POST /admin/reload names, resolved, or a validation AppError naming the path: missing, not
    a directory, a symlink loop, unreadable, or neither the `configured` index nor under settings.reload_root (default:
    the directory that holds the `configured` index)."""
    root = (settings.reload_root or configured.absolute().parent).resolve()
    try:  # where it leads first, so that nothing outside the root is even looked at
        target = Path(index).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "a symlink loop"
        why = str(exc) if isinstance(exc, ValueError) else why  # e.g. an embedded null byte
        raise AppError(f"{index} cannot be resolved: {why}", kind="validation", field="index") from None
    problem = None
    if not target.is_relative_to(root) and target != configured.resolve():
        problem = f"is not under the reload root {root} (--reload-root / FILL_RELOAD_ROOT)"
    else:
        try:
            if not target.exists():
                problem = "does not exist"
            elif not target.is_dir():
                problem = "is not a directory"
        except OSError:  # a directory on the way that the server may not search
            problem = "cannot be read by the server (permission denied)"
        if problem is None and not os.access(target, os.R_OK | os.X_OK):
            problem = "cannot be read by the server (permission denied)"
    if problem is not None:
        raise AppError(f"{index} {problem}", kind="validation", field="index")
    return target


def open_engine(settings: Settings, reuse: FillEngine | None = None) -> FillEngine:
    """The engine of the settings' backend: every shard here (local), or shard groups on Ray (ray is imported
    only then). A local one uses the encoder and reader of `reuse` (the one served) where they are the same
    (FillEngine.open)."""
    if settings.backend == "ray":
        engine: FillEngine = ray_backend().open_ray_engine(settings)
        return engine
    return FillEngine.open(settings.engine_config(), reuse=reuse)


class ServiceState:
    def __init__(
        self, settings: Settings, engine: FillEngine | None = None, on_fatal: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self.configured = settings.index  # SIGHUP and an empty reload go back to it, whatever was served since
        self.metrics = Metrics()
        self.error: str | None = None
        self.on_fatal = on_fatal  # called with the message when the first load fails (the server exits)
        self.serving: Serving | None = None
        self._swap = threading.Lock()  # one load or reload at a time
        self._current = threading.Lock()  # guards `serving` between taking and entering it
        self.watch = IndexWatch(self)  # the served files' checks (service.index_watch)
        self.documents = DocumentChanges(self)  # live document changes (service.updates)
        self.requests = RequestPath(self)  # fills and scores (service.requests)
        self.metrics.queue.set_function(
            lambda: self.serving.batcher.depth + self.serving.heavy.depth if self.serving is not None else 0
        )
        if engine is not None:
            self._install(engine)

    @property
    def ready(self) -> bool:
        return self.serving is not None

    @property
    def engine(self) -> FillEngine | None:
        serving = self.serving
        return serving.engine if serving is not None else None

    # ------------------------------------------------------------------ loading and reloading

    def load(self) -> None:
        """The first load (in the background): on failure the error is kept (503 naming it) and
        `on_fatal` is told, so a server exits with it rather than stay up unable to serve."""
        try:
            self.reload(first=True)
            self.metrics.reloads.labels("ok").inc()
        except Exception as exc:  # noqa: BLE001 - reported by /readyz, the log, and the exit
            self.metrics.reloads.labels("failed").inc()
            if isinstance(exc, IndexDamaged):
                self.metrics.integrity_failures.inc()
            self.error = f"failed to load: {exc}"
            logger.error("service failed to load: %s", exc)
            if self.on_fatal is not None:
                self.on_fatal(str(exc))

    def reload(self, index: Path | None = None, first: bool = False) -> dict[str, Any]:
        """Open `index` (default: the configured directory, read again), warm it up, and swap it in; the
        engine it replaces is released after its last request (its encoder and reader serve on where the new index
        has the same: fill.models). A failure leaves the current one serving.
        A reload (not the `first` load) checks every file's sha256 before it swaps (unless check_hashes is off)."""
        with self._swap:
            settings = self.settings.model_copy(update={"index": index if index is not None else self.configured})
            if not first and settings.check_hashes:
                settings = settings.model_copy(update={"verify": True})
            t0 = time.perf_counter()
            engine = open_engine(settings, reuse=None if first else self.engine)
            if first and settings.check_hashes and settings.check_before_ready:
                check_before_ready(engine, settings.check_before_ready_max_gb)
            self._install(engine)
            self.settings = settings.model_copy(update={"verify": self.settings.verify})
            return {
                "index": engine.index.root.name,
                "seconds": round(time.perf_counter() - t0, 3),
                "tokens": engine.index.total_tokens,
                "generation": engine.index.manifest.generation,
            }

    def serve_update(self, root: Path) -> None:
        """After a live change of `root` committed (service.updates): serve its next generation, the same models
        over the new manifest (FillEngine.next_generation), if `root` is still the directory served."""
        with self._swap:
            current = self.engine
            if current is None or current.index.root != root:
                return  # another directory is served now: the change waits on disk for it
            updated = current.next_generation()
            try:
                self._install(updated, warmup=False)
            except BaseException:
                updated.close()
                raise

    def reload_or_report(self, index: str | None = None) -> dict[str, Any]:
        """`reload`, counted in the metrics; an index that cannot be served is a validation error naming
        why (the old index keeps serving)."""
        configured, target = self.configured or self.settings.index_dir(), None
        try:
            target = reload_target(self.settings, index, configured) if index is not None else configured
            done = self.reload(target)
        except Exception as exc:  # noqa: BLE001 - any failure to open is the index's, reported as such
            self.metrics.reloads.labels("failed").inc()
            message = exc.message if isinstance(exc, AppError) else f"{type(exc).__name__}: {exc}"
            if (
                isinstance(exc, AppError)
                and exc.kind == "input"
                and self._serves(target)
                and self.watch.recheck(full=True)
            ):
                raise AppError(
                    f"reload failed and the served index is damaged too, no longer served: {message}", kind="not_ready"
                ) from None
            logger.error("reload failed, still serving the previous index: %s", message)
            kind = exc.kind if isinstance(exc, AppError) and exc.kind != "input" else "validation"
            raise AppError(
                f"reload failed, still serving the previous index: {message}", kind=kind, field="index"
            ) from None
        self.metrics.reloads.labels("ok").inc()
        return done

    def _serves(self, root: Path | None) -> bool:
        """Whether the served index is the directory `root` (False for a path that cannot be resolved)."""
        engine = self.engine
        try:
            return engine is not None and root is not None and engine.index.root.resolve() == root.resolve()
        except (OSError, ValueError):  # e.g. a NUL byte in a requested path
            return False

    def _install(self, engine: FillEngine, warmup: bool = True) -> None:
        """Warm `engine` up (a failure closes it; `warmup` false: its encoder and reader are the served ones, warm
        already) and make it the one served."""
        try:
            if warmup:
                engine.fill(WARMUP)
        except BaseException:
            engine.close()
            raise
        serving = Serving(engine, self.settings, self.metrics)
        with self._current:
            old, self.serving = self.serving, serving
        self.error = None
        self.metrics.serving(engine)
        logger.info("serving index %s (%d tokens)", engine.index.root.name, engine.index.total_tokens)
        if old is not None:
            old.retire()
        self.metrics.index_warm.set(0)
        if self.settings.warm or self.settings.check_hashes:
            self.watch.warm_in_background(engine)  # index_warm 1 when done
        else:
            self.metrics.index_warm.set(1)

    def unserve(self, engine: FillEngine, message: str) -> bool:
        """Stop serving `engine` (if it still is) because a file failed its check: not ready, naming the file."""
        with self._current:
            serving = self.serving if self.serving is not None and self.serving.engine is engine else None
            if serving is not None:
                self.serving, self.error = None, f"index check failed: {message}"
        if serving is not None:
            self.metrics.integrity_failures.inc()
            logger.error("index %s fails its check, no longer served: %s", engine.index.root.name, message)
            serving.retire()
        return serving is not None

    def start_loading(self) -> threading.Thread:
        """Load in the background, and watch the served files from then on (Settings.recheck_seconds)."""
        thread = threading.Thread(target=self.load, name="load-engine", daemon=True)
        thread.start()
        self.watch.start()
        return thread

    def close(self) -> None:
        self.watch.close()
        with self._current:
            serving, self.serving = self.serving, None
        if serving is not None:
            serving.retire()
        self.requests.close()

    # ------------------------------------------------------------------ the engine served

    def ready_engine(self) -> FillEngine:
        """The engine, or a not_ready AppError saying why there is none."""
        engine = self.engine
        if engine is None:
            reason = self.error or "model and index are loading"
            raise AppError(f"service not ready ({reason})", kind="not_ready")
        return engine

    @contextmanager
    def held(self) -> Iterator[Serving | None]:
        """What is served (None: nothing), kept open (a reload cannot close it) until the block ends."""
        with self._current:
            serving = self.serving
            if serving is not None:
                serving.enter()
        try:
            yield serving
        finally:
            if serving is not None:
                serving.leave()

    @contextmanager
    def using(self) -> Iterator[Serving]:
        """The current engine, kept open (a reload cannot close it) until the block ends; not_ready without one."""
        with self.held() as serving:
            if serving is None:
                self.ready_engine()  # raises not_ready with the reason
                raise AppError("service not ready (the index is being replaced)", kind="not_ready")  # loaded meanwhile
            try:
                yield serving
            except IndexDamaged as exc:  # a read met bytes that do not match their checksum (indexer.checksums)
                self.unserve(serving.engine, exc.message)
                raise

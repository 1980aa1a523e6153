"""The service's one engine: loaded in the background (so the process answers /healthz at once),
guarded by a fixed number of slots (more requests at once get 429), measured."""

from __future__ import annotations

import logging
import threading
import time

from common.errors import AppError
from service.config import Settings
from service.engine import FillEngine
from service.metrics import Metrics
from service.schemas import FillRequest, FillResult

logger = logging.getLogger(__name__)

WARMUP = FillRequest(text="<mask>", top_k=1, k=1, max_span_tokens=1, evidence=0)


class ServiceState:
    def __init__(self, settings: Settings, engine: FillEngine | None = None) -> None:
        self.settings = settings
        self.engine: FillEngine | None = engine
        self.error: str | None = None
        self.ready = False
        self.slots = threading.BoundedSemaphore(settings.max_concurrency)
        self.metrics = Metrics()
        if engine is not None:
            self._warm_up()

    def load(self) -> None:
        try:
            self.engine = FillEngine.open(self.settings)
            self._warm_up()
        except Exception as exc:  # reported by /readyz and in the log; the process stays up
            self.error = str(exc)
            logger.error("service failed to load: %s", exc)

    def _warm_up(self) -> None:
        assert self.engine is not None
        self.engine.fill(WARMUP)
        self.ready = True
        logger.info("service ready")
        if self.settings.warm:
            threading.Thread(target=self.engine.index.warm, name="warm-pages", daemon=True).start()

    def start_loading(self) -> threading.Thread:
        thread = threading.Thread(target=self.load, name="load-engine", daemon=True)
        thread.start()
        return thread

    def ready_engine(self) -> FillEngine:
        """The engine, or a not_ready AppError saying why there is none."""
        if not self.ready or self.engine is None:
            reason = f"failed to load: {self.error}" if self.error else "model and index are loading"
            raise AppError(f"service not ready ({reason})", kind="not_ready")
        return self.engine

    def fill(self, request: FillRequest) -> FillResult:
        """One fill in a free slot (else an overloaded AppError), counted in the metrics."""
        engine = self.ready_engine()
        if not self.slots.acquire(blocking=False):
            self.metrics.outcome("overloaded")
            raise AppError(f"too many requests in flight (max {self.settings.max_concurrency}); retry", kind="overloaded")
        t0 = time.perf_counter()
        try:
            result = engine.fill(request)
        except AppError as exc:
            self.metrics.outcome("invalid" if exc.kind == "validation" else exc.kind)
            raise
        finally:
            self.slots.release()
        self.metrics.filled(result, time.perf_counter() - t0)
        return result

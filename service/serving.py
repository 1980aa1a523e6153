"""One served engine and its two batchers (the light lane's and the heavy lane's), with the count of the
requests using them: a reload retires it, and it is closed when its last request is done."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from common.priority import lower_this_thread
from fill.engine import FillEngine
from service.batcher import Batcher
from service.config import Settings
from service.metrics import Metrics

logger = logging.getLogger(__name__)


class Serving:
    """One engine and its batcher, with the count of requests using them: once retired (replaced by
    a reload) it is closed when its last request is done."""

    def __init__(self, engine: FillEngine, settings: Settings, metrics: Metrics) -> None:
        self.engine = engine
        self.batcher = Batcher(
            engine, settings.max_batch, settings.batch_tokens, settings.batch_wait_ms / 1000, on_batch=metrics.batch
        )
        # the heavy lane's batches are prepared on a thread of their own at FILL_HEAVY_NICE (service.batcher)
        self._heavy_thread = ThreadPoolExecutor(
            1, thread_name_prefix="batch-heavy", initializer=lower_this_thread, initargs=(settings.heavy_nice,)
        )
        self.heavy = Batcher(engine, settings.max_batch, settings.batch_tokens, 0.0, run_on=self._heavy_thread)
        self._users = 0
        self._retired = False
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self._users += 1

    def leave(self) -> None:
        with self._lock:
            self._users -= 1
            done = self._retired and self._users == 0
        if done:
            self.close()

    def retire(self) -> None:
        with self._lock:
            self._retired = True
            done = self._users == 0
        if done:
            self.close()

    def close(self) -> None:
        self.batcher.close()
        self.heavy.close()
        self._heavy_thread.shutdown(wait=False)
        self.engine.close()
        logger.info("index %s released", self.engine.index.root.name)

"""Loading the engine (in the background, so the process answers /healthz at once) and guarding it."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from service.config import Settings
from service.engine import FillEngine, FillParams

logger = logging.getLogger(__name__)


def load_engine(settings: Settings) -> FillEngine:
    """Open the index and the encoder it was built with; refuse a model whose fingerprint differs."""
    from encoder.model import Encoder, model_fingerprint
    from indexer.errors import IndexerError
    from service.index import PhraseIndex

    if settings.index is None:
        raise IndexerError("no index given: pass --index DIR or set FILL_INDEX")
    index = PhraseIndex(
        settings.index, verify=settings.verify, nprobe=settings.nprobe, ef_search=settings.ef_search,
        refine=settings.refine,
    )
    model_dir = Path(settings.model) if settings.model else Path(index.manifest.model.path)
    if not model_dir.is_dir():
        raise IndexerError(f"model directory {model_dir} named by the manifest does not exist here; pass --model")
    if model_fingerprint(model_dir) != index.manifest.model.fingerprint:
        raise IndexerError(
            f"model {model_dir} differs from the model the index {settings.index} was built with "
            f"(fingerprint {index.manifest.model.fingerprint[:12]}); pass the right --model or rebuild"
        )
    encoder = Encoder(model_dir, device=settings.device, dtype=settings.dtype)
    return FillEngine(encoder, index)


WARMUP = FillParams(top_k=1, k=1, max_span_tokens=1, evidence=0)


class ServiceState:
    def __init__(self, settings: Settings, engine: FillEngine | None = None) -> None:
        self.settings = settings
        self.engine: FillEngine | None = engine
        self.error: str | None = None
        self.ready = False
        self.slots = threading.BoundedSemaphore(settings.max_concurrency)
        if engine is not None:
            self._warm_up()

    def load(self) -> None:
        try:
            self.engine = load_engine(self.settings)
            self._warm_up()
        except Exception as exc:  # reported by /readyz and in the log; the process stays up
            self.error = str(exc)
            logger.error("service failed to load: %s", exc)

    def _warm_up(self) -> None:
        assert self.engine is not None
        self.engine.fill("<mask>", WARMUP)
        self.ready = True
        logger.info("service ready")

    def start_loading(self) -> threading.Thread:
        thread = threading.Thread(target=self.load, name="load-engine", daemon=True)
        thread.start()
        return thread

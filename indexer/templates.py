"""Trained, empty FAISS indexes shared by the shards of one build.

IVF centroids and PQ codebooks are trained ONCE per factory string, on the vectors of the first
shard that uses it, and saved as `trained/<factory>.faiss` (atomically) next to the shards. Every
later shard with the same factory copies the template and only adds its vectors: at 10.5M tokens
(docs/BENCHMARKS.md, "Build throughput") the IVF / PQ training took ~27 s on the first shard, indexing and
writing 18.6 s per later shard, against 48.5 s of encoding per shard. The file stays after the build, so a
resumed or distributed build uses the same centroids as an uninterrupted one.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import faiss
import numpy as np

from common.files import atomic_path
from indexer.ann import train_faiss_index

logger = logging.getLogger(__name__)

TEMPLATE_DIR = "trained"


def needs_training(factory: str, dim: int) -> bool:
    return not faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT).is_trained


class Templates:
    def __init__(self, root: Path, poll_seconds: float = 2.0) -> None:
        self.dir = root / TEMPLATE_DIR
        self.poll_seconds = poll_seconds

    def path(self, factory: str) -> Path:
        return self.dir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", factory) + ".faiss")

    def train(self, vectors: np.ndarray, factory: str, seed: int) -> faiss.Index:
        """Train the template of `factory` on `vectors` and save it atomically (common.files)."""
        index = train_faiss_index(vectors, factory, seed)
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.path(factory)
        with atomic_path(final) as tmp:
            faiss.write_index(index, str(tmp))
        logger.info("saved trained %s for the later shards: %s", factory, final)
        return index

    def load(self, factory: str, wait: bool) -> faiss.Index | None:
        """The saved template; with `wait`, block until another process has saved it."""
        path = self.path(factory)
        waited = 0.0
        while not path.is_file():
            if not wait:
                return None
            if waited % 60 < self.poll_seconds:
                logger.info("waiting for the trained %s from the process that builds its first shard", factory)
            time.sleep(self.poll_seconds)
            waited += self.poll_seconds
        return faiss.read_index(str(path))

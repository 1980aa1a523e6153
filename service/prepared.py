"""A fill between the engine's steps (service.engine): planned (checked, tokenized), then prepared
(encoded and searched, possibly in one batch with other requests, service.batcher)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from encoder.model import QueryVectors
from service.schemas import FillRequest


@dataclass
class Planned:
    """A request checked and tokenized (`FillEngine.plan`)."""

    request: FillRequest
    mode: str
    ids: list[int]  # query token ids, each mask as MASK_s MASK_e
    positions: list[int]  # the MASK_s positions
    t0: float  # when the fill started (perf_counter)

    @property
    def tokens(self) -> int:
        return len(self.ids)


@dataclass
class Prepared:
    """A request encoded and searched (`FillEngine.prepare`, possibly in a batch with others)."""

    planned: Planned
    vectors: QueryVectors
    hits: list[tuple[np.ndarray, np.ndarray]]  # FAISS (shards, positions) per start query, then per end query
    encode_ms: float  # the batch's encode and search times
    search_ms: float

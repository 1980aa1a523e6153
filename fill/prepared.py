"""A request between the engine's steps (fill.engine): planned (checked, tokenized), then prepared (encoded and
searched, possibly in one batch with other requests, service.batcher)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from encoder.model import QueryVectors
from fill.candidates import Lexical, ShardCandidates
from fill.choices import ChoicePhrases
from fill.hits import MaskHits
from fill.schemas import FillRequest, Mode, ScoreRequest

# the request a step holds: a fill's steps and a score's are typed apart (`Planned[FillRequest]`, ...)
Req = TypeVar("Req", FillRequest, ScoreRequest)


@dataclass
class Planned(Generic[Req]):
    """A request checked and tokenized (`FillEngine.plan`)."""

    request: Req
    mode: Mode
    ids: list[int]  # query token ids, each mask as MASK_s MASK_e
    mask_at: list[int]  # the token index of each mask's MASK_s
    t0: float  # when the fill started (perf_counter)
    cost: float  # the request's cost in default fills (fill.budget.Budget.cost): the service's lane
    phrases: ChoicePhrases | None = None  # a ScoreRequest's choices as token ids

    @property
    def tokens(self) -> int:
        return len(self.ids)


@dataclass
class Prepared(Generic[Req]):
    """A request encoded and searched (`FillEngine.prepare`, possibly in a batch with others)."""

    planned: Planned[Req]
    queries: QueryVectors  # per mask, its start and end query vectors
    hits: list[MaskHits]  # per mask, the search's hits (empty in restricted mode)
    encode_ms: float  # the batch's encode and search times
    search_ms: float
    # a fill's candidates per mask, formed with the search (shards with `one_round`: fill.scatter), and its BM25 side
    parts: list[list[ShardCandidates]] | None = None
    lexical: Lexical | None = None

"""A shard group on Ray Serve: the deployment whose replicas hold some of an index's shards and run the
shard-local stage for the ingress (service.ray_backend). Its imports, and those of the tasks it unpickles
(fill.candidates, fill.windows, fill.evidence, fill.choices), are the shard side's only: a replica loads no
encoder and no torch (tested)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
from pydantic import BaseModel, Field
from ray import serve
from ray.serve import Application

from common.process import single_thread_blas
from fill.candidates import CandidateForm, ShardCandidates
from fill.shard_group import ShardGroup, ShardTask
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex, ScoredHits

T = TypeVar("T")


@serve.deployment(
    ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64, health_check_period_s=2, graceful_shutdown_timeout_s=5
)
class ShardGroupReplica:
    """One replica of a shard group: its shards opened (and their pages warmed), answering `search` and `gather`."""

    def __init__(
        self,
        index: str,
        shard_nos: list[int],
        nprobe: int | None = None,
        ef_search: int | None = None,
        refine: int | None = None,
        warm: bool = True,
        delay_ms: float = 0.0,
        generation: str = "",
    ) -> None:
        single_thread_blas()
        self.group = ShardGroup(
            PhraseIndex(index, nprobe=nprobe, ef_search=ef_search, refine=refine, shard_nos=shard_nos, bm25=False)
        )
        self.delay = delay_ms / 1000  # a simulated network hop each way (bench/bench_ray.py); 0 when served
        # `generation` (generation_of the index deployed) only tells Serve that a changed index is a new deployment
        if warm:
            self.group.index.warm(pages=True)

    def held(self) -> dict[str, Any]:
        """What this replica serves: its shards and the index generation (an ingress attaching checks them)."""
        m = self.group.index.manifest
        return {"shard_nos": self.group.shard_nos, "generation": generation_of(m)}

    # The calls are coroutines whose work runs on a thread of the replica's event loop, so several run at once:
    # an async method costs Serve ~0.5-0.9 ms less per call than a sync one here (docs/history/BENCHMARKS.md,
    # "Beyond one machine: Ray Serve").
    async def search(self, queries: np.ndarray, k: int, groups: list[int] | None) -> list[ScoredHits]:
        return await asyncio.to_thread(self._hop, self.group.search, queries, k, groups)

    async def gather(self, tasks: list[ShardTask[Any]]) -> list[Any]:
        return await asyncio.to_thread(self._hop, self.group.gather, tasks)

    async def search_forming(
        self, queries: np.ndarray, k: int, groups: list[int], forms: list[CandidateForm | None]
    ) -> tuple[list[ScoredHits], list[list[list[ShardCandidates]]]]:
        return await asyncio.to_thread(self._hop, self.group.search_forming, queries, k, groups, forms)

    def _hop(self, work: Callable[..., T], *args: Any) -> T:
        if self.delay:
            time.sleep(self.delay)
        out = work(*args)
        if self.delay:
            time.sleep(self.delay)
        return out


def group_plan(shards: int, groups: int) -> list[list[int]]:
    """The shard numbers of each group: consecutive runs, as even as they go (a group per shard at most)."""
    groups = max(1, min(groups, shards))
    bounds = np.linspace(0, shards, groups + 1).round().astype(int).tolist()
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


def generation_of(manifest: Manifest) -> str:
    """An index's build and generation, as one string: a group deployed with another one is redeployed."""
    return f"{manifest.created_at}#{manifest.generation}"


def app_name(prefix: str, group: int) -> str:
    """The Serve application of group `group` (FILL_RAY_APP is the prefix)."""
    return f"{prefix}-group-{group}"


class GroupArgs(BaseModel):
    """A shard group application's `args` in a Serve config (deploy/ray/serve.yaml): group `group` of `groups` over
    the index at `index` (the plan of `group_plan`, as the ingress's FILL_RAY_GROUPS makes it)."""

    index: str = Field(description="index directory, the same path on every node (a shared volume)")
    group: int = Field(ge=0)
    groups: int = Field(ge=1)
    nprobe: int | None = Field(None, ge=1)
    ef_search: int | None = Field(None, ge=1)
    refine: int | None = Field(None, ge=1)
    warm: bool = True


def group_app(args: dict[str, Any]) -> Application:
    """`import_path: service.ray_group:group_app` of a shard group's application in a Serve config."""
    a = GroupArgs.model_validate(args)
    manifest = Manifest.load(Path(a.index))
    plan = group_plan(len(manifest.shards), a.groups)
    if a.group >= len(plan):
        raise ValueError(
            f"group {a.group} of {a.groups}: the index {a.index} makes only {len(plan)} groups "
            f"(one shard each at most); use groups <= {len(plan)}"
        )
    app: Application = ShardGroupReplica.bind(  # type: ignore[attr-defined]  # serve.deployment adds bind
        a.index, plan[a.group], a.nprobe, a.ef_search, a.refine, a.warm, 0.0, generation_of(manifest)
    )
    return app

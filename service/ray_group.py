"""A shard group on Ray Serve: the deployment whose replicas hold some of an index's shards and run the
shard-local stage for the ingress (service.ray_backend). Its imports are the shard side's only (no encoder,
no torch in the replica's process beyond what the tasks' modules bring)."""

from __future__ import annotations

import numpy as np
from ray import serve

from common.process import single_thread_blas
from fill.shard_group import ShardGroup
from indexer.phrase_index import PhraseIndex


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64, health_check_period_s=2,
                  graceful_shutdown_timeout_s=5)
class ShardGroupReplica:
    """One replica of a shard group: its shards opened (and their pages warmed), answering `search` and `run`."""

    def __init__(self, index: str, shard_nos: list[int], nprobe: int | None = None, ef_search: int | None = None,
                 refine: int | None = None, warm: bool = True) -> None:
        single_thread_blas()
        self.group = ShardGroup(PhraseIndex(index, nprobe=nprobe, ef_search=ef_search, refine=refine,
                                            shard_nos=shard_nos, bm25=False))
        if warm:
            self.group.index.warm(pages=True)

    def search(self, queries: np.ndarray, k: int, groups: list[int] | None) -> list:
        return self.group.search(queries, k, groups)

    def run(self, tasks: list) -> list:
        return self.group.run(tasks)


def group_plan(shards: int, groups: int) -> list[list[int]]:
    """The shard numbers of each group: consecutive runs, as even as they go (a group per shard at most)."""
    groups = max(1, min(groups, shards))
    bounds = np.linspace(0, shards, groups + 1).round().astype(int).tolist()
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


def app_name(prefix: str, group: int) -> str:
    """The Serve application of group `group` (FILL_RAY_APP is the prefix)."""
    return f"{prefix}-group-{group}"

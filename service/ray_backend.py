"""Serving beyond one machine on Ray Serve (FILL_BACKEND=ray): the index's shards split into shard groups,
each a Serve application of one deployment (`ShardGroupReplica`, `FILL_RAY_REPLICAS` replicas that share
nothing but the index files), and this server as the ingress. Imported only when the backend is ray, so the
one-process server never imports ray (`pip install .[ray]` adds it).

A fill over Ray, hop by hop (the engine's steps are those of fill.engine; only the search and the candidates move):
  ingress  plan, encode the queries, BM25 (restricted / hybrid: the ingress holds the BM25 files, ~2% of the
           index), then `RayShards` (fill.scatter):
  round    ONE call to every group, in parallel: it searches its shards (FAISS, exact re-scoring), forms each
           mask's candidates from its own top k and the mask's BM25 blocks, and returns its hits with scores and
           its candidates with their exact logits; the ingress keeps the top k of all hits (the hits of one
           process) and the candidates they form (the spans and logits of one process)
  ingress  the global ranking, the reader (its windows read from the shards' text, which the ingress opens
           itself: no FAISS index, no vectors), the confidence and the evidence; a restricted fill's candidates
           (no search) and a closed-set score's votes are one call per group each
A group with no replica answering within FILL_RAY_TIMEOUT fails the request with 503 naming the group (never a
silent partial answer); Serve restarts a dead replica, and a call that was on it is tried once more."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError, RayServeException

from common.errors import AppError
from fill.engine import FillEngine
from fill.scatter import ScatterShards
from fill.shard_group import ShardGroup
from indexer.manifest import Manifest
from service.config import Settings
from service.ray_group import ShardGroupReplica, app_name, generation_of, group_plan

logger = logging.getLogger(__name__)

ATTACH_WAIT = 300.0  # seconds an ingress waits for the groups a Serve config deploys beside it


@dataclass
class Group:
    name: str
    shard_nos: list[int]
    handle: Any  # ray.serve.handle.DeploymentHandle

    @property
    def label(self) -> str:
        a, b = self.shard_nos[0], self.shard_nos[-1]
        return f"shard group {self.name} (shard{'s' if a != b else ''} {a}{f'-{b}' if a != b else ''})"


class RayShards(ScatterShards):
    """fill.scatter.ScatterShards over shard groups on Ray Serve (see the module doc): `text` the ingress's own
    shards (their text side), the calls sent by `_call`."""

    def __init__(self, groups: list[Group], timeout: float, text: ShardGroup | None = None) -> None:
        super().__init__({s: g for g, group in enumerate(groups) for s in group.shard_nos}, text, self._call)
        self.groups = groups
        self.timeout = timeout
        self.calls = 0  # calls sent to the groups (tests and bench/bench_ray.py count a fill's rounds)

    def _call(self, calls: list[tuple[int, str, tuple[Any, ...]]]) -> list[Any]:
        """The results of the calls (group, method, args), sent together; one retry of a call whose replica
        died; AppError (not_ready, 503) naming the group that did not answer in time."""
        self.calls += len(calls)
        sent = [(g, method, args, getattr(self.groups[g].handle, method).remote(*args)) for g, method, args in calls]
        out = []
        for g, method, args, response in sent:
            try:
                out.append(self._result(g, response))
            except RayActorError:
                logger.warning("%s: a replica died during %s; trying again", self.groups[g].label, method)
                out.append(self._result(g, getattr(self.groups[g].handle, method).remote(*args)))
        return out

    def _result(self, g: int, response: Any) -> Any:
        try:
            return response.result(timeout_s=self.timeout)
        except TimeoutError:
            response.cancel()
            raise AppError(
                f"{self.groups[g].label} did not answer in {self.timeout:g} s (FILL_RAY_TIMEOUT): it has "
                "no running replica (Ray Serve restarts failed replicas) or is overloaded; retry later",
                kind="not_ready",
            ) from None
        except DeploymentUnavailableError:
            raise AppError(
                f"{self.groups[g].label} is not deployed on the Ray cluster (deleted, or its application "
                "failed); redeploy it (reload the server, or `serve run deploy/ray/serve.yaml`)",
                kind="not_ready",
            ) from None


def connect(settings: Settings) -> None:
    """Join the Ray cluster at FILL_RAY_ADDRESS (none: start one on this machine; inside a Serve replica: the
    replica's) and, to deploy the groups, start Serve without its HTTP proxy (this server is the ingress)."""
    if not ray.is_initialized():
        ray.init(
            address=settings.ray_address,
            namespace=settings.ray_namespace,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    if settings.ray_deploy:
        serve.start(proxy_location="Disabled")


def shard_groups(settings: Settings, root: Path, deploy: bool, wait: float = ATTACH_WAIT) -> list[Group]:
    """The handles of the index's shard groups, Serve applications `<prefix>-group-<n>`, one per group of this
    server's plan (FILL_RAY_GROUPS): with `deploy`, run (or updated) here, waiting until each has its replicas
    (`_deploy`); else deployed by a Serve config (FILL_RAY_DEPLOY=false) and attached to (`_attach`)."""
    manifest = Manifest.load(root)
    out = []
    for number, shard_nos in enumerate(group_plan(len(manifest.shards), settings.ray_groups)):
        group = Group(app_name(settings.ray_app, number), shard_nos, None)
        if deploy:
            _deploy(settings, root, manifest, group)
        else:
            _attach(settings, root, manifest, group, wait)
        out.append(group)
    return out


def _deploy(settings: Settings, root: Path, manifest: Manifest, group: Group) -> None:
    """Run (or update) the group's application and wait until it has its replicas; its handle into `group`."""
    t0 = time.perf_counter()
    app = ShardGroupReplica.options(num_replicas=settings.ray_replicas).bind(  # type: ignore[attr-defined]
        str(root.resolve()),
        group.shard_nos,
        settings.nprobe,
        settings.ef_search,
        settings.refine,
        settings.warm,
        0.0,
        generation_of(manifest),
    )
    group.handle = serve.run(app, name=group.name, route_prefix=None)
    logger.info(
        "shard group %s (shards %s) running with %d replicas in %.1f s",
        group.name,
        group.shard_nos,
        settings.ray_replicas,
        time.perf_counter() - t0,
    )


def _attach(settings: Settings, root: Path, manifest: Manifest, group: Group, wait: float) -> None:
    """The group's handle into `group`, waiting up to `wait` seconds for it to exist; it must hold the shards
    of this server's plan and this generation of the index."""
    deadline = time.monotonic() + wait
    while group.handle is None:
        try:
            group.handle = serve.get_app_handle(group.name)
        except RayServeException:
            if time.monotonic() > deadline:
                raise AppError(
                    f"{group.label} is not deployed on the Ray cluster after {wait:g} s; deploy it "
                    "(deploy/ray/serve.yaml) or let this server deploy it (FILL_RAY_DEPLOY=true)",
                    kind="not_ready",
                ) from None
            time.sleep(1.0)
    held = RayShards([group], settings.ray_timeout)._call([(0, "held", ())])[0]
    if held["shard_nos"] != group.shard_nos:
        raise AppError(
            f"{group.label} holds shards {held['shard_nos']}, not those of this server's plan; give the "
            "ingress and the groups the same index and the same number of groups (FILL_RAY_GROUPS)"
        )
    if held["generation"] != generation_of(manifest):
        raise AppError(
            f"{group.label} serves another generation of {root} ({held['generation']}, here "
            f"{generation_of(manifest)}); redeploy the groups (serve deploy) after changing the index"
        )


def open_ray_engine(settings: Settings) -> FillEngine:
    """The engine of a Ray ingress: encoder, reader, manifest, BM25 and the shards' text side here, their searches
    and vectors in their groups."""
    connect(settings)
    root = settings.index_dir()
    groups = shard_groups(settings, root, deploy=settings.ray_deploy)
    return FillEngine.open(
        settings.engine_config(), shards=lambda index: RayShards(groups, settings.ray_timeout, ShardGroup(index))
    )

"""The whole service on Ray Serve from one Serve config (deploy/ray/serve.yaml, `serve run`): this project's
FastAPI app (service.api) as the ingress deployment behind Serve's HTTP proxy, attached to the shard groups the
same config deploys (service.ray_group.group_app). The ingress encodes, holds BM25 and the shards' text
side, ranks and reads; the groups search the shards (service.ray_backend)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application

from common.process import single_thread_blas
from service.api import create_app
from service.config import Settings


def ingress_settings(args: dict[str, Any]) -> Settings:
    """The ingress's Settings: the config's `args` (Settings fields by name, e.g. index, ray_groups, api_keys) over
    the FILL_* variables, always the ray backend attached to the config's groups."""
    return Settings.model_validate(
        {**Settings().model_dump(exclude_unset=True), **args, "backend": "ray", "ray_deploy": False}
    )


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256, graceful_shutdown_timeout_s=15)
@serve.ingress()
class FillIngress:
    """One ingress replica: the FastAPI app over its own ServiceState (the engine loads at start-up)."""

    def __init__(self, args: dict[str, Any]) -> None:
        single_thread_blas()
        self.settings = ingress_settings(args)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.settings, load=True)


def ingress_app(args: dict[str, Any]) -> Application:
    """`import_path: service.ray_app:ingress_app` of the ingress application; `args` are checked here, so a wrong
    field fails the deployment with the field's name."""
    ingress_settings(args)
    app: Application = FillIngress.bind(args)  # type: ignore[attr-defined]  # serve.deployment adds bind
    return app

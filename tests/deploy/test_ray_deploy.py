"""The deployment beyond one machine (deploy/ray/): the Serve config is a valid Ray Serve config whose shard
groups and ingress agree with each other, the KubeRay RayService carries the same applications, the compose
profile `ray` runs a head and workers over the index volume; and `serve run` of the config (over a test index,
on loopback) serves fills equal to the local engine's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib

import httpx
import pytest
import yaml

from fill.engine import FillEngine
from fill.schemas import FillRequest
from service.config import Settings
from tests.deploy.compose_local import ROOT, load_compose
from tests.service.test_server_process import clean_env, free_port

pytest.importorskip("ray", reason="the Ray deployment needs `pip install .[ray]` (deploy/setup.sh installs it)")

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


SERVE = ROOT / "deploy" / "ray" / "serve.yaml"
RAYSERVICE = ROOT / "deploy" / "ray" / "rayservice.yaml"


def serve_config() -> dict:
    return yaml.safe_load(SERVE.read_text(encoding="utf-8"))


def split(config: dict) -> tuple[list[dict], dict]:
    groups = [a for a in config["applications"] if a["import_path"] == "service.ray_group:group_app"]
    ingress = [a for a in config["applications"] if a["import_path"] == "service.ray_app:ingress_app"]
    assert len(ingress) == 1 and len(groups) + 1 == len(config["applications"])
    return groups, ingress[0]


def test_the_serve_config_is_valid_and_its_groups_are_the_ingress_plan():
    from ray.serve.schema import ServeDeploySchema

    config = serve_config()
    ServeDeploySchema.model_validate(config)
    groups, ingress = split(config)
    n = ingress["args"]["ray_groups"]
    assert [g["args"]["group"] for g in groups] == list(range(n)) and {g["args"]["groups"] for g in groups} == {n}
    assert [g["name"] for g in groups] == [f"{ingress['args']['ray_app']}-group-{i}" for i in range(n)]
    assert all(g["route_prefix"] is None and g["deployments"][0]["name"] == "ShardGroupReplica" for g in groups)
    assert ingress["route_prefix"] == "/" and ingress["deployments"][0]["name"] == "FillIngress"
    assert {g["args"]["index"] for g in groups} == {ingress["args"]["index"]}
    Settings.model_validate({**ingress["args"], "backend": "ray"})  # every ingress arg is a Settings field


def test_the_kuberay_service_carries_the_serve_config():
    service = yaml.safe_load(RAYSERVICE.read_text(encoding="utf-8"))
    assert service["apiVersion"] == "ray.io/v1" and service["kind"] == "RayService"
    assert yaml.safe_load(service["spec"]["serveConfigV2"]) == serve_config()
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert f"ray[serve]=={service['spec']['rayClusterConfig']['rayVersion']}" in pinned["ray"]
    cluster = service["spec"]["rayClusterConfig"]
    for spec in [cluster["headGroupSpec"]["template"]["spec"]] + [
        w["template"]["spec"] for w in cluster["workerGroupSpecs"]
    ]:
        mounts = spec["containers"][0]["volumeMounts"]
        assert {"name": "index", "mountPath": "/index", "readOnly": True} in mounts


def test_the_compose_ray_profile_runs_a_head_and_workers_over_the_index_volume():
    services = load_compose()["services"]
    head, worker = services["ray-head"], services["ray-worker"]
    assert head["profiles"] == ["ray"] and worker["profiles"] == ["ray"]  # a plain `up` starts neither
    assert head["build"]["args"]["EXTRAS"] == "[ray]" and worker["image"] == head["image"] == "npm-retrieval:ray"
    for service in (head, worker):
        assert "index:/index:ro" in service["volumes"]
        assert {"FILL_API_KEYS", "FILL_ADMIN_KEYS"} <= set(service["environment"])  # the ingress may run on any node
    assert "serve deploy deploy/ray/serve.yaml" in head["command"][-1] and "--head" in head["command"][-1]
    assert worker["command"][:3] == ["ray", "start", "--address=ray-head:6379"] and "--block" in worker["command"]
    assert head["depends_on"]["indexer"]["condition"] == "service_completed_successfully"
    out = services["indexer"]["environment"]["INDEXER_OUT"]
    assert {a["args"]["index"] for a in serve_config()["applications"]} == {out}
    published = {s["ports"][0].rsplit(":", 1)[0] for s in (services["api"], services["api-gpu"], head)}
    assert len(published) == 3  # `--profile ray` beside the default stack: no host port shared


def test_serve_run_of_the_config_serves_the_local_engines_fills(tmp_path, tiny_index):
    config = serve_config()
    port = free_port()
    config["http_options"].update(host="127.0.0.1", port=port)
    for app in config["applications"]:
        app["args"]["index"] = str(tiny_index)
        app["deployments"][0]["num_replicas"] = 1
    split(config)[1]["args"].update(use_reader=False, ray_app="npm")
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "serve"), "run", str(path)],
            cwd=ROOT,
            env=clean_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(1)
        local = FillEngine.open(Settings(index=tiny_index, use_reader=False).engine_config())
        for text in ("Allan Peiper was born in <mask> .", "Paris is the capital of <mask> ."):
            request = FillRequest(text=text, top_k=3, evidence=2)
            got = httpx.post(f"{url}/fill", json=request.model_dump(), timeout=30)
            assert got.status_code == 200, got.text
            want = local.fill(request).model_dump(mode="json", exclude={"took_ms", "timings_ms"})
            assert {k: v for k, v in got.json().items() if k not in ("took_ms", "timings_ms")} == want
        local.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

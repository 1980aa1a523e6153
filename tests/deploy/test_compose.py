"""The deployment: docker-compose.yml is valid for docker-compose 1.29 (`config`), has the shape docs/OPERATIONS.md
promises (one-shot indexer, api after it with a healthcheck, a `gpu` profile reserving an NVIDIA device,
non-root images), and, with no Docker engine here, a smoke test runs its services' commands and
environments as local processes on loopback: the `indexer` command builds the index into the folder that
stands for the named volume, the `api` command serves it, /readyz, /fill and the healthcheck answer, and
the server stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.deploy.compose_local import (
    ROOT,
    InterpolationError,
    LocalService,
    docker_compose,
    dockerfile_instructions,
    interpolate,
    load_compose,
    run_docker_compose,
)
from tests.service.test_server_process import Server

CPU, GPU = ("indexer", "api"), ("indexer-gpu", "api-gpu")
pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


DOCKERFILES = (ROOT / "deploy" / "Dockerfile", ROOT / "deploy" / "Dockerfile.gpu")
READY_TIMEOUT = 120.0


def require_docker_compose() -> str:
    """docker-compose's path; without it the test fails under CI (which installs it: .ci/run), else skips."""
    path = docker_compose()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not on PATH under CI: .ci/run installs Debian's docker-compose")
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    return path


# -- docker-compose itself ------------------------------------------------------------------------------


def test_docker_compose_config_accepts_the_file():
    require_docker_compose()
    for args in (("config", "-q"), ("--profile", "gpu", "config", "-q")):
        proc = run_docker_compose(*args)
        assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stdout + proc.stderr


def test_docker_compose_reads_commands_and_environments_as_the_smoke_test_does():
    """The smoke test's own substitution gives the same commands, environments and mounts as
    docker-compose's `config`, so the processes it runs are the ones the containers would run."""
    require_docker_compose()
    proc = run_docker_compose("config")
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)["services"]
    ours = load_compose()["services"]
    assert set(resolved) == set(ours)
    for name, spec in ours.items():
        assert resolved[name]["command"] == spec["command"], name
        assert {k: str(v) for k, v in resolved[name]["environment"].items()} == spec["environment"], name
        assert {mount(v) for v in resolved[name]["volumes"]} == {mount(v) for v in spec["volumes"]}, name


def mount(entry: str) -> tuple[str, str, str]:
    """(source, target, mode) of a short-syntax volume entry; a host path made absolute, mode rw by default."""
    source, target, *mode = entry.split(":")
    if source.startswith((".", "/")):
        source = str((ROOT / source).resolve())
    return source, target, mode[0] if mode else "rw"


def test_interpolation_follows_compose_rules():
    assert interpolate("${A:-x}", {}) == "x"
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A-x}", {"A": ""}) == ""
    assert interpolate("${A:-x}/$B/$$C", {"A": "a", "B": "b"}) == "a/b/$C"
    assert interpolate({"k": ["${A}", 1]}, {"A": "v"}) == {"k": ["v", 1]}
    with pytest.raises(InterpolationError):
        interpolate("${A:?set A}", {})


# -- the file's shape -----------------------------------------------------------------------------------


def test_indexer_is_a_one_shot_job_and_api_waits_for_it():
    services = load_compose()["services"]
    for indexer, api in (CPU, GPU):
        assert services[indexer]["restart"] == "no"
        assert services[api]["depends_on"] == {indexer: {"condition": "service_completed_successfully"}}
        health = services[api]["healthcheck"]["test"]
        assert health[0] in ("CMD", "CMD-SHELL") and "/readyz" in " ".join(health)
        # the job writes the named volume, the api only reads it
        index_mount = next(v for v in services[indexer]["volumes"] if v.split(":")[1] == "/index")
        assert not index_mount.endswith(":ro")
        assert f"{index_mount.split(':')[0]}:/index:ro" in services[api]["volumes"]
        assert services[api]["environment"]["FILL_INDEX"] == services[indexer]["environment"]["INDEXER_OUT"]
        assert services[indexer]["volumes"][-1].endswith(":/corpus:ro")


def test_gpu_profile_reserves_an_nvidia_device_and_the_default_stays_on_cpu():
    compose = load_compose()
    services = compose["services"]
    for name in GPU:
        spec = services[name]
        assert spec["profiles"] == ["gpu"]
        assert spec["build"]["dockerfile"] == "deploy/Dockerfile.gpu"
        devices = spec["deploy"]["resources"]["reservations"]["devices"]
        assert {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]} in devices
    for name in CPU:
        assert "profiles" not in services[name] and "deploy" not in services[name]
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile"
    # `--profile gpu up` starts both stacks: they must not share the volume nor the host port
    cpu_volume = services["indexer"]["volumes"][0].split(":")[0]
    gpu_volume = services["indexer-gpu"]["volumes"][0].split(":")[0]
    assert cpu_volume != gpu_volume and {cpu_volume, gpu_volume} <= set(compose["volumes"])
    assert services["api"]["ports"][0].split(":")[0] != services["api-gpu"]["ports"][0].split(":")[0]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_as_a_non_root_user_that_owns_the_volume_mount_point(dockerfile):
    instructions = dockerfile_instructions(dockerfile)
    users = [args for instr, args in instructions if instr == "USER"]
    assert users, f"{dockerfile.name} has no USER line"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    runs = " ".join(args for instr, args in instructions if instr == "RUN")
    assert "mkdir /index" in runs and "chown" in runs and "/index" in runs.split("chown", 1)[1]
    assert "torch==2.13.0" in runs and "--index-url" in runs


def test_gpu_image_installs_faiss_gpu_and_not_faiss_cpu():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(d.startswith("faiss-gpu==") for d in project["optional-dependencies"]["gpu"])
    runs = " ".join(args for instr, args in dockerfile_instructions(DOCKERFILES[1]) if instr == "RUN")
    assert "not d.startswith('faiss-cpu')" in runs and "['gpu']" in runs and "! pip show faiss-cpu" in runs
    assert "download.pytorch.org/whl/cpu" not in runs
    base = [args for instr, args in dockerfile_instructions(DOCKERFILES[1]) if instr in ("ARG", "FROM")]
    assert any("nvidia/cuda:" in a for a in base)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_copied_path_exists_and_is_in_the_build_context(dockerfile):
    allowed = [
        line[1:].strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    ]
    copies = [args.split()[:-1] for instr, args in dockerfile_instructions(dockerfile) if instr == "COPY"]
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source
            assert any(source == a or source.startswith(a + "/") for a in allowed), (
                f"{source} not in .dockerignore's list"
            )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_installed_package_is_copied_into_the_image(dockerfile):
    """`pip install .` in the image installs the packages pyproject.toml lists only if they were COPY'd."""
    import tomllib

    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"][
        "find"
    ]
    packages = {pattern.rstrip("*") for pattern in find["include"]}
    copied = {args.split()[0] for instr, args in dockerfile_instructions(dockerfile) if instr == "COPY"}
    assert packages and packages <= copied, f"not copied: {sorted(packages - copied)}"


# -- smoke test: the services' commands as local processes ----------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The `indexer` service's command run to completion, then the `api` service's command started on a
    free loopback port; yields (api process, port, api service, log path). Stops the server at the end."""
    compose = load_compose()
    tmp = tmp_path_factory.mktemp("compose")
    volume_dirs = {name: tmp / f"volume-{name}" for name in compose["volumes"]}
    for folder in volume_dirs.values():
        folder.mkdir()
    indexer = LocalService(compose, "indexer", volume_dirs)
    job = subprocess.run(
        indexer.argv(), env=indexer.environment(), cwd=tmp, capture_output=True, text=True, timeout=600
    )
    assert job.returncode == 0, job.stdout + job.stderr

    api = LocalService(compose, "api", volume_dirs)
    port = free_port()
    assert api.spec["environment"]["FILL_HOST"] == "0.0.0.0"  # replaced: loopback only here
    env = api.environment(FILL_HOST="127.0.0.1", FILL_PORT=str(port))
    log = tmp / "api.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(api.argv(), env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield {"proc": proc, "port": port, "api": api, "log": log, "out": Path(indexer.environment()["INDEXER_OUT"])}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def wait_ready(stack) -> None:
    Server(stack["proc"], stack["port"], stack["log"]).wait_ready(READY_TIMEOUT)


def test_indexer_command_builds_the_index_into_the_volume(stack):
    out = stack["out"]
    assert out.parent.name == "volume-index"  # /index/default of the named volume `index`
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["documents"] == 64  # data/sample/encyclopedia.jsonl, the image's default corpus


def test_api_command_serves_readyz_and_fill(stack):
    wait_ready(stack)
    r = httpx.post(
        f"http://127.0.0.1:{stack['port']}/fill",
        timeout=60,
        json={"text": "Paris is the capital of <mask> .", "top_k": 3},
    )
    assert r.status_code == 200, r.text
    top = r.json()["masks"][0]["candidates"][0]
    assert top["phrase"] == "France", r.text
    assert top["evidence"][0]["doc_id"] == "enc-037"  # the sample's article on Paris


def test_api_healthcheck_command_passes_on_the_ready_server_and_fails_without_one(stack):
    wait_ready(stack)
    test = stack["api"].spec["healthcheck"]["test"]
    assert test[0] == "CMD"

    def run(port: int) -> subprocess.CompletedProcess:
        argv = [a.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for a in test[1:]]
        assert argv != test[1:], "the healthcheck does not name the container port 8000"
        assert argv[0] == "python"
        argv[0] = sys.executable
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    ok = run(stack["port"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert run(free_port()).returncode != 0  # nothing listens there


def test_api_stops_on_sigterm(stack):
    """Last of the smoke tests: `docker stop` sends SIGTERM; the server shuts down gracefully by itself
    (uvicorn re-raises the signal once it has shut down, so the exit status is 0 or -SIGTERM)."""
    wait_ready(stack)
    proc = stack["proc"]
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("api still running 30 s after SIGTERM")
    log = stack["log"].read_text(errors="replace")
    assert code in (0, -signal.SIGTERM), log
    assert "shutdown complete" in log.lower(), log

"""The Ray path (FILL_BACKEND=ray) on a local Ray started by the test: shard groups as Serve applications, this
process the ingress. Its fills and scores equal the local engine's, response for response; a group without a
replica answering fails a request with 503 naming it; a replica killed under load costs no request."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray path needs `pip install .[ray]` (deploy/setup.sh installs it)")
serve = pytest.importorskip("ray.serve")

from common.errors import AppError  # noqa: E402
from fill.engine import FillEngine  # noqa: E402
from fill.schemas import FillRequest, ScoreRequest  # noqa: E402
from service.config import Settings  # noqa: E402
from service.ray_group import app_name  # noqa: E402
from service.state import open_engine  # noqa: E402
from tests.service.test_server_process import clean_env, exercise, free_port, start_server  # noqa: E402,F401

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


QUERIES = [
    "Allan Peiper was born in <mask> .",
    "Paris is the capital of <mask> .",
    "<mask> was born in Warsaw in <mask> .",
    "The <mask> flows through Paris.",
]
VOLATILE = {"took_ms", "timings_ms"}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    serve.shutdown()
    ray.shutdown()


def ray_settings(index, **extra) -> Settings:
    return Settings(
        index=index,
        backend="ray",
        **{"ray_groups": 2, "ray_replicas": 1, "ray_app": "t", "ray_timeout": 600.0, **extra},
    )


@pytest.fixture(scope="module")
def engines(local_ray, tiny_index):
    local = FillEngine.open(Settings(index=tiny_index).engine_config())
    remote = open_engine(ray_settings(tiny_index))
    yield local, remote
    local.close()
    remote.close()


def replica_names(app: str) -> list[str]:
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(f"SERVE_REPLICA::{app}#")
    ]


def test_the_groups_split_the_shards(engines):
    _, remote = engines
    groups = remote.shards.groups
    assert [g.name for g in groups] == ["t-group-0", "t-group-1"]
    assert [s for g in groups for s in g.shard_nos] == list(range(len(remote.index.manifest.shards)))
    # the ingress opens the shards' text side only (windows, evidence): no FAISS index, no vectors
    assert len(remote.index.shards) == len(remote.index.manifest.shards)
    assert not any(s.dense for s in remote.index.shards)


@pytest.mark.parametrize("mode", ["dense", "hybrid", "restricted"])
def test_a_fill_is_one_round_per_group(engines, mode):
    _, remote = engines
    before = remote.shards.calls
    remote.fill(FillRequest(text=QUERIES[2], mode=mode, evidence=3))
    if mode == "restricted":  # no search: a call to each group holding a BM25 block
        assert 1 <= remote.shards.calls - before <= len(remote.shards.groups)
    else:
        assert remote.shards.calls - before == len(remote.shards.groups)


@pytest.mark.parametrize("mode", ["dense", "hybrid", "restricted"])
def test_ray_fills_equal_the_local_engine(engines, mode):
    local, remote = engines
    for text in QUERIES:
        for options in ({}, {"top_k": 5, "evidence": 3, "max_span_tokens": 4}, {"alpha": 0.5, "aggregate": "sum"}):
            request = FillRequest(text=text, mode=mode, **options)
            want = local.fill(request).model_dump(exclude=VOLATILE)
            got = remote.fill(request).model_dump(exclude=VOLATILE)
            assert got == want, (text, options)
            assert any(m["candidates"] for m in got["masks"])  # something was filled and compared


@pytest.mark.parametrize("scorer", ["npm", "npm_single"])
def test_ray_scores_equal_the_local_engine(engines, scorer):
    local, remote = engines
    for mode in ("dense", "hybrid", "restricted"):
        request = ScoreRequest(
            text="Marie Curie was born in <mask> .",
            choices=["Warsaw", "Paris", "France"],
            mode=mode,
            scorer=scorer,
            evidence=2,
        )
        want = local.score(request).model_dump(exclude=VOLATILE)
        assert remote.score(request).model_dump(exclude=VOLATILE) == want


def test_a_group_with_no_replica_answering_gets_503_naming_it(local_ray, tiny_index):
    """No step waits on the machine's speed: the healthy phases wait for an answer as long as it takes (a timeout
    of an hour), the dead replica's phase needs no answer at all (its group is called first: it is the one named)."""
    engine = open_engine(ray_settings(tiny_index, ray_app="gone", ray_timeout=0.5))
    groups = engine.shards
    try:
        request = FillRequest(text=QUERIES[0], mode="dense")
        groups.timeout = 3600.0
        assert engine.fill(request).masks[0].candidates  # both groups answer, however busy the machine
        ray.kill(ray.get_actor(replica_names(app_name("gone", 0))[0], namespace="serve"), no_restart=True)
        groups.timeout = 0.5
        with pytest.raises(AppError) as caught:  # until Serve has started another replica
            engine.fill(request)
        assert caught.value.kind == "not_ready" and caught.value.status == 503
        assert "gone-group-0 (shards 0-1) did not answer in 0.5 s (FILL_RAY_TIMEOUT)" in caught.value.message
        serve.delete(app_name("gone", 1))
        groups.timeout = 3600.0  # group 0 answers once Serve has replaced its replica; group 1 is gone
        with pytest.raises(AppError) as caught:
            engine.fill(request)
        assert caught.value.kind == "not_ready" and caught.value.status == 503
        assert "gone-group-1 (shard 2) is not deployed" in caught.value.message
    finally:
        engine.close()


def test_a_replica_killed_under_load_costs_no_request(local_ray, tiny_index):
    """What it checks is that no request fails, not how fast: the group timeout is an hour (5 s failed one request
    beside two busy processes), and the wait for the replacement replica ends when it is there."""
    settings = ray_settings(tiny_index, ray_app="kill", ray_groups=1, ray_replicas=2, ray_timeout=3600.0)
    engine = open_engine(settings)
    failures, done, stop = [], [0], threading.Event()

    def client(n: int) -> None:
        while not stop.is_set():
            try:
                engine.fill(FillRequest(text=QUERIES[n % len(QUERIES)], mode="hybrid"))
                done[0] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is counted
                failures.append(repr(exc))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(3)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        before = replica_names("kill-group-0")
        assert len(before) == 2
        ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
        at_kill = done[0]
        deadline = time.monotonic() + 600  # a bound on a hang, not a speed: the loop ends once both happened
        while time.monotonic() < deadline and (
            len(set(replica_names("kill-group-0")) - set(before)) < 1 or done[0] < at_kill + 20
        ):
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        engine.close()
    assert set(replica_names("kill-group-0")) - set(before), "Serve did not start a replacement replica"
    assert done[0] >= at_kill + 20 and failures == []


def test_one_replica_answers_several_calls_at_once(local_ray, tiny_index):
    """Four calls that each take 0.8 s (a simulated hop of 0.4 s each way) on one replica finish together, not one
    after another (3.2 s): a replica serves several calls at once (service.ray_group)."""
    from service.ray_group import ShardGroupReplica

    app = ShardGroupReplica.bind(str(tiny_index), [0], None, None, None, False, 400.0, "t")
    handle = serve.run(app, name="slow", route_prefix=None)
    try:
        handle.gather.remote([]).result(timeout_s=300)  # the replica is up
        t0 = time.perf_counter()
        responses = [handle.gather.remote([]) for _ in range(4)]
        assert [r.result(timeout_s=300) for r in responses] == [[]] * 4
        assert time.perf_counter() - t0 < 4 * 0.8  # less than one after another takes at the least, whatever the load
    finally:
        serve.delete("slow")


def test_the_local_server_never_imports_ray():
    code = (
        "import sys, service.server, service.state, service.api, service.__main__; "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_server_process_serves_through_its_own_ray(start_server, tiny_index):
    port = free_port()
    server = start_server(
        ["--index", str(tiny_index), "--port", str(port)],
        clean_env(FILL_BACKEND="ray", FILL_RAY_GROUPS="2", FILL_RAY_APP="proc"),
        port,
    )
    server.wait_ready()
    exercise(server)
    log = server.output()
    assert "shard group proc-group-0 (shards [0, 1])" in log and "shard group proc-group-1 (shards [2])" in log


def test_a_changed_index_is_redeployed_by_a_reload_and_refused_by_an_attaching_ingress(
    local_ray, tiny_index, fresh_copy
):
    from indexer.update import AddConfig, run_add
    from tests.conftest import write_jsonl

    index = fresh_copy(tiny_index)
    first = open_engine(ray_settings(index, ray_app="gen"))
    first.close()
    story = write_jsonl(index.parent / "add.jsonl", [{"id": "ada", "text": "Ada Quint was born in Lisbon."}])
    run_add(AddConfig(index=index, corpus=story))
    with pytest.raises(AppError, match="serves another generation .* redeploy the groups"):
        open_engine(ray_settings(index, ray_app="gen", ray_deploy=False))
    remote = open_engine(ray_settings(index, ray_app="gen"))  # what a reload does: the groups are redeployed
    local = FillEngine.open(Settings(index=index).engine_config())
    try:
        request = FillRequest(text="Ada Quint was born in <mask> .", mode="restricted", evidence=3)
        got = remote.fill(request).model_dump(exclude=VOLATILE)
        assert got == local.fill(request).model_dump(exclude=VOLATILE)
        assert "ada" in {e["doc_id"] for c in got["masks"][0]["candidates"] for e in c["evidence"]}
        attached = open_engine(ray_settings(index, ray_app="gen", ray_deploy=False))
        assert attached.fill(request).model_dump(exclude=VOLATILE) == got
        attached.close()
    finally:
        remote.close()
        local.close()


def test_documents_cannot_change_through_a_ray_ingress(tiny_index):
    from service.state import ServiceState

    state = ServiceState(Settings(index=tiny_index, backend="ray"))
    with pytest.raises(AppError) as caught:
        state.documents.apply(lambda update: None, "add 1 document")
    assert caught.value.kind == "conflict" and caught.value.status == 409 and "indexer add" in caught.value.message
    state.close()

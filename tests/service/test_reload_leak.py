"""Reloads release what they replace (issue 86): N reloads with no traffic leave the process's threads, open files
and memory where the first two left them, whether the new index reuses the served models (the same model files and
settings: fill.models) or brings another model (the old encoder's inference thread and compiled model closed).
Before, every reload kept the old encoder for good (its inference thread's initializer was bound to it), with its
OpenVINO compiled model, its threads and its cache file: +3 threads, +1 descriptor and ~150 MB a reload on the
demo's index."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fill.engine import FillEngine
from indexer.build import BuildConfig, build_index
from service.api import create_app
from service.config import Settings
from service.state import ServiceState

KEY = {"Authorization": "Bearer admin-key"}
RELOADS = 8
THREAD_SLACK = 2  # threads a pool of the server may start meanwhile (e.g. one more worker of the route's pool)
FD_SLACK = 2  # descriptors the same way (e.g. a socket of the test client)
RSS_SLACK_MB = 40  # allocator noise of a tiny model's reload (a leaked tiny encoder was ~15 MB a reload: +90 MB here)


def resources() -> dict[str, int]:
    """This process's threads (the kernel's: OpenVINO's own threads too), open descriptors and resident MB, once the
    background checks of the reloads so far (`warm-pages`: they end by themselves) are done."""
    for thread in threading.enumerate():
        if thread.name == "warm-pages":
            thread.join()
    status = Path("/proc/self/status").read_text()
    rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
    return {
        "threads": len(os.listdir("/proc/self/task")),
        "fds": len(os.listdir("/proc/self/fd")),
        "rss_mb": rss_kb // 1024,
    }


@pytest.fixture(scope="module")
def roberta_index(tmp_path_factory, tiny_corpus, tiny_roberta_dir) -> Path:
    """An index of the same corpus built with the tiny RoBERTa: another model than tiny_index's."""
    out = tmp_path_factory.mktemp("reload_leak") / "index-roberta"
    build_index(BuildConfig(corpus=tiny_corpus, out=out, model=tiny_roberta_dir, block_tokens=16, shard_tokens=30))
    return out


@pytest.fixture()
def served(tiny_index, roberta_index, tmp_path):
    """A client over a copy of tiny_index (reload root: tmp_path), and a copy of roberta_index beside it."""
    index, other = tmp_path / "index-bert", tmp_path / "index-roberta"
    shutil.copytree(tiny_index, index)
    shutil.copytree(roberta_index, other)
    settings = Settings(index=index, admin_keys="admin-key", warm=False, reload_root=tmp_path)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as client:
        yield client, state, other
    state.close()


def reload_n(client: TestClient, bodies: list[dict]) -> list[dict[str, int]]:
    """Each body POSTed to /admin/reload (each must succeed); the resources after each."""
    after = []
    for body in bodies:
        r = client.post("/admin/reload", json=body, headers=KEY)
        assert r.status_code == 200, r.text
        after.append(resources())
    return after


def assert_flat(after: list[dict[str, int]]) -> None:
    """After the last reload: no more threads or descriptors than after the second (plus their slack), and the
    resident memory within RSS_SLACK_MB of it."""
    base, last = after[1], after[-1]
    assert last["threads"] <= base["threads"] + THREAD_SLACK, after
    assert last["fds"] <= base["fds"] + FD_SLACK, after
    assert last["rss_mb"] <= base["rss_mb"] + RSS_SLACK_MB, after


def test_reloads_of_the_same_index_reuse_its_models_and_leak_nothing(served):
    client, state, _ = served
    encoder, reader = state.engine.encoder, state.engine.reader
    assert_flat(reload_n(client, [{}] * RELOADS))
    assert state.engine.encoder is encoder and state.engine.reader is reader  # the same files: the same models
    assert state.engine.models.encoder.users == 1  # every engine it served before was closed
    r = client.post("/fill", json={"text": "Marie Curie was born in <mask> ."}, headers=KEY)
    assert r.status_code == 200, r.text


def test_reloads_to_an_index_of_another_model_release_the_old_one(served):
    client, state, other = served
    first = state.engine.encoder
    after = reload_n(client, [{"index": str(other)}, {}] * (RELOADS // 2))  # roberta, bert, roberta, ...
    assert_flat(after)
    assert state.engine.encoder is not first and first._closed  # the first bert encoder: released, not reused
    assert client.get("/info", headers=KEY).json()["model"]["name"] == first.model_dir.name
    r = client.post("/admin/reload", json={"index": str(other)}, headers=KEY)
    assert r.status_code == 200 and client.get("/info", headers=KEY).json()["index"] == "index-roberta", r.text
    r = client.post("/fill", json={"text": "Paris is the capital of <mask> ."}, headers=KEY)
    assert r.status_code == 200, r.text

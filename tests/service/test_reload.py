"""Hot reload: POST /admin/reload swaps the index without failing a request in flight or arriving; the
old index is released after its last request; a failed reload leaves the old index serving."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.state import ServiceState

KEY = {"Authorization": "Bearer admin-key"}


@pytest.fixture()
def served(tiny_index, tmp_path):
    """A client over tiny_index with an API key, and a second copy of that index under another name."""
    other = tmp_path / "index-b"
    shutil.copytree(tiny_index, other)
    settings = Settings(index=tiny_index, admin_keys="admin-key", warm=False, reload_root=tmp_path)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as client:
        yield client, state, other
    state.close()


def test_reload_swaps_to_another_index_and_releases_the_old(served):
    client, state, other = served
    old = state.serving
    r = client.post("/admin/reload", json={"index": str(other)}, headers=KEY)
    assert r.status_code == 200, r.text
    assert r.json()["index"] == "index-b" and r.json()["tokens"] > 0
    assert client.get("/info", headers=KEY).json()["index"] == "index-b"
    assert state.serving is not old
    assert old.batcher._closed  # released: no request was using it
    r = client.post("/fill", json={"text": "Marie Curie was born in <mask> ."}, headers=KEY)
    assert r.status_code == 200, r.text
    assert 'index_reloads_total{outcome="ok"} 1.0' in client.get("/metrics", headers=KEY).text


def test_reload_without_an_index_reads_the_configured_one_again(served):
    client, state, _ = served
    before = state.serving
    r = client.post("/admin/reload", json={}, headers=KEY)
    assert r.status_code == 200, r.text
    assert state.serving is not before and r.json()["index"] == state.settings.index.name


def test_a_failed_reload_keeps_the_old_index_serving(served, tmp_path):
    client, state, _ = served
    before = state.serving
    r = client.post("/admin/reload", json={"index": str(tmp_path / "nowhere")}, headers=KEY)
    assert r.status_code == 422, r.text
    assert "reload failed, still serving the previous index" in r.json()["error"]
    assert str(tmp_path) not in r.json()["error"]  # no server paths
    assert state.serving is before
    assert client.post("/fill", json={"text": "<mask>"}, headers=KEY).status_code == 200
    assert 'index_reloads_total{outcome="failed"} 1.0' in client.get("/metrics", headers=KEY).text


def test_a_reload_of_an_unresolvable_path_is_a_422(served):
    client, state, _ = served
    before = state.serving
    r = client.post("/admin/reload", json={"index": "a\u0000b"}, headers=KEY)
    assert r.status_code == 422 and "still serving the previous index" in r.json()["error"], r.text
    assert state.serving is before


def test_reload_needs_an_admin_key_and_refuses_before_reading_the_body(served, tiny_index):
    client, state, other = served
    before = state.serving
    assert client.post("/admin/reload", json={"index": str(other)}).status_code == 401
    settings = Settings(index=tiny_index)
    with TestClient(
        create_app(settings, state=ServiceState(settings, engine=FillEngine.open(settings.engine_config()))),
        raise_server_exceptions=False,
    ) as open_client:
        for body in ({"index": str(other)}, {"index": 7, "extra": True}):  # a bad body too: 403, not 422
            r = open_client.post("/admin/reload", json=body)
            assert r.status_code == 403 and r.json()["error_type"] == "forbidden", r.text
            assert "FILL_ADMIN_KEYS" in r.json()["error"]
    assert state.serving is before


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda d: (d / "loop").symlink_to(d / "loop"), "cannot be resolved: a symlink loop"),
        (lambda d: None, "does not exist"),
        (lambda d: (d / "loop").write_text("x"), "is not a directory"),
        (lambda d: (d / "loop").mkdir(mode=0), "cannot be read by the server"),
    ],
    ids=["symlink loop", "missing", "a file", "no permission"],
)
def test_a_reload_path_that_cannot_be_served_is_a_422_naming_it(served, tmp_path, make, problem):
    client, state, _ = served
    if problem.startswith("cannot be read") and os.geteuid() == 0:
        pytest.skip("root reads a directory of mode 000")
    before = state.serving
    make(tmp_path)
    r = client.post("/admin/reload", json={"index": str(tmp_path / "loop")}, headers=KEY)
    assert r.status_code == 422, r.text
    assert f"loop {problem}" in r.json()["error"] and r.json()["detail"][0]["loc"] == ["body", "index"]
    assert state.serving is before


def test_reload_serves_only_directories_under_the_reload_root(tiny_index, tmp_path):
    """The default root is the directory that holds the configured index: an admin key cannot make the server
    read a directory elsewhere, also not through a symlink under the root."""
    root = tmp_path / "indexes"
    served, other = root / "a", tmp_path / "elsewhere"
    shutil.copytree(tiny_index, served)
    shutil.copytree(tiny_index, other)
    (root / "link").symlink_to(other)
    shutil.copytree(tiny_index, root / "b")
    settings = Settings(index=served, admin_keys="admin-key", warm=False)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as client:
        for path in (other, root / "link", root / "b" / ".." / ".." / "elsewhere"):
            r = client.post("/admin/reload", json={"index": str(path)}, headers=KEY)
            assert r.status_code == 422 and "is not under the reload root" in r.json()["error"], r.text
        assert client.post("/admin/reload", json={"index": str(root / "b")}, headers=KEY).status_code == 200
    state.close()


def test_reload_under_load_fails_no_request(served):
    client, state, other = served
    statuses: list[int] = []
    stop = threading.Event()

    def load():
        while not stop.is_set():
            statuses.append(
                client.post("/fill", json={"text": "The Seine flows through <mask> ."}, headers=KEY).status_code
            )

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for target in (other, state.settings.index, other):
            r = client.post("/admin/reload", json={"index": str(target)}, headers=KEY)
            assert r.status_code == 200, r.text
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert len(statuses) > 10 and set(statuses) == {200}, statuses


def _flip_last_byte(path) -> None:
    """Change one byte of a file in place, keeping its size: only a hash of every byte sees it."""
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_an_empty_reload_goes_back_to_the_configured_index(served):
    client, state, other = served
    assert client.post("/admin/reload", json={"index": str(other)}, headers=KEY).json()["index"] == "index-b"
    r = client.post("/admin/reload", json={}, headers=KEY)  # as SIGHUP does: the configured --index
    assert r.status_code == 200 and r.json()["index"] == state.configured.name != "index-b"
    assert client.get("/info", headers=KEY).json()["index"] == state.configured.name


def test_a_reload_checks_every_sha256_before_it_swaps(served):
    client, state, other = served
    _flip_last_byte(other / "shard_00000" / "vectors.npy")
    before = state.serving
    r = client.post("/admin/reload", json={"index": str(other)}, headers=KEY)
    assert r.status_code == 422 and "vectors.npy does not match the manifest's sha256" in r.text, r.text
    assert str(other.parent) not in r.text  # neither the error nor its detail shows a server path
    assert (
        state.serving is before
        and client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code == 200
    )


@pytest.mark.parametrize("damaged_file", ["vectors.npy", "index.faiss", "token_ids.npy"])
def test_a_file_changed_in_place_turns_the_server_not_ready_naming_it(tiny_index, tmp_path, damaged_file):
    """Served at start without a check (check_before_ready off: ready at once), then found by the background
    sha256 check (index.faiss), or when the shard opens: the tiny index's small .npy files are read whole and
    checked against their block checksums then (indexer.checksums)."""
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    _flip_last_byte(root / "shard_00001" / damaged_file)
    settings = Settings(index=root, admin_keys="admin-key", warm=True, check_before_ready=False, recheck_seconds=0)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        for _ in range(300):
            r = client.get("/readyz")
            if r.status_code == 503 and damaged_file in r.text:
                break
            threading.Event().wait(0.1)  # no faster than the probes' rate limit (FILL_PROBE_RATE: 10 a second)
        assert r.status_code == 503 and re.search(f"shard_00001/{damaged_file} (does|has .*) not match", r.text), r.text
        assert str(tmp_path) not in r.text
        fill = client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY)
        assert fill.status_code == 503 and damaged_file in fill.json()["error"]
        assert "index_integrity_failures_total 1.0" in client.get("/metrics", headers=KEY).text
    state.close()


def test_warming_builds_the_word_table_of_scores_synonyms(tiny_index):
    settings = Settings(index=tiny_index, admin_keys="admin-key", warm=True, check_before_ready=False)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True)) as client:
        _wait_for(client, "/readyz", 200, "")
        encoder = state.serving.engine.encoder
        deadline = time.monotonic() + 60.0  # the background warm-up thread
        while "word_neighbours" not in vars(encoder) and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        assert "word_neighbours" in vars(encoder)  # built without a /score asking for it
    state.close()


def _wait_for(client, path: str, status: int, words: str, seconds: float = 60.0):
    deadline = time.monotonic() + seconds  # generous: the loading thread may share busy cores
    while True:
        r = client.get(path)
        if r.status_code == status and words in r.text:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never answered {status} with {words!r}: {r.status_code} {r.text}")
        threading.Event().wait(0.1)  # no faster than the probes' rate limit (FILL_PROBE_RATE: 10 a second)


def test_a_damaged_index_is_never_served_when_checked_before_ready(tiny_index, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    _flip_last_byte(root / "shard_00002" / "vectors.npy")
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0)  # check_before_ready is the default
    fatal: list[str] = []
    state = ServiceState(settings, on_fatal=fatal.append)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        answers, deadline = [], time.monotonic() + 60
        while not fatal and time.monotonic() < deadline:
            answers.append(client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code)
            threading.Event().wait(0.02)
        answers.append(client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code)
        assert set(answers) == {503}, answers  # not one fill from the damaged index, before or after the check
        r = _wait_for(client, "/readyz", 503, "failed to load")
        assert re.search("shard_00002/vectors.npy (does|has .*) not match", r.json()["error"]), r.text
    assert fatal and "vectors.npy" in fatal[0]  # the server exits naming the file
    state.close()


def _zero_in_place(path) -> None:
    """Zero a .npy payload through a shared map, as a stray process might: size and inode kept."""
    mapped = np.load(path, mmap_mode="r+")
    mapped[:] = 0
    mapped.flush()
    del mapped


def test_a_file_written_in_place_while_served_turns_the_server_not_ready(tiny_index, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0.05)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, "/readyz", 200, "")
        assert client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code == 200
        _zero_in_place(root / "shard_00001" / "vectors.npy")
        r = _wait_for(client, "/readyz", 503, "check failed")
        assert "shard_00001/vectors.npy does not match" in r.json()["error"], r.text
        assert client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code == 503
    state.close()


def test_a_reload_that_finds_the_served_files_damaged_stops_serving_them(tiny_index, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0)  # no watching: the reload finds it
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, "/readyz", 200, "")
        good = (root / "shard_00000" / "token_ids.npy").read_bytes()
        _flip_last_byte(root / "shard_00000" / "token_ids.npy")
        r = client.post("/admin/reload", json={}, headers=KEY)
        assert r.status_code == 503 and "served index is damaged too" in r.json()["error"], r.text
        assert "token_ids.npy does not match" in client.get("/readyz").json()["error"]
        (root / "shard_00000" / "token_ids.npy").write_bytes(good)  # restored: a reload serves it again
        assert client.post("/admin/reload", json={}, headers=KEY).status_code == 200
        assert client.get("/readyz").status_code == 200
    state.close()


def test_writers_beside_the_server_are_not_damage_to_the_watch(tiny_index, tiny_bert_dir, tmp_path):
    """Changes made beside a watched server (`indexer add`, `delete`, `compact` without a reload) write new files
    and collect a superseded generation's, here the served generation's tombstones: the served generation stays
    ready and answers (its data is in memory or still mapped)."""
    from indexer.compact import CompactConfig, run_compact
    from indexer.update import AddConfig, DeleteConfig, run_add, run_delete
    from tests.conftest import write_jsonl

    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    run_delete(DeleteConfig(index=root, ids=["d1"]))  # the served generation (1) has a tombstones file
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0.02)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, "/readyz", 200, "")
        served = [p for p, _ in state.engine.index.files.all()]
        corpus = write_jsonl(tmp_path / "add.jsonl", [{"id": "n1", "text": "Vexmoor is a harbour town."}])
        run_add(AddConfig(index=root, corpus=corpus, model=tiny_bert_dir, device="cpu", dtype="fp32"))
        run_delete(DeleteConfig(index=root, ids=["d2"]))
        run_compact(CompactConfig(index=root))
        assert any(not p.exists() for p in served)  # collected
        threading.Event().wait(0.5)  # many watch periods
        assert client.get("/readyz").status_code == 200, client.get("/readyz").text
        assert client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code == 200
    state.close()


def test_a_fill_that_reads_bytes_changed_in_place_gets_503_and_stops_the_serving(tiny_index, tmp_path, monkeypatch):
    """Damage with size and mtime kept, after every check at start and with no watch: the first fill that reads
    it answers 503 naming the file (never a wrong fill or a 500), and the server turns not ready."""
    from indexer import checksums

    monkeypatch.setattr(checksums, "IN_MEMORY_BELOW", 0)  # the tiny files mapped and checked on read, as large ones
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, "/readyz", 200, "")
        assert client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code == 200
        for shard in sorted(root.glob("shard_*")):
            path = shard / "vectors.npy"
            st, data = path.stat(), bytearray(path.read_bytes())
            data[128:] = bytes(b ^ 0x5A for b in data[128:])  # the payload, after the .npy header
            with open(path, "r+b") as f:
                f.write(data)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        fill = client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY)
        assert fill.status_code == 503 and "vectors.npy has bytes" in fill.json()["error"], fill.text
        assert str(tmp_path) not in fill.text
        r = client.get("/readyz")
        assert r.status_code == 503 and "check failed" in r.text and "vectors.npy" in r.text, r.text
        assert "index_integrity_failures_total 1.0" in client.get("/metrics", headers=KEY).text
    state.close()


def test_the_watch_finds_a_manifest_changed_in_place(tiny_index, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0.05)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, "/readyz", 200, "")
        path = root / "manifest.json"
        st, text = path.stat(), path.read_text()
        fp = json.loads(text)["model"]["fingerprint"]
        path.write_text(text.replace(f'"{fp}"', '"' + ("1" if fp[0] != "1" else "2") + fp[1:] + '"'))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime kept: only reading it tells
        r = _wait_for(client, "/readyz", 503, "check failed")
        assert "manifest.json does not match its own checksum" in r.json()["error"], r.text
        assert client.post("/fill", json={"text": "Paris is the <mask> ."}, headers=KEY).status_code == 503
    state.close()

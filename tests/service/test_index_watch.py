"""The served files watched whichever name writes them: a write through a hard link of `indexer merge` is never
answered from (inotify on each file's inode), and a file held in memory damaged in place, its mtime restored, turns
the server not ready naming it (the periodic watch compares the ctime too)."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
from fastapi.testclient import TestClient

from indexer.build import BuildConfig, build_index
from indexer.merge import MergeConfig, merge_indexes
from service.api import create_app
from service.config import Settings
from service.state import ServiceState
from tests.conftest import CORPUS, write_jsonl

KEY = {"Authorization": "Bearer admin-key"}
QUERY = {"text": "Paris is the <mask> ."}


def _xor_payload_keeping_mtime(path) -> None:
    """Every byte after the .npy header flipped in place, through this name; size and mtime restored."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(128)
        data = f.read()
        f.seek(128)
        f.write(bytes(b ^ 0x5A for b in data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def _wait_for(client, status: int, words: str, seconds: float = 60.0):
    deadline = time.monotonic() + seconds  # generous: the loading thread may share busy cores
    while True:
        r = client.get("/readyz")
        if r.status_code == status and words in r.text:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"/readyz never answered {status} with {words!r}: {r.status_code} {r.text}")
        threading.Event().wait(0.1)  # no faster than the probes' rate limit (FILL_PROBE_RATE: 10 a second)


@pytest.fixture()
def merged(tmp_path, tiny_bert_dir):
    """Two builds (halves of the corpus) and `indexer merge`'s index of both, whose files are hard links."""
    inputs = []
    for name, rows in (("a", CORPUS[:2]), ("b", CORPUS[2:])):
        corpus = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        inputs.append(tmp_path / name)
        build_index(BuildConfig(corpus=corpus, out=inputs[-1], model=tiny_bert_dir, block_tokens=16))
    merge_indexes(MergeConfig(out=tmp_path / "m", inputs=inputs))
    return tmp_path / "m", inputs


def test_a_write_through_a_merge_link_is_never_answered_from(merged, monkeypatch):
    """No stat watch (recheck 0): only the write events can tell. The directory of M's file sees no event for a
    write through A's name; the file's own inode does."""
    from indexer import checksums

    monkeypatch.setattr(checksums, "IN_MEMORY_BELOW", 0)  # the tiny files mapped and checked on read, as large ones
    root, inputs = merged
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, 200, "")
        assert client.post("/fill", json=QUERY, headers=KEY).status_code == 200  # its blocks checked, then trusted
        for n, source in enumerate(inputs):
            linked, written = root / f"shard_{n:05d}" / "vectors.npy", source / "shard_00000" / "vectors.npy"
            assert os.stat(linked).st_ino == os.stat(written).st_ino  # merge's own hard link: one file, two names
            _xor_payload_keeping_mtime(written)
        fill = client.post("/fill", json=QUERY, headers=KEY)
        assert fill.status_code == 503 and "vectors.npy has bytes" in fill.json()["error"], fill.text
        assert client.get("/readyz").status_code == 503
    state.close()


@pytest.mark.parametrize(
    "name", ["shard_00001/token_ids.npy", "shard_00001/checksums.npy", "shard_00000/index.faiss", "bm25.sqlite"]
)
def test_a_file_held_in_memory_damaged_with_its_mtime_restored_turns_the_server_not_ready(tiny_index, tmp_path, name):
    """Read whole when the index opened (fills keep answering from the good copy), but the operator is told: the
    watch sees the changed ctime, hashes the file again, and /readyz names it; a metric counts it."""
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0.05)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, 200, "")
        assert client.post("/fill", json=QUERY, headers=KEY).status_code == 200
        path = root / name
        st, raw = path.stat(), bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        with open(path, "r+b") as f:
            f.write(raw)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns) == (
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
        )
        r = _wait_for(client, 503, "check failed")
        assert f"{name} does not match" in r.json()["error"], r.text
        assert "index_integrity_failures_total 1.0" in client.get("/metrics", headers=KEY).text
    state.close()


def test_an_index_over_the_size_limit_is_ready_at_once_and_hashed_in_the_background(tiny_index, tmp_path):
    """check_before_ready_max_gb 0: no index is small enough, so it is served as soon as it opens; a damaged file
    that reads do not check block by block (index.faiss) is found by the background hashing, and the server turns
    not ready naming it (rather than exiting: it had already served)."""
    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    path = root / "shard_00000" / "index.faiss"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    fatal: list[str] = []
    settings = Settings(index=root, admin_keys="admin-key", recheck_seconds=0, check_before_ready_max_gb=0)
    state = ServiceState(settings, on_fatal=fatal.append)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        r = _wait_for(client, 503, "check failed")
        assert "shard_00000/index.faiss does not match" in r.json()["error"], r.text
        assert "index_integrity_failures_total 1.0" in client.get("/metrics", headers=KEY).text
    assert not fatal  # it was served: found after ready, not a failed start
    state.close()


def test_pages_are_warmed_only_when_the_index_fits_in_half_the_memory(tiny_index, monkeypatch):
    from service import index_watch

    for fits in (True, False):
        monkeypatch.setattr(index_watch, "pages_fit", lambda engine, fraction=0.5: fits)
        settings = Settings(index=tiny_index, warm=True, check_hashes=True, recheck_seconds=0)
        state = ServiceState(settings)
        with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
            _wait_for(client, 200, "")
            engine = state.engine
            index_watch.IndexWatch(state).warm(engine)  # as the background warm-up runs it
            assert all(shard.warmed for shard in engine.index.shards) is fits
            assert not engine.index.files.unverified()  # hashed either way
        state.close()


def test_index_bytes_and_the_memory_rule(tiny_index):
    from service.index_watch import index_bytes, memory_bytes, pages_fit

    settings = Settings(index=tiny_index)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, 200, "")
        size = index_bytes(state.engine)
        assert size == sum(p.stat().st_size for p, _ in state.engine.index.files.all())
        assert pages_fit(state.engine) and not pages_fit(state.engine, fraction=0.0)
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        assert 0 < (memory_bytes() or 0) <= physical  # the cgroup's limit where it is lower
    state.close()


def test_index_warm_says_when_the_background_warm_up_is_done(tiny_index, monkeypatch):
    from service import index_watch

    started, release = threading.Event(), threading.Event()

    def held(engine, fraction=0.5):  # the background warm-up's first step, held until released
        started.set()
        release.wait(60)
        return True

    monkeypatch.setattr(index_watch, "pages_fit", held)
    settings = Settings(index=tiny_index, warm=True, recheck_seconds=0)
    state = ServiceState(settings)
    with TestClient(create_app(settings, state=state, load=True), raise_server_exceptions=False) as client:
        _wait_for(client, 200, "")
        assert started.wait(60)
        assert "index_warm 0.0" in client.get("/metrics").text  # served, still warming
        release.set()
        deadline = time.monotonic() + 60
        while "index_warm 1.0" not in client.get("/metrics").text:
            assert time.monotonic() < deadline, "index_warm never turned 1"
            threading.Event().wait(0.05)
        assert all(shard.warmed for shard in state.engine.index.shards)
    state.close()

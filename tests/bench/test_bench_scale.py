"""bench/bench_scale.py: the grown corpus, the vectors drawn from real ones, and a run end to end on tiny sizes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bench.bench_scale import Resampler, grow_corpus, parse_size, size_name
from tests.conftest import REPO_ROOT, run_module, write_jsonl

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "encyclopedia.jsonl"


def test_sizes_read_with_their_suffixes():
    assert [parse_size(s) for s in ("3m", "1.5M", "20k", "2b", "12345")] == [
        3 * 10**6,
        1_500_000,
        20_000,
        2 * 10**9,
        12345,
    ]


def test_every_size_has_its_own_name():
    names = [size_name(n) for n in (3 * 10**6, 1_500_000, 20_000, 2500, 999, 10**9)]
    assert names == ["3m", "1500k", "20k", "2500", "999", "1000m"] and len(set(names)) == len(names)


def test_the_grown_corpus_repeats_the_documents_under_new_ids(tmp_path):
    base = write_jsonl(tmp_path / "base.jsonl", [{"id": f"d{i}", "text": f"text {i}"} for i in range(3)])
    out = grow_corpus(base, tokens=70, base_tokens=30, out=tmp_path / "grown.jsonl")  # 10 tokens a document
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["d0~0", "d1~0", "d2~0", "d0~1", "d1~1", "d2~1", "d0~2"]
    assert [r["text"] for r in rows[3:6]] == ["text 0", "text 1", "text 2"]


def test_each_token_gets_a_real_vector_of_its_own_id_plus_noise():
    ids = np.array([5, 7, 5, 9])
    vectors = np.array([[1, 0], [0, 1], [2, 0], [0, 3]], dtype=np.float16)
    blocks = [SimpleNamespace(ids=[5, 7]), SimpleNamespace(ids=[9, 5, 42])]
    exact = Resampler(ids, vectors, noise=0.0).encode_blocks(blocks)
    assert [v.shape for v in exact] == [(2, 2), (3, 2)]
    assert exact[0][0].tolist() in ([1, 0], [2, 0]) and exact[0][1].tolist() == [0, 1]
    assert exact[1][0].tolist() == [0, 3] and exact[1][1].tolist() in ([1, 0], [2, 0])
    assert exact[1][2].tolist() in vectors.astype(np.float32).tolist()  # an id never seen: any real vector
    noisy = Resampler(ids, vectors, noise=0.5).encode_blocks(blocks)
    assert not np.array_equal(noisy[0], exact[0])
    spread = vectors.astype(np.float32).std(axis=0)
    assert np.all(np.abs(noisy[0][1] - [0, 1]) <= 6 * 0.5 * spread)  # the noise is scaled to each dimension


@pytest.mark.slow  # builds two indexes and starts a server for each
def test_a_run_on_two_tiny_sizes_prints_their_figures(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--corpus", str(SAMPLE), "--out", str(tmp_path), "--sizes", "10k,20k", "--probes", "4", "--fills", "6"]
    out = run_module("bench.bench_scale", *args, "--calibration", "3000", "--port", str(port))
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["size"] for r in rows] == ["10k", "20k"]
    assert 0 < rows[0]["tokens"] < rows[1]["tokens"] and rows[1]["tokens"] >= 19_000
    for r in rows:
        assert r["disk_b_per_token"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] and r["anon_mib"] > 0 and r["ready_s"] > 0
        assert r["warm_s"] >= r["ready_s"]  # warm after ready, timed fills after warm
    assert out.splitlines()[-1].startswith("20k") and "p50" in out.splitlines()[-1]
    again = run_module("bench.bench_scale", *args, "--port", str(port))  # resumed: nothing made again
    assert [json.loads(line) for line in again.splitlines() if line.startswith("{")] == rows
    built = run_module(  # an index built elsewhere, measured by name
        "bench.bench_scale",
        "--corpus",
        str(SAMPLE),
        "--out",
        str(tmp_path / "given"),
        "--indexes",
        f"small={tmp_path / 'idx_10k'}",
        "--probes",
        "4",
        "--fills",
        "3",
        "--port",
        str(port),
    )
    (given,) = [json.loads(line) for line in built.splitlines() if line.startswith("{")]
    assert given["size"] == "small" and given["tokens"] == rows[0]["tokens"] and given["p50_ms"] > 0
    refused = subprocess.run(  # not an index: refused, naming what to give
        [sys.executable, "-m", "bench.bench_scale", "--corpus", str(SAMPLE), "--out", str(tmp_path / "x")]
        + ["--indexes", f"a={tmp_path}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode != 0 and "NAME=DIR pairs of built indexes" in refused.stderr

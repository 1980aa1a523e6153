"""A build killed with SIGKILL at any commit point resumes to the same index; the torchrun 2-process build."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from common.files import sha256_file
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it

ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "--block-tokens",
    "16",
    "--shard-tokens",
    "30",
    "--title-tokens",
    "4",
    "--batch-tokens",
    "64",
    "--device",
    "cpu",
    "--dtype",
    "fp32",
    "--index-type",
    "flat",
]

# Runs `indexer build` in forked children (imports paid once). A child given a crash point N counts
# the build's renames (every file and shard directory is committed by os.replace) and SIGKILLs itself
# just before the N-th one, i.e. with everything before it on disk and the N-th file fully written
# under its temporary name. Crash point 0 = no crash. Prints {case: exit status} as JSON.
CRASHER = r"""
import json, os, runpy, signal, sys
import indexer.cli, indexer.build  # the slow imports, done once
cases = json.loads(sys.argv[1])
status = {}
for case in cases:
    pid = os.fork()
    if pid == 0:
        log = os.open(case["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        real, count = os.replace, [0]
        def replace(src, dst, *a, **k):
            count[0] += 1
            if count[0] == case["crash_at"]:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(src, dst, *a, **k)
        os.replace = replace
        sys.argv = ["indexer", "build", *case["args"]]
        code = 0
        try:
            runpy.run_module("indexer", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        with open(case["log"] + ".renames", "w") as f:
            f.write(str(count[0]))
        os._exit(code)
    _, st = os.waitpid(pid, 0)
    status[case["name"]] = os.waitstatus_to_exitcode(st)
print(json.dumps(status))
"""


def _run(cases: list[dict], crasher: str = CRASHER) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-c", crasher, json.dumps(cases)], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _hashes(out: Path) -> dict[str, str]:
    return {f"{p.parent.name}/{p.name}": sha256_file(p) for p in sorted(out.glob("shard_*/*.npy"))}


def test_sigkill_at_every_commit_point_resumes_to_the_same_index(tiny_corpus, tiny_bert_dir, tmp_path):
    common = ["--corpus", str(tiny_corpus), "--model", str(tiny_bert_dir), *ARGS]
    ref = tmp_path / "ref"
    assert _run(
        [{"name": "ref", "crash_at": 0, "args": [*common, "--out", str(ref)], "log": str(tmp_path / "ref.log")}]
    ) == {"ref": 0}
    total = int(Path(str(tmp_path / "ref.log") + ".renames").read_text())  # renames of an uninterrupted build
    shards = Manifest.load(ref).counts.shards
    assert (
        shards >= 3 and total == shards + 3
    )  # build.json, every shard directory (all its files at once), bm25, manifest
    points = list(range(1, total + 1))
    crashes = [
        {
            "name": f"c{n}",
            "crash_at": n,
            "args": [*common, "--out", str(tmp_path / f"c{n}")],
            "log": str(tmp_path / f"c{n}.log"),
        }
        for n in points
    ]
    status = _run(crashes)
    assert all(status[f"c{n}"] == -signal.SIGKILL for n in points), status  # every point was reached
    for n in points:
        with pytest.raises(Exception, match="not a finished index"):
            PhraseIndex(tmp_path / f"c{n}")  # no reader ever sees a half-written index
    resumed = _run([{**c, "name": c["name"] + "r", "crash_at": 0, "log": c["log"] + ".r"} for c in crashes])
    assert set(resumed.values()) == {0}, {
        k: (v, Path(crashes[int(k[1:-1]) - 1]["log"] + ".r").read_text()[-500:]) for k, v in resumed.items() if v
    }
    want = _hashes(ref)
    ref_manifest = Manifest.load(ref)
    for n in points:
        out = tmp_path / f"c{n}"
        assert _hashes(out) == want, n
        m = Manifest.load(out)
        assert m.counts == ref_manifest.counts
        assert [s.files for s in m.shards] == [s.files for s in ref_manifest.shards]
        assert not list(out.glob("*.tmp")) and not list(out.glob("shard_*/*.tmp"))
        PhraseIndex(out, verify=True).close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_process_build_equals_single_process(tiny_corpus, tiny_bert_dir, tmp_path):
    common = ["--corpus", str(tiny_corpus), "--model", str(tiny_bert_dir), *ARGS]
    one, two = tmp_path / "one", tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "indexer", "build", *common, "--out", str(one)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(_free_port()),
            "-m",
            "indexer",
            "build",
            *common,
            "--out",
            str(two),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("built ") == 1  # rank 0 reports the whole index
    assert "rank 1 of 2" in proc.stderr and "rank 0 of 2" in proc.stderr
    m1, m2 = Manifest.load(one), Manifest.load(two)
    assert m2.counts == m1.counts and m2.counts.shards >= 3
    assert _hashes(two) == _hashes(one)
    assert [s.files for s in m2.shards] == [s.files for s in m1.shards]
    PhraseIndex(two, verify=True).close()

"""The real `indexer build` command line, run in subprocesses (in parallel, once per module)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CORPUS, write_jsonl

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it

ROOT = Path(__file__).resolve().parents[2]

# Every `python -m indexer` start pays ~5 s of torch/transformers imports. The error cases therefore run in
# processes forked from one helper that has done those imports once; each child still runs the real entry point
# (indexer/__main__.py, as `python -m indexer build ...` does) with its own argv, stdout, stderr and exit code.
# The success case and one error case are also run as plain `python -m indexer build ...` subprocesses.
FORK_SERVER = r"""
import json, os, runpy, sys
import indexer.cli, indexer.build  # the slow imports, done once
try:
    import transformers.models.bert.modeling_bert
except ImportError:
    pass
cases = json.loads(sys.argv[1])
codes = {}
for case in cases:
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            for fd, path in ((1, case["stdout"]), (2, case["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.argv = ["indexer", *case["args"]]
            try:
                runpy.run_module("indexer", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    codes[case["name"]] = os.waitstatus_to_exitcode(status)
print(json.dumps(codes))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=path, TOKENIZERS_PARALLELISM="false")
    return env


def _popen(argv: list[str], tmp: Path, name: str) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp / f"{name}.out", tmp / f"{name}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=fo, stderr=fe)
    return proc, out, err


def _run_all(cases: dict[str, list[str]], real: set[str], tmp: Path) -> dict[str, subprocess.CompletedProcess]:
    """Run `indexer build <args>` for every case; those in `real` as their own `python -m indexer` process."""
    forked = [name for name in cases if name not in real]
    if not hasattr(os, "fork"):  # no fork (Windows): every case as its own process
        real, forked = set(cases), []
    procs = {name: _popen([sys.executable, "-m", "indexer", "build", *cases[name]], tmp, name) for name in real}
    codes: dict[str, int] = {}
    if forked:
        spec = [
            {"name": n, "args": ["build", *cases[n]], "stdout": str(tmp / f"{n}.out"), "stderr": str(tmp / f"{n}.err")}
            for n in forked
        ]
        server = subprocess.run(
            [sys.executable, "-c", FORK_SERVER, json.dumps(spec)],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert server.returncode == 0, server.stderr
        codes.update(json.loads(server.stdout.strip().splitlines()[-1]))
    for name, (proc, _, _) in procs.items():
        codes[name] = proc.wait(timeout=600)
    return {
        name: subprocess.CompletedProcess(
            cases[name],
            codes[name],
            (tmp / f"{name}.out").read_text(errors="replace"),
            (tmp / f"{name}.err").read_text(errors="replace"),
        )
        for name in cases
    }


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory, tiny_bert_dir, tiny_corpus, tiny_index
) -> dict[str, tuple[subprocess.CompletedProcess, dict]]:
    """Every CLI case, run once per module: name -> (completed process, details for the checks)."""
    tmp = tmp_path_factory.mktemp("cli")
    model = str(tiny_bert_dir)
    small = ["--block-tokens", "16", "--shard-tokens", "30", "--device", "cpu"]

    csv = tmp / "corpus.csv"
    csv.write_text("id,text\n1,hello\n")
    no_text = write_jsonl(tmp / "no_text.jsonl", [{"id": "a", "body": "hello"}, {"id": "b", "body": "world"}])
    empty = tmp / "empty.jsonl"
    empty.write_text("")
    empty_model = tmp / "empty_model"
    empty_model.mkdir()
    garbage_model = tmp / "garbage_model"
    garbage_model.mkdir()
    (garbage_model / "config.json").write_text("{not json at all")
    broken = tmp / "broken.jsonl"
    broken.write_text('{"id": "a", "text": "Paris is a city."\n{"id": "b", "text": "Rome is a city."}\n')
    existing = tmp / "existing_index"
    shutil.copytree(tiny_index, existing)

    cases: dict[str, tuple[list[str], dict]] = {
        "ok": (
            ["--corpus", str(tiny_corpus), "--out", str(tmp / "out_ok"), "--model", model, *small],
            {"out": tmp / "out_ok"},
        ),
        "missing_corpus": (
            ["--corpus", str(tmp / "nope.jsonl"), "--out", str(tmp / "o1"), "--model", model],
            {"names": str(tmp / "nope.jsonl")},
        ),
        "csv": (["--corpus", str(csv), "--out", str(tmp / "o2"), "--model", model], {"names": str(csv)}),
        "no_text": (
            ["--corpus", str(no_text), "--out", str(tmp / "o3"), "--model", model, *small],
            {"names": str(no_text), "also": "text"},
        ),
        "broken_line": (
            ["--corpus", str(broken), "--out", str(tmp / "o12" / "idx"), "--model", model, *small],
            {"names": str(broken), "removed": tmp / "o12" / "idx"},
        ),
        "empty_corpus": (
            ["--corpus", str(empty), "--out", str(tmp / "o4"), "--model", model, *small],
            {"names": str(empty)},
        ),
        "empty_model": (
            ["--corpus", str(tiny_corpus), "--out", str(tmp / "o5"), "--model", str(empty_model)],
            {"names": str(empty_model)},
        ),
        "garbage_model": (
            ["--corpus", str(tiny_corpus), "--out", str(tmp / "o6"), "--model", str(garbage_model)],
            {"names": str(garbage_model)},
        ),
        "different_index": (
            [
                "--corpus",
                str(tiny_corpus),
                "--out",
                str(existing),
                "--model",
                model,
                "--block-tokens",
                "20",
                "--shard-tokens",
                "30",
            ],
            {"names": str(existing), "also": "--overwrite"},
        ),
        "block_tokens_too_large": (
            ["--corpus", str(tiny_corpus), "--out", str(tmp / "o8"), "--model", model, "--block-tokens", "200"],
            {"also": "--block-tokens"},
        ),
        "bad_index_type": (
            [
                "--corpus",
                str(tiny_corpus),
                "--out",
                str(tmp / "o9"),
                "--model",
                model,
                "--index-type",
                "IVF-nonsense",
                *small,
            ],
            {"names": "IVF-nonsense", "also": "ivfpq"},
        ),
        "bad_memory_budget": (
            [
                "--corpus",
                str(tiny_corpus),
                "--out",
                str(tmp / "o10"),
                "--model",
                model,
                "--memory-budget",
                "lots",
                *small,
            ],
            {"names": "lots", "also": "--memory-budget"},
        ),
        "bad_vector_dtype": (
            [
                "--corpus",
                str(tiny_corpus),
                "--out",
                str(tmp / "o11"),
                "--model",
                model,
                "--vector-dtype",
                "int4",
                *small,
            ],
            {"also": "--vector-dtype"},
        ),
    }
    completed = _run_all({name: args for name, (args, _) in cases.items()}, {"ok", "missing_corpus"}, tmp)
    results = {name: (completed[name], cases[name][1]) for name in cases}
    results["_existing_manifest"] = (
        None,
        {"path": existing / "manifest.json", "before": (tiny_index / "manifest.json").read_text()},
    )
    return results


def test_success_prints_summary(runs):
    proc, info = runs["ok"]
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    for word in ("documents", "blocks", "tokens", "shards"):
        assert word in line
    m = re.search(r"(\d+) documents \((\d+) empty\), (\d+) blocks, (\d+) tokens, (\d+) shards", line)
    assert m, line
    docs, empty, blocks, tokens, shards = map(int, m.groups())
    assert (docs, empty) == (len(CORPUS), 1)
    assert shards >= 2
    manifest = json.loads((info["out"] / "manifest.json").read_text())
    assert manifest["counts"] == {
        "documents": docs,
        "empty_documents": empty,
        "blocks": blocks,
        "tokens": tokens,
        "shards": shards,
        "deleted_documents": 0,
        "deleted_tokens": 0,
    }
    assert len(list(info["out"].glob("shard_*"))) == shards


ERROR_CASES = [
    "missing_corpus",
    "csv",
    "no_text",
    "broken_line",
    "empty_corpus",
    "empty_model",
    "garbage_model",
    "different_index",
    "block_tokens_too_large",
    "bad_index_type",
    "bad_memory_budget",
    "bad_vector_dtype",
]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_exit_code_and_message(runs, case):
    proc, info = runs[case]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "Traceback" not in proc.stdout
    assert "error:" in proc.stderr
    if "names" in info:
        assert info["names"] in proc.stderr
    if "also" in info:
        assert info["also"] in proc.stderr
    assert "built " not in proc.stdout  # no success summary
    if "removed" in info:  # a build that fails before its first shard removes the directory it created
        assert not info["removed"].exists() and info["removed"].parent.is_dir()


def test_refused_build_leaves_existing_index_alone(runs):
    _, info = runs["_existing_manifest"]
    assert info["path"].read_text() == info["before"]

"""An `indexer add`, `delete` or `compact` killed with SIGKILL before any of its renames (each file it writes, then
the manifest, the commit) leaves the index as it was, never a mix: it opens, passes the sha256 check and serves
exactly the old documents; run again, the writer removes what the killed one left and ends at the new index."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from indexer.phrase_index import PhraseIndex
from tests.conftest import write_jsonl
from tests.indexer.test_crash_resume import CRASHER
from tests.indexer.test_crash_resume import _run as run_crasher
from tests.indexer.test_update import _live_docs

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ADD = [
    {"id": "d2", "title": "Rome", "text": "Rome is the capital of Italy."},
    {"id": "n1", "title": "Vexmoor", "text": "Vexmoor is a harbour town with a lighthouse."},
]


# the build's crasher (it counts os.replace calls and SIGKILLs itself before the N-th), running any subcommand
UPDATE_CRASHER = CRASHER.replace('["indexer", "build", *case["args"]]', '["indexer", *case["args"]]')
assert UPDATE_CRASHER != CRASHER


def _run(cases: list[dict]) -> dict[str, int]:
    return run_crasher(cases, UPDATE_CRASHER)


def _state(root: Path) -> tuple[int, frozenset]:
    """The generation served and its live documents (compact changes the first only)."""
    index = PhraseIndex(root, verify=True)
    try:
        return index.manifest.generation, frozenset(_live_docs(index))
    finally:
        index.close()


def _prepared(kind: str, src: Path, out: Path, tiny_bert_dir: Path, tmp_path: Path) -> list[str]:
    """A copy of the index ready for the operation `kind`, and the operation's arguments."""
    import shutil

    from indexer.compact import CompactConfig  # noqa: F401 - the module the compact case runs
    from indexer.update import DeleteConfig, run_delete

    shutil.copytree(src, out)
    if kind == "add":
        return [
            "add",
            "--index",
            str(out),
            "--corpus",
            str(write_jsonl(tmp_path / "add.jsonl", ADD)),
            "--model",
            str(tiny_bert_dir),
            "--device",
            "cpu",
            "--dtype",
            "fp32",
        ]
    if kind == "delete":
        return ["delete", "--index", str(out), "--ids", "d1", "--ids", "d3"]
    run_delete(DeleteConfig(index=out, ids=["d2"]))
    return ["compact", "--index", str(out)]


@pytest.mark.parametrize("kind", ["add", "delete", "compact"])
def test_sigkill_at_every_commit_point_leaves_the_old_or_the_new_index(kind, tiny_index, tiny_bert_dir, tmp_path):
    ref = tmp_path / "ref"
    args = _prepared(kind, tiny_index, ref, tiny_bert_dir, tmp_path)
    old = _state(ref)
    log = str(tmp_path / "ref.log")
    assert _run([{"name": "ref", "crash_at": 0, "args": args, "log": log}]) == {"ref": 0}, Path(log).read_text()
    new = _state(ref)
    assert new != old
    total = int(Path(log + ".renames").read_text())
    assert total >= 2  # at least the change's own file(s) and the manifest
    cases = []
    for n in range(1, total + 1):
        out = tmp_path / f"c{n}"
        case_args = _prepared(kind, tiny_index, out, tiny_bert_dir, tmp_path)
        cases.append(
            {"name": f"c{n}", "crash_at": n, "args": case_args, "log": str(tmp_path / f"c{n}.log"), "out": str(out)}
        )
    status = _run([{k: v for k, v in c.items() if k != "out"} for c in cases])
    assert all(status[c["name"]] == -signal.SIGKILL for c in cases), status
    for c in cases:
        out = Path(c["out"])
        # it opens, hashes right and serves the old generation whole: the manifest's rename, the last of the
        # writer's renames, is its commit point
        assert _state(out) == old, c["name"]
    again = _run([{"name": c["name"] + "r", "crash_at": 0, "args": c["args"], "log": c["log"] + ".r"} for c in cases])
    assert set(again.values()) <= {0}, again
    for c in cases:
        out = Path(c["out"])
        assert _state(out) == new
        assert not list(out.glob("*.tmp")) and not list(out.glob("*.old"))

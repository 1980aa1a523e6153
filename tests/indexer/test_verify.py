"""`indexer verify --index DIR` (indexer.verify): a sound index verifies (exit 0, a summary); a byte changed in place
(same size: no structural check sees it), a missing file, a truncated one and a file the format needs but the
manifest does not list are each named, all of them at once, with exit 2. Every case damages a copy of the built
tiny index (tests/conftest.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from common.errors import IndexDamaged
from indexer.cli import app
from indexer.manifest import MANIFEST_NAME
from indexer.verify import VerifyConfig, verify_index
from tests.manifests import resealed


@pytest.fixture()
def index_copy(tmp_path, tiny_index) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(tiny_index, dst)
    return dst


def run(index: Path):
    return CliRunner().invoke(app, ["verify", "--index", str(index)])


def flip(path: Path, at: int) -> None:
    """One byte changed in place: the file keeps its size."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_sound_index_verifies(index_copy):
    done = run(index_copy)
    assert done.exit_code == 0, done.output
    files = len(re.findall(r'"sha256"', (index_copy / MANIFEST_NAME).read_text()))
    assert re.search(rf"{index_copy}: sound: {files} files, [0-9.]+ MiB checked against their sha256 in ", done.output)


def test_a_flipped_byte_is_named(index_copy):
    bad = index_copy / "shard_00001" / "vectors.npy"
    flip(bad, bad.stat().st_size - 3)  # inside the payload: any byte is a valid int8
    done = run(index_copy)
    assert done.exit_code == 2, done.output
    assert f"index {index_copy} is damaged: 1 damaged or missing file(s)" in done.output
    assert f"index file {bad} does not match the manifest's sha256" in done.output
    assert "from a backup" in done.output and "Traceback" not in done.output


def test_a_missing_file_is_named(index_copy):
    gone = index_copy / "shard_00000" / "docs.arrow"
    gone.unlink()
    done = run(index_copy)
    assert done.exit_code == 2 and f"index file {gone} is missing" in done.output, done.output


def test_every_damaged_file_is_named_not_only_the_first(index_copy):
    gone, cut, flipped = (
        index_copy / "shard_00000" / "flags.npy",
        index_copy / "shard_00002" / "token_ids.npy",
        index_copy / "bm25.sqlite",
    )
    gone.unlink()
    cut.write_bytes(cut.read_bytes()[:-2])
    flip(flipped, 200)
    with pytest.raises(IndexDamaged) as info:
        verify_index(VerifyConfig(index=index_copy), progress=False)
    message = info.value.message
    assert message.startswith(f"index {index_copy} is damaged: 3 damaged or missing file(s)"), message
    assert f"index file {gone} is missing" in message
    assert f"index file {cut} has {cut.stat().st_size} bytes, the manifest says" in message
    assert f"index file {flipped} does not match the manifest's sha256" in message
    assert info.value.path == str(gone) and message.count("from a backup") == 1


def test_a_file_the_format_needs_but_the_manifest_does_not_list_is_named(index_copy):
    path = index_copy / MANIFEST_NAME
    data = json.loads(path.read_text())
    del data["shards"][1]["files"]["scales.npy"]  # an int8 shard's scales
    path.write_text(json.dumps(resealed(data)))
    done = run(index_copy)
    scales = index_copy / "shard_00001" / "scales.npy"
    assert done.exit_code == 2 and f"index file {scales} is not listed in the manifest" in done.output, done.output


def test_a_damaged_manifest_is_named(index_copy):
    path = index_copy / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["dim"] += 1  # edited without its checksum
    path.write_text(json.dumps(data))
    done = run(index_copy)
    assert done.exit_code == 2 and f"index manifest {path} does not match its own checksum" in done.output


def test_leftovers_are_reported_not_damage(index_copy):
    (index_copy / "shard_00099").mkdir()  # a killed writer's shard
    (index_copy / "bm25.sqlite.tmp").write_bytes(b"x")
    summary = verify_index(VerifyConfig(index=index_copy), progress=False)
    assert summary.leftovers == ["bm25.sqlite.tmp", "shard_00099"]
    assert "2 entries no manifest names (bm25.sqlite.tmp, shard_00099" in summary.line()

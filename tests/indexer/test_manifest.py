"""indexer.manifest: the version is checked before the fields, and the build settings read back typed."""

from __future__ import annotations

import json
import shutil

import pytest

from common.errors import AppError, IndexDamaged
from indexer.manifest import FORMAT_VERSION, MANIFEST_NAME, BuildSettings, Counts, Manifest, ModelInfo
from tests.manifests import resealed


def _manifest(root) -> Manifest:
    return Manifest(
        created_at="2024-01-01T00:00:00+00:00",
        model=ModelInfo(path="m", fingerprint="0", model_type="bert", tokenizer="T", vocab_size=1, mask_token=None),
        dim=4,
        index_type="flat",
        similarity_scale=0.5,
        corpus={},
        build=BuildSettings(corpus=root / "c.jsonl", out=root, block_tokens=64),
        counts=Counts(documents=0, empty_documents=0, blocks=0, tokens=0, shards=0),
        shards=[],
    )


def test_another_format_version_is_named_before_its_fields_are_checked(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"format_version": FORMAT_VERSION - 1, "shards": "old"}))
    with pytest.raises(AppError, match=f"format version {FORMAT_VERSION - 1}; this software reads {FORMAT_VERSION}"):
        Manifest.load(tmp_path)


def test_build_settings_round_trip_typed_with_the_build_defaults_and_unknown_keys_kept(tmp_path):
    _manifest(tmp_path).save(tmp_path)
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    del data["build"]["shard_tokens"]  # as a build of another version might have written it
    data["build"]["future_setting"] = 7
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(resealed(data)))
    build = Manifest.load(tmp_path).build
    assert build.block_tokens == 64 and build.out == tmp_path
    assert build.shard_tokens == BuildSettings.model_fields["shard_tokens"].default  # the build's own default
    assert build.model_dump()["future_setting"] == 7


def test_a_manifest_that_is_not_json_is_refused(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text("{")
    with pytest.raises(AppError, match="is not a valid manifest"):
        Manifest.load(tmp_path)


def _flip_fingerprint_digit(root) -> None:
    """One hex digit of the model's fingerprint changed in place, the file's size kept."""
    path = root / MANIFEST_NAME
    text = path.read_text()
    fp = json.loads(text)["model"]["fingerprint"]
    path.write_text(text.replace(f'"{fp}"', '"' + ("1" if fp[0] != "1" else "2") + fp[1:] + '"'))


def test_a_manifest_changed_in_place_is_refused_as_such(tmp_path):
    _manifest(tmp_path).save(tmp_path)
    Manifest.load(tmp_path)
    _flip_fingerprint_digit(tmp_path)
    with pytest.raises(IndexDamaged, match="manifest .* does not match its own checksum"):
        Manifest.load(tmp_path)


def test_a_damaged_manifest_is_blamed_at_start_not_the_model(tiny_index, tmp_path):
    from fill.config import EngineConfig
    from fill.engine import FillEngine

    root = tmp_path / "idx"
    shutil.copytree(tiny_index, root)
    _flip_fingerprint_digit(root)
    with pytest.raises(IndexDamaged) as info:
        FillEngine.open(EngineConfig(index=root))
    assert "manifest" in info.value.message and "fingerprint" not in info.value.message

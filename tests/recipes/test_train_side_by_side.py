"""recipes/train_side_by_side.py: runs side by side, their changes packed in parts, a model rebuilt from them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import write_jsonl
from tests.training.test_train import city_docs

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipes.train_side_by_side", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_pack_in_parts_and_unpack_round_trip(tiny_bert_dir, tmp_path):
    from recipes import train_side_by_side as sbs

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_bert_dir, ckpt)
    weights = load_file(str(ckpt / "model.safetensors"))
    changed = [k for k in sorted(weights) if "encoder.layer.1." in k]
    for k in changed:
        weights[k] = weights[k] + 0.5
    save_file(weights, str(ckpt / "model.safetensors"))

    packed = sbs.changed_tensors(tiny_bert_dir, ckpt)
    assert sorted(packed) == changed and all(t.dtype == torch.float16 for t in packed.values())
    parts = sbs.write_parts(packed, tmp_path, "run", part_mb=0.004)  # ~4 KB a part: several files
    assert len(parts) > 1
    assert sorted(k for p in parts for k in load_file(str(p))) == changed

    done = _script("unpack", "--init", tiny_bert_dir, "--parts", *parts, "--out", tmp_path / "model")
    assert done.returncode == 0, done.stderr
    rebuilt = load_file(str(tmp_path / "model" / "model.safetensors"))
    for k, v in weights.items():
        assert torch.allclose(rebuilt[k].float(), v.float(), atol=2e-3), k  # fp16 of the checkpoint
    assert (tmp_path / "model" / "tokenizer.json").is_file() and (tmp_path / "model" / "config.json").is_file()


def test_run_trains_each_run_and_packs_its_changes(tiny_bert_dir, tmp_path):
    corpus = write_jsonl(tmp_path / "cities.jsonl", city_docs())
    common = (
        f"--corpus {corpus} --steps 2 --save-every 2 --group-size 4 --device cpu --dtype fp32 "
        "--block-tokens 32 --title-tokens 8 --lr 1e-3 --warmup-steps 1 --freeze-embeddings"
    )
    done = _script(
        "run",
        "--init",
        tiny_bert_dir,
        "--work",
        tmp_path / "runs",
        "--out",
        tmp_path / "out",
        "--common",
        common,
        "--run",
        "a=--seed 0",
        "--run",
        "b=--seed 1 --positives document --views 2",
    )
    assert done.returncode == 0, done.stderr + done.stdout
    for name in ("a", "b"):
        parts = sorted((tmp_path / "out").glob(f"{name}.part*.safetensors"))
        keys = {k for p in parts for k in load_file(str(p))}
        assert keys and "embeddings.word_embeddings.weight" not in keys  # frozen: not shipped back
        assert "checkpoint-000002" in (tmp_path / "out" / f"{name}.log").read_text()
    bad = _script(
        "run",
        "--init",
        tiny_bert_dir,
        "--work",
        tmp_path / "r2",
        "--out",
        tmp_path / "o2",
        "--common",
        common,
        "--run",
        "c=--no-such-flag",
    )
    assert bad.returncode == 1 and "no checkpoint" in bad.stdout

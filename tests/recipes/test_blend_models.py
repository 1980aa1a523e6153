"""recipes/blend_models.py: (1 - alpha) * base + alpha * tuned, tensor by tensor."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]


def _blend(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipes.blend_models", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_blend_is_the_weighted_mean_of_two_models(tiny_bert_dir, tmp_path):
    tuned = tmp_path / "tuned"
    shutil.copytree(tiny_bert_dir, tuned)
    (tuned / "scoring.json").write_text("{}")
    base_w = load_file(str(tiny_bert_dir / "model.safetensors"))
    save_file({k: v + 1.0 for k, v in base_w.items()}, str(tuned / "model.safetensors"))
    for alpha in (0.0, 0.25, 1.0):
        out = tmp_path / f"blend{alpha}"
        done = _blend("--base", tiny_bert_dir, "--tuned", tuned, "--alpha", alpha, "--out", out)
        assert done.returncode == 0, done.stderr
        got = load_file(str(out / "model.safetensors"))
        for k, v in base_w.items():
            assert got[k].dtype == torch.float16
            assert torch.allclose(got[k].float(), v.float() + alpha, atol=5e-3), (k, alpha)
        assert (out / "tokenizer.json").is_file() and not (out / "scoring.json").exists()


def test_blend_refuses_other_architectures_and_alpha_outside_the_range(tiny_bert_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_bert_dir, other)
    w = load_file(str(other / "model.safetensors"))
    w.pop(next(iter(w)))
    save_file(w, str(other / "model.safetensors"))
    done = _blend("--base", tiny_bert_dir, "--tuned", other, "--alpha", 0.5, "--out", tmp_path / "x")
    assert done.returncode != 0 and "one architecture" in done.stderr and not (tmp_path / "x").exists()
    done = _blend("--base", tiny_bert_dir, "--tuned", tiny_bert_dir, "--alpha", 1.5, "--out", tmp_path / "y")
    assert done.returncode != 0 and "outside [0, 1]" in done.stderr

"""recipes/device_build.py: an encoder and a corpus packed small for a lent GPU machine, and unpacked there."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "encyclopedia.jsonl"


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "recipes.device_build", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_pack_then_unpack_restores_the_model_and_the_corpus(tmp_path, tiny_bert_dir):
    packed, out = tmp_path / "packed", tmp_path / "model"
    _run("pack", "--model", str(tiny_bert_dir), "--corpus", str(SAMPLE), "--probes", str(SAMPLE), "--out", str(packed))
    before = load_file(str(tiny_bert_dir / "model.safetensors"))
    key = next(k for k in before if k.endswith("embeddings.word_embeddings.weight"))
    assert key not in load_file(str(packed / "model" / "model.safetensors"))  # the matrix travels as int8 rows
    rows, cols = before[key].shape
    assert (packed / "words.safetensors").stat().st_size < rows * cols + 4 * rows + 4096  # int8 codes, a scale a row
    assert gzip.decompress((packed / "corpus.jsonl.gz").read_bytes()) == SAMPLE.read_bytes()
    _run("unpack", "--packed", str(packed), "--out", str(out))
    after = load_file(str(out / "model.safetensors"))
    assert after.keys() == before.keys()
    for name, tensor in before.items():
        if name != key:
            assert torch.equal(after[name], tensor.to(torch.float16)), name
    words = before[key].float()
    step = words.abs().amax(dim=1, keepdim=True) / 127.0
    error = (after[key].float() - words).abs()
    assert bool((error <= step / 2 + 1e-3).all()) and float(error.max()) > 0  # rounded to the row's int8 steps
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()

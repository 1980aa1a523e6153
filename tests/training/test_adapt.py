"""Tests for training.adapt (`encoder adapt`): a time-budgeted NPM run on a corpus, exported as a model
directory that the indexer and the service accept; bad input exits 2 naming the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from encoder.model import Encoder
from encoder.model_files import model_fingerprint
from tests.conftest import write_jsonl
from tests.training.test_train import city_docs
from training.adapt import AdaptConfig, adapt
from training.cli import main as cli_main
from training.train_config import TrainConfig
from training.train_setup import lr_lambda

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(block_tokens=32, title_tokens=8, device="cpu", dtype="fp32", lr=1e-3, warmup_steps=1)


@pytest.fixture(scope="module")
def untitled_corpus(tmp_path_factory) -> Path:
    """The city documents without titles: a user corpus of short untitled documents."""
    rows = [{"id": d["id"], "text": d["text"]} for d in city_docs(48)]
    return write_jsonl(tmp_path_factory.mktemp("adapt") / "untitled.jsonl", rows)


def test_adapt_writes_a_loadable_fp16_model_that_changed(untitled_corpus, tiny_bert_dir, tmp_path):
    out = tmp_path / "adapted"
    cfg = AdaptConfig(corpus=untitled_corpus, out=out, init=tiny_bert_dir, minutes=5, max_steps=3, **SMALL)
    assert adapt(cfg) == out
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}
    assert json.loads((out / "train_config.json").read_text())["schedule"] == "constant"
    run = out.with_name("adapted.run")
    assert json.loads((run / "latest.json").read_text())["step"] == 3
    before, after = Encoder(tiny_bert_dir, device="cpu", dtype="fp32"), Encoder(out, device="cpu", dtype="fp32")
    q = "Lyon is a city in <mask> ."
    assert not np.allclose(before.encode_queries([q])[0].q_start, after.encode_queries([q])[0].q_start, atol=1e-3)
    assert model_fingerprint(out) != model_fingerprint(tiny_bert_dir)
    # resuming the same command continues the run (here: already at max_steps, so it only re-exports)
    adapt(cfg)
    assert json.loads((run / "latest.json").read_text())["step"] == 3


def test_time_budget_stops_the_run(untitled_corpus, tiny_bert_dir, tmp_path):
    cfg = AdaptConfig(corpus=untitled_corpus, out=tmp_path / "m", init=tiny_bert_dir, minutes=1e-6, **SMALL)
    adapt(cfg)  # the budget is spent before the first step: the init is exported unchanged in fp16
    assert json.loads((tmp_path / "m.run" / "latest.json").read_text())["step"] == 0
    a = Encoder(tiny_bert_dir, device="cpu", dtype="fp32").encode_queries(["a <mask> b"])[0].q_start
    b = Encoder(tmp_path / "m", device="cpu", dtype="fp32").encode_queries(["a <mask> b"])[0].q_start
    np.testing.assert_allclose(a, b, atol=2e-2)


def test_constant_schedule():
    f = lr_lambda(TrainConfig(corpus=[Path("x")], out=Path("o"), steps=100, warmup_steps=4, schedule="constant"))
    assert [f(s) for s in (0, 3, 4, 50, 99, 500)] == [0.25, 1.0, 1.0, 1.0, 1.0, 1.0]
    g = lr_lambda(TrainConfig(corpus=[Path("x")], out=Path("o"), steps=100, warmup_steps=4))
    assert g(4) == 1.0 and g(52) == pytest.approx(0.5) and g(100) == 0.0


def test_adapted_model_builds_an_index(untitled_corpus, tiny_bert_dir, tmp_path):
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.schemas import FillRequest
    from indexer.build import BuildConfig, build_index

    model = adapt(AdaptConfig(corpus=untitled_corpus, out=tmp_path / "m", init=tiny_bert_dir, max_steps=1, **SMALL))
    build_index(BuildConfig(corpus=untitled_corpus, out=tmp_path / "idx", model=model, block_tokens=32, device="cpu"))
    engine = FillEngine.open(EngineConfig(index=tmp_path / "idx", device="cpu"))
    assert engine.fill(FillRequest(text="Lyon is a city in <mask> .")).masks[0].candidates


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "training", "adapt", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # starts a process
def test_cli_bad_input_exits_2_naming_the_file(tiny_bert_dir, tmp_path):
    missing = tmp_path / "nope.jsonl"
    r = _cli(["--corpus", str(missing), "--out", str(tmp_path / "m"), "--init", str(tiny_bert_dir)])
    assert r.returncode == 2 and str(missing) in r.stderr and "Traceback" not in r.stderr
    tiny = write_jsonl(tmp_path / "tiny.jsonl", [{"text": "One sentence only."}])
    r = _cli(["--corpus", str(tiny), "--out", str(tmp_path / "m"), "--init", str(tiny_bert_dir), "--device", "cpu"])
    assert r.returncode == 2 and str(tiny) in r.stderr and "Traceback" not in r.stderr
    r = _cli(["--corpus", str(tiny), "--out", str(tmp_path / "m"), "--minutes", "-1"])
    assert r.returncode == 2 and "--minutes" in r.stderr
    assert not (tmp_path / "m").exists()


def test_cli_help_lists_the_interface():
    with pytest.raises(SystemExit) as exc:
        cli_main(["adapt", "--help"])
    assert exc.value.code == 0

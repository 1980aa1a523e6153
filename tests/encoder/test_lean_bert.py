"""The lean BERT (serving without transformers' modeling code): transformers' hidden states to the bit,
refused for what it does not implement, and what the serving path loads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from encoder.device import lower_weights
from encoder.lean_bert import LeanBert, lean_bert
from encoder.model import Encoder
from encoder.model_files import load_transformer

ROOT = Path(__file__).resolve().parents[2]


def _batch() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    ids = torch.randint(1000, 20000, (3, 17))
    attention = torch.ones_like(ids)
    attention[1, 12:] = 0
    attention[2, 5:] = 0
    types = torch.zeros_like(ids)
    types[0, 9:] = 1
    return ids, attention, types


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("lowered", [False, True])
def test_hidden_states_equal_transformers_bit_for_bit(tiny_bert_dir, autocast, lowered):
    hf, lean = load_transformer(tiny_bert_dir).eval(), load_transformer(tiny_bert_dir, lean=True)
    assert isinstance(lean, LeanBert)
    if lowered:
        for m in (hf, lean):
            lower_weights(m, torch.bfloat16)
    ids, attention, types = _batch()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast or lowered):
        for rows in (slice(0, 1), slice(0, 3)):  # one unpadded row (no mask), a padded batch
            a = hf(input_ids=ids[rows], attention_mask=attention[rows], token_type_ids=types[rows]).last_hidden_state
            b = lean(input_ids=ids[rows], attention_mask=attention[rows], token_type_ids=types[rows]).last_hidden_state
            real = attention[rows].bool()
            assert torch.equal(a[real], b[real])


def test_what_is_not_plain_bert_is_left_to_transformers(tiny_bert_dir, tiny_roberta_dir, tmp_path):
    assert lean_bert(tiny_roberta_dir) is None
    relative = tmp_path / "relative"
    shutil.copytree(tiny_bert_dir, relative, ignore=shutil.ignore_patterns("onnx"))
    config = json.loads((relative / "config.json").read_text())
    (relative / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    assert lean_bert(relative) is None
    assert not isinstance(Encoder(relative, lean=True).model, LeanBert)  # transformers' model serves it


def test_a_lean_encoder_gives_the_vectors_of_transformers_model(tiny_bert_dir):
    lean, full = Encoder(tiny_bert_dir, lean=True).for_inference(), Encoder(tiny_bert_dir).for_inference()
    assert isinstance(lean.model, LeanBert) and not isinstance(full.model, LeanBert)
    texts = ["Paris is the capital of <mask> .", "The river <mask> flows through <mask> and Rouen ."]
    for a, b in zip(lean.encode_queries(texts), full.encode_queries(texts)):
        np.testing.assert_array_equal(a.q_start, b.q_start)
        np.testing.assert_array_equal(a.q_end, b.q_end)


@pytest.mark.slow  # starts a process
def test_serving_loads_no_modeling_code(tiny_index, tiny_bert_dir):
    # the model exported first, as setup does (`encoder export-onnx`): exporting it is torch's exporter's work
    Encoder(tiny_bert_dir, device="cpu", engine="auto", lean=True).for_inference()
    code = (
        f"import sys; from pathlib import Path; from fill.config import EngineConfig; "
        f"from fill.engine import FillEngine; from fill.schemas import FillRequest; "
        f"e = FillEngine.open(EngineConfig(index=Path({str(tiny_index)!r}), use_reader=False)); "
        f"e.fill(FillRequest(text='Paris is the capital of <mask> .')); "
        f"print(sorted(m for m in sys.modules if m in ('transformers.modeling_utils', 'torch._dynamo', "
        f"'transformers.models')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"

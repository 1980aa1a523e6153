"""The GPU path on a CPU-only machine: only the device check (`encoder.device.accelerator`) is replaced.

The stub reports the CPU as "the GPU", so every decision that follows from a GPU being present
(device choice per process, fp16 autocast, fp16 loss scaling, the nccl backend, the log line) runs
for real; only the hardware underneath is the CPU.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import encoder.device as device_mod
from common.errors import AppError
from encoder.device import (
    choose_device,
    choose_dtype,
    describe_device,
    distributed_backend,
    grad_scaler,
    is_accelerator,
)
from encoder.model import BlockInput, Encoder
from tests.conftest import write_jsonl
from tests.training.test_train import city_docs, config
from training.checkpoints import STATE_FILE
from training.train import Trainer

STAND_IN = torch.device("cpu")


@pytest.fixture()
def gpu_present(monkeypatch):
    """Make the device check report a GPU (the CPU stands in for it)."""
    monkeypatch.setattr(device_mod, "accelerator", lambda local_rank=0: STAND_IN)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answers")
def test_without_gpu_everything_is_cpu():
    assert device_mod.accelerator() is None
    assert choose_device("auto") == torch.device("cpu") and not is_accelerator(torch.device("cpu"))
    assert distributed_backend() == "gloo"
    assert "CPU path" in describe_device(torch.device("cpu"))
    assert not grad_scaler(torch.device("cpu"), choose_dtype(torch.device("cpu"))).is_enabled()


def test_gpu_present_decisions(gpu_present):
    dev = choose_device("auto", local_rank=1)
    assert dev == STAND_IN and is_accelerator(dev)
    assert choose_dtype(dev, "auto") == torch.float16  # GPUs run fp16 autocast
    assert choose_dtype(dev, "bf16") == torch.bfloat16  # an explicit request still wins
    assert distributed_backend() == "nccl"
    assert "GPU path" in describe_device(dev)
    assert grad_scaler(dev, torch.float16).is_enabled() and not grad_scaler(dev, torch.bfloat16).is_enabled()


def test_encoder_gpu_path_encodes_in_fp16(gpu_present, tiny_bert_dir, caplog):
    with caplog.at_level(logging.INFO, logger="encoder.model"):
        gpu = Encoder(tiny_bert_dir)  # device "auto"
    assert gpu.dtype == torch.float16 and "GPU path" in caplog.text and "float16" in caplog.text
    cpu = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    block = BlockInput(
        np.asarray(cpu.tokenizer("the river flows through the old town", add_special_tokens=False)["input_ids"])
    )
    a, b = gpu.encode_blocks([block])[0], cpu.encode_blocks([block])[0]
    assert a.shape == b.shape and np.isfinite(a).all()
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cos.min() > 0.99  # fp16 autocast computes the same vectors up to rounding
    assert not np.array_equal(a, b)  # ...but really ran in reduced precision


def test_training_gpu_path_scales_fp16_loss_and_resumes(gpu_present, tiny_bert_dir, tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", city_docs())
    cfg = config(corpus, tmp_path / "run", tiny_bert_dir, device="auto", dtype="auto", steps=2, save_every=2)
    trainer = Trainer(cfg)
    assert trainer.encoder.dtype == torch.float16 and trainer.scaler.is_enabled()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.run()
    assert trainer.step == 2
    moved = sum(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))
    assert moved > 0  # the scaled fp16 steps updated the weights
    state = torch.load(tmp_path / "run" / "checkpoint-000002" / STATE_FILE, weights_only=False)
    assert state["scaler"]["scale"] > 0  # the loss scale is part of the checkpoint
    resumed = Trainer(cfg.model_copy(update={"resume": True, "steps": 3}))
    assert resumed.step == 2 and resumed.scaler.get_scale() == pytest.approx(state["scaler"]["scale"])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_lowered_linear_weights_encode_the_same_vectors_bit_for_bit(tiny_bert_dir, dtype):
    """Autocast casts a Linear layer's weights at every pass; casting them once for inference gives the same
    numbers (fp16 stands for the GPU path's dtype; on the CPU autocast runs it too)."""
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype=dtype)
    texts = ["The river <mask> flows through the old town .", "<mask> was born in <mask> ."]
    blocks = [BlockInput(np.asarray(encoder.tokenizer(t, add_special_tokens=False)["input_ids"])) for t in texts]
    before_q, before_b = encoder.encode_queries(texts), encoder.encode_blocks(blocks)
    assert encoder.for_inference() is encoder
    linears = [m for m in encoder.model.modules() if isinstance(m, torch.nn.Linear)]
    norms = [m for m in encoder.model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert linears and all(m.weight.dtype == encoder.dtype for m in linears)
    assert norms and all(m.weight.dtype == torch.float32 for m in norms)  # autocast keeps these in fp32
    for a, b in zip(before_q, encoder.encode_queries(texts)):
        assert np.array_equal(a.q_start, b.q_start) and np.array_equal(a.q_end, b.q_end)
    for a, b in zip(before_b, encoder.encode_blocks(blocks)):
        assert np.array_equal(a, b)


def test_fp32_weights_are_left_alone(tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32").for_inference()
    assert all(p.dtype == torch.float32 for p in encoder.model.parameters())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_embedding_tables_a_fp16_file_holds_stay_fp16_and_encode_the_same_vectors(tiny_bert_dir, tmp_path, dtype):
    """An embedding table whose values fp16 holds exactly (a model file stored in fp16) is kept in fp16 for inference,
    mapped from the file (encoder.model_files.map_file_tables), its rows widened when looked up: the vectors are
    those of the fp32 table, bit for bit; a table fp16 cannot hold (the fp32 file of tiny_bert_dir) stays fp32."""
    from safetensors.torch import load_file, save_file

    half_dir = tmp_path / "half"
    shutil.copytree(tiny_bert_dir, half_dir)
    weights = half_dir / "model.safetensors"
    save_file({k: v.half().contiguous() for k, v in load_file(str(weights)).items()}, str(weights))
    encoder = Encoder(half_dir, device="cpu", dtype=dtype, lean=True)  # as a server loads it
    texts = ["The river <mask> flows through the old town .", "<mask> was born in <mask> ."]
    blocks = [BlockInput(np.asarray(encoder.tokenizer(t, add_special_tokens=False)["input_ids"])) for t in texts]
    before_q, before_b = encoder.encode_queries(texts), encoder.encode_blocks(blocks)
    tables = [m for m in encoder.for_inference().model.modules() if isinstance(m, torch.nn.Embedding)]
    assert tables and all(m.weight.dtype == torch.float16 for m in tables)
    spans = [line.split()[0].split("-") for line in open("/proc/self/maps") if line.rstrip().endswith(str(weights))]
    spans = [(int(a, 16), int(b, 16)) for a, b in spans]
    assert all(any(a <= m.weight.data_ptr() < b for a, b in spans) for m in tables)  # the file's pages, not a copy
    for a, b in zip(before_q, encoder.encode_queries(texts)):
        assert np.array_equal(a.q_start, b.q_start) and np.array_equal(a.q_end, b.q_end)
    for a, b in zip(before_b, encoder.encode_blocks(blocks)):
        assert np.array_equal(a, b)
    full = Encoder(tiny_bert_dir, device="cpu", dtype=dtype).for_inference()
    assert all(m.weight.dtype == torch.float32 for m in full.model.modules() if isinstance(m, torch.nn.Embedding))


def test_the_cpu_flags_say_what_torch_says_of_native_bf16():
    """cpu_has_fast_bf16 reads /proc/cpuinfo (no torch import): the same answer as torch's own check."""
    assert device_mod.cpu_has_fast_bf16() == bool(
        torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answers")
@pytest.mark.parametrize("fast_bf16", [False, True])
def test_on_a_cpu_queries_run_on_openvino_in_fp32_and_on_torch_in_bf16(monkeypatch, fast_bf16):
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: fast_bf16)
    query = device_mod.choose_runtime("auto", "auto", "auto", "query")
    if fast_bf16:  # OpenVINO's bf16 pass moved dense fills (docs/BENCHMARKS.md, "Engines")
        assert query == ("torch", torch.device("cpu"), torch.bfloat16)
    else:
        assert query == ("openvino", "cpu", "float32")
    assert device_mod.choose_runtime("auto", "auto", "auto", "reader")[:2] == ("openvino", "cpu")
    assert device_mod.choose_runtime("auto", "cpu", "auto", "encoder")[:2] == ("torch", torch.device("cpu"))
    assert device_mod.choose_runtime("openvino", "cpu", "bf16", "encoder") == ("openvino", "cpu", "bfloat16")
    assert device_mod.choose_runtime("torch", torch.device("cpu"), "fp32", "query") == (
        "torch",
        torch.device("cpu"),
        torch.float32,
    )


def test_with_a_gpu_every_model_runs_on_torch_and_onnx_engines_are_refused(gpu_present):
    assert device_mod.choose_runtime("auto", "auto", "auto", "query") == ("torch", STAND_IN, torch.float16)
    assert device_mod.choose_runtime("auto", "auto", "auto", "reader")[0] == "torch"
    with pytest.raises(AppError, match="runs on the CPU"):
        device_mod.choose_runtime("openvino", "auto", "auto", "query")
    assert "CPU path" in describe_device("cpu")  # an ONNX engine's device is never the GPU


def test_without_a_gpu_driver_the_device_check_imports_no_torch():
    code = (
        "import sys; import encoder.device as d; d.GPU_DRIVER_FILES = ('/nonexistent/nvidia',); "
        "print(d.accelerator(), d.choose_runtime('auto', 'auto', 'fp32', 'reader'), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "None ('openvino', 'cpu', 'float32') False"

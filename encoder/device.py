"""Run-time choice of device and autocast precision (never hard-coded).

`accelerator()` is the project's ONE device check: every GPU decision (the encoder's device and
precision, the training process's device and gradient scaling, the distributed backend) follows
from what it returns. Tests replace it, and nothing else, to run the GPU path on a CPU-only machine.
"""

from __future__ import annotations

import contextlib
import logging
from typing import ContextManager

import torch

from common.errors import AppError

logger = logging.getLogger(__name__)

DTYPES = ("auto", "fp32", "bf16", "fp16")


def accelerator(local_rank: int = 0) -> torch.device | None:
    """This process's GPU (CUDA device `local_rank` modulo the GPU count), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))


def is_accelerator(device: torch.device) -> bool:
    """True when `device` is the kind of device the device check reports as the GPU."""
    gpu = accelerator()
    return gpu is not None and device.type == gpu.type


def distributed_backend() -> str:
    """nccl between GPUs, gloo between CPU processes."""
    return "nccl" if accelerator() is not None else "gloo"


def choose_device(requested: str = "auto", local_rank: int = 0) -> torch.device:
    """`auto` picks this process's GPU when there is one, else the CPU."""
    if requested == "auto":
        gpu = accelerator(local_rank)
        return gpu if gpu is not None else torch.device("cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise AppError(
            f"device {requested!r} requested but CUDA is not available; pass --device cpu or auto", kind="validation"
        )
    return device


def describe_device(device: torch.device) -> str:
    """A log-friendly device name that says whether it is the GPU path."""
    return f"{device} (GPU path)" if is_accelerator(device) else f"{device} (CPU path)"


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with native bf16 math (AVX512-BF16 or AMX); elsewhere bf16 is slower than fp32."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch builds
        return False


def choose_dtype(device: torch.device, requested: str = "auto") -> torch.dtype:
    """Autocast dtype: fp16 on GPU, bf16 on CPUs that support it fast, fp32 otherwise."""
    if requested not in DTYPES:
        raise AppError(f"dtype must be one of {DTYPES}, got {requested!r}", kind="validation")
    if requested == "fp32":
        return torch.float32
    if requested == "bf16":
        return torch.bfloat16
    if requested == "fp16":
        return torch.float16
    if device.type == "cuda" or is_accelerator(device):
        return torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


def grad_scaler(device: torch.device, dtype: torch.dtype) -> torch.amp.GradScaler:
    """Loss scaling for fp16 training (fp16 gradients underflow without it); a no-op for bf16/fp32."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def lower_weights(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Weights for inference, in less memory, with the same outputs bit for bit (tested); never for a model being
    trained (its master weights stay fp32):
    - every Linear layer's weight and bias in the autocast dtype, cast once: autocast casts them at every pass (a
      6-layer 384-dim encoder's 42 MB of fp32 weights read and 21 MB written per query) and rounds them the same way
      (none for fp32);
    - every embedding table whose values fp16 holds exactly (a model file stored in fp16, as the bundled ones are)
      kept in fp16, its rows widened back to fp32 when looked up: the bundled encoder's 45 MB table takes 22."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and dtype != torch.float32:
            module.to(dtype)
        elif isinstance(module, torch.nn.Embedding) and module.weight.dtype == torch.float32:
            half = module.weight.detach().half()
            if torch.equal(half.float(), module.weight.detach()):
                module.weight = torch.nn.Parameter(half, requires_grad=False)
                module.register_forward_hook(_widened)


def _widened(module: torch.nn.Module, inputs: object, output: torch.Tensor) -> torch.Tensor:
    return output.float()


def autocast(device: torch.device, dtype: torch.dtype) -> ContextManager:
    """An autocast context for `dtype`, or a no-op for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)

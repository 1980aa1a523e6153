"""Run-time choice of device and autocast precision (never hard-coded)."""

from __future__ import annotations

import contextlib
import logging
from typing import ContextManager

import torch

logger = logging.getLogger(__name__)

DTYPES = ("auto", "fp32", "bf16", "fp16")


def choose_device(requested: str = "auto") -> torch.device:
    """`auto` picks CUDA when a GPU is present, else the CPU."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {requested!r} requested but CUDA is not available")
    return device


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with native bf16 math (AVX512-BF16 or AMX); elsewhere bf16 is slower than fp32."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch builds
        return False


def choose_dtype(device: torch.device, requested: str = "auto") -> torch.dtype:
    """Autocast dtype: fp16 on GPU, bf16 on CPUs that support it fast, fp32 otherwise."""
    if requested not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {requested!r}")
    if requested == "fp32":
        return torch.float32
    if requested == "bf16":
        return torch.bfloat16
    if requested == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


def autocast(device: torch.device, dtype: torch.dtype) -> ContextManager:
    """An autocast context for `dtype`, or a no-op for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)

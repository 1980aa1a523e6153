"""Run-time choice of device and autocast precision (never hard-coded).

`accelerator()` is the project's ONE device check: every GPU decision (the encoder's device and
precision, the training process's device and gradient scaling, the distributed backend) follows
from what it returns. Tests replace it, and nothing else, to run the GPU path on a CPU-only machine.

torch is imported where it is used, not here: a server whose passes run on OpenVINO (encoder.onnx_engine) on a
machine without a GPU driver never imports it (~1.5 s of its start; `choose_runtime`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager

from common.errors import AppError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

DTYPES = ("auto", "fp32", "bf16", "fp16")


# NVIDIA's driver (Linux), WSL2's GPU device, ROCm's driver
GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def gpu_driver_loaded() -> bool:
    """True when a GPU driver CUDA (or ROCm's torch) could use is loaded; without one there is no CUDA device,
    and no need to import torch to learn it."""
    return any(Path(name).exists() for name in GPU_DRIVER_FILES)


def accelerator(local_rank: int = 0) -> torch.device | None:
    """This process's GPU (CUDA device `local_rank` modulo the GPU count), or None without CUDA (known without
    importing torch when no GPU driver is loaded and torch is not imported yet)."""
    if "torch" not in sys.modules and not gpu_driver_loaded():
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))


def is_accelerator(device: torch.device | str) -> bool:
    """True when `device` (a torch device, or an ONNX engine's "cpu") is the kind the device check reports as
    the GPU."""
    gpu = accelerator()
    return gpu is not None and isinstance(device, type(gpu)) and device.type == gpu.type


def distributed_backend() -> str:
    """nccl between GPUs, gloo between CPU processes."""
    return "nccl" if accelerator() is not None else "gloo"


def choose_device(requested: str = "auto", local_rank: int = 0) -> torch.device:
    """`auto` picks this process's GPU when there is one, else the CPU."""
    import torch

    if requested == "auto":
        gpu = accelerator(local_rank)
        return gpu if gpu is not None else torch.device("cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise AppError(
            f"device {requested!r} requested but CUDA is not available; pass --device cpu or auto", kind="validation"
        )
    return device


def describe_device(device: torch.device | str) -> str:
    """A log-friendly device name that says whether it is the GPU path."""
    return f"{device} (GPU path)" if is_accelerator(device) else f"{device} (CPU path)"


FAST_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo's names of native bf16 math


@functools.cache  # the CPU's flags do not change; every model a process loads asks
def cpu_has_fast_bf16() -> bool:
    """True on CPUs with native bf16 math (AVX512-BF16 or AMX); elsewhere bf16 is slower than fp32. Read from
    the kernel's CPU flags where there are some (the features torch's check reads), else asked of torch."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        flags = None
    if flags is not None:
        return not FAST_BF16_FLAGS.isdisjoint(flags)
    import torch

    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch builds
        return False


PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # the setting's names -> torch's


def precision(device_type: str, requested: str = "auto") -> str:
    """The passes' precision, by torch's name (float32, bfloat16, float16): fp16 on a GPU, bf16 on CPUs that
    support it fast, fp32 otherwise; `requested` (a DTYPES name) when not auto."""
    if requested not in DTYPES:
        raise AppError(f"dtype must be one of {DTYPES}, got {requested!r}", kind="validation")
    if requested != "auto":
        return PRECISIONS[requested]
    if device_type == "cuda":
        return "float16"
    return "bfloat16" if cpu_has_fast_bf16() else "float32"


def choose_dtype(device: torch.device, requested: str = "auto") -> torch.dtype:
    """Autocast dtype (`precision` as a torch dtype)."""
    import torch

    gpu = device.type == "cuda" or is_accelerator(device)
    dtype: torch.dtype = getattr(torch, precision("cuda" if gpu else device.type, requested))
    return dtype


def choose_runtime(
    engine: str, device: str | torch.device, dtype: str, kind: str
) -> tuple[str, str | torch.device, str | torch.dtype]:
    """(engine, device, precision) of a model of `kind` (encoder.onnx_engine.CPU_DEFAULT's keys): the torch
    engine's torch device and autocast dtype, or an ONNX engine's "cpu" and precision name (`precision`); decided
    without importing torch where no GPU driver is loaded."""
    from encoder.onnx_engine import resolve_engine

    if isinstance(device, str):
        device_type = ("cuda" if accelerator() is not None else "cpu") if device == "auto" else device.split(":")[0]
    else:
        device_type = "cuda" if is_accelerator(device) else device.type
    wanted = precision(device_type, dtype)
    chosen = resolve_engine(engine, device_type, kind, wanted)
    if chosen != "torch":  # (resolve_engine refuses an ONNX engine on anything but the CPU)
        return chosen, "cpu", wanted
    torch_device = choose_device(device) if isinstance(device, str) else device
    return chosen, torch_device, choose_dtype(torch_device, dtype)


def torch_runtime(device: torch.device | str, dtype: torch.dtype | str) -> tuple[torch.device, torch.dtype]:
    """A torch engine's (device, autocast dtype), as choose_runtime gave them; an ONNX engine's ("cpu" and a
    precision's name) have no torch passes."""
    import torch

    if not isinstance(device, torch.device) or not isinstance(dtype, torch.dtype):
        raise AppError(f"a model on an ONNX engine ({device}, {dtype}) runs no torch passes; pass --engine torch")
    return device, dtype


def grad_scaler(device: torch.device, dtype: torch.dtype) -> torch.amp.GradScaler:
    """Loss scaling for fp16 training (fp16 gradients underflow without it); a no-op for bf16/fp32."""
    import torch

    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def lower_weights(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Weights for inference, in less memory, with the same outputs bit for bit (tested); never for a model being
    trained (its master weights stay fp32):
    - every Linear layer's weight and bias in the autocast dtype, cast once: autocast casts them at every pass (a
      6-layer 384-dim encoder's 42 MB of fp32 weights read and 21 MB written per query) and rounds them the same way
      (none for fp32);
    - every embedding table whose values fp16 holds exactly (a model file stored in fp16, as the bundled ones are)
      kept in fp16, its rows widened back to fp32 when looked up: the bundled encoder's 45 MB table takes 22."""
    import torch

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
    import torch

    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)

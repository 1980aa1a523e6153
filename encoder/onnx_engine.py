"""Inference engines for the encoder's and the reader's forward passes on the CPU (the `engine` setting).

A model directory is exported once to ONNX by torch's exporter (fp32), and run by
- `openvino`: OpenVINO's CPU plugin, compiled at load in the model's autocast precision (bf16 on CPUs with
  native bf16, as the torch path; f32 otherwise);
- `onnx`: ONNX Runtime, fp32;
- `onnx-int8`: ONNX Runtime on a second export whose MatMul weights are int8 per output channel
  (onnxruntime.quantization.quantize_dynamic; activations quantized per pass).
The file is derived from the directory's own safetensors, never downloaded, and cached by the directory's
fingerprint: `<model_dir>/onnx/<kind>-<onnx|onnx-int8>-<fingerprint>.onnx`, or under the user's cache
(`$XDG_CACHE_HOME/npm-retrieval/onnx`) when the model directory is read-only. A changed model has another
fingerprint, so a stale export is never used.

The torch path stays for training, for the GPU, and as a setting (`--engine torch`). Light to import
(configs read ENGINES and ENGINE_HELP): torch and onnxruntime load when a model is exported or run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from common.errors import AppError
from common.files import atomic_path

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

ENGINES = ("auto", "torch", "openvino", "onnx", "onnx-int8")
# What `auto` picks on a CPU, per model: the fastest engine whose fills agree with the torch path's on >= 98%
# of held-out probes in every mode (docs/BENCHMARKS.md, "Engines"). The reader: OpenVINO (its pass in ~0.7x the
# time). The encoder's query passes (kind "query": a serving encoder): OpenVINO in fp32 (~0.7x, every T-REx dev
# fill with the same phrases, evidence and order, 2026-12-02; and a server that imports no torch), torch in
# bf16, where OpenVINO's bf16 pass moved dense fills more (97.1% with both). The index build's encoder: torch.
CPU_DEFAULT = {"encoder": "torch", "query": "openvino", "reader": "openvino"}
CPU_BF16_DEFAULT = {**CPU_DEFAULT, "query": "torch"}
ENGINE_HELP = (
    "what runs the models' passes: torch, openvino (bf16 where the CPU has it), onnx or onnx-int8 "
    "(ONNX Runtime); the last three on the CPU, from an ONNX export made once and cached by "
    "fingerprint; auto: torch on a GPU; on a CPU, openvino for the reader and the queries (torch for them in "
    "bf16), torch for the index build's encoder"
)


def resolve_engine(requested: str, device_type: str, kind: str, precision: str = "float32") -> str:
    """The engine that runs the passes of a model of `kind` (CPU_DEFAULT's keys) on a device of `device_type`
    (cpu, cuda) in `precision` (torch's name): `auto` is torch on a GPU, CPU_DEFAULT[kind] on a CPU
    (CPU_BF16_DEFAULT[kind] in bf16)."""
    if requested not in ENGINES:
        raise AppError(f"engine must be one of {ENGINES}, got {requested!r}", kind="validation")
    if requested == "auto":
        if device_type != "cpu":
            return "torch"
        return (CPU_BF16_DEFAULT if precision == "bfloat16" else CPU_DEFAULT)[kind]
    if requested != "torch" and device_type != "cpu":
        raise AppError(
            f"engine {requested} runs on the CPU; pass --engine torch (or auto) for {device_type}", kind="validation"
        )
    return requested


def cache_path(model_dir: Path, fingerprint: str, kind: str, engine: str) -> Path:
    """Where the export of `model_dir` for `engine` lives: beside the model when it is there or the model
    directory is writable, else under the user's cache."""
    name = f"{kind}-{'onnx-int8' if engine == 'onnx-int8' else 'onnx'}-{fingerprint[:16]}.onnx"
    beside = model_dir / "onnx" / name
    if beside.is_file() or os.access(model_dir, os.W_OK):
        return beside
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npm-retrieval" / "onnx"
    return root / name


def write_onnx(
    module: torch.nn.Module, example: dict[str, torch.Tensor], outputs: list[str], path: Path, engine: str
) -> Path:
    """Write `module` (fp32, eval) as ONNX to `path`, atomically: inputs named as `example`'s keys, whose
    first two dimensions (rows, tokens) are dynamic; int8 weights for `onnx-int8`."""
    import torch
    from torch.export import Dim

    rows, width = Dim("rows", min=1, max=4096), Dim("tokens", min=2, max=4096)
    shapes = {name: {0: rows, 1: width} if t.dim() == 2 else {0: rows} for name, t in example.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    logger.info("exporting %s to %s (once per model)", type(module).__name__, path)
    with atomic_path(path) as tmp:
        fp32 = tmp.with_name(tmp.name + ".fp32.onnx") if engine == "onnx-int8" else tmp
        try:
            with torch.no_grad(), quiet():
                torch.onnx.export(
                    module,
                    tuple(example.values()),
                    str(fp32),
                    input_names=list(example),
                    output_names=outputs,
                    dynamic_shapes=shapes,
                    dynamo=True,
                    optimize=True,
                    external_data=False,
                    verbose=False,
                )
        except Exception as exc:  # the exporter raises many types; all mean "cannot export"
            raise AppError(f"cannot export {type(module).__name__} to ONNX ({exc}); pass --engine torch") from exc
        if engine == "onnx-int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            try:
                with quiet():
                    quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
            finally:
                fp32.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def export_lock(path: Path) -> Iterator[None]:
    """An exclusive lock (flock, blocking) on `<path>.lock`: the export's temporary name is fixed, so two
    processes exporting the same model at once would rename each other's file away."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No warnings while exporting: the exporter's and the quantizer's notes (shapes, deprecations, torchvision
    ops it skips, "consider pre-processing") say nothing about a model that exports; errors still raise."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


class OnnxPass:
    """An ONNX Runtime session on the CPU for one exported model: `run(**arrays)` feeds the inputs the
    graph kept (an input the graph does not read, e.g. token types of a model without them, is dropped)."""

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types; all mean "cannot load"
            raise AppError(f"cannot load {path} ({exc}); delete it to export it again") from exc
        self.path = path
        self.inputs = [i.name for i in self.session.get_inputs()]

    def run(self, **arrays: np.ndarray) -> list[np.ndarray]:
        return self.session.run(None, {name: arrays[name] for name in self.inputs})


OV_PRECISION = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}  # torch's names -> OpenVINO's
OV_CACHE = "openvino-cache"  # beside the exports: compiled models, a third of a compile's time to load


class OpenVinoPass:
    """One exported model compiled by OpenVINO for the CPU in `dtype` (the encoder's autocast precision);
    `run` as OnnxPass's. An infer request per calling thread (a request serves one pass at a time)."""

    def __init__(self, path: Path, threads: int, dtype: torch.dtype | str) -> None:
        import openvino

        config: dict[str, int | str] = {
            "INFERENCE_PRECISION_HINT": OV_PRECISION[str(dtype).removeprefix("torch.")],
            "PERFORMANCE_HINT": "LATENCY",
        }
        if threads > 0:
            config["INFERENCE_NUM_THREADS"] = threads
        # the compiled model cached beside the export (CACHE_DIR, keyed by model and settings; a cache folder
        # OpenVINO cannot make or write is skipped, it compiles without one)
        config["CACHE_DIR"] = str(path.parent / OV_CACHE)
        try:
            self.compiled = openvino.Core().compile_model(str(path), "CPU", config)
        except Exception as exc:  # openvino raises RuntimeError and its own types; all mean "cannot load"
            raise AppError(f"cannot load {path} with OpenVINO ({exc}); delete it to export it again") from exc
        self.path = path
        self.inputs = [port.get_any_name() for port in self.compiled.inputs]
        self._local = threading.local()

    def run(self, **arrays: np.ndarray) -> list[np.ndarray]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        results = request.infer({name: arrays[name] for name in self.inputs})
        return [np.array(results[port]) for port in self.compiled.outputs]


def engine_pass(
    model_dir: Path,
    fingerprint: str,
    kind: str,
    engine: str,
    dtype: torch.dtype | str,
    build: Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor], list[str]]],
) -> OnnxPass | OpenVinoPass:
    """The pass of `engine` for `model_dir`, exported first when not cached (`build` gives the fp32 module,
    an example batch and the output names; torch is imported only then); threads as `inference_threads`."""
    path = cache_path(model_dir, fingerprint, kind, engine)
    if not path.is_file():
        with export_lock(path):  # processes starting together export once, one after the other
            if not path.is_file():
                module, example, outputs = build()
                write_onnx(module, example, outputs, path, engine)
    if engine == "openvino":
        return OpenVinoPass(path, inference_threads(), dtype)
    return OnnxPass(path, inference_threads())


def inference_threads() -> int:
    """The threads of a pass: torch's (when torch is loaded, as the torch path's passes use), else
    OMP_NUM_THREADS when set, else 0: the runtime's own default (one per physical core, as torch's)."""
    if "torch" in sys.modules:
        return int(sys.modules["torch"].get_num_threads())
    try:
        return max(0, int(os.environ.get("OMP_NUM_THREADS", "0")))
    except ValueError:
        return 0

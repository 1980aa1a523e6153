"""A training checkpoint as a model directory: fp16 safetensors, config, tokenizer, train config."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from common.errors import AppError
from common.files import atomic_path

KEPT_FILES = ("README.md",)  # a hand-written model card in the target survives a re-export


def export_model(checkpoint: Path, out: Path) -> Path:
    """Write `checkpoint` (an HF directory written by `encoder train`) to `out` in fp16, atomically:
    `out` is replaced in one step, never left half written or missing."""
    from transformers import AutoModel, AutoTokenizer

    if not (checkpoint / "config.json").is_file():
        raise AppError(f"checkpoint {checkpoint} has no config.json; pass a checkpoint-NNNNNN directory of a run")
    model = AutoModel.from_pretrained(str(checkpoint), local_files_only=True, dtype=torch.float32).half()
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True).save_pretrained(tmp)
        if (checkpoint / "train_config.json").is_file():
            shutil.copy(checkpoint / "train_config.json", tmp / "train_config.json")
        for name in KEPT_FILES:
            if (out / name).is_file():
                shutil.copy(out / name, tmp / name)
    return out

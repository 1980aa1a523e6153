"""A training run's checkpoints: `checkpoint-STEP/` (the model in HF format, its tokenizer, the run's config and
the trainer's state) written atomically, `latest.json` naming the newest, the oldest beyond `keep` removed; and
read back to resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from common.files import atomic_path, write_json_atomic

STATE_FILE = "trainer_state.pt"
LATEST = "latest.json"


def checkpoint_dir(out: Path, step: int) -> Path:
    return out / f"checkpoint-{step:06d}"


def write_checkpoint(out: Path, step: int, model, tokenizer, config_json: str, state: dict, keep: int) -> Path:
    """checkpoint-STEP under `out` (model, tokenizer, train_config.json, the trainer's `state`), then latest.json;
    all but the newest `keep` checkpoints removed (keep <= 0: none)."""
    final = checkpoint_dir(out, step)
    with atomic_path(final) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "train_config.json").write_text(config_json, encoding="utf-8")
        torch.save(state, tmp / STATE_FILE)
    write_json_atomic(out / LATEST, {"checkpoint": final.name, "step": step})
    checkpoints = sorted(out.glob("checkpoint-*[0-9]"))
    for old in checkpoints[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint latest.json names, None before the first."""
    path = out / LATEST
    if not path.is_file():
        return None
    return out / json.loads(path.read_text(encoding="utf-8"))["checkpoint"]


def read_state(checkpoint: Path) -> dict:
    """The trainer's state saved in `checkpoint` (optimizer, scheduler, step, data position, RNGs, ...)."""
    return torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=False)

"""A weight-space blend of two encoders of one architecture (WiSE-FT, Wortsman et al. 2022).

    python -m recipes.blend_models --base encoder/default_model --tuned data-local/models/s4_adj --alpha 0.5 \\
        --out data-local/models/s4_adj_a05

Every tensor becomes (1 - alpha) * base + alpha * tuned (fp32 arithmetic, written in fp16 like an exported
model); the tokenizer and config are the tuned model's. A further-trained encoder gains on new text but loses
some of what the base did well (Google-RE's subject binding); a blend between the two often keeps most of both.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from common.files import atomic_path

WEIGHTS = "model.safetensors"
NOT_COPIED = ("README.md", "scoring.json", "onnx", "openvino-cache")  # the card and fitted files of another model


def write_model(like: Path, tensors: dict[str, torch.Tensor], out: Path) -> None:
    """A model directory at `out` (atomically): `like`'s files but its card and fitted files, `tensors` in fp16."""
    with atomic_path(out) as tmp:
        shutil.copytree(like, tmp, ignore=shutil.ignore_patterns(*NOT_COPIED))
        save_file(
            {k: v.to(torch.float16).contiguous() for k, v in tensors.items()},
            str(tmp / WEIGHTS),
            metadata={"format": "pt"},
        )


def blend(base: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    if base.keys() != tuned.keys() or any(base[k].shape != tuned[k].shape for k in base):
        raise SystemExit("error: the two models differ in their tensors; blend two encoders of one architecture")
    return {k: (1 - alpha) * base[k].float() + alpha * tuned[k].float() for k in base}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--tuned", type=Path, required=True)
    ap.add_argument("--alpha", type=float, required=True, help="0: the base, 1: the tuned model")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not 0.0 <= args.alpha <= 1.0:
        raise SystemExit(f"error: --alpha {args.alpha} is outside [0, 1]")
    tensors = blend(load_file(str(args.base / WEIGHTS)), load_file(str(args.tuned / WEIGHTS)), args.alpha)
    write_model(args.tuned, tensors, args.out)
    print(f"{len(tensors)} tensors, alpha {args.alpha} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

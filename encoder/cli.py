"""`encoder train` and `encoder export`: the command line of the training job.

`train`'s flags (and ENCODER_* variables) are generated from `TrainConfig`, its one config object.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Annotated

import typer

from common.cli import model_command
from common.errors import AppError, cli_errors
from common.files import atomic_path
from encoder.train import TrainConfig, train

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train and export NPM encoders.")


def _train(cfg: TrainConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    last = train(cfg)
    if last is not None:
        typer.echo(f"last checkpoint: {last}")


model_command(app, TrainConfig, _train, name="train", env_prefix="ENCODER_",
              help="Train with the NPM objective; run under `torchrun -m encoder train ...` for several processes.")


@app.command()
def export(
    checkpoint: Annotated[Path, typer.Option(help="checkpoint directory written by `encoder train`")],
    out: Annotated[Path, typer.Option(help="output model directory")],
) -> None:
    """Write a checkpoint as an fp16 safetensors model directory (weights, config, tokenizer, train config).

    The new directory replaces `--out` atomically; a hand-written README.md (model card) there is kept."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    with cli_errors():
        if not (checkpoint / "config.json").is_file():
            raise AppError(f"checkpoint {checkpoint} has no config.json; pass a checkpoint-NNNNNN directory of a run")
        model = AutoModel.from_pretrained(str(checkpoint), local_files_only=True, dtype=torch.float32).half()
        with atomic_path(out) as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True).save_pretrained(tmp)
            if (checkpoint / "train_config.json").is_file():
                shutil.copy(checkpoint / "train_config.json", tmp / "train_config.json")
            if (out / "README.md").is_file():
                shutil.copy(out / "README.md", tmp / "README.md")
    typer.echo(f"exported {checkpoint} -> {out}")


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="encoder")

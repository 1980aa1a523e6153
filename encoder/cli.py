"""`encoder train`, `encoder adapt`, `encoder train-reader` and `encoder export`: the command lines of the
training jobs.

Their flags (and ENCODER_* / ENCODER_ADAPT_* / ENCODER_READER_* variables) are generated from `TrainConfig`,
`AdaptConfig` and `ReaderTrainConfig`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from common.cli import model_command
from common.errors import cli_errors
from encoder.adapt import AdaptConfig, adapt
from encoder.export import export_model
from encoder.reader_train import ReaderTrainConfig, train_reader
from encoder.train import TrainConfig, train

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train and export NPM encoders.")


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _train(cfg: TrainConfig) -> None:
    _logging()
    last = train(cfg)
    if last is not None:
        typer.echo(f"last checkpoint: {last}")


model_command(app, TrainConfig, _train, name="train", env_prefix="ENCODER_",
              help="Train with the NPM objective; run under `torchrun -m encoder train ...` for several processes.")


def _adapt(cfg: AdaptConfig) -> None:
    _logging()
    typer.echo(f"adapted model: {adapt(cfg)}")


model_command(app, AdaptConfig, _adapt, name="adapt", env_prefix="ENCODER_ADAPT_")


def _train_reader(cfg: ReaderTrainConfig) -> None:
    _logging()
    typer.echo(f"reader: {train_reader(cfg)}")


model_command(app, ReaderTrainConfig, _train_reader, name="train-reader", env_prefix="ENCODER_READER_",
              help="Train the reader (a cross-encoder re-ranking fills) on examples written by fill-reader-data.")


@app.command()
def export(
    checkpoint: Annotated[Path, typer.Option(help="checkpoint directory written by `encoder train`")],
    out: Annotated[Path, typer.Option(help="output model directory")],
) -> None:
    """Write a checkpoint as an fp16 safetensors model directory (weights, config, tokenizer, train config).

    The new directory replaces `--out` atomically; a hand-written README.md (model card) there is kept."""
    with cli_errors():
        export_model(checkpoint, out)
    typer.echo(f"exported {checkpoint} -> {out}")


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="encoder")

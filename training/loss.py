"""The NPM objective: multi-positive InfoNCE over in-batch token candidates, for starts and for ends."""

from __future__ import annotations

import torch


def multi_positive_nce(
    queries: torch.Tensor, candidates: torch.Tensor, positive: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """Mean over queries with >= 1 positive of -log( sum_pos exp(s) / sum_allowed exp(s) ).

    queries [M, d], candidates [N, d], positive / allowed bool [M, N] (positive implies allowed),
    s = q.c * scale.
    """
    positive = positive & allowed
    has_pos = positive.any(dim=1)
    if not bool(has_pos.any()):
        return queries.sum() * 0.0  # keeps the graph; no signal in this batch
    scores = (queries.float() @ candidates.float().T) * scale
    neg_inf = torch.finfo(scores.dtype).min
    all_lse = torch.logsumexp(scores.masked_fill(~allowed, neg_inf), dim=1)
    pos_lse = torch.logsumexp(scores.masked_fill(~positive, neg_inf), dim=1)
    return (all_lse - pos_lse)[has_pos].mean()


def npm_loss(
    q_start: torch.Tensor,
    q_end: torch.Tensor,
    candidates: torch.Tensor,
    pos_start: torch.Tensor,
    pos_end: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_start, L_end); the training loss is their sum."""
    return (
        multi_positive_nce(q_start, candidates, pos_start, allowed, scale),
        multi_positive_nce(q_end, candidates, pos_end, allowed, scale),
    )


def per_query_nce(
    queries: torch.Tensor, candidates: torch.Tensor, positive: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """`multi_positive_nce` where each query has candidates of its own (encoder tune-queries: its top k of the
    index and its answer's occurrences): queries [M, d], candidates [M, N, d], positive / allowed bool [M, N]."""
    positive = positive & allowed
    has_pos = positive.any(dim=1)
    if not bool(has_pos.any()):
        return queries.sum() * 0.0
    scores = torch.einsum("mnd,md->mn", candidates.float(), queries.float()) * scale
    neg_inf = torch.finfo(scores.dtype).min
    all_lse = torch.logsumexp(scores.masked_fill(~allowed, neg_inf), dim=1)
    pos_lse = torch.logsumexp(scores.masked_fill(~positive, neg_inf), dim=1)
    return (all_lse - pos_lse)[has_pos].mean()

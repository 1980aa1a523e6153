"""One round per shard group: a fill's search and candidates in ONE call to each group, and at the ingress the
global top k of the groups' answers (Vespa's scatter-gather: one round to every content node, one global phase).

  groups   each searches its shards (its own top k of every query, with scores) and forms each mask's candidates
           from its own hits and the mask's BM25 blocks in its shards (fill.shard_group.ShardGroup.search_forming),
           their logits without the lexical bonus
  ingress  keeps the top k of all the groups' hits (indexer.shard_hits.top_hits: the hits of one process), and of
           each group's candidates those the global hits form (`kept`): a span stays when its first token is a
           global start hit, its last a global end hit, or its block a BM25 block. A group's own top k holds every
           global hit in its shards, and whether a span is valid depends on its two ends alone (fill.spans), so
           these are the spans of one process; `kept` then adds the lexical bonus to their distinct starts and ends:
           the logits of one process bit for bit (a logit does not depend on which rows are scored with it:
           common.arrays.row_dot)

Everything else a fill asks of the shards reads their text (the reader's windows, the evidence, a block's tokens),
which the ingress opens itself (indexer.shard.Shard with dense=False; `text`), so a fill costs one round."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from common.arrays import unique, unique_inverse
from common.errors import AppError
from fill.candidates import CandidateForm, Lexical, ShardCandidates
from fill.hits import MaskHits
from fill.ragged import Ragged
from fill.shard_group import R, ShardGroup, ShardTask
from indexer.shard_hits import ScoredHits, top_hits

Call = tuple[int, str, tuple[Any, ...]]  # (group, method of fill.shard_group.ShardGroup, its arguments)


class ScatterShards:
    """fill.shard_group.Shards over shard groups elsewhere: `send(calls)` gives the results of calls made to the
    groups at once (service.ray_backend.RayShards: over Ray Serve); `owner[shard_no]` is a shard's group. `text`
    (the ingress's own shards, their text side) runs the tasks that read no vector; without it every task goes to
    its group."""

    one_round = True

    def __init__(self, owner: dict[int, int], text: ShardGroup | None, send: Callable[[list[Call]], list[Any]]) -> None:
        self.owner = owner
        self.text = text
        self.send = send
        self.groups_n = len(set(owner.values()))

    def search(self, queries: np.ndarray, k: int, groups: list[int] | None = None) -> list[ScoredHits]:
        found: list[list[ScoredHits]] = self.send([(g, "search", (queries, k, groups)) for g in range(self.groups_n)])
        return merged_hits(found, k)

    def search_forming(
        self, queries: np.ndarray, k: int, groups: list[int], forms: Sequence[CandidateForm | None]
    ) -> tuple[list[ScoredHits], list[list[list[ShardCandidates]]]]:
        """Every group's search and candidates (one call each); the global top k of the hits, and per fill and mask
        every group's candidates, shards ascending (not yet `kept`)."""
        answers = self.send([(g, "search_forming", (queries, k, groups, forms)) for g in range(self.groups_n)])
        found = merged_hits([a[0] for a in answers], k)
        parts = [
            [sorted((c for a in answers for c in a[1][i][m]), key=lambda c: c.shard_no) for m in range(len(f.masks))]
            if f is not None
            else []
            for i, f in enumerate(forms)
        ]
        return found, parts

    def gather(self, tasks: Sequence[ShardTask[R]]) -> list[R]:
        out: list[R] = [None] * len(tasks)  # type: ignore[list-item]  # every slot is set below
        here: list[int] = []  # run on the ingress's text side
        per: dict[int, list[int]] = {}  # sent to the owning group
        for i, task in enumerate(tasks):
            if self.text is not None and not task.dense:
                here.append(i)
                continue
            g = self.owner.get(task.shard_no)
            if g is None:
                raise AppError(f"shard {task.shard_no} belongs to no shard group", kind="internal")
            per.setdefault(g, []).append(i)
        if self.text is not None and here:
            for i, result in zip(here, self.text.gather([tasks[i] for i in here])):
                out[i] = result
        found = self.send([(g, "gather", ([tasks[i] for i in own],)) for g, own in per.items()]) if per else []
        for own, results in zip(per.values(), found):
            for i, result in zip(own, results):
                out[i] = result
        return out


def merged_hits(found: list[list[ScoredHits]], k: int) -> list[ScoredHits]:
    """Per query, the top k of every group's top k (`found[group][query]`)."""
    out = []
    for row in range(len(found[0]) if found else 0):
        parts = [f[row] for f in found]
        out.append(
            top_hits(
                np.concatenate([p.scores for p in parts]),
                np.concatenate([p.shard_no for p in parts]),
                np.concatenate([p.positions for p in parts]),
                k,
            )
        )
    return out


def kept(parts: list[ShardCandidates], hits: MaskHits, lexical: Lexical | None) -> list[ShardCandidates]:
    """Of one mask's candidates formed by the groups (plain logits), the spans the global `hits` and the BM25
    blocks form, each part cut to them, with the lexical bonus added: the parts one process forms."""
    out = []
    for c in parts:
        keep = np.isin(c.first, hits.start.in_shard(c.shard_no)) | np.isin(c.last, hits.end.in_shard(c.shard_no))
        if lexical is not None:
            keep |= np.isin(c.block, lexical.blocks)
        if keep.any():
            out.append(_cut(c, keep, lexical))
    return out


def _cut(c: ShardCandidates, keep: np.ndarray, lexical: Lexical | None) -> ShardCandidates:
    """`c` with only the spans of `keep`, its starts and ends those of the spans kept (plus the bonus)."""
    starts, start_of = unique_inverse(c.start_of[keep])
    ends, end_of = unique_inverse(c.end_of[keep])
    block = c.block[keep]
    start_logits, end_logits = c.start_logits[starts], c.end_logits[ends]
    start_max, end_max = float(start_logits.max()), float(end_logits.max())
    if lexical is not None and lexical.bonus is not None:
        bonus = lexical.bonus
        start_logits = start_logits + bonus.weight * bonus.prior(_of_rows(block, start_of, starts.size))
        end_logits = end_logits + bonus.weight * bonus.prior(_of_rows(block, end_of, ends.size))
    distinct = unique(block)
    return ShardCandidates(
        shard_no=c.shard_no,
        first=c.first[keep],
        last=c.last[keep],
        start_logits=start_logits,
        start_of=start_of,
        end_logits=end_logits,
        end_of=end_of,
        start_max=start_max,
        end_max=end_max,
        block=block,
        row=c.row[keep],
        char=c.char[keep],
        keys=Ragged(c.keys.codes, c.keys.start[keep], c.keys.length[keep]),
        tokens=c.tokens[keep] if c.tokens is not None else None,
        blocks=distinct,
        bounds=c.bounds[np.searchsorted(c.blocks, distinct)],
    )


def _of_rows(block: np.ndarray, of: np.ndarray, n: int) -> np.ndarray:
    """Per row of a start (end) logits array, the global block of its position (that of any span starting there)."""
    out = np.empty(n, dtype=block.dtype)
    out[of] = block
    return out

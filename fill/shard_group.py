"""The shard-local stage behind one door: a `ShardGroup` searches the shards it has opened and runs tasks on
them. It is everything the fill path does with a shard's files, so the engine never touches a shard itself:

  search   the top k tokens of each query over the group's shards, with their scores (PhraseIndex.search_scored;
           ties broken by shard and position, so the top k of several groups' top k is the top k of all)
  gather   a list of tasks (`ShardTask[R]`: a frozen dataclass naming one shard, `shard_no`, its number in the
           whole index, whose `compute(shard)` gives an R): form and score a mask's candidate spans
           (fill.candidates.CandidateTask -> ShardCandidates), read documents for evidence (fill.evidence.PlacesTask
           -> Places), a block's token ids (`BlockTokensTask`), the reader's windows (fill.windows.WindowTask ->
           WindowRead), a closed-set score's votes, their places and its choices' base rates (fill.choices). The
           results come back in the tasks' order.
  search_forming  `search`, and each fill's candidates from this group's own hits and blocks, in the same call
           (a shard group on Ray: one round a fill, fill.scatter)

Tasks and results are plain data (dataclasses, NamedTuples, numpy arrays): in one process `gather` is a loop over
them; a distributed deployment (service.ray_backend: one group per set of shard directories, on other processes
or machines) pickles the same objects and sends every group one message a fill (fill.scatter); the tasks that
read no vector (`dense` False) run on the ingress's own text side of the shards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Sequence, TypeVar

import numpy as np

from fill.candidates import CandidateForm, CandidateTask, ShardCandidates
from indexer.phrase_index import PhraseIndex, ScoredHits
from indexer.shard import Shard

_NONE = np.empty(0, dtype=np.int64)

R_co = TypeVar("R_co", covariant=True)  # a task's result type
R = TypeVar("R")  # the result type of a list of tasks run together


class ShardTask(Protocol[R_co]):
    """Work on one shard (number `shard_no` of the whole index) whose result is an R; `dense`: it reads the
    shard's vectors (else its text side only, which a Ray ingress holds: fill.scatter)."""

    dense: ClassVar[bool]

    @property
    def shard_no(self) -> int: ...

    def compute(self, shard: Shard) -> R_co: ...


class Shards(Protocol):
    """What the engine needs of the shards: this module's ShardGroup, or service.ray_backend.RayShards. With
    `one_round`, a fill's search and candidates are one call (`search_forming`, fill.scatter)."""

    one_round: bool

    def search(self, queries: np.ndarray, k: int, groups: list[int] | None = None) -> list[ScoredHits]: ...

    def gather(self, tasks: Sequence[ShardTask[R]]) -> list[R]: ...

    def search_forming(
        self, queries: np.ndarray, k: int, groups: list[int], forms: Sequence[CandidateForm | None]
    ) -> tuple[list[ScoredHits], list[list[list[ShardCandidates]]]]: ...


class ShardGroup:
    """The opened shards of `index` (all of them, or a group's: PhraseIndex(shard_nos=...)). In one process a fill
    searches, then forms its candidates (`gather`): `one_round` False."""

    one_round = False

    def __init__(self, index: PhraseIndex) -> None:
        self.index = index
        self._at = {n: i for i, n in enumerate(index.numbers)}

    @property
    def shard_nos(self) -> list[int]:
        return list(self.index.numbers)

    def shard(self, shard_no: int) -> Shard:
        """The opened shard number `shard_no` of the whole index (KeyError when this group does not hold it)."""
        return self.index.shards[self._at[shard_no]]

    def search(self, queries: np.ndarray, k: int, groups: list[int] | None = None) -> list[ScoredHits]:
        return self.index.search_scored(queries, k, groups)

    def gather(self, tasks: Sequence[ShardTask[R]]) -> list[R]:
        return [task.compute(self.shard(task.shard_no)) for task in tasks]

    def search_forming(
        self, queries: np.ndarray, k: int, groups: list[int], forms: Sequence[CandidateForm | None]
    ) -> tuple[list[ScoredHits], list[list[list[ShardCandidates]]]]:
        """`search`, and with it the candidates of each group of queries that has a form (a fill's: its masks'
        start queries, then their end queries): per mask, those its hits here (this group's own top k) and its
        blocks in this group's shards form, their logits without the lexical bonus (fill.scatter keeps the
        spans the global top k forms, and adds it)."""
        found = self.search(queries, k, groups)
        parts: list[list[list[ShardCandidates]]] = []
        at = 0
        for n, form in zip(groups, forms):
            parts.append([] if form is None else self._form(found[at : at + n], form))
            at += n
        return found, parts

    def _form(self, found: list[ScoredHits], form: CandidateForm) -> list[list[ShardCandidates]]:
        out = []
        half = len(found) // 2
        for m, query in enumerate(form.masks):
            start, end = found[m], found[half + m]
            held = set(start.shard_no.tolist()) | set(end.shard_no.tolist()) | set(form.blocks)
            tasks = [
                CandidateTask(
                    s,
                    start.positions[start.shard_no == s],
                    end.positions[end.shard_no == s],
                    form.blocks.get(s, _NONE),
                    query,
                )
                for s in sorted(held & set(self._at))
            ]
            out.append([c for c in self.gather(tasks) if c is not None])
        return out


@dataclass(frozen=True)
class BlockTokensTask:
    """The token ids of one block of one shard (`block`: its global number)."""

    dense: ClassVar[bool] = False  # reads text only: a Ray ingress runs it (fill.scatter)

    shard_no: int
    block: int

    def compute(self, shard: Shard) -> np.ndarray:
        _, a, b = (int(x) for x in shard.blocks[self.block - shard.info.block_base])
        return np.asarray(shard.token_ids[a:b])


def by_shard(items: list[tuple[int, Any]]) -> tuple[dict[int, list[Any]], list[tuple[int, int]]]:
    """Items (shard number, payload) gathered per shard (shards ascending, payloads in order), and where each
    item lands: (its shard, its index in that shard's list)."""
    per: dict[int, list[Any]] = {}
    where = []
    for shard_no, payload in items:
        own = per.setdefault(shard_no, [])
        where.append((shard_no, len(own)))
        own.append(payload)
    return dict(sorted(per.items())), where

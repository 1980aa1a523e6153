"""Typed hits: what the search finds for a request, per mask, before any span is formed.

`Hits` are token hits over the whole index as two parallel arrays (the shard number of each hit and its
position in that shard); `MaskHits` are the hits of one mask's start query and of its end query (start
hits are extended forward into spans, end hits backward). The candidate stage (fill.candidates) reads
one shard's positions at a time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.arrays import unique
from indexer.phrase_index import PhraseIndex

_EMPTY = np.empty(0, dtype=np.int64)
_EMPTY.flags.writeable = False  # shared by every empty Hits


@dataclass(frozen=True)
class Hits:
    shard_no: np.ndarray  # int64, the shard of each hit
    positions: np.ndarray  # int64, the hit's token position within its shard

    @classmethod
    def empty(cls) -> "Hits":
        return cls(_EMPTY, _EMPTY)

    def shard_nos(self) -> list[int]:
        """The shards holding at least one hit, ascending."""
        shards: list[int] = unique(self.shard_no).tolist()
        return shards

    def in_shard(self, shard_no: int) -> np.ndarray:
        """The positions of the hits in shard `shard_no`."""
        positions: np.ndarray = self.positions[self.shard_no == shard_no]
        return positions


@dataclass(frozen=True)
class MaskHits:
    start: Hits  # hits of the mask's start query (MASK_s)
    end: Hits  # hits of its end query (MASK_e)

    @classmethod
    def empty(cls) -> "MaskHits":
        return cls(Hits.empty(), Hits.empty())

    def shard_nos(self) -> list[int]:
        """The shards holding a start or an end hit, ascending."""
        shards: list[int] = unique(np.concatenate([self.start.shard_no, self.end.shard_no])).tolist()
        return shards


def blocks_by_shard(index: PhraseIndex, blocks: np.ndarray) -> dict[int, np.ndarray]:
    """The global block numbers `blocks` of `index` (indexer.phrase_index.PhraseIndex) per shard holding them, as
    block numbers in that shard."""
    shard_no, local = index.block_shards(blocks)
    return {s: local[shard_no == s] for s in unique(shard_no).tolist()}

"""Every occurrence of a phrase in an opened index: the token runs whose ids are the phrase's, starting at a word
start, ending at a word end, inside one live block.

`encoder tune-queries` (training.tune_queries) makes every occurrence of an answer a positive, as a fill sums a
phrase over all of them. The phrases' ids are hashed (a polynomial over the ids, modulo 2^64) and each shard's
token runs of every needed length hashed the same way, one vectorised pass a length: 64-bit hashes of a few
million runs do not collide in practice. A place is a key `shard << 40 | position` (`key`, `split_keys`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from corpus.tokens import WORD_END, WORD_START
from indexer.phrase_index import PhraseIndex

SHIFT = 40  # a position below 2^40 (a shard holds at most ~18M tokens)
_BASE = np.uint64(0x9E3779B97F4A7C15)


def key(shard_no: np.ndarray | int, positions: np.ndarray | int) -> np.ndarray:
    """The int64 key of each (shard number, position)."""
    return (np.asarray(shard_no, dtype=np.int64) << SHIFT) | np.asarray(positions, dtype=np.int64)


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shard numbers, positions) of keys."""
    keys = np.asarray(keys, dtype=np.int64)
    return keys >> SHIFT, keys & ((1 << SHIFT) - 1)


def phrase_hash(ids: list[int]) -> int:
    """The hash of one phrase's ids (what `_run_hashes` gives its runs)."""
    h = np.uint64(0)
    power = np.uint64(1)
    with np.errstate(over="ignore"):
        for token in ids:
            h = h + np.uint64(token + 1) * power
            power = power * _BASE
    return int(h)


@dataclass(frozen=True)
class Places:
    """Where one phrase occurs: the keys of its first tokens, of its last tokens (the same order), and the global
    block of each occurrence."""

    starts: np.ndarray
    ends: np.ndarray
    blocks: np.ndarray

    def __len__(self) -> int:
        return int(self.starts.size)


EMPTY = Places(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))


def find_occurrences(index: PhraseIndex, phrases: list[list[int]], max_tokens: int = 10) -> list[Places]:
    """The places of each phrase (token ids; phrases longer than `max_tokens` or empty have none), over the live
    blocks of every opened shard."""
    wanted: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))  # length -> hash -> phrases
    for p, ids in enumerate(phrases):
        if 0 < len(ids) <= max_tokens:
            wanted[len(ids)][phrase_hash(ids)].append(p)
    found: list[list[np.ndarray]] = [[] for _ in phrases]  # per phrase: [3, m] (start key, end key, block) pieces
    for s, shard in enumerate(index.shards):
        number = index.numbers[s]
        tokens = np.asarray(shard.token_ids, dtype=np.int64)
        block = shard.block_of(np.arange(tokens.size, dtype=np.int64))
        dead = np.zeros(len(shard.blocks), dtype=bool)
        live = index.live[s]
        if live is not None:
            dead[live.dead_blocks] = True
        base = index.manifest.shards[number].block_base
        for length, hashes in sorted(wanted.items()):
            at, run_hashes = _runs(tokens, np.asarray(shard.flags), block, dead, length)
            hit = np.isin(run_hashes, np.fromiter(hashes.keys(), dtype=np.uint64, count=len(hashes)))
            order = np.argsort(run_hashes[hit], kind="stable")
            at, run_hashes = at[hit][order], run_hashes[hit][order]
            bounds = np.concatenate([[0], np.flatnonzero(np.diff(run_hashes)) + 1, [at.size]]).tolist()
            for a, b in zip(bounds[:-1], bounds[1:]):
                if a == b:
                    continue
                first = at[a:b]
                piece = np.stack([key(number, first), key(number, first + length - 1), block[first] + base])
                for p in hashes[int(run_hashes[a])]:
                    found[p].append(piece)
    return [_places(pieces) for pieces in found]


def _runs(
    tokens: np.ndarray, flags: np.ndarray, block: np.ndarray, dead: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first positions of a shard's word-aligned runs of `length` tokens inside one live block, and their
    hashes."""
    n = tokens.size - length + 1
    if n <= 0:
        return np.empty(0, np.int64), np.empty(0, np.uint64)
    ok = (flags[:n] & WORD_START).astype(bool) & (flags[length - 1 :] & WORD_END).astype(bool)
    ok &= block[:n] == block[length - 1 :]
    ok &= ~dead[block[:n]]
    at = np.flatnonzero(ok)
    h = np.zeros(at.size, dtype=np.uint64)
    power = np.uint64(1)
    with np.errstate(over="ignore"):
        for j in range(length):
            h += (tokens[at + j].astype(np.uint64) + np.uint64(1)) * power
            power = power * _BASE
    return at, h


def _places(pieces: list[np.ndarray]) -> Places:
    if not pieces:
        return EMPTY
    starts, ends, blocks = np.concatenate(pieces, axis=1)
    return Places(starts, ends, blocks)

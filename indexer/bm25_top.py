"""The top-n blocks of a BM25 query without adding up every posting of its common words (MaxScore, Turtle and Flood
1995): the blocks and scores of adding every posting (indexer.bm25.top_blocks), bit for bit.

  bound      each word's largest weight (term_stats' `top`); `rest[i]`, the sum of those of the words after the
             i-th, in the reading order: the cheap words (in fewer than 1 / CHEAP_SHARE of the blocks: adding a
             short posting costs less than looking a long candidate list up in it) first, then the common ones,
             each part in decreasing order of that bound
  essential  words read whole, in that order: the cheap ones at once (their blocks and summed weights by one
             stable sort of their postings: no array of every block, 2.66M at 100M tokens), then each common one
             added to an array of every block's partial score; after the cheap words and each common one,
             theta = the n-th best partial score (a floor under the n-th best total: scores only grow). Once
             rest < theta, a block none of them holds cannot reach the top n, and reading stops
  remaining  each other word's weight read only at the candidates (blocks whose partial + rest can still reach
             theta), from the pieces holding them (indexer.bm25_postings); candidates that can no longer reach
             theta are dropped after each word
  totals     each candidate's weights added again in the query's word order from 0, as FTS5 sums its phrases (so
             the same doubles), then the n best, ties by lower block id

At 100M tokens (2.66M blocks) a dev probe's common words hold ~2M postings, all read and added before; the
candidates a remaining word is read at are a few hundred to a few thousand blocks. Reading the cheap words first
(~390k postings a probe) spares the candidate lists of tens of thousands of blocks that reading them at the
candidates needed (bench.bench_bm25)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from indexer.bm25_postings import Posting, weights_at

SLACK = 1e-9  # relative: bounds and partial sums are doubles added in other orders than the totals
CHEAP_SHARE = 16  # a word in fewer than 1/16 of the blocks is read whole before MaxScore decides what to skip


def maxscore_top(
    words: list[str],
    tops: dict[str, float],
    whole: Callable[[str], Posting],
    at: Callable[[str, np.ndarray], np.ndarray],
    rows: int,
    n: int,
    blocks: dict[str, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(block ids, scores) of the n best blocks (score > 0) for `words` (query order; each in `tops`, its largest
    weight), reading a word whole by `whole(word)` or at given blocks by `at(word, blocks)`. `blocks`: each word's
    block count, where known: the words in fewer than rows / CHEAP_SHARE blocks are read whole first (adding a short
    posting costs less than looking up a long candidate list in it), MaxScore's skipping kept for the common ones."""
    if not words:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    common = {w for w in words if blocks is not None and blocks.get(w, 0) * CHEAP_SHARE >= rows}
    order = sorted(words, key=lambda w: (w in common, -tops[w]))
    rest = np.concatenate([np.cumsum([tops[w] for w in order[::-1]])[::-1], [0.0]])
    first = max(1, sum(w not in common for w in order))  # the cheap words (or the first word), read whole at once
    read = {w: whole(w) for w in order[:first]}
    held, partial = _sparse_sums([read[w] for w in order[:first]])  # the blocks they hold, partial scores
    pool, theta = _best_of(held, partial, n)
    score: np.ndarray | None = None  # every block's partial score, once a common word is read whole
    i = first - 1
    while not (pool.size >= n and rest[i + 1] * (1 + SLACK) < theta * (1 - SLACK)):
        i += 1
        if i == len(order):  # every word read whole: the sums in the query's order
            return top_blocks(_summed([read[w] for w in words], rows), n)
        if score is None:
            score = np.zeros(rows, dtype=np.float64)
            score[held] = partial
        posting = read[order[i]] = whole(order[i])  # a common word read whole: its blocks changed
        score[posting.blocks] += posting.weights
        pool, theta = _best(score, pool, posting.blocks, n)
    stop = len(read)
    bound = rest[stop]
    if score is not None:
        held = np.flatnonzero(score > 0)
        partial = score[held]
    reach = (partial + bound) * (1 + SLACK) >= theta * (1 - SLACK)  # the blocks that can still reach theta
    candidates, partial = held[reach], partial[reach]
    found: dict[str, np.ndarray] = {}  # the remaining words' weights at the candidates
    for j, word in enumerate(order[stop:]):
        found[word] = at(word, candidates)
        partial = partial + found[word]
        bound = rest[stop + j + 1]
        if candidates.size > n:
            theta = max(theta, float(np.partition(partial, candidates.size - n)[candidates.size - n]))
            keep = (partial + bound) * (1 + SLACK) >= theta * (1 - SLACK)
            candidates, partial = candidates[keep], partial[keep]
            found = {w: v[keep] for w, v in found.items()}
    total = np.zeros(candidates.size, dtype=np.float64)
    for word in words:
        total += found[word] if word in found else weights_at(read[word], candidates)
    return top_ids(candidates, total, n)


def _summed(postings: list[Posting], rows: int) -> np.ndarray:
    """float64 [rows]: each block's weights added word after word from 0 (the doubles of adding them one word at a
    time: bincount adds in the order given), one pass."""
    if len(postings) == 1:
        out = np.zeros(rows, dtype=np.float64)
        out[postings[0].blocks] = postings[0].weights
        return out
    blocks = np.concatenate([p.blocks for p in postings]).astype(np.intp)
    return np.bincount(blocks, np.concatenate([p.weights for p in postings]), minlength=rows)


def _sparse_sums(postings: list[Posting]) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct blocks of some postings, ascending; each one's weights added), without an array of every block
    (a stable sort of the postings one after the other: timsort merges their sorted runs). The sums are bounds for
    skipping, not totals: `maxscore_top` adds the totals again in the query's order."""
    if len(postings) == 1:
        return postings[0].blocks.astype(np.int64), np.asarray(postings[0].weights, dtype=np.float64)
    blocks = np.concatenate([p.blocks for p in postings])
    order = np.argsort(blocks, kind="stable")
    blocks, weights = blocks[order], np.concatenate([p.weights for p in postings])[order]
    first = np.empty(blocks.size, dtype=bool)
    first[:1] = True
    np.not_equal(blocks[1:], blocks[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return blocks[starts].astype(np.int64), np.add.reduceat(weights, starts)


def _best_of(held: np.ndarray, partial: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """`_best` of blocks `held` (ascending) with these partial scores, every other block at 0."""
    if held.size < n:
        return held, 0.0
    kth = float(np.partition(partial, held.size - n)[held.size - n])
    return held[partial >= kth], kth


def _best(score: np.ndarray, pool: np.ndarray, blocks: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """The blocks with the n best partial scores (ties at the n-th kept) and the n-th score, from the previous best
    `pool` and the blocks of the word just added (only those changed: the others' scores stay below the n-th)."""
    blocks = blocks.astype(np.int64)
    if pool.size:
        place = np.minimum(np.searchsorted(pool, blocks), pool.size - 1)
        blocks = blocks[pool[place] != blocks]
    both = np.concatenate([pool, blocks])
    if both.size < n:
        return np.sort(both), 0.0
    values = score[both]
    kth = float(np.partition(values, both.size - n)[both.size - n])
    return np.sort(both[values >= kth]), kth


def top_blocks(score: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(block ids, scores) of the n best blocks with a score > 0, best first, ties by lower block id."""
    matched = np.flatnonzero(score > 0)  # every weight is > 0 (idf >= 1e-6, f >= 1)
    return top_ids(matched, score[matched], n)


def top_ids(ids: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, scores) of the n best of `ids` (ascending) with a score > 0, best first, ties by lower id."""
    keep = scores > 0
    ids, scores = ids[keep].astype(np.int64), scores[keep]
    if ids.size > n:
        cut = np.partition(-scores, n - 1)[n - 1]  # the n-th best score
        ids, scores = ids[-scores <= cut], scores[-scores <= cut]  # ties at the cut included, trimmed below
    order = np.lexsort((ids, -scores))[:n]
    return ids[order], scores[order]

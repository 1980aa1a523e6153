"""Order training blocks so that each run of `group_size` blocks is lexically related.

NPM groups blocks that are consecutive in the corpus. For a corpus of short, unrelated documents
(one snippet per person, say) consecutive blocks share little, so in-batch negatives are easy:
"London" in one person's snippet rarely meets "London" in another's. `similar_order` instead
groups each block with the blocks that share the most rare-ish content tokens with it (an
IDF-weighted overlap), so the same phrases recur across the documents of a group and the
encoder must tell their occurrences apart by context.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict

import numpy as np

logger = logging.getLogger(__name__)


def similar_order(
    token_sets: list[np.ndarray], group_size: int, rng: np.random.Generator, max_df: int = 500
) -> np.ndarray:
    """A permutation of the blocks: consecutive runs of `group_size` are greedy groups of similar blocks.

    `token_sets[i]` holds block i's content token ids (duplicates are ignored). Tokens found in a
    single block or in more than `max_df` blocks do not link blocks. Seeds are taken in random
    order; each seed collects the unassigned blocks with the highest summed IDF of shared tokens,
    then unrelated leftovers fill the group.
    """
    n = len(token_sets)
    sets = [np.unique(np.asarray(t, dtype=np.int64)) for t in token_sets]
    postings: dict[int, list[int]] = defaultdict(list)
    for i, toks in enumerate(sets):
        for t in toks.tolist():
            postings[t].append(i)
    idf = {t: math.log(n / len(b)) for t, b in postings.items() if 1 < len(b) <= max_df}
    assigned = np.zeros(n, dtype=bool)
    order: list[int] = []
    seeds = rng.permutation(n).tolist()
    fill = iter(seeds)  # leftovers, in the same random order
    for seed in seeds:
        if assigned[seed]:
            continue
        assigned[seed] = True
        group = [seed]
        scores: dict[int, float] = defaultdict(float)
        for t in sets[seed].tolist():
            w = idf.get(t)
            if w is None:
                continue
            for j in postings[t]:
                if not assigned[j]:
                    scores[j] += w
        for j, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[: group_size - 1]:
            assigned[j] = True
            group.append(j)
        while len(group) < group_size and not assigned.all():
            j = next(fill)
            if not assigned[j]:
                assigned[j] = True
                group.append(j)
        order += group
    logger.info("grouped %d blocks by shared content tokens (%d linking tokens)", n, len(idf))
    return np.asarray(order, dtype=np.int64)

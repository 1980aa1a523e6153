"""NPM span masking: mask word-aligned n-grams that also occur in another block of the same group.

Each masked span is replaced by exactly two mask tokens (MASK_s, MASK_e). Its positives are the
first / last tokens of every occurrence of the same n-gram in the OTHER blocks of the group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from corpus.tokens import WORD_END, WORD_START


@dataclass(frozen=True)
class MaskingConfig:
    budget: float = 0.15  # fraction of a block's tokens to mask
    geometric_p: float = 0.5  # span length ~ Geometric(p)
    max_span: int = 10
    max_spans: int = 64  # per block
    attempts: int = 40  # samples tried per span before giving up on a block
    salient_rate: float = 0.0  # chance that a span is drawn from the block's salient spans (entities, numbers)


@dataclass
class MaskedSpan:
    start: int  # token range [start, end] (inclusive) in the unmasked block
    end: int
    positives: list[tuple[int, int]]  # (block, start position) of the same n-gram elsewhere (or itself)


@dataclass
class MaskedBlock:
    ids: list[int]  # the block with every span replaced by two mask tokens
    mask_positions: list[int]  # position of MASK_s of each span in `ids` (MASK_e follows)
    spans: list[MaskedSpan] = field(default_factory=list)


_Candidate = tuple[int, int, list[tuple[int, int]]]  # a maskable span: (start, end inclusive, its positives)


def ngram_occurrences(
    blocks: list[np.ndarray], flags: list[np.ndarray], max_span: int
) -> dict[tuple, list[tuple[int, int]]]:
    """Every word-aligned n-gram (n <= max_span) of the group -> its (block, start) occurrences."""
    table: dict[tuple, list[tuple[int, int]]] = {}
    for b, (ids, fl) in enumerate(zip(blocks, flags)):
        ids_l = ids.tolist()
        n = len(ids_l)
        for i in np.flatnonzero(fl & WORD_START).tolist():
            for j in range(i, min(n, i + max_span)):
                if fl[j] & WORD_END:
                    table.setdefault(tuple(ids_l[i : j + 1]), []).append((b, i))
    return table


def mask_group(
    blocks: list[np.ndarray],
    flags: list[np.ndarray],
    mask_id: int,
    rng: np.random.Generator,
    cfg: MaskingConfig = MaskingConfig(),
    allowed: Callable[[tuple], bool] | None = None,
    tokens_per_span: int = 2,
    docs: list[int] | None = None,
    include_self: bool = False,
    regions: list[tuple[int, int]] | None = None,
    salient: list[np.ndarray | None] | None = None,
) -> list[MaskedBlock]:
    """Mask every block of a group. `allowed(ids_tuple) -> bool` can veto spans (e.g. stopwords only).

    With `docs` (a document number per block) only occurrences in other blocks of the same
    document count as positives (and a span needs one to be masked).

    With `include_self` a span's own position (in the unmasked copy of its block) is a positive
    too, so every word-aligned span qualifies; with `docs`, so are the other occurrences in the
    same document (same block included).

    `regions` (a token range [a, b) per block) restricts the spans of each block to that range;
    the mask budget is then a fraction of the range's length.

    `salient` (inclusive token ranges per block, see `training.salient`) are whole entities and
    numbers; each span is drawn from them with probability `cfg.salient_rate` while any is left,
    otherwise as NPM draws it (a random n-gram of Geometric length). They obey the same rules
    (word-aligned, inside the region, allowed, a positive, not touching another span).

    `tokens_per_span` is 2 for NPM (MASK_s, MASK_e) and 1 for NPM-single (with max_span = 1).
    """
    rules = _SpanRules(ngram_occurrences(blocks, flags, cfg.max_span), allowed, docs, include_self)
    out = []
    for b, (ids, fl) in enumerate(zip(blocks, flags)):
        ids_l = ids.tolist()
        lo, hi = regions[b] if regions is not None else (0, len(ids_l))
        by_len = _ngram_candidates(b, ids_l, fl, lo, hi, cfg.max_span, rules)
        named: list[_Candidate] = []
        if salient is not None and salient[b] is not None and cfg.salient_rate > 0:
            named = _salient_candidates(b, ids_l, cast(np.ndarray, salient[b]), lo, hi, rules)  # (not None: above)
        budget = max(1, int(round(cfg.budget * (hi - lo))))
        chosen = _choose_spans(by_len, named, budget, len(ids_l), rng, cfg)
        out.append(_masked_block(ids_l, chosen, mask_id, tokens_per_span))
    return out


@dataclass(frozen=True)
class _SpanRules:
    """Which n-grams of a group may be masked and what their positives are (see `mask_group`)."""

    table: dict[tuple, list[tuple[int, int]]]  # ngram_occurrences of the group
    allowed: Callable[[tuple], bool] | None
    docs: list[int] | None
    include_self: bool

    def positives(self, b: int, ids: list[int], i: int, j: int) -> list[tuple[int, int]]:
        """The positives of the n-gram ids[i..j] of block b: empty when `allowed` vetoes it or it has none."""
        key = tuple(ids[i : j + 1])
        if self.allowed is not None and not self.allowed(key):
            return []
        occs = self.table.get(key, ())
        docs = self.docs
        if self.include_self:
            return [o for o in occs if o == (b, i) or (docs is not None and docs[o[0]] == docs[b])]
        return [o for o in occs if o[0] != b and (docs is None or docs[o[0]] == docs[b])]


def _ngram_candidates(
    b: int, ids: list[int], flags: np.ndarray, lo: int, hi: int, max_span: int, rules: _SpanRules
) -> dict[int, list[_Candidate]]:
    """Block b's maskable word-aligned n-grams (n <= max_span) inside [lo, hi), by length."""
    by_len: dict[int, list[_Candidate]] = {}
    for i in np.flatnonzero(flags[lo:hi] & WORD_START).tolist():
        i += lo
        for j in range(i, min(hi, i + max_span)):
            if not flags[j] & WORD_END:
                continue
            others = rules.positives(b, ids, i, j)
            if others:
                by_len.setdefault(j - i + 1, []).append((i, j, others))
    return by_len


def _salient_candidates(
    b: int, ids: list[int], spans: np.ndarray, lo: int, hi: int, rules: _SpanRules
) -> list[_Candidate]:
    """Block b's salient spans (inclusive ranges) that lie inside [lo, hi) and may be masked."""
    named: list[_Candidate] = []
    for i, j in spans.tolist():
        if lo <= i and j < hi and (others := rules.positives(b, ids, i, j)):
            named.append((i, j, others))
    return named


def _is_free(taken: np.ndarray, candidate: _Candidate) -> bool:
    """Neither the span nor a token next to it is taken (masked spans never touch)."""
    return not taken[max(0, candidate[0] - 1) : candidate[1] + 2].any()


def _choose_spans(
    by_len: dict[int, list[_Candidate]],
    named: list[_Candidate],
    budget: int,
    size: int,
    rng: np.random.Generator,
    cfg: MaskingConfig,
) -> list[MaskedSpan]:
    """Draw spans of a block of `size` tokens until `budget` tokens are masked (2 more at most), `cfg.max_spans`
    spans are drawn or `cfg.attempts` draws missed; sorted by start.

    A draw is a free salient span with probability `cfg.salient_rate` while any is left, otherwise a free
    n-gram of Geometric(cfg.geometric_p) length (capped at cfg.max_span)."""
    taken = np.zeros(size + 1, dtype=bool)
    chosen: list[MaskedSpan] = []
    masked = 0
    misses = 0
    while by_len and masked < budget and len(chosen) < cfg.max_spans and misses < cfg.attempts:
        options = []
        if named and rng.random() < cfg.salient_rate:  # one free salient span, chosen uniformly
            named = [c for c in named if _is_free(taken, c)]
            if named:
                options = [named[int(rng.integers(len(named)))]]
                length = options[0][1] - options[0][0] + 1
        if not options:
            length = min(int(rng.geometric(cfg.geometric_p)), cfg.max_span)
            options = [c for c in by_len.get(length, ()) if _is_free(taken, c)]
        if not options or masked + length > budget + 2:
            misses += 1
            continue
        i, j, others = options[int(rng.integers(len(options)))]
        taken[i : j + 1] = True
        chosen.append(MaskedSpan(start=i, end=j, positives=others))
        masked += j - i + 1
    chosen.sort(key=lambda s: s.start)
    return chosen


def _masked_block(ids: list[int], chosen: list[MaskedSpan], mask_id: int, tokens_per_span: int) -> MaskedBlock:
    """The block with each chosen span (sorted, disjoint) replaced by `tokens_per_span` mask tokens."""
    new_ids: list[int] = []
    positions: list[int] = []
    cursor = 0
    for span in chosen:
        new_ids += ids[cursor : span.start]
        positions.append(len(new_ids))
        new_ids += [mask_id] * tokens_per_span
        cursor = span.end + 1
    new_ids += ids[cursor:]
    return MaskedBlock(ids=new_ids, mask_positions=positions, spans=chosen)

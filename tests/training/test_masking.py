"""Tests for training.masking: NPM span masking on hand-made groups of token ids + boundary flags."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.tokens import WORD_END, WORD_START
from training.masking import MaskedBlock, MaskingConfig, mask_group, ngram_occurrences

MASK = 999  # never used as a token id below
W = WORD_START | WORD_END  # a one-piece word


def _block(words: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """ids + flags of a block given as words made of token pieces."""
    ids, flags = [], []
    for word in words:
        for k, tok in enumerate(word):
            f = 0
            if k == 0:
                f |= WORD_START
            if k == len(word) - 1:
                f |= WORD_END
            ids.append(tok)
            flags.append(f)
    return np.asarray(ids, dtype=np.int32), np.asarray(flags, dtype=np.uint8)


def _group(*blocks: list[list[int]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    made = [_block(b) for b in blocks]
    return [m[0] for m in made], [m[1] for m in made]


def _single_words(ids: list[int]) -> list[list[int]]:
    return [[i] for i in ids]


def _reconstruct(mb: MaskedBlock, original: list[int], tokens_per_span: int = 2) -> list[int]:
    """Rebuild the unmasked block from the masked ids + spans, checking the mask tokens on the way."""
    out: list[int] = []
    cursor = 0  # position in mb.ids
    for pos, span in zip(mb.mask_positions, mb.spans):
        out += mb.ids[cursor:pos]
        assert mb.ids[pos : pos + tokens_per_span] == [MASK] * tokens_per_span
        out += original[span.start : span.end + 1]
        cursor = pos + tokens_per_span
    out += mb.ids[cursor:]
    return out


def _aligned_occurrences(blocks, flags, key: tuple) -> set[tuple[int, int]]:
    """Brute force: every word-aligned occurrence (block, start) of the n-gram `key`."""
    occ = set()
    n = len(key)
    for b, (ids, fl) in enumerate(zip(blocks, flags)):
        ids = ids.tolist()
        for i in range(len(ids) - n + 1):
            if tuple(ids[i : i + n]) == key and fl[i] & WORD_START and fl[i + n - 1] & WORD_END:
                occ.add((b, i))
    return occ


def _check_invariants(
    blocks,
    flags,
    out,
    cfg: MaskingConfig,
    tokens_per_span: int = 2,
    docs=None,
    include_self: bool = False,
    regions=None,
) -> None:
    assert len(out) == len(blocks)
    for b, (ids, fl, mb) in enumerate(zip(blocks, flags, out)):
        orig = ids.tolist()
        assert MASK not in orig
        assert len(mb.mask_positions) == len(mb.spans)
        assert mb.ids.count(MASK) == tokens_per_span * len(mb.spans)
        masked = sum(s.end - s.start + 1 for s in mb.spans)
        assert len(mb.ids) == len(orig) - masked + tokens_per_span * len(mb.spans)
        assert _reconstruct(mb, orig, tokens_per_span) == orig
        lo, hi = regions[b] if regions is not None else (0, len(orig))
        budget = max(1, int(round(cfg.budget * (hi - lo))))
        assert masked <= budget + 2
        assert len(mb.spans) <= cfg.max_spans
        for prev, nxt in zip(mb.spans, mb.spans[1:]):
            assert nxt.start >= prev.end + 2, "spans overlap or touch"
        for span in mb.spans:
            assert 0 <= span.start <= span.end < len(orig)
            assert span.end - span.start + 1 <= cfg.max_span
            assert fl[span.start] & WORD_START and fl[span.end] & WORD_END
            key = tuple(orig[span.start : span.end + 1])
            assert span.positives, "a masked span must have positives"
            assert lo <= span.start and span.end < hi
            for ob, p in span.positives:
                assert ob != b or include_self
                assert tuple(blocks[ob][p : p + len(key)].tolist()) == key
            occurrences = _aligned_occurrences(blocks, flags, key)
            if include_self:
                expected = {
                    o for o in occurrences if o == (b, span.start) or (docs is not None and docs[o[0]] == docs[b])
                }
            else:
                expected = {o for o in occurrences if o[0] != b and (docs is None or docs[o[0]] == docs[b])}
            assert set(span.positives) == expected
            assert len(span.positives) == len(set(span.positives))


# ---------------------------------------------------------------- ngram_occurrences


def test_ngram_occurrences_small_case():
    # block 0: "1 2 1 2"; block 1: word [7, 8] (two pieces) then "1"
    blocks, flags = _group(_single_words([1, 2, 1, 2]), [[7, 8], [1]])
    table = ngram_occurrences(blocks, flags, max_span=2)
    assert table == {
        (1,): [(0, 0), (0, 2), (1, 2)],
        (2,): [(0, 1), (0, 3)],
        (1, 2): [(0, 0), (0, 2)],
        (2, 1): [(0, 1)],
        (7, 8): [(1, 0)],  # no (7,) or (8,): pieces of a word are not word-aligned alone
        # (8, 1) starts mid-word; (7, 8, 1) is longer than max_span
    }


def test_ngram_occurrences_respects_max_span():
    blocks, flags = _group(_single_words([1, 2, 3, 4]))
    for m in (1, 2, 3, 4, 6):
        table = ngram_occurrences(blocks, flags, max_span=m)
        assert max(len(k) for k in table) == min(m, 4)
        assert len(table) == sum(4 - n + 1 for n in range(1, min(m, 4) + 1))


# ---------------------------------------------------------------- what may be masked


def test_block_of_unique_tokens_is_not_masked():
    blocks, flags = _group(_single_words(list(range(1, 31))), _single_words(list(range(101, 131))))
    for seed in range(10):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed))
        for ids, mb in zip(blocks, out):
            assert mb.spans == [] and mb.mask_positions == []
            assert mb.ids == ids.tolist()


def test_repeats_inside_one_block_do_not_count():
    # block 0 repeats "5 6" many times, but no other block contains 5 or 6
    blocks, flags = _group(_single_words([5, 6] * 10), _single_words(list(range(101, 121))))
    for seed in range(10):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed))
        assert all(mb.spans == [] for mb in out)


def test_only_shared_ngrams_are_masked():
    # blocks share exactly the tokens 40..44 (as "40 41 42" and "43 44"); everything else is unique
    a = list(range(1, 20)) + [40, 41, 42] + list(range(20, 30)) + [43, 44]
    b = list(range(101, 110)) + [43, 44] + list(range(110, 120)) + [40, 41, 42]
    c = list(range(201, 230))
    blocks, flags = _group(_single_words(a), _single_words(b), _single_words(c))
    cfg = MaskingConfig()
    seen = set()
    for seed in range(30):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg)
        _check_invariants(blocks, flags, out, cfg)
        assert out[2].spans == []
        for ids, mb in zip(blocks, out):
            for s in mb.spans:
                key = ids[s.start : s.end + 1].tolist()
                assert set(key) <= {40, 41, 42, 43, 44}
                seen.add(tuple(key))
    assert seen  # something was masked


def test_spans_are_word_aligned():
    # block 0 holds the multi-piece word [10 11 12]; block 1 holds [11 12] as its own word and the
    # pieces 10 11 12 inside other words ([9 10] [11 12 13]). The only token sequences the blocks share
    # are aligned in one block but not in the other: nothing may be masked.
    blocks, flags = _group(
        [[1], [10, 11, 12], [2], [3], [4], [5], [6], [7]],
        [[21], [11, 12], [22], [9, 10], [11, 12, 13], [23], [24], [25]],
    )
    for seed in range(30):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed))
        assert all(mb.spans == [] for mb in out)


def test_multi_piece_words_are_masked_whole():
    # shared words are multi-piece; every mask must cover whole words
    shared = [[50, 51], [52, 53, 54], [55, 56]]
    blocks, flags = _group(
        [[1], [2, 3], *shared, [4], [5, 6, 7], [8]] * 2, [[11, 12], *shared, [13], [14, 15], [16]] * 2
    )
    cfg = MaskingConfig(budget=0.5)
    masked_any = False
    for seed in range(30):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg)
        _check_invariants(blocks, flags, out, cfg)
        masked_any |= any(mb.spans for mb in out)
    assert masked_any


# ---------------------------------------------------------------- budget, counts, layout


def _twins(n: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Two identical blocks of n distinct one-piece words: every n-gram is a candidate."""
    return _group(_single_words(list(range(1, n + 1))), _single_words(list(range(1, n + 1))))


@pytest.mark.parametrize("n", [7, 20, 30, 64, 100, 200])
def test_budget_is_respected_and_used(n):
    blocks, flags = _twins(n)
    cfg = MaskingConfig()
    budget = max(1, int(round(cfg.budget * n)))
    for seed in range(15):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg)
        _check_invariants(blocks, flags, out, cfg)
        for mb in out:
            masked = sum(s.end - s.start + 1 for s in mb.spans)
            assert budget <= masked <= budget + 2, (seed, masked, budget)


def test_budget_slack_is_two_tokens():
    # the only shared word is 4 pieces long: it fits when budget + 2 >= 4, i.e. budget >= 2
    word = [[60, 61, 62, 63]]

    def group(n_block: int):
        filler0 = _single_words(list(range(1, n_block - 4 + 1)))
        filler1 = _single_words(list(range(101, 121)))
        return _group(filler0[:2] + word + filler0[2:], filler1 + word)

    def masked_in_block0(n_block: int) -> bool:
        blocks, flags = group(n_block)
        assert len(blocks[0]) == n_block
        hits = 0
        for seed in range(40):
            out = mask_group(blocks, flags, MASK, np.random.default_rng(seed))
            _check_invariants(blocks, flags, out, MaskingConfig())
            hits += bool(out[0].spans)
        return hits > 0

    assert int(round(0.15 * 9)) == 1 and int(round(0.15 * 10)) == 2
    assert not masked_in_block0(9)  # budget 1: at most 3 tokens
    assert masked_in_block0(10)  # budget 2: up to 4 tokens


def test_max_spans_is_respected():
    blocks, flags = _twins(200)
    for k in (1, 2, 5):
        cfg = MaskingConfig(budget=1.0, max_spans=k)
        counts = []
        for seed in range(5):
            out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg)
            _check_invariants(blocks, flags, out, cfg)
            counts += [len(mb.spans) for mb in out]
        assert max(counts) == k


def test_default_max_spans_is_64():
    blocks, flags = _twins(600)
    cfg = MaskingConfig(budget=1.0, geometric_p=0.99, attempts=10_000)
    out = mask_group(blocks, flags, MASK, np.random.default_rng(0), cfg)
    _check_invariants(blocks, flags, out, cfg)
    assert [len(mb.spans) for mb in out] == [64, 64]


def test_max_span_caps_span_length():
    blocks, flags = _twins(100)
    cfg = MaskingConfig(max_span=3, geometric_p=0.1, budget=0.5)
    lengths = set()
    for seed in range(10):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg)
        _check_invariants(blocks, flags, out, cfg)
        lengths |= {s.end - s.start + 1 for mb in out for s in mb.spans}
    assert max(lengths) == 3


def test_each_span_becomes_two_masks_rest_preserved():
    rng = np.random.default_rng(123)
    vocab = np.arange(1, 25)
    blocks_words = [_single_words(rng.choice(vocab, size=60).tolist()) for _ in range(4)]
    blocks, flags = _group(*blocks_words)
    cfg = MaskingConfig()
    total = 0
    for seed in range(20):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg)
        _check_invariants(blocks, flags, out, cfg)
        for mb in out:
            total += len(mb.spans)
            for pos in mb.mask_positions:
                assert mb.ids[pos] == MASK and mb.ids[pos + 1] == MASK
            assert mb.mask_positions == sorted(mb.mask_positions)
    assert total > 0


def test_tokens_per_span_one():
    blocks, flags = _twins(80)
    cfg = MaskingConfig(max_span=1)
    for seed in range(10):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, tokens_per_span=1)
        _check_invariants(blocks, flags, out, cfg, tokens_per_span=1)
        for mb in out:
            assert mb.spans
            assert all(s.start == s.end for s in mb.spans)
            assert mb.ids.count(MASK) == len(mb.spans)


def _sevens_eights() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The n-gram "7 8" occurs twice in block 0, once in block 1, twice in block 2."""
    return _group(
        _single_words([1, 7, 8, 2, 3, 7, 8, 4, 5, 6]),
        _single_words([11, 12, 7, 8, 13, 14, 15, 16]),
        _single_words([7, 8, 21, 22, 7, 8, 23, 24, 25]),
    )


def _sevens_eights_runs(want: dict[int, set], **kw) -> list[list[MaskedBlock]]:
    """Mask `_sevens_eights()` under 40 seeds with `kw`; every masked "7 8" of block b has positives want[b]."""
    blocks, flags = _sevens_eights()
    cfg = MaskingConfig(budget=0.5)
    runs, seen = [], 0
    for seed in range(40):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, **kw)
        _check_invariants(blocks, flags, out, cfg, **kw)
        for b, mb in enumerate(out):
            for s in mb.spans:
                if blocks[b][s.start : s.end + 1].tolist() == [7, 8]:
                    seen += 1
                    assert set(s.positives) == want[b]
        runs.append(out)
    assert seen > 0
    return runs


def test_positives_point_at_other_blocks_only():
    _sevens_eights_runs({0: {(1, 2), (2, 0), (2, 4)}, 1: {(0, 1), (0, 5), (2, 0), (2, 4)}, 2: {(0, 1), (0, 5), (1, 2)}})


def test_positives_by_document_only_count_the_same_document():
    """With docs = [0, 1, 0]: block 0 and 2 (one document) are each other's only positives; block 1 has none."""
    for out in _sevens_eights_runs({0: {(2, 0), (2, 4)}, 2: {(0, 1), (0, 5)}}, docs=[0, 1, 0]):
        assert out[1].spans == []  # "7 8" occurs in block 1 too, but in another document
        for b, mb in enumerate(out):
            for s in mb.spans:
                assert {other for other, _ in s.positives} == {2 - b}


def test_include_self_masks_unique_spans_with_their_own_position_as_positive():
    """Self positives: any span qualifies; without docs its only positive is itself."""
    blocks, flags = _group(_single_words([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), _single_words([11, 12, 13, 14, 15, 16]))
    cfg = MaskingConfig(budget=0.5)
    assert all(mb.spans == [] for mb in mask_group(blocks, flags, MASK, np.random.default_rng(0), cfg))
    total = 0
    for seed in range(20):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, include_self=True)
        _check_invariants(blocks, flags, out, cfg, include_self=True)
        for b, mb in enumerate(out):
            for s in mb.spans:
                total += 1
                assert s.positives == [(b, s.start)]
    assert total > 0


def test_include_self_with_docs_adds_the_documents_other_occurrences():
    same_doc = {(0, 1), (0, 5), (2, 0), (2, 4)}
    for out in _sevens_eights_runs({0: same_doc, 1: {(1, 2)}, 2: same_doc}, docs=[0, 1, 0], include_self=True):
        for b, mb in enumerate(out):
            for s in mb.spans:
                assert (b, s.start) in s.positives
                assert all(other != 1 for other, _ in s.positives) or b == 1


def test_regions_confine_spans_and_scale_the_budget():
    rng = np.random.default_rng(3)
    blocks, flags = _group(*[_single_words(rng.integers(1, 1000, size=60).tolist()) for _ in range(3)])
    regions = [(10, 30), (0, 20), (40, 60)]
    cfg = MaskingConfig(budget=0.25)
    seen = 0
    for seed in range(20):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, include_self=True, regions=regions)
        _check_invariants(blocks, flags, out, cfg, include_self=True, regions=regions)
        for (lo, hi), mb in zip(regions, out):
            assert mb.spans, "every region has spans to mask"
            assert all(lo <= s.start <= s.end < hi for s in mb.spans)
            assert sum(s.end - s.start + 1 for s in mb.spans) <= round(0.25 * (hi - lo)) + 2
            seen += len(mb.spans)
    assert seen > 0


# ---------------------------------------------------------------- veto and determinism


def test_allowed_veto():
    blocks, flags = _twins(60)
    keys_seen = []

    def no_sevens(key):
        keys_seen.append(key)
        return 7 not in key

    cfg = MaskingConfig(budget=0.5)
    for seed in range(20):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, allowed=no_sevens)
        _check_invariants(blocks, flags, out, cfg)
        for ids, mb in zip(blocks, out):
            for s in mb.spans:
                assert 7 not in ids[s.start : s.end + 1].tolist()
    assert keys_seen and all(isinstance(k, tuple) for k in keys_seen)
    assert all(isinstance(t, int) for t in keys_seen[0])
    out = mask_group(blocks, flags, MASK, np.random.default_rng(0), cfg, allowed=lambda key: False)
    assert all(mb.spans == [] and mb.ids == ids.tolist() for ids, mb in zip(blocks, out))


def _signature(out):
    return [(mb.ids, mb.mask_positions, [(s.start, s.end, s.positives) for s in mb.spans]) for mb in out]


def test_deterministic_for_a_seed():
    rng = np.random.default_rng(5)
    blocks, flags = _group(*[_single_words(rng.integers(1, 30, size=50).tolist()) for _ in range(4)])
    first = _signature(mask_group(blocks, flags, MASK, np.random.default_rng(42)))
    again = _signature(mask_group(blocks, flags, MASK, np.random.default_rng(42)))
    assert first == again
    others = [_signature(mask_group(blocks, flags, MASK, np.random.default_rng(s))) for s in range(5)]
    assert any(o != first for o in others)


def test_inputs_are_not_modified():
    blocks, flags = _twins(40)
    copies = [b.copy() for b in blocks], [f.copy() for f in flags]
    mask_group(blocks, flags, MASK, np.random.default_rng(0))
    for a, b in zip(blocks + flags, copies[0] + copies[1]):
        np.testing.assert_array_equal(a, b)

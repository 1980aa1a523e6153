"""Hand-made cases for the pure arithmetic of NPM inference in fill.spans (and of the string path,
tests/fill/reference.py, that the phrase tests compare against)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corpus.tokens import WORD_END, WORD_START
from fill.spans import softmax, spans_from_hits, strip_phrase
from tests.fill.reference import Phrase, aggregate, rank

S, E, SE, MID = WORD_START, WORD_END, WORD_START | WORD_END, 0

# A toy shard of 9 tokens in 2 blocks:
#   block 0: 0 "The"(SE) 1 "alpha"(S) 2 "bet"(E) 3 ","(SE)
#   block 1: 4 "gam"(S) 5 "ma"(-) 6 "ray"(E) 7 "."(SE) 8 "x"(SE)
FLAGS = np.array([SE, S, E, SE, S, MID, E, SE, SE], dtype=np.uint8)
BLOCK_STARTS = np.array([0, 4], dtype=np.int64)


def block_of(positions):
    return np.searchsorted(BLOCK_STARTS, np.asarray(positions), side="right") - 1


def spans(hits, forward, max_len, flags=FLAGS, blocks=block_of):
    a, b = spans_from_hits(np.asarray(hits, dtype=np.int64), forward, max_len, flags, blocks)
    assert a.shape == b.shape
    pairs = list(zip(a.tolist(), b.tolist()))
    assert len(pairs) == len(set(pairs)), "a span is listed twice"
    return set(pairs)


# ---------------------------------------------------------------- spans_from_hits


@pytest.mark.parametrize(
    "hits, expected",
    [
        ([0], {(0, 0), (0, 2), (0, 3)}),  # never (0, 6)/(0, 7)/(0, 8): they cross into block 1
        ([1], {(1, 2), (1, 3)}),
        ([3], {(3, 3)}),  # last token of block 0: no extension into block 1
        ([4], {(4, 6), (4, 7), (4, 8)}),
        ([8], {(8, 8)}),  # position n-1: nothing beyond the end
        ([2], set()),  # "bet" is not a word start
        ([5], set()),  # "ma" is neither start nor end
        ([6], set()),  # "ray" is a word end only
        ([0, 0, 4], {(0, 0), (0, 2), (0, 3), (4, 6), (4, 7), (4, 8)}),  # duplicate hits counted once
    ],
)
def test_forward_extension(hits, expected):
    assert spans(hits, True, 10) == expected


@pytest.mark.parametrize(
    "hits, expected",
    [
        ([3], {(3, 3), (1, 3), (0, 3)}),
        ([2], {(1, 2), (0, 2)}),
        ([6], {(4, 6)}),  # never (3, 6)/(0, 6): those start in block 0
        ([8], {(8, 8), (7, 8), (4, 8)}),  # position n-1
        ([0], {(0, 0)}),  # position 0: nothing before it
        ([1], set()),  # "alpha" is a word start but not a word end
        ([4], set()),
        ([5], set()),
    ],
)
def test_backward_extension(hits, expected):
    assert spans(hits, False, 10) == expected


def test_max_len_forward_and_backward():
    assert spans([0], True, 2) == {(0, 0)}  # (0, 1): 1 is no word end; (0, 2) has 3 tokens
    assert spans([0], True, 3) == {(0, 0), (0, 2)}
    assert spans([4], True, 3) == {(4, 6)}
    assert spans([4], True, 4) == {(4, 6), (4, 7)}
    assert spans([8], False, 2) == {(8, 8), (7, 8)}
    assert spans([8], False, 4) == {(8, 8), (7, 8)}
    assert spans([8], False, 5) == {(8, 8), (7, 8), (4, 8)}
    assert spans([3], False, 2) == {(3, 3)}


def test_max_len_one_gives_single_tokens_only():
    every = list(range(len(FLAGS)))
    assert spans(every, True, 1) == {(0, 0), (3, 3), (7, 7), (8, 8)}
    assert spans(every, False, 1) == {(0, 0), (3, 3), (7, 7), (8, 8)}


def test_max_len_respected_everywhere_and_large_max_len():
    every = list(range(len(FLAGS)))
    for max_len in range(1, 12):
        for forward in (True, False):
            got = spans(every, forward, max_len)
            for i, j in got:
                assert 1 <= j - i + 1 <= max_len
                assert FLAGS[i] & WORD_START and FLAGS[j] & WORD_END
                assert block_of([i])[0] == block_of([j])[0]
    # with every token a hit, forward and backward extension find exactly the same spans
    assert (
        spans(every, True, 100)
        == spans(every, False, 100)
        == {(0, 0), (0, 2), (0, 3), (1, 2), (1, 3), (3, 3), (4, 6), (4, 7), (4, 8), (7, 7), (7, 8), (8, 8)}
    )


def test_block_boundary_between_single_token_words():
    # three one-token words, each in its own block: only single-token spans exist
    flags = np.array([SE, SE, SE], dtype=np.uint8)
    starts = np.array([0, 1, 2])

    def blocks(p):
        return np.searchsorted(starts, np.asarray(p), side="right") - 1

    assert spans([0, 1, 2], True, 3, flags, blocks) == {(0, 0), (1, 1), (2, 2)}
    assert spans([0, 1, 2], False, 3, flags, blocks) == {(0, 0), (1, 1), (2, 2)}

    def one_block(p):
        return np.zeros(np.asarray(p).shape, dtype=np.int64)

    assert spans([0], True, 3, flags, one_block) == {(0, 0), (0, 1), (0, 2)}
    assert spans([2], False, 3, flags, one_block) == {(2, 2), (1, 2), (0, 2)}


def test_empty_hits_and_zero_max_len():
    for hits, max_len in (([], 5), ([0, 4], 0)):
        a, b = spans_from_hits(np.asarray(hits, dtype=np.int64), True, max_len, FLAGS, block_of)
        assert a.size == 0 and b.size == 0


# ---------------------------------------------------------------- strip_phrase


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello", "Hello"),
        ("  Hello  ", "Hello"),
        (" «Hello», ", "Hello"),
        ("Hello, world.", "Hello, world"),  # inner punctuation is kept
        ("a.b", "a.b"),
        ("¡Hola!", "Hola"),
        ("\u3000「東京」。", "東京"),  # ideographic space and CJK brackets / full stop
        ("— dash —", "dash"),  # em dash (Pd)
        ("\t\n(x)\n", "x"),
        ('"quoted"', "quoted"),
        ("_under_", "under"),  # connector punctuation (Pc)
        ("$5", "$5"),  # '$' is a currency symbol (Sc), not punctuation
        ("+1+", "+1+"),  # math symbols are kept
        ("9", "9"),
    ],
)
def test_strip_phrase(text, expected):
    a, b = strip_phrase(text)
    assert 0 <= a <= b <= len(text)
    assert text[a:b] == expected


@pytest.mark.parametrize("text", ["", " ", ",", "...", " , ", "«»", "—", "「。」", "!?\n", "\u3000"])
def test_strip_phrase_only_punctuation_is_empty(text):
    a, b = strip_phrase(text)
    assert b <= a
    assert text[a:b] == ""


def test_strip_phrase_fast_path_agrees_with_the_full_strip():
    import random
    import unicodedata

    alphabet = "aZ9é東٣²½ _-.,«»—()\u3000!$+\u00a0'\"ⅷ"  # letters, digits and other numbers, punctuation, spaces
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        a, b = strip_phrase(text)
        strip = lambda c: c.isspace() or unicodedata.category(c).startswith("P")  # noqa: E731
        lead = next((i for i, c in enumerate(text) if not strip(c)), len(text))
        end = next((i + 1 for i in range(len(text) - 1, -1, -1) if not strip(text[i])), 0)
        assert text[a:b] == (text[lead:end] if end > lead else ""), text


# ---------------------------------------------------------------- softmax


def test_softmax_values():
    x = np.array([1.0, 2.0, 3.0])
    z = np.exp(x)
    np.testing.assert_allclose(softmax(x), z / z.sum(), rtol=1e-12)
    assert softmax(x).dtype == np.float64
    np.testing.assert_allclose(softmax(x + 1000.0), z / z.sum(), rtol=1e-12)  # no overflow, shift invariant
    np.testing.assert_allclose(softmax(np.array([-1000.0, -1000.0])), [0.5, 0.5])
    np.testing.assert_allclose(softmax(np.array([5.0])), [1.0])
    wide = softmax(np.array([0.0, 800.0, -800.0]))  # spread beyond exp's range: still finite
    assert np.all(np.isfinite(wide))
    np.testing.assert_allclose(wide, [0.0, 1.0, 0.0], atol=1e-300)
    np.testing.assert_allclose(softmax(np.array([1, 2, 3], dtype=np.float16)), z / z.sum(), rtol=1e-6)


def test_softmax_empty():
    out = softmax(np.empty(0, dtype=np.float32))
    assert out.size == 0 and out.dtype == np.float64


# ---------------------------------------------------------------- aggregate


KEYS = ["a", "A", "a", None, "", "b", "a b"]
SCORES = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
LENGTHS = np.array([1, 1, 1, 1, 1, 2, 3])


def test_aggregate_case_sensitive():
    out = {p.text: p for p in aggregate(KEYS, SCORES, LENGTHS)}
    assert set(out) == {"a", "A", "b", "a b"}  # None and "" are dropped
    assert np.isclose(out["a"].mass, 0.4) and out["a"].occurrences.tolist() == [0, 2]
    assert np.isclose(out["A"].mass, 0.2) and out["A"].occurrences.tolist() == [1]
    assert np.isclose(out["b"].mass, 0.6) and out["b"].tokens == 2
    assert out["a b"].tokens == 3
    assert np.isclose(sum(p.mass for p in out.values()), 0.1 + 0.2 + 0.3 + 0.6 + 0.7)


def test_aggregate_case_insensitive():
    out = aggregate(KEYS, SCORES, LENGTHS, case_sensitive=False)
    by_lower = {p.text.lower(): p for p in out}
    assert set(by_lower) == {"a", "b", "a b"}
    assert np.isclose(by_lower["a"].mass, 0.6)
    assert by_lower["a"].occurrences.tolist() == [0, 1, 2]
    assert by_lower["a"].text in {"a", "A"}


def test_aggregate_max_keeps_the_best_occurrence():
    out = {p.text: p for p in aggregate(KEYS, SCORES, LENGTHS, how="max")}
    assert np.isclose(out["a"].mass, 0.3) and out["a"].occurrences.tolist() == [0, 2]
    assert np.isclose(out["A"].mass, 0.2) and np.isclose(out["b"].mass, 0.6)
    folded = {p.text.lower(): p for p in aggregate(KEYS, SCORES, LENGTHS, case_sensitive=False, how="max")}
    assert np.isclose(folded["a"].mass, 0.3) and folded["a"].occurrences.tolist() == [0, 1, 2]


def test_aggregate_rejects_an_unknown_rule():
    with pytest.raises(ValueError, match="aggregation must be one of"):
        aggregate(KEYS, SCORES, LENGTHS, how="mean")


def test_aggregate_all_dropped():
    assert aggregate([None, "", None], np.array([1.0, 2.0, 3.0]), np.array([1, 1, 1])) == []


# ---------------------------------------------------------------- rank


def test_rank_alpha_prefers_longer():
    short, long_ = Phrase("short", mass=0.5, tokens=1), Phrase("long phrase", mass=0.3, tokens=3)
    r0 = rank([short, long_], 0.0)
    assert [p.text for p, _ in r0] == ["short", "long phrase"]
    np.testing.assert_allclose([v for _, v in r0], [0.5 / 0.8, 0.3 / 0.8])
    r1 = rank([short, long_], 1.0)
    assert [p.text for p, _ in r1] == ["long phrase", "short"]
    np.testing.assert_allclose([v for _, v in r1], [0.9 / 1.4, 0.5 / 1.4])
    r05 = rank([short, long_], 0.5)
    v_long = 0.3 * math.sqrt(3)
    assert [p.text for p, _ in r05] == ["long phrase", "short"]
    np.testing.assert_allclose([v for _, v in r05], [v_long / (v_long + 0.5), 0.5 / (v_long + 0.5)])


@pytest.mark.parametrize("alpha", [0.0, 0.5, 2.0])
def test_rank_normalised(alpha):
    rng = np.random.default_rng(1)
    phrases = [
        Phrase(f"p{i}", mass=float(m), tokens=int(t))
        for i, (m, t) in enumerate(zip(rng.random(7), rng.integers(1, 6, 7)))
    ]
    ranked = rank(phrases, alpha)
    values = [v for _, v in ranked]
    assert np.isclose(sum(values), 1.0)
    assert values == sorted(values, reverse=True)
    raw = {p.text: p.mass * p.tokens**alpha for p in phrases}
    total = sum(raw.values())
    for p, v in ranked:
        assert np.isclose(v, raw[p.text] / total)


def test_rank_ties_sorted_by_text():
    phrases = [Phrase("b", 0.25, 1), Phrase("c", 0.5, 1), Phrase("a", 0.25, 1), Phrase("B", 0.25, 1)]
    ranked = rank(phrases, 0.0)
    assert [p.text for p, _ in ranked] == ["c", "B", "a", "b"]
    np.testing.assert_allclose([v for _, v in ranked], [0.4, 0.2, 0.2, 0.2])
    # a tie created by the length factor: 0.2 * 2 == 0.4 * 1
    ranked = rank([Phrase("z", 0.4, 1), Phrase("y y", 0.2, 2)], 1.0)
    assert [p.text for p, _ in ranked] == ["y y", "z"]


def test_rank_empty_and_zero():
    assert rank([], 0.5) == []
    ranked = rank([Phrase("x", 0.0, 1)], 0.0)
    assert ranked[0][1] == 0.0


@pytest.mark.parametrize("n", [1, 2, 3, 5, 50])
def test_rank_first_n_is_the_head_of_the_whole_order(n):
    rng = np.random.default_rng(n)
    masses = rng.choice([0.1, 0.2, 0.2, 0.3, 0.05], size=40)  # many ties: the text decides among them
    phrases = [Phrase(f"p{int(i):02d}", float(m), int(1 + i % 3)) for i, m in zip(rng.permutation(40), masses)]
    for alpha in (0.0, 1.0):
        whole = rank(phrases, alpha)
        head = rank(phrases, alpha, n)
        assert [(p.text, v) for p, v in head] == [(p.text, v) for p, v in whole[:n]]


def _aggregate_by_loop(keys, scores, lengths, case_sensitive, how):
    """The span-by-span reference: a running sum (or max) per phrase, in span order."""
    phrases: dict[str, list] = {}
    for idx, key in enumerate(keys):
        if not key:
            continue
        norm = key if case_sensitive else key.lower()
        if norm not in phrases:
            phrases[norm] = [key, 0.0, int(lengths[idx]), []]
        p = phrases[norm]
        p[1] = max(p[1], float(scores[idx])) if how == "max" else p[1] + float(scores[idx])
        p[3].append(idx)
    return [tuple(p) for p in phrases.values()]


@pytest.mark.parametrize("seed", range(20))
def test_aggregate_is_exactly_the_running_sum_or_max(seed):
    rng = np.random.default_rng(seed)
    pool = ["a", "A", "b", "B b", "b b", None, "", "c"]
    n = int(rng.integers(0, 60))
    keys = [pool[i] for i in rng.integers(0, len(pool), n)]
    scores = rng.random(n) * rng.choice([1e-9, 1.0, 1e3], n)  # magnitudes where summation order shows
    lengths = rng.integers(1, 5, n)
    for case_sensitive in (True, False):
        for how in ("sum", "max"):
            got = [
                (p.text, p.mass, p.tokens, p.occurrences.tolist())
                for p in aggregate(keys, scores, lengths, case_sensitive, how)
            ]
            assert got == _aggregate_by_loop(keys, scores, lengths, case_sensitive, how)


def test_rank_of_no_phrase_and_phrases_compare_without_occurrences():
    assert rank([Phrase("x", 0.5, 1)], 0.0, 0) == []
    assert Phrase("x", 0.5, 1, np.array([1, 2])) == Phrase("x", 0.5, 1, np.array([3]))


def test_strip_chars_scans_every_code_point_that_can_be_stripped():
    import sys

    from fill.spans import STRIP_BELOW, strip_chars

    assert strip_chars.__wrapped__(sys.maxunicode + 1) == strip_chars()  # nothing to strip above STRIP_BELOW
    assert (
        " " in strip_chars()
        and "\u3002" in strip_chars()
        and "a" not in strip_chars()
        and STRIP_BELOW <= sys.maxunicode
    )

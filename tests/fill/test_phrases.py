"""fill.phrases equals the string path (strip_phrase, poor_fill, str.lower, and tests/fill/reference.py's
aggregate + rank) exactly."""

from __future__ import annotations

import random

import numpy as np
import pytest

import fill.ragged as ragged
from encoder.stopwords import STOPWORDS, broken_span, poor_fill
from fill.phrases import lower_phrases, phrase_table, poor_fills, rank_table, strip_phrases
from fill.ragged import Ragged, group_phrases, join_ragged
from fill.spans import strip_phrase
from tests.fill.reference import aggregate, rank

PIECES = STOPWORDS[:30] + [
    "The",
    "Of",
    "IN",
    "London",
    "Hague",
    "x",
    "Q",
    "7",
    "1867",
    "city",
    "İstanbul",
    "Kelvin",
    "café",
    "naïve",
    "Straße",
    "東京",
    "_",
    "-",
    ",",
    ".",
    "«",
    "»",
    "—",
    "…",
    "(",
    ")",
    "'",
    "\u00a0",
    "\t",
    "$",
    "+",
    "%",
    " ",
]


def _strings(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) for _ in range(rng.randint(0, 5))]
        out.append("".join(p + rng.choice(["", " ", " ", "-"]) for p in parts))
    return out


def _ragged(texts: list[str]) -> Ragged:
    codes = [np.frombuffer(t.encode("utf-32-le"), dtype="<u4") for t in texts]
    length = np.array([c.size for c in codes], dtype=np.int64)
    flat = np.concatenate(codes).astype(np.uint32) if codes else np.empty(0, np.uint32)
    return Ragged(flat, np.cumsum(length) - length, length)


def _overlapping(n: int, seed: int) -> tuple[Ragged, list[str]]:
    """n segments cut at random from one buffer (pieces of text joined by NULs), overlapping as the spans
    of a shard do in shard_span_texts."""
    rng = random.Random(seed)
    pieces = [" ".join(_strings(12, seed + i)) for i in range(8)]
    buffer = "\0".join(pieces)
    bounds = np.cumsum([0] + [len(p) + 1 for p in pieces])
    texts, starts = [], []
    for _ in range(n):
        p = rng.randrange(len(pieces))
        a = rng.randrange(len(pieces[p]) + 1)
        b = rng.randrange(a, min(len(pieces[p]), a + 40) + 1)
        texts.append(pieces[p][a:b])
        starts.append(int(bounds[p]) + a)
    codes = np.frombuffer(buffer.encode("utf-32-le"), dtype="<u4").astype(np.uint32)
    length = np.array([len(t) for t in texts], dtype=np.int64)
    return Ragged(codes, np.array(starts, dtype=np.int64), length), texts


def test_overlapping_segments_of_one_buffer():
    raw, texts = _overlapping(3000, 5)
    assert [raw.text(i) for i in range(len(texts))] == texts
    stripped = strip_phrases(raw)
    keys = [stripped.text(i) for i in range(len(texts))]
    assert keys == [t[slice(*strip_phrase(t))] if strip_phrase(t)[1] > strip_phrase(t)[0] else "" for t in texts]
    kept = [i for i, k in enumerate(keys) if k]
    stripped = Ragged(raw.codes, stripped.start[kept], stripped.length[kept])
    assert poor_fills(stripped).tolist() == [poor_fill(keys[i]) for i in kept]
    groups, firsts = group_phrases(stripped)
    seen: dict[str, int] = {}
    assert groups.tolist() == [seen.setdefault(keys[i], len(seen)) for i in kept]
    assert [keys[kept[i]] for i in firsts.tolist()] == list(seen)
    assert len(seen) < len(kept)  # some keys repeat, so grouping was exercised


def test_texts_of_a_selection_equal_text_of_each():
    raw, texts = _overlapping(2000, 7)
    which = np.array(random.Random(3).sample(range(len(texts)), 300) + [0, 0])  # any order, repeats
    assert raw.texts(which) == [raw.text(i) for i in which.tolist()] == [texts[i] for i in which.tolist()]
    assert raw.texts(np.empty(0, dtype=np.int64)) == []
    small = Ragged(np.array([ord(c) for c in "aéb"], dtype=np.uint32), np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]))
    assert small.texts(np.arange(4)) == ["a", "", "éb", "b"]
    assert any(ord(c) >= 128 for t in raw.texts(which) for c in t)  # non-ASCII text went through


def test_strip_equals_strip_phrase():
    texts = _strings(3000, 0) + ["", " ", "...", "«a»", "a", " a b ", "—"]
    raw = _ragged(texts)
    keys = strip_phrases(raw)
    for i, t in enumerate(texts):
        a = int(keys.start[i] - raw.start[i])
        ref = strip_phrase(t)
        assert t[a : a + int(keys.length[i])] == (t[ref[0] : ref[1]] if ref[1] > ref[0] else ""), t


def test_poor_equals_poor_fill():
    texts = [t for t in _strings(4000, 1) if t] + ["a", "A", "7", "in London", "The Hague", "the Hague", "of the", "Of"]
    got = poor_fills(_ragged(texts))
    assert got.tolist() == [poor_fill(t) for t in texts]
    assert got.any() and not got.all()


def test_lower_equals_str_lower_even_when_it_changes_the_length():
    texts = _strings(500, 2) + ["İstanbul", "\u212a", "ABC"]
    low = lower_phrases(_ragged(texts))
    assert [low.text(i) for i in range(len(texts))] == [t.lower() for t in texts]


def test_group_is_exact_and_numbers_groups_by_first_appearance():
    texts = [t for t in _strings(2000, 3) if t]
    groups, firsts = group_phrases(_ragged(texts))
    seen: dict[str, int] = {}
    ref = [seen.setdefault(t, len(seen)) for t in texts]
    assert groups.tolist() == ref
    assert [texts[i] for i in firsts.tolist()] == list(seen)


def test_a_hash_collision_is_split_not_merged(monkeypatch):
    monkeypatch.setattr(ragged, "_hashes", lambda keys: np.zeros(keys.length.size, dtype=np.uint64))  # every key alike
    groups, firsts = group_phrases(_ragged(["ab", "ba", "ab", "abc", "ba"]))  # same hash; lengths and texts differ
    assert groups.tolist() == [0, 1, 0, 2, 1] and firsts.tolist() == [0, 1, 3]
    groups, _ = group_phrases(_ragged(["ab", "ab"]))  # equal keys still group
    assert groups.tolist() == [0, 0]


def test_a_collision_leaves_the_other_groups_alone(monkeypatch):
    """Only the colliding hash group is split by strings; the numbering is by first appearance over all."""
    texts = ["x", "ab", "y", "ba", "x", "ab", "z"]
    real = ragged._hashes

    def collide(keys):
        h = real(keys)
        pair = [i for i in range(keys.length.size) if keys.text(i) in ("ab", "ba")]
        h[pair] = h[pair[0]]
        return h

    monkeypatch.setattr(ragged, "_hashes", collide)
    groups, firsts = group_phrases(_ragged(texts))
    seen: dict[str, int] = {}
    assert groups.tolist() == [seen.setdefault(t, len(seen)) for t in texts]
    assert [texts[i] for i in firsts.tolist()] == list(seen)


def test_join_keeps_each_segment():
    a, b = _ragged(["ab", "c"]), _ragged(["de"])
    joined = join_ragged([a, b])
    assert [joined.text(i) for i in range(3)] == ["ab", "c", "de"]
    assert join_ragged([]).length.size == 0


@pytest.mark.parametrize("case_sensitive", [True, False])
@pytest.mark.parametrize("how", ["max", "sum"])
@pytest.mark.parametrize("drop", [True, False])
@pytest.mark.parametrize("alpha", [0.0, 0.5, -1.0])
@pytest.mark.parametrize("strict", [False, True])
def test_phrase_table_and_rank_equal_aggregate_and_rank(case_sensitive, how, drop, alpha, strict):
    rng = np.random.default_rng(4)
    texts = _strings(1500, 4)
    scores = rng.random(len(texts))
    tokens = rng.integers(1, 11, len(texts))
    table = phrase_table(strip_phrases(_ragged(texts)), scores, tokens, case_sensitive, how, drop, strict)
    got = [(table.text(p), v, table.occurrences(p).tolist()) for p, v in rank_table(table, alpha, 40)]
    keys = []
    for t in texts:
        a, b = strip_phrase(t)
        key = t[a:b] if b > a else None
        dropped = key is None or (drop and poor_fill(key)) or (strict and broken_span(key))
        keys.append(None if dropped else key)
    ref = rank(aggregate(keys, scores, tokens, case_sensitive, how), alpha, 40)
    assert got == [(p.text, v, p.occurrences.tolist()) for p, v in ref]
    assert len(got) == 40


def test_broken_span_is_npms_rule():
    assert not broken_span("Warsaw") and not broken_span("Maria Sklodowska") and not broken_span("1867")
    assert broken_span("University of Warsaw") and broken_span("The Hague") and broken_span("Paris, France")
    assert broken_span("Jean-Paul") and broken_span("a_b")


def test_poor_of_empty_segments_over_an_empty_buffer():
    empty = Ragged(np.empty(0, dtype=np.uint32), np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64))
    assert poor_fills(empty).tolist() == [poor_fill(""), poor_fill("")]

"""BM25 from the postings copied out of FTS5 equals FTS5's own bm25() ranking, bit for bit."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3

import numpy as np
import pytest

from indexer import bm25 as bm25_module
from indexer import bm25_postings, bm25_top
from indexer.bm25 import BM25, BM25_NAME
from indexer.bm25_postings import K1
from tests.conftest import write_jsonl

VOCAB = (
    "the of and a to in is was born river city music band album song 1960 1867 2001 paris france "
    "warsaw cyclist victoria seine flows capital marie curie died passy australian alexandra"
).split()


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory, tiny_bert_dir):
    return _build(tmp_path_factory, tiny_bert_dir)


@pytest.fixture(scope="module")
def pieces_index(tmp_path_factory, tiny_bert_dir):
    """The same documents with the postings of any word in 8 blocks or more kept in pieces of 5."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25_postings, "LONG_FROM", 8)
        patch.setattr(bm25_postings, "PIECE", 5)
        return _build(tmp_path_factory, tiny_bert_dir)


@pytest.fixture(params=["whole", "pieces"])
def bm25_file(request):
    return request.getfixturevalue({"whole": "bm25_index", "pieces": "pieces_index"}[request.param]) / BM25_NAME


def _build(tmp_path_factory, tiny_bert_dir):
    """An index over 120 random documents, a dozen of them repeated word for word (tied BM25 scores)."""
    from indexer.build import BuildConfig, build_index

    rng = random.Random(7)
    docs = []
    for i in range(120):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(3, 40))]
        docs.append({"id": f"d{i}", "title": rng.choice(VOCAB).title(), "text": " ".join(words) + "."})
    docs += [dict(d, id=f"copy{i}") for i, d in enumerate(docs[:12])]
    tmp = tmp_path_factory.mktemp("bm25")
    out = tmp / "idx"
    build_index(BuildConfig(corpus=write_jsonl(tmp / "c.jsonl", docs), out=out, model=tiny_bert_dir, block_tokens=16))
    return out


def _queries(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    extra = ["unseen", "zzz", "The", "RIVER", "city_river", "Rivér", "the_of", "ça"]
    return [" ".join(rng.choice(VOCAB + extra) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def _same_as_fts5(bm25: BM25, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """FTS5's own top n for `text`, after checking the postings' search gives the same blocks and the same doubles."""
    fast, ref = bm25.search_scored(text, n), bm25.search_fts5(text, n)
    assert np.array_equal(fast[0], ref[0]), text
    assert np.array_equal(fast[1], ref[1]), text  # the same doubles, not close ones
    return ref


def _copy_without(index, tmp_path, *changes: str):
    """A copy of the index's bm25.sqlite with the SQL `changes` made (an older file's layout)."""
    path = tmp_path / BM25_NAME
    shutil.copy(index / BM25_NAME, path)
    con = sqlite3.connect(path)
    for change in changes:
        con.execute(change)
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("cheap_share", [1, 3, 10**9], ids=["cheap-all", "mixed", "common-all"])
def test_postings_give_fts5_blocks_and_scores_exactly(bm25_file, monkeypatch, cheap_share):
    """Whichever words are read whole before MaxScore decides what to skip (indexer.bm25_top.CHEAP_SHARE; 3: the
    words in a third of the blocks or more, some of every query here, left to it)."""
    monkeypatch.setattr(bm25_top, "CHEAP_SHARE", cheap_share)
    bm25 = BM25(bm25_file)
    assert bm25.rows is not None
    ties = 0
    for text in _queries(300):
        for n in (1, 3, 10, 100):
            ref = _same_as_fts5(bm25, text, n)
        ties += len(set(ref[1].tolist())) < len(ref[1])
    assert ties > 10  # the repeated documents tie, and ties come out in block order as FTS5's do


def test_plain_words_never_reach_fts5(bm25_file, monkeypatch):
    bm25 = BM25(bm25_file)
    monkeypatch.setattr(bm25, "search_fts5", lambda *a: pytest.fail("plain words must not reach FTS5"))
    assert bm25.search_scored("river city 1960", 5)[0].size > 0


def test_words_fts5_tokenizes_differently_score_as_fts5_does(bm25_file):
    bm25 = BM25(bm25_file)
    for text in (
        "Rivér",
        "city_river",
        "paris-france",
        "Warsaw’s",
        "the city_river of Rivér and café 1960_s",
        "_",
        "river _ the",
        "Ⅻ ǅ city",
    ):
        for n in (3, 100):
            _same_as_fts5(bm25, text, n)
    assert bm25.search_scored("rivér", 10)[0].size > 0  # diacritics removed by FTS5: matches "river"


def test_long_words_are_read_at_the_candidates_only(tmp_path, tiny_bert_dir, monkeypatch):
    """A word in LONG_FROM blocks or more lives in pieces; once the rarer words leave no room for a block they do
    not hold, a query reads it only at its candidates (Postings.at), never whole, and the answer is FTS5's."""
    from indexer.build import BuildConfig, build_index

    rng = random.Random(5)
    docs = [
        {"id": f"d{i}", "text": " ".join([f"w{rng.randrange(999)}" for _ in range(5)] + rng.sample(["the", "of"], 1))}
        for i in range(300)
    ]
    docs += [
        {"id": "m1", "text": "marie curie of"},
        {"id": "m2", "text": "the marie curie"},
        {"id": "m3", "text": "marie"},
    ]
    out = tmp_path / "idx"
    monkeypatch.setattr(bm25_postings, "LONG_FROM", 8)
    monkeypatch.setattr(bm25_postings, "PIECE", 5)
    build_index(
        BuildConfig(corpus=write_jsonl(tmp_path / "c.jsonl", docs), out=out, model=tiny_bert_dir, block_tokens=16)
    )
    bm25 = BM25(out / BM25_NAME)
    con = sqlite3.connect(out / BM25_NAME)
    (pieces,) = con.execute("SELECT count(*) FROM pieces WHERE term = 'the'").fetchone()
    (whole,) = con.execute("SELECT count(*) FROM postings WHERE term IN ('the', 'of')").fetchone()
    con.close()
    assert pieces >= 2 and whole == 0
    read: list[str] = []
    real = bm25_postings.Postings.whole
    monkeypatch.setattr(bm25_postings.Postings, "whole", lambda self, terms: read.extend(terms) or real(self, terms))
    for n in (1, 2):
        _same_as_fts5(bm25, "marie curie the of", n)
    assert set(read) == {"marie", "curie"}
    for text in ("the of w1", "of", "w3 w4 w5 the"):  # the common words read whole (none rarer): FTS5's all the same
        _same_as_fts5(bm25, text, 10)


def test_a_file_before_term_stats_adds_every_posting(bm25_index, tmp_path):
    old = BM25(
        _copy_without(
            bm25_index,
            tmp_path,
            "DROP TABLE term_stats",
            "DROP TABLE pieces",
            "DELETE FROM postings_meta WHERE key = 'layout'",
        )
    )
    assert old._postings is not None and not old._postings.pieces
    for text in _queries(30, seed=2):
        _same_as_fts5(old, text, 10)


def test_an_index_without_postings_uses_fts5(bm25_index, tmp_path):
    path = _copy_without(bm25_index, tmp_path, "DROP TABLE postings", "DROP TABLE postings_meta")
    old, new = BM25(path), BM25(bm25_index / BM25_NAME)
    assert old.rows is None
    for text in _queries(20, seed=1):
        assert np.array_equal(old.search_scored(text, 10)[1], new.search_scored(text, 10)[1])


def test_a_small_file_is_searched_from_memory_without_a_descriptor(bm25_index, monkeypatch):
    """Under IN_MEMORY_BELOW bytes (a delta shard's file) the database is read into memory, read-only, and gives the
    file's own answers; a larger file is opened (one descriptor)."""
    path = bm25_index / BM25_NAME

    def held() -> int:
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve()) for fd in os.listdir("/proc/self/fd"))

    before = held()
    small = BM25(path)
    assert held() == before
    monkeypatch.setattr(bm25_module, "IN_MEMORY_BELOW", 0)
    large = BM25(path)
    assert held() == before + 1
    for text in _queries(40, seed=2):
        found, expected = small.search_scored(text, 10), large.search_scored(text, 10)
        assert np.array_equal(found[0], expected[0]) and np.array_equal(found[1], expected[1]), text
        assert np.array_equal(small.search_fts5(text, 10)[1], large.search_fts5(text, 10)[1]), text
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        small._con.execute("DELETE FROM postings")
    small.close()
    large.close()
    assert held() == before


def test_a_large_index_skips_the_words_in_half_its_blocks_whose_weight_fts5_clamps(
    tmp_path, tiny_bert_dir, monkeypatch
):
    """From SKIP_COMMON_FROM_BLOCKS blocks on, a word in half the blocks or more is not read: FTS5 clamps its idf to
    1e-6, so every score moves by at most 1e-6 x (K1 + 1) a skipped word, and a block only such words match is left
    out; below the threshold (this index as it is) the scores stay FTS5's exactly."""
    from indexer.build import BuildConfig, build_index

    rng = random.Random(3)
    docs = [{"id": f"d{i}", "text": "the " + " ".join(rng.choice(VOCAB[3:]) for _ in range(4))} for i in range(60)]
    docs.append({"id": "only", "text": "the the"})
    out = tmp_path / "idx"
    build_index(
        BuildConfig(corpus=write_jsonl(tmp_path / "c.jsonl", docs), out=out, model=tiny_bert_dir, block_tokens=16)
    )
    bm25 = BM25(out / BM25_NAME)
    texts = ["the river city", "the 1960 album of paris", "the"]
    exact = {t: bm25.search_scored(t, 100) for t in texts}
    for t in texts:
        assert np.array_equal(exact[t][1], bm25.search_fts5(t, 100)[1])  # below the threshold: FTS5's
    monkeypatch.setattr(bm25_module, "SKIP_COMMON_FROM_BLOCKS", bm25.rows)
    only = next(
        b for (b,) in bm25._con.execute("SELECT rowid FROM blocks WHERE blocks MATCH 'the' ORDER BY rowid DESC")
    )
    for t in texts:
        blocks, scores = bm25.search_scored(t, 100)
        ref = dict(zip(*exact[t]))
        assert only not in blocks.tolist() and only in ref  # matched by "the" alone: no longer a hit
        assert set(blocks.tolist()) == {b for b, s in ref.items() if s > 1e-5}  # every block a rarer word matches
        assert all(0 < ref[b] - s <= 1e-6 * (K1 + 1) for b, s in zip(blocks.tolist(), scores.tolist()))
    assert bm25.search_scored("the", 10)[0].size == 0

"""Tests for corpus.blocking: cut points within budget at word starts; blocks never cross documents."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.blocking import cut_points, iter_blocks
from corpus.readers import Document
from corpus.tokens import WORD_END, WORD_START, boundary_flags, tokenize_documents
from tests.conftest import CORPUS

S, E = WORD_START, WORD_END


def _flags(word_lengths: list[int]) -> np.ndarray:
    """Flags of consecutive words of the given token lengths."""
    word_ids = [w for w, n in enumerate(word_lengths) for _ in range(n)]
    return boundary_flags(word_ids)


def _check_ranges(ranges, n, block_tokens):
    """Contiguous, complete, non-empty and within budget."""
    assert all(b - a >= 1 for a, b in ranges)
    assert all(b - a <= block_tokens for a, b in ranges)
    if n == 0:
        assert ranges == []
        return
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    for (_, b), (a2, _) in zip(ranges, ranges[1:]):
        assert b == a2


# ---------------------------------------------------------------- cut_points


def test_cut_points_empty():
    assert cut_points(np.zeros(0, dtype=np.uint8), 8) == []


def test_cut_points_short_doc_is_one_block():
    flags = _flags([1, 2, 1])
    assert cut_points(flags, 8) == [(0, 4)]
    assert cut_points(flags, 4) == [(0, 4)]


def test_cut_points_single_token_words():
    flags = _flags([1] * 7)
    assert cut_points(flags, 3) == [(0, 3), (3, 6), (6, 7)]


def test_cut_points_cut_before_word_start():
    # words: [0,1] [2,3,4] [5] [6,7]
    flags = _flags([2, 3, 1, 2])
    ranges = cut_points(flags, 4)
    # a cut at 4 would split the second word; the last start within budget is 2
    assert ranges == [(0, 2), (2, 6), (6, 8)]


def test_cut_points_full_block_when_next_token_starts_a_word():
    flags = _flags([2, 2, 2, 2])
    assert cut_points(flags, 4) == [(0, 4), (4, 8)]
    assert cut_points(flags, 5) == [(0, 4), (4, 8)]


def test_cut_points_hard_cuts_a_giant_word():
    flags = _flags([10])
    assert flags[0] == S and flags[-1] == E
    assert cut_points(flags, 4) == [(0, 4), (4, 8), (8, 10)]
    # a giant word between normal ones: normal words are kept whole, the giant one is hard-cut
    flags = _flags([1, 9, 1])
    ranges = cut_points(flags, 4)
    _check_ranges(ranges, 11, 4)
    assert ranges[0] == (0, 1)  # cut before the giant word starts
    assert ranges[-1][1] == 11


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("block_tokens", [1, 2, 3, 5, 8, 16])
def test_cut_points_properties_random(seed, block_tokens):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=int(rng.integers(0, 40))).tolist()
    flags = _flags(lengths)
    n = len(flags)
    ranges = cut_points(flags, block_tokens)
    _check_ranges(ranges, n, block_tokens)
    for a, b in ranges[:-1]:
        window_has_start = bool((flags[a + 1 : a + block_tokens + 1] & S).any())
        if window_has_start:
            # cut before a word start, and at the last one that fits (no shorter block than needed)
            assert flags[b] & S
            later = np.flatnonzero(flags[b + 1 : a + block_tokens + 1] & S)
            assert later.size == 0
        else:
            assert b - a == block_tokens  # hard cut: as full as possible


# ---------------------------------------------------------------- iter_blocks


@pytest.fixture(scope="module")
def tok(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


def _docs(rows: list[dict]) -> list[Document]:
    return [Document(row=i, id=r["id"], title=r.get("title") or "", text=r["text"]) for i, r in enumerate(rows)]


ROWS = CORPUS + [
    {
        "id": "d5",
        "title": "Long words",
        "text": "antidisestablishmentarianism and floccinaucinihilipilification forever",
    },
    {"id": "d6", "title": "A very long title that certainly has more than four tokens", "text": "Short."},
    {"id": "d7", "title": "Blank", "text": "   \n  "},
]


@pytest.mark.parametrize("block_tokens", [3, 8, 16, 1000])
@pytest.mark.parametrize("batch_docs", [1, 2, 256])
def test_iter_blocks_never_cross_documents(tok, block_tokens, batch_docs):
    docs = _docs(ROWS)
    stats: dict[str, int] = {}
    blocks = list(iter_blocks(docs, tok, block_tokens, title_tokens=0, batch_docs=batch_docs, stats=stats))
    full = tokenize_documents(tok, [d.text for d in docs])
    # blocks come in corpus order and, per document, concatenate to exactly the document's tokens
    rows = [b.doc.row for b in blocks]
    assert rows == sorted(rows)
    for doc, dt in zip(docs, full):
        mine = [b for b in blocks if b.doc is doc]
        assert all(b.doc.row == doc.row for b in mine)
        if len(dt) == 0:
            assert mine == []
            continue
        assert np.concatenate([b.tokens.ids for b in mine]).tolist() == dt.ids.tolist()
        assert np.concatenate([b.tokens.offsets for b in mine]).tolist() == dt.offsets.tolist()
        assert np.concatenate([b.tokens.flags for b in mine]).tolist() == dt.flags.tolist()
        for b in mine:
            assert 1 <= len(b) <= block_tokens
            assert b.tokens.offsets.max() <= len(doc.text)
            assert b.title_ids is None
    assert stats == {"documents": len(ROWS), "empty_documents": 2}


def test_iter_blocks_start_at_word_starts(tok):
    """With words shorter than the budget, every block starts a word and ends one."""
    docs = _docs(CORPUS)
    for b in iter_blocks(docs, tok, 8, title_tokens=0):
        assert b.tokens.flags[0] & S
        assert b.tokens.flags[-1] & E


def test_iter_blocks_hard_cuts_a_long_word(tok):
    docs = _docs([{"id": "x", "text": "antidisestablishmentarianism"}])
    n = len(tok("antidisestablishmentarianism", add_special_tokens=False)["input_ids"])
    assert n > 2
    blocks = list(iter_blocks(docs, tok, 2, title_tokens=0))
    assert [len(b) for b in blocks] == [2] * (n // 2) + ([n % 2] if n % 2 else [])


@pytest.mark.parametrize("title_tokens", [1, 4, 32])
def test_iter_blocks_title_ids_truncated(tok, title_tokens):
    docs = _docs(ROWS)
    blocks = list(iter_blocks(docs, tok, 8, title_tokens=title_tokens, batch_docs=3))
    assert blocks
    for b in blocks:
        if not b.doc.title:
            assert b.title_ids is None
            continue
        full = tok(b.doc.title, add_special_tokens=False)["input_ids"]
        assert b.title_ids is not None
        assert b.title_ids.tolist() == full[:title_tokens]
        assert len(b.title_ids) <= title_tokens
    long_title = [b for b in blocks if b.doc.id == "d6"]
    n_title = len(tok(ROWS[5]["title"], add_special_tokens=False)["input_ids"])
    assert n_title > 4
    assert len(long_title) == 1
    assert len(long_title[0].title_ids) == min(title_tokens, n_title)


def test_iter_blocks_empty_documents_counted(tok):
    rows = [
        {"id": "a", "text": ""},
        {"id": "b", "text": "Hello world."},
        {"id": "c", "text": ""},
        {"id": "d", "text": " "},
    ]
    stats: dict[str, int] = {}
    blocks = list(iter_blocks(_docs(rows), tok, 16, stats=stats, batch_docs=2))
    assert [b.doc.id for b in blocks] == ["b"]
    assert stats == {"documents": 4, "empty_documents": 3}
    # stats accumulate into an existing dict
    list(iter_blocks(_docs(rows), tok, 16, stats=stats))
    assert stats == {"documents": 8, "empty_documents": 6}


def test_iter_blocks_is_lazy_and_counts_only_what_was_read(tok):
    rows = [{"id": str(i), "text": f"Document number {i}."} for i in range(10)]
    stats: dict[str, int] = {}
    it = iter_blocks(_docs(rows), tok, 16, stats=stats, batch_docs=4)
    first = next(it)
    assert first.doc.id == "0"
    assert stats["documents"] == 1
    rest = list(it)
    assert len(rest) == 9 and stats["documents"] == 10

"""Tests for training.data: training blocks (load_blocks), content tokens, query windows (make_batch: test_batch.py)."""

from __future__ import annotations

import numpy as np

import training.data as data_mod
from corpus.tokens import WORD_END, WORD_START
from tests.conftest import write_jsonl
from tests.training.conftest import make_groups
from training.data import content_token_mask, load_blocks

# ---------------------------------------------------------------- content tokens


def _id(enc, word) -> int:
    ids = enc.tokenizer(word, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1
    return ids[0]


def test_content_token_mask(bert):
    content = content_token_mask(bert.tokenizer)
    assert content.dtype == bool and content.shape[0] >= len(bert.tokenizer.get_vocab())
    for word in ("the", ",", ".", "of", "is", "and", "("):
        assert not content[_id(bert, word)], word
    for word in ("paris", "capital", "river", "1867", "seine"):
        assert content[_id(bert, word)], word
    for idx in bert.tokenizer.all_special_ids:
        assert not content[idx]


def test_content_token_mask_roberta(roberta):
    content = content_token_mask(roberta.tokenizer)
    for word in (" the", "The", ","):
        ids = roberta.tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            assert not content[ids[0]], word
    assert not content[roberta.tokenizer.mask_token_id]
    paris = roberta.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    assert any(content[i] for i in paris)


# ---------------------------------------------------------------- load_blocks


def test_load_blocks_keeps_corpus_order(bert, tmp_path):
    rows = [{"id": f"d{i}", "title": f"Title {i}", "text": f"Document number {i} says hello. " * 3} for i in range(5)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    blocks = load_blocks([path, path], bert.tokenizer, block_tokens=8, title_tokens=2)
    assert len(blocks) % 2 == 0 and len(blocks) >= 10
    half = len(blocks) // 2
    assert all(np.array_equal(a.ids, b.ids) for a, b in zip(blocks[:half], blocks[half:]))
    assert all(len(b.ids) <= 8 and len(b.title_ids) == 2 for b in blocks)
    text = bert.tokenizer.decode(np.concatenate([b.ids for b in blocks[:half]]).tolist())
    assert [text.find(f"number {i}") for i in range(5)] == sorted(text.find(f"number {i}") for i in range(5))


def test_load_blocks_numbers_documents_across_corpora(bert, tmp_path):
    rows = [{"id": f"d{i}", "title": "", "text": f"Document number {i} says hello. " * 3} for i in range(3)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    blocks = load_blocks([path, path], bert.tokenizer, block_tokens=8, title_tokens=0)
    docs = [b.doc for b in blocks]
    assert docs == sorted(docs) and sorted(set(docs)) == list(range(6))  # the second corpus gets new numbers
    assert len(docs) > len(set(docs))  # documents of several blocks share their number


# ---------------------------------------------------------------- query windows


def test_choose_window_is_word_aligned_and_bounded(bert):
    (group, _) = make_groups(bert)
    flags = np.concatenate([b.flags for b in group])
    for seed in range(50):
        a, b = data_mod.choose_window(flags, np.random.default_rng(seed), 12)
        assert 0 <= a < b <= len(flags) and b - a <= 12
        assert flags[a] & WORD_START and flags[b - 1] & WORD_END
    assert data_mod.choose_window(flags[:5], np.random.default_rng(0), 12) == (0, 5)

"""The queries of tune-queries (training.tune_data): made from an index's own blocks, or read from a file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import AppError
from indexer.phrase_index import PhraseIndex
from training.tune_data import Shape, _window, file_queries, is_dev, self_supervised


def test_self_supervised_queries_mask_a_phrase_of_their_own_block(tiny_index):
    index = PhraseIndex(tiny_index)
    queries = self_supervised(index, 50, seed=0) + self_supervised(index, 50, seed=0, dev=True)
    assert queries, "the tiny index has sentences with names and words to mask"
    at = {n: i for i, n in enumerate(index.numbers)}
    for q in queries:
        assert q.text.count("<mask>") == 1 and q.block >= 0 and q.kind in ("self:name", "self:word")
        shard_no, local = (int(v[0]) for v in index.block_shards(np.array([q.block])))
        shard = index.shards[at[shard_no]]
        _, first, end = shard.blocks[local].tolist()
        block_ids = np.asarray(shard.token_ids[first:end]).tolist()
        (answer,) = q.answers
        assert any(block_ids[i : i + len(answer)] == list(answer) for i in range(len(block_ids)))
        assert is_dev(q.doc) == (q in queries[len(queries) - len(self_supervised(index, 50, 0, dev=True)) :])
    again = self_supervised(index, 50, seed=0)
    assert [q.text for q in again] == [q.text for q in queries[: len(again)]]  # reproducible for a seed
    index.close()


def test_a_long_sentence_is_cut_around_the_mask_at_word_boundaries():
    flags = np.array([3] * 40, dtype=np.uint8)  # one-token words
    lo, hi = _window(flags, (30, 31), 10)
    assert hi - lo + 1 <= 10 and lo <= 30 and hi >= 31
    pieces = np.array([1, 2] * 20, dtype=np.uint8)  # two-token words: starts at even, ends at odd tokens
    lo, hi = _window(pieces, (20, 21), 9)
    assert pieces[lo] & 1 and pieces[hi] & 2 and hi - lo + 1 <= 9


def test_a_queries_file_is_read_and_its_answers_tokenized(tmp_path, bert):
    path = tmp_path / "q.jsonl"
    rows = [{"query": "Marie Curie was born in <mask> .", "answers": ["Warsaw", "Warszawa"], "doc": "d3"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    (q,) = file_queries(path, bert.phrase_ids)
    assert q.answers == tuple(tuple(ids) for ids in bert.phrase_ids(["Warsaw", "Warszawa"])) and q.doc == "d3"
    assert q.block == -1


@pytest.mark.parametrize(
    "line", ['{"query": "no mask here", "answers": ["x"]}', '{"query": "a <mask>", "answers": "x"}', "not json"]
)
def test_a_bad_line_is_refused_naming_it(tmp_path, bert, line):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "a <mask> .", "answers": ["b"]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(AppError, match=r"q.jsonl:2: not a query pair"):
        file_queries(path, bert.phrase_ids)


def test_dropping_words_keeps_names_and_the_words_by_the_mask(tiny_index):
    index = PhraseIndex(tiny_index)
    full = self_supervised(index, 50, seed=3)
    sparse = self_supervised(index, 50, seed=3, shape=Shape(drop=0.99, own_block=True))
    assert [q.answers for q in full] == [q.answers for q in sparse]  # the same masks, other words
    assert all(q.block == -1 for q in sparse) and all(q.block >= 0 for q in full)
    for f, q in zip(full, sparse):
        words, kept = f.text.split(), q.text.split()
        assert len(kept) <= len(words) and kept.count("<mask>") == 1
        at = kept.index("<mask>")
        names = [w for w in words if w[0].isupper() or w[0].isdigit()]
        assert all(n in kept for n in names)
        assert at >= min(2, words.index("<mask>"))  # the two words before the mask stay
    index.close()

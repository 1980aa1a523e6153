"""Tests for training.query_pairs: typed queries trained against their answers in their own documents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from common.errors import AppError
from corpus.tokens import WORD_END, WORD_START, tokenize_documents
from tests.conftest import write_jsonl
from tests.training.test_train import config, metrics
from training.data import TrainBlock
from training.query_pairs import PairBatches, load_pairs, match_pairs, occurrences, pair_batch
from training.train import Trainer

PEOPLE = [  # made-up people: the language of each is in their own document, other languages in the others'
    ("p0", "Orla Venn", "Orla Venn was a German-language poet from a small town. She wrote twelve books."),
    ("p1", "Tamsin Quell", "Tamsin Quell was a French novelist who lived by the sea and wrote in French."),
    ("p2", "Ivo Marsk", "Ivo Marsk was a Dutch painter. He also spoke German with his friends."),
    ("p3", "Ulla Brin", "Ulla Brin was a singer known for her songs in Italian."),
]


def blocks_of(enc, rows=PEOPLE) -> dict[str, list[TrainBlock]]:
    docs = tokenize_documents(enc.tokenizer, [text for _, _, text in rows])
    titles = enc.tokenizer([title for _, title, _ in rows], add_special_tokens=False)["input_ids"]
    return {
        key: [TrainBlock(d.ids, d.flags, np.asarray(t, dtype=np.int32), doc=n, key=key)]
        for n, ((key, _, _), d, t) in enumerate(zip(rows, docs, titles))
    }


def language_rows() -> list[dict]:
    answers = {"p0": ["German"], "p1": ["French"], "p2": ["Dutch"], "p3": ["Italian"]}
    return [
        {
            "relation": "typed:language",
            "query": f"The language of {title} is <mask> .",
            "answers": answers[key],
            "doc": key,
        }
        for key, title, _ in PEOPLE
    ]


def test_occurrences_are_word_aligned():
    block = TrainBlock(
        ids=np.array([7, 8, 9, 8, 9], dtype=np.int32),
        flags=np.array([3, 1, 2, 0, 2], dtype=np.uint8),  # the second 8 starts no word
        title_ids=None,
    )
    assert occurrences(block, [8, 9]) == [(1, 2)]
    assert occurrences(block, [7]) == [(0, 0)]
    assert occurrences(block, [9]) == []  # a word's second token alone
    assert occurrences(block, [7, 8]) == []  # 8 there ends no word
    assert occurrences(block, [8, 9, 8]) == []
    assert WORD_START | WORD_END == 3


def test_an_answer_inside_a_compound_is_a_positive_of_its_own_document_only(bert):
    blocks = blocks_of(bert)
    pairs = match_pairs(language_rows(), blocks, bert)
    assert [p.doc for p in pairs] == ["p0", "p1", "p2", "p3"]
    batch = pair_batch(pairs, blocks, bert)
    cand_ids = batch.c_ids.reshape(-1)[batch.cand_at]
    german = bert.phrase_ids(["German"])[0]
    assert len(german) == 1
    # "German" of "German-language" in Orla Venn's document: her query's positive (start and end)
    row0 = batch.pos_start[0].nonzero().flatten()
    assert cand_ids[row0].tolist() == german and torch.equal(row0, batch.pos_end[0].nonzero().flatten())
    assert (batch.cand_doc[row0] == batch.q_doc[0]).all()
    # "German" in Ivo Marsk's document is a negative for her query, and no positive of his ("Dutch" is)
    elsewhere = ((cand_ids == german[0]) & (batch.cand_doc != batch.q_doc[0])).nonzero().flatten()
    assert len(elsewhere) == 1 and not batch.pos_start[0, elsewhere].any()
    assert cand_ids[batch.pos_start[2]].tolist() == bert.phrase_ids(["Dutch"])[0]
    # "French" twice in Tamsin Quell's document: both are positives
    assert batch.pos_start[1].sum() == 2
    # the queries are laid out as a fill lays them out: MASK_s MASK_e, the start and end rows on them
    mask = bert.tokenizer.mask_token_id
    assert (batch.q_ids.reshape(-1)[batch.start_at] == mask).all()
    assert (batch.q_ids.reshape(-1)[batch.end_at] == mask).all()
    assert (batch.q_seq == -1).all()  # no own block: every candidate may be matched


def test_pairs_without_their_answer_or_document_are_left_out(bert):
    rows = language_rows()
    rows[0] = {**rows[0], "answers": ["Spanish"]}
    rows[1] = {**rows[1], "doc": "nowhere"}
    rows[2] = {**rows[2], "query": "Two <mask> masks <mask> ."}
    pairs = match_pairs(rows, blocks_of(bert), bert)
    assert [p.doc for p in pairs] == ["p3"]
    with pytest.raises(AppError, match="no query pair"):
        PairBatches([], {}, bert, 2, 0)
    with pytest.raises(AppError, match="no batch of two"):  # one pair of its kind: never a loop without end
        PairBatches(pairs, blocks_of(bert), bert, 2, 0).batch_at(0)


def test_batches_hold_one_kind_and_distinct_documents_and_repeat_by_position(bert):
    blocks = blocks_of(bert)
    rows = language_rows() + [
        {"relation": "typed:occupation", "query": f"{title}'s occupation is <mask> .", "answers": [job], "doc": key}
        for (key, title, _), job in zip(PEOPLE, ["poet", "novelist", "painter", "singer"])
    ]
    rows.append({**rows[0], "query": "Orla Venn wrote in <mask> ."})  # a second pair of p0's, same kind
    pairs = match_pairs(rows, blocks, bert)
    assert len(pairs) == 9
    batches = PairBatches(pairs, blocks, bert, size=3, seed=0)
    seen = []
    for position in range(6):  # past the first epoch's batches too
        batch = batches.batch_at(position)
        assert len(batch.q_doc.unique()) == batch.q_doc.numel()  # distinct documents
        seen.append(batch.q_ids.tolist())
    for members in batches._batches(0):
        assert len({pairs[i].kind for i in members}) == 1
        assert len({pairs[i].doc for i in members}) == len(members)
    again = PairBatches(pairs, blocks, bert, size=3, seed=0)
    assert [again.batch_at(p).q_ids.tolist() for p in range(6)] == seen


def test_load_pairs_names_a_bad_line(tmp_path: Path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(language_rows()[0]) + "\n" + json.dumps({"query": "x <mask>"}) + "\n")
    with pytest.raises(AppError, match=r"pairs.jsonl line 2"):
        load_pairs(path)


def test_training_with_query_pairs_adds_their_loss_and_lowers_it(tiny_bert_dir, tmp_path):
    rows = [{"id": key, "title": title, "text": text} for key, title, text in PEOPLE] * 3
    rows = [{**r, "id": f"{r['id']}-{i}"} if i >= len(PEOPLE) else r for i, r in enumerate(rows)]
    corpus = write_jsonl(tmp_path / "people.jsonl", rows)
    pairs = write_jsonl(tmp_path / "pairs.jsonl", language_rows())
    cfg = config(corpus, tmp_path / "run", tiny_bert_dir, steps=12, save_every=12, query_pairs=pairs, pair_batch=4)
    trainer = Trainer(cfg)
    assert len(trainer.pairs.pairs) == 4
    before = float(trainer.pair_loss(0).detach())
    trainer.run()
    logged = [m["loss_pairs"] for m in metrics(tmp_path / "run")]
    assert len(logged) == 12 and all(np.isfinite(logged))
    assert float(trainer.pair_loss(0).detach()) < before  # the same batch, after training on it

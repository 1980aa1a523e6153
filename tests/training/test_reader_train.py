"""Training the reader: its loss, its targets, its examples, and a run that learns and resumes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from common.errors import AppError
from corpus.tokens import WORD_END, WORD_START
from encoder.model import Encoder
from encoder.reader import Reader, ReaderInput
from encoder.reader_model import load_model
from training.reader_train import ReaderTrainConfig, ReaderTrainer, multi_positive_ce, read_examples, targets


def test_multi_positive_ce_is_minus_log_of_the_gold_mass_among_allowed():
    logits = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    allowed = torch.tensor([[True, True, True, False]])  # the 9 is not a valid start: not in the softmax
    gold = torch.tensor([[False, True, True, False]])
    p = np.exp([1.0, 2.0, 3.0])
    want = -math.log((p[1] + p[2]) / p.sum())
    assert float(multi_positive_ce(logits, allowed, gold)) == pytest.approx(want, rel=1e-5)


def test_targets_allow_word_starts_and_ends_and_mark_gold_across_windows():
    both = WORD_START | WORD_END
    ex = {"windows": [[5, 6], [7, 8, 9]], "flags": [[both, both], [WORD_START, 0, WORD_END]], "gold": [[1, 0, 2]]}
    positions = [np.array([10, 11, 13, 14, 15])]  # the window tokens' places in the sequence
    s_ok, s_gold, e_ok, e_gold = targets([ex], positions, 16)
    assert s_ok[0].nonzero().flatten().tolist() == [10, 11, 13]
    assert e_ok[0].nonzero().flatten().tolist() == [10, 11, 15]
    assert s_gold[0].nonzero().flatten().tolist() == [13]
    assert e_gold[0].nonzero().flatten().tolist() == [15]


def test_targets_with_null_allow_the_first_position_and_make_it_gold_without_spans():
    ex = {"windows": [[5, 6]], "flags": [[3, 3]], "gold": [[0, 1, 1]]}
    none = {"windows": [[5, 6]], "flags": [[3, 3]], "gold": []}
    s_ok, s_gold, e_ok, e_gold = targets([ex, none], [np.array([4, 5]), np.array([4, 5])], 8, null=True)
    assert s_ok[:, 0].all() and e_ok[:, 0].all()
    assert s_gold[0].nonzero().flatten().tolist() == [5] and e_gold[0].nonzero().flatten().tolist() == [5]
    assert s_gold[1].nonzero().flatten().tolist() == [0] and e_gold[1].nonzero().flatten().tolist() == [0]
    s_ok, *_ = targets([ex], [np.array([4, 5])], 8)
    assert not s_ok[0, 0]  # without null the first position is no candidate


def test_bad_examples_name_the_file_and_line(tmp_path):
    path = tmp_path / "ex.jsonl"
    path.write_text('{"query_ids": [1], "mask_at": 0, "windows": [[1]], "flags": [[3], [3]], "gold": []}\n')
    with pytest.raises(AppError, match=r"ex.jsonl:1: not a reader example"):
        read_examples([path])
    with pytest.raises(AppError, match="cannot read examples"):
        read_examples([tmp_path / "missing.jsonl"])


def make_examples(encoder: Encoder, path) -> list[ReaderInput]:
    """Each query's answer is in its second window; a distractor of the same kind is in its first."""
    tok = encoder.tokenizer
    rows, items = [], []
    for query, windows, answer in [
        ("Curie was born in <mask> .", ["she died in Passy", "she was born in Warsaw"], "Warsaw"),
        ("Peiper was born in <mask> .", ["he lives in Belgium", "he was born in Alexandra"], "Alexandra"),
    ]:
        ids, mask_at = encoder.query_layout(query)
        wins = [tok(w, add_special_tokens=False)["input_ids"] for w in windows]
        answer_ids = tok(answer, add_special_tokens=False)["input_ids"]
        i = next(k for k in range(len(wins[1])) if wins[1][k : k + len(answer_ids)] == answer_ids)
        flags = [[WORD_START | WORD_END] * len(w) for w in wins]
        rows.append(
            {
                "query_ids": ids,
                "mask_at": mask_at[0],
                "windows": wins,
                "flags": flags,
                "gold": [[1, i, i + len(answer_ids) - 1]],
            }
        )
        items.append((ReaderInput(ids, mask_at[0], [np.array(w) for w in wins]), len(wins[0]) + i))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return items


def test_training_learns_the_gold_span_and_resumes(tmp_path, tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    items = make_examples(encoder, tmp_path / "ex.jsonl")
    cfg = ReaderTrainConfig(
        examples=[tmp_path / "ex.jsonl"],
        out=tmp_path / "run",
        init=tiny_bert_dir,
        epochs=40,
        batch_size=2,
        lr=3e-3,
        warmup=0.0,
        save_every=10,
        device="cpu",
    )
    trainer = ReaderTrainer(cfg.model_copy(update={"minutes": 1e-9}))  # stops after its first step
    rows = [json.loads(line) for line in (tmp_path / "ex.jsonl").read_text().splitlines()]
    with torch.no_grad():
        first = float(trainer.loss(rows))
    trainer.run()
    assert trainer.step == 1
    trainer.save_checkpoint()
    resumed = ReaderTrainer(cfg.model_copy(update={"resume": True}))
    assert resumed.step == 1  # goes on from the checkpoint
    out = resumed.run()
    assert resumed.step == resumed.steps == 40
    reader = Reader(out, device="cpu", dtype="fp32")
    assert reader.card.trained["steps"] == 40
    with torch.no_grad():
        last = float(resumed.loss(rows))
    assert last < first / 4
    for x, gold_at in items:
        start, end = reader.logits([x])[0]
        assert int(np.argmax(start)) == gold_at


def test_title_training_needs_a_title_per_window(tmp_path):
    path = tmp_path / "ex.jsonl"
    row = {"query_ids": [1], "mask_at": 0, "windows": [[1], [2]], "flags": [[3], [3]], "gold": [[0, 0, 0]]}
    path.write_text(json.dumps({**row, "titles": [[7]]}) + "\n")
    assert read_examples([path])  # titles are not read without --title-tokens
    with pytest.raises(AppError, match="no title per window"):
        read_examples([path], titles=True)


def test_examples_without_gold_are_kept_only_for_null_training(tmp_path):
    path = tmp_path / "ex.jsonl"
    row = {"query_ids": [1], "mask_at": 0, "windows": [[1]], "flags": [[3]]}
    path.write_text(json.dumps({**row, "gold": [[0, 0, 0]]}) + "\n" + json.dumps({**row, "gold": []}) + "\n")
    assert [len(ex["gold"]) for ex in read_examples([path])] == [1]
    assert [len(ex["gold"]) for ex in read_examples([path], null=True)] == [1, 0]


def test_null_training_learns_to_say_none_of_these(tmp_path, tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    items = make_examples(encoder, tmp_path / "ex.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "ex.jsonl").read_text().splitlines()]
    tok = encoder.tokenizer
    ids, mask_at = encoder.query_layout("Zorp was born in <mask> .")  # nobody in the windows is Zorp
    wins = [tok(w, add_special_tokens=False)["input_ids"] for w in ["he was born in Paris", "she died in Passy"]]
    rows.append(
        {
            "query_ids": ids,
            "mask_at": mask_at[0],
            "windows": wins,
            "flags": [[WORD_START | WORD_END] * len(w) for w in wins],
            "gold": [],
        }
    )
    (tmp_path / "ex.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = ReaderTrainConfig(
        examples=[tmp_path / "ex.jsonl"],
        out=tmp_path / "run",
        init=tiny_bert_dir,
        epochs=60,
        batch_size=3,
        lr=3e-3,
        warmup=0.0,
        save_every=100,
        device="cpu",
        null=True,
    )
    reader = Reader(ReaderTrainer(cfg).run(), device="cpu", dtype="fp32")
    assert reader.card.null
    none = ReaderInput(ids, mask_at[0], [np.array(w) for w in wins])
    start, end = reader.logits([none])[0]  # relative to "none of these"
    assert start.max() + end.max() < 0
    for x, gold_at in items:
        start, end = reader.logits([x])[0]
        assert int(np.argmax(start)) == gold_at and start.max() + end.max() > 0


def test_freeze_embeddings_keeps_the_encoders_word_embeddings(tmp_path, tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    make_examples(encoder, tmp_path / "ex.jsonl")
    cfg = ReaderTrainConfig(
        examples=[tmp_path / "ex.jsonl"],
        out=tmp_path / "run",
        init=tiny_bert_dir,
        epochs=3,
        batch_size=2,
        lr=3e-3,
        warmup=0.0,
        device="cpu",
        save_every=3,
        freeze_embeddings=True,
    )
    trainer = ReaderTrainer(cfg)
    before = {k: v.clone() for k, v in trainer.model.transformer.state_dict().items()}
    trainer.run()
    after = load_model(tmp_path / "run" / "checkpoint")[0].transformer.state_dict()  # fp32 (the export is fp16)
    word = "embeddings.word_embeddings.weight"
    assert torch.equal(before[word], after[word])
    assert any(not torch.equal(before[k], after[k]) for k in before if ".attention." in k)


def test_bucketed_order_keeps_every_example_and_cuts_the_padding(tmp_path, tiny_bert_dir):
    rng = np.random.default_rng(1)
    rows = [
        {"query_ids": [1, 2, 3], "mask_at": 1, "windows": [[5] * int(n)], "flags": [[3] * int(n)], "gold": [[0, 0, 0]]}
        for n in rng.integers(1, 200, size=96)
    ]
    (tmp_path / "ex.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = ReaderTrainConfig(
        examples=[tmp_path / "ex.jsonl"],
        out=tmp_path / "run",
        init=tiny_bert_dir,
        epochs=2,
        batch_size=8,
        device="cpu",
        bucket=0,
    )
    plain = ReaderTrainer(cfg).order
    bucketed = ReaderTrainer(cfg.model_copy(update={"bucket": 6})).order
    assert sorted(bucketed.tolist()) == sorted(plain.tolist())  # the same examples, as often
    assert np.array_equal(bucketed, ReaderTrainer(cfg.model_copy(update={"bucket": 6})).order)  # resumable

    def padded(order: np.ndarray) -> int:
        lengths = np.array([len(rows[i]["windows"][0]) for i in order]).reshape(-1, 8)
        return int(lengths.max(axis=1).sum())

    assert padded(bucketed) < 0.8 * padded(plain)
    first_run = [max(len(rows[i]["windows"][0]) for i in bucketed[at : at + 8]) for at in range(0, 48, 8)]
    assert first_run != sorted(first_run)  # the batches are shuffled, not served shortest first


def test_layers_are_cut_on_a_fresh_run_with_resume_and_kept_when_it_resumes(tmp_path, tiny_bert_dir):
    """`--resume` on a run with no checkpoint yet starts from `init`, cut to `layers` (v2b-v2e were not: they kept
    all 6); resumed from its checkpoint, the run keeps the checkpoint's layers."""
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    make_examples(encoder, tmp_path / "ex.jsonl")
    cfg = ReaderTrainConfig(
        examples=[tmp_path / "ex.jsonl"],
        out=tmp_path / "run",
        init=tiny_bert_dir,
        epochs=2,
        batch_size=2,
        device="cpu",
        layers=1,
        resume=True,
        minutes=1e-9,
    )
    trainer = ReaderTrainer(cfg)
    assert len(trainer.model.transformer.encoder.layer) == 1
    trainer.run()
    trainer.save_checkpoint()
    resumed = ReaderTrainer(cfg.model_copy(update={"minutes": None}))
    assert resumed.step == 1 and len(resumed.model.transformer.encoder.layer) == 1
    assert Reader(resumed.run(), device="cpu", dtype="fp32").max_length > 0
    assert json.loads((tmp_path / "run" / "reader" / "config.json").read_text())["num_hidden_layers"] == 1

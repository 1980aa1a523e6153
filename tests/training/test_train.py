"""Tests for training.train / training.cli: gradients, exact resume, 2-process torchrun on CPU, fp16 export."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import training.train as train_mod
from common.errors import AppError
from encoder.model import BlockInput, Encoder
from tests.conftest import write_jsonl
from training.checkpoints import LATEST, STATE_FILE
from training.cli import main as cli_main
from training.train import Trainer, train
from training.train_config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]

CITIES = [
    ("Paris", "France", "Seine", "the Louvre"),
    ("Berlin", "Germany", "Spree", "the Pergamon Museum"),
    ("Rome", "Italy", "Tiber", "the Colosseum"),
    ("Vienna", "Austria", "Danube", "the Hofburg"),
    ("Madrid", "Spain", "Manzanares", "the Prado"),
]
SENTENCES = [
    "{c} is the capital of {k}.",
    "The river {r} flows through {c}.",
    "Many tourists visit {m} in {c}.",
    "{c} is the largest city of {k}.",
    "The old town of {c} lies on the river {r}.",
]


def city_docs(n: int = 40) -> list[dict]:
    """n short documents, eight in a row about each city, so groups of consecutive blocks share phrases."""
    rows = []
    for i in range(n):
        c, k, r, m = CITIES[(i // 8) % len(CITIES)]
        picks = [SENTENCES[(i + j) % len(SENTENCES)] for j in range(3)]
        text = " ".join(s.format(c=c, k=k, r=r, m=m) for s in picks)
        rows.append({"id": f"doc{i}", "title": f"{c} ({i})", "text": text})
    return rows


@pytest.fixture(scope="module")
def city_corpus(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("city") / "cities.jsonl", city_docs())


def config(corpus: Path, out: Path, init: Path, **kw) -> TrainConfig:
    base = dict(
        corpus=[corpus],
        out=out,
        init=init,
        steps=4,
        save_every=2,
        group_size=4,
        device="cpu",
        dtype="fp32",
        block_tokens=32,
        title_tokens=8,
        lr=1e-3,
        warmup_steps=10,
        seed=0,
    )
    base.update(kw)
    return TrainConfig(**base)


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- gradients


def test_gradient_reaches_candidate_pass(city_corpus, tiny_bert_dir, tmp_path, monkeypatch):
    trainer = Trainer(config(city_corpus, tmp_path / "run", tiny_bert_dir, steps=1))
    assert trainer.model.training
    assert len(trainer.groups) >= 4 and all(len(g) >= 2 for g in trainer.groups)
    captured = {}
    real = train_mod.npm_loss

    def spy(q_start, q_end, cands, pos_s, pos_e, allowed, scale):
        captured.update(allowed=allowed, pos_s=pos_s, pos_e=pos_e, cands=cands, q_start=q_start, scale=scale)
        return real(q_start, q_end, cands, pos_s, pos_e, allowed, scale)

    monkeypatch.setattr(train_mod, "npm_loss", spy)
    batch = trainer.batch_at(0)
    assert batch.masks > 0 and batch.pos_start.any()
    l_start, l_end = trainer.loss(batch)
    assert torch.isfinite(l_start) and torch.isfinite(l_end) and l_start.item() > 0 and l_end.item() > 0
    # candidates allowed: exactly the tokens of the other sequences of the batch
    assert torch.equal(captured["allowed"], batch.cand_seq[None, :] != batch.q_seq[:, None])
    assert captured["cands"].shape == (batch.cand_at.numel(), trainer.encoder.dim)
    assert captured["scale"] == pytest.approx(1 / np.sqrt(32))
    (l_start + l_end).backward()
    grad = trainer.model.embeddings.word_embeddings.weight.grad
    q_tokens = set(batch.q_ids[batch.q_attn.bool()].tolist())
    c_tokens = set(batch.c_ids[batch.c_attn.bool()].tolist())
    only_candidates = sorted(c_tokens - q_tokens)  # e.g. the masked spans' own tokens
    assert only_candidates
    norms = grad[only_candidates].norm(dim=1)
    assert (norms > 0).all(), "the candidate forward pass gets no gradient"
    unused = sorted(set(range(2000, 2100)) - q_tokens - c_tokens)
    assert (grad[unused] == 0).all()


def test_loss_has_no_signal_from_own_sequence(city_corpus, tiny_bert_dir, tmp_path):
    """Positives are in other sequences only: the loss's allowed matrix never hides a positive."""
    trainer = Trainer(config(city_corpus, tmp_path / "run", tiny_bert_dir, steps=1))
    for position in range(3):
        b = trainer.batch_at(position)
        own = b.cand_seq[None, :] == b.q_seq[:, None]
        assert not (b.pos_start & own).any() and not (b.pos_end & own).any()
        assert b.pos_start.any(dim=1).all()  # every masked span has a positive


# ---------------------------------------------------------------- checkpoints and resume


@pytest.fixture(scope="module")
def run_a(city_corpus, tiny_bert_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run_a")
    last = train(config(city_corpus, out, tiny_bert_dir, keep_checkpoints=1))
    assert last == out / "checkpoint-000004"
    return out


def test_checkpoint_layout(run_a):
    ckpt = run_a / "checkpoint-000004"
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "train_config.json",
        STATE_FILE,
    ):
        assert (ckpt / name).is_file(), name
    assert json.loads((run_a / LATEST).read_text()) == {"checkpoint": "checkpoint-000004", "step": 4}
    assert sorted(p.name for p in run_a.iterdir() if p.is_dir()) == ["checkpoint-000004"]  # keep_checkpoints=1
    cfg = TrainConfig.model_validate_json((ckpt / "train_config.json").read_text())
    assert cfg.steps == 4 and cfg.group_size == 4
    state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False)
    assert state["step"] == 4 and state["position"] == 4
    assert {"optimizer", "scheduler", "torch_rng", "python_rng"} <= state.keys()
    recs = metrics(run_a)
    assert [r["step"] for r in recs] == [1, 2, 3, 4]
    assert all(
        np.isfinite(r["loss"]) and r["masks"] > 0 and r["loss"] == pytest.approx(r["loss_start"] + r["loss_end"])
        for r in recs
    )
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        assert all(f.get_slice(k).get_dtype() == "F32" for k in f.keys())
    Encoder(ckpt, device="cpu")  # loadable as an encoder directory


def test_resume_reproduces_uninterrupted_run(run_a, city_corpus, tiny_bert_dir, tmp_path):
    b = tmp_path / "run_b"
    train(config(city_corpus, b, tiny_bert_dir, steps=2))
    assert json.loads((b / LATEST).read_text())["checkpoint"] == "checkpoint-000002"
    resumed = Trainer(config(city_corpus, b, tiny_bert_dir, steps=4, resume=True))
    assert resumed.step == 2 and resumed.position == 2
    assert resumed.run() == b / "checkpoint-000004"
    ra, rb = metrics(run_a), metrics(b)
    assert [r["step"] for r in rb] == [1, 2, 3, 4]
    for x, y in zip(ra, rb):
        for key in ("loss", "loss_start", "loss_end", "lr"):
            assert y[key] == pytest.approx(x[key], rel=1e-5), (x["step"], key)
        assert x["masks"] == y["masks"] and x["tokens"] == y["tokens"]
    wa = load_file(str(run_a / "checkpoint-000004" / "model.safetensors"))
    wb = load_file(str(b / "checkpoint-000004" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    w0 = load_file(str(tiny_bert_dir / "model.safetensors"))
    assert any(not torch.equal(wa[k], w0[k]) for k in wa if k in w0)  # training changed the weights
    for k in wa:
        assert torch.equal(wb[k], wa[k]), k


def test_memory_negatives_join_the_loss_and_resume_exactly(city_corpus, tiny_bert_dir, tmp_path, monkeypatch):
    """memory_tokens: recent candidates are extra negatives (never of a query's document); resume keeps them."""
    kw = dict(positives="self", query_window=12, memory_tokens=64, steps=4)
    trainer = Trainer(config(city_corpus, tmp_path / "mem", tiny_bert_dir, **kw))
    captured = []
    real = train_mod.npm_loss

    def spy(q_start, q_end, cands, pos_s, pos_e, allowed, scale):
        captured.append((cands.shape[0], allowed, pos_s, pos_e))
        return real(q_start, q_end, cands, pos_s, pos_e, allowed, scale)

    monkeypatch.setattr(train_mod, "npm_loss", spy)
    first, second = trainer.batch_at(0), trainer.batch_at(1)
    trainer.loss(first)
    assert captured[-1][0] == first.cand_at.numel()  # empty memory: only the batch
    assert trainer.memory.shape == (min(64, first.cand_at.numel()), trainer.encoder.dim)
    assert torch.equal(trainer.memory_doc, first.cand_doc[: trainer.memory.shape[0]])
    trainer.loss(second)
    n, allowed, pos_s, pos_e = captured[-1]
    extra = n - second.cand_at.numel()
    assert extra == min(64, first.cand_at.numel())
    mem_doc = first.cand_doc[:extra]
    assert torch.equal(allowed[:, -extra:], mem_doc[None, :] != second.q_doc[:, None])
    assert not pos_s[:, -extra:].any() and not pos_e[:, -extra:].any()
    monkeypatch.setattr(train_mod, "npm_loss", real)
    # an interrupted run with memory resumes to the same losses and weights
    a, b = tmp_path / "mem_a", tmp_path / "mem_b"
    train(config(city_corpus, a, tiny_bert_dir, **kw))
    train(config(city_corpus, b, tiny_bert_dir, **{**kw, "steps": 2}))
    train(config(city_corpus, b, tiny_bert_dir, **kw, resume=True))
    for x, y in zip(metrics(a), metrics(b)):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5), x["step"]
    wa = load_file(str(a / "checkpoint-000004" / "model.safetensors"))
    wb = load_file(str(b / "checkpoint-000004" / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_inline_title_puts_the_title_in_the_query_text(city_corpus, tiny_bert_dir, tmp_path):
    trainer = Trainer(
        config(
            city_corpus,
            tmp_path / "inline",
            tiny_bert_dir,
            positives="self",
            query_window=12,
            inline_title=True,
            query_title_dropout=0.0,
        )
    )
    batch = trainer.batch_at(0)
    assert (batch.q_types == 0).all()  # one segment
    sep = trainer.encoder.tokenizer.sep_token_id
    assert ((batch.q_ids == sep).sum(1) == 1).all()
    titles = {tuple(b.title_ids.tolist()) for g in trainer.groups for b in g}
    cls_len = len(trainer.encoder.template.single_prefix)
    for row in batch.q_ids:
        assert any(tuple(row[cls_len : cls_len + len(t)].tolist()) == t for t in titles)
    mask = trainer.encoder.tokenizer.mask_token_id
    assert (batch.q_ids.reshape(-1)[batch.start_at] == mask).all() and (
        batch.q_ids.reshape(-1)[batch.end_at] == mask
    ).all()


def test_until_stops_early_on_the_full_schedule(run_a, city_corpus, tiny_bert_dir, tmp_path):
    """--until 2 of a 4-step schedule: the same first two steps (and lr) as the 4-step run, then a checkpoint."""
    out = tmp_path / "until"
    assert train(config(city_corpus, out, tiny_bert_dir, until=2, save_every=100)) == out / "checkpoint-000002"
    ra, ru = metrics(run_a), metrics(out)
    assert [r["step"] for r in ru] == [1, 2]
    for x, y in zip(ra, ru):
        assert y["lr"] == pytest.approx(x["lr"]) and y["loss"] == pytest.approx(x["loss"], rel=1e-5)


def test_resume_without_checkpoint_starts_fresh(city_corpus, tiny_bert_dir, tmp_path):
    trainer = Trainer(config(city_corpus, tmp_path / "empty", tiny_bert_dir, resume=True))
    assert trainer.step == 0 and trainer.position == 0


def test_views_repeat_each_block_and_train_by_document(city_corpus, tiny_bert_dir, tmp_path):
    trainer = Trainer(config(city_corpus, tmp_path / "views", tiny_bert_dir, views=2, positives="document", steps=2))
    for group in trainer.groups:
        assert len(group) == 4
        assert group[0] is group[1] and group[2] is group[3] and group[0].doc != group[2].doc
    batch = trainer.batch_at(0)
    assert batch.masks > 0
    rows, cols = torch.nonzero(batch.pos_start, as_tuple=True)
    assert (batch.q_seq[rows] // 2 == batch.cand_seq[cols] // 2).all()  # positives only in the other view
    assert (batch.q_seq[rows] != batch.cand_seq[cols]).all()
    assert np.isfinite(float(sum(trainer.loss(batch)).detach()))


def test_mixed_positives_alternate_objectives(city_corpus, tiny_bert_dir, tmp_path):
    trainer = Trainer(config(city_corpus, tmp_path / "mixed", tiny_bert_dir, positives="mixed", query_views=2, steps=1))
    batch = trainer.batch_at(0)
    own = batch.own_allowed
    assert own.any() and (~own).any()  # both objectives in one batch
    rows, cols = torch.nonzero(batch.pos_start, as_tuple=True)
    assert (batch.q_seq[rows] != batch.cand_seq[cols])[~own[rows]].all()  # NPM rows: positives in other blocks
    l_start, l_end = trainer.loss(batch)
    assert np.isfinite(float((l_start + l_end).detach()))


def test_freeze_embeddings_trains_the_layers_only(city_corpus, tiny_bert_dir, tmp_path):
    out = tmp_path / "frozen"
    last = train(config(city_corpus, out, tiny_bert_dir, steps=2, save_every=2, freeze_embeddings=True))
    before = Encoder(tiny_bert_dir, device="cpu", dtype="fp32").model.state_dict()
    after = Encoder(last, device="cpu", dtype="fp32").model.state_dict()
    word = "embeddings.word_embeddings.weight"
    assert torch.equal(before[word], after[word])
    changed = [k for k in before if k != word and not torch.equal(before[k], after[k])]
    assert any(".attention." in k for k in changed) and any("position_embeddings" in k for k in changed)


def test_too_small_corpus_is_refused(tiny_bert_dir, tmp_path):
    path = write_jsonl(tmp_path / "one.jsonl", [{"id": "a", "text": "Just one short block."}])
    with pytest.raises(AppError, match="groups"):
        Trainer(config(path, tmp_path / "run", tiny_bert_dir))


# ---------------------------------------------------------------- torchrun


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # starts a process
def test_torchrun_two_processes_on_cpu(city_corpus, tiny_bert_dir, tmp_path):
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        "-m",
        "training",
        "train",
        "--corpus",
        str(city_corpus),
        "--out",
        str(out),
        "--init",
        str(tiny_bert_dir),
        "--steps",
        "2",
        "--save-every",
        "2",
        "--group-size",
        "4",
        "--block-tokens",
        "32",
        "--title-tokens",
        "8",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-000002", "latest.json", "metrics.jsonl"]
    assert (out / "checkpoint-000002" / "model.safetensors").is_file()
    recs = metrics(out)
    assert [r["step"] for r in recs] == [1, 2]  # rank 0 only
    assert all(np.isfinite(r["loss"]) and r["loss"] > 0 for r in recs)
    assert proc.stdout.count("last checkpoint:") == 2  # both ranks finish


def _gather_worker(rank: int, world: int, port: int) -> None:
    """One process of test_gather: checks Trainer._gather's columns and its gradient across processes."""
    import types

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        sizes, d, m, width = [3, 5], 4, 2, 5
        g = torch.Generator().manual_seed(0)
        all_c = [torch.randn(n, d, generator=g) for n in sizes]  # the same on both ranks
        weights = [torch.randn(2 * width, d, generator=g) for _ in range(world)]
        g_r = torch.Generator().manual_seed(10 + rank)
        allowed = torch.rand(m, sizes[rank], generator=g_r) < 0.6
        pos_s = (torch.rand(m, sizes[rank], generator=g_r) < 0.5) & allowed
        pos_e = (torch.rand(m, sizes[rank], generator=g_r) < 0.5) & allowed
        cands = all_c[rank].clone().requires_grad_()
        fake = types.SimpleNamespace(rank=rank, world=world)
        gc, ga, gps, gpe = Trainer._gather(fake, cands, allowed, pos_s, pos_e)
        assert gc.shape == (world * width, d) and ga.shape == gps.shape == gpe.shape == (m, world * width)
        for r in range(world):
            block = slice(r * width, r * width + sizes[r])
            pad = slice(r * width + sizes[r], (r + 1) * width)
            assert torch.equal(gc[block].detach(), all_c[r])
            assert not ga[:, pad].any() and not gps[:, pad].any() and not gpe[:, pad].any()
            if r == rank:
                assert torch.equal(ga[:, block], allowed)
                assert torch.equal(gps[:, block], pos_s) and torch.equal(gpe[:, block], pos_e)
            else:  # other processes' tokens: negatives only
                assert ga[:, block].all() and not gps[:, block].any() and not gpe[:, block].any()
        (gc * weights[rank]).sum().backward()
        # every process's loss sends gradient to this process's candidates
        want = sum(w[rank * width : rank * width + sizes[rank]] for w in weights)
        torch.testing.assert_close(cands.grad, want)
    finally:
        dist.destroy_process_group()


def test_gather_across_two_processes():
    import torch.multiprocessing as mp

    mp.start_processes(_gather_worker, args=(2, _free_port()), nprocs=2, join=True, start_method="fork")


@pytest.mark.slow  # starts a process
def test_python_m_encoder_train_help():
    proc = subprocess.run(
        [sys.executable, "-m", "training", "train", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "--corpus" in proc.stdout and "--save-every" in proc.stdout


# ---------------------------------------------------------------- export


def test_export_fp16(run_a, tmp_path):
    ckpt = run_a / "checkpoint-000004"
    out = tmp_path / "exported"
    with pytest.raises(SystemExit) as exc:
        cli_main(["export", "--checkpoint", str(ckpt), "--out", str(out)])
    assert exc.value.code in (0, None)
    assert (out / "train_config.json").read_text() == (ckpt / "train_config.json").read_text()
    assert (out / "tokenizer.json").is_file() and not (out / STATE_FILE).exists()
    assert not out.with_name(out.name + ".tmp").exists()
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"F16"}
    assert (out / "model.safetensors").stat().st_size < 0.6 * (ckpt / "model.safetensors").stat().st_size

    fp32, fp16 = Encoder(ckpt, device="cpu", dtype="fp32"), Encoder(out, device="cpu", dtype="fp32")
    assert next(fp16.model.parameters()).dtype == torch.float32
    ids = np.asarray(fp32.tokenizer("Paris is the capital of France.", add_special_tokens=False)["input_ids"])
    blocks = [
        BlockInput(ids=ids, prefix_ids=np.asarray(fp32.tokenizer("Paris", add_special_tokens=False)["input_ids"]))
    ]
    a, b = fp32.encode_blocks(blocks)[0], fp16.encode_blocks(blocks)[0]
    np.testing.assert_allclose(b, a, atol=1e-2)
    qa = fp32.encode_queries(["Paris is the capital of <mask>."])[0]
    qb = fp16.encode_queries(["Paris is the capital of <mask>."])[0]
    np.testing.assert_allclose(qb.q_start, qa.q_start, atol=1e-2)

    # re-export over an existing directory keeps a hand-written README.md
    (out / "README.md").write_text("model card\n")
    with pytest.raises(SystemExit):
        cli_main(["export", "--checkpoint", str(ckpt), "--out", str(out)])
    assert (out / "README.md").read_text() == "model card\n"
    assert (out / "model.safetensors").is_file()


def test_salient_words_are_read_into_the_blocks(city_corpus, tiny_bert_dir, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("# rivers\nTiber\n\nold\n", encoding="utf-8")
    plain = Trainer(config(city_corpus, tmp_path / "plain", tiny_bert_dir, steps=1))
    listed = Trainer(
        config(city_corpus, tmp_path / "listed", tiny_bert_dir, steps=1, salient_words=words, salient_rate=0.5)
    )
    count = lambda t: sum(len(b.salient) for g in t.groups for b in g)  # noqa: E731
    assert count(listed) > count(plain)  # "old" (lower case) adds spans; "Tiber" was one already


def test_missing_or_empty_salient_word_list_is_named(city_corpus, tiny_bert_dir, tmp_path):
    with pytest.raises(AppError, match="nowhere.txt"):
        Trainer(
            config(city_corpus, tmp_path / "a", tiny_bert_dir, salient_words=tmp_path / "nowhere.txt", salient_rate=0.5)
        )
    (tmp_path / "empty.txt").write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(AppError, match="holds no word"):
        Trainer(
            config(city_corpus, tmp_path / "b", tiny_bert_dir, salient_words=tmp_path / "empty.txt", salient_rate=0.5)
        )

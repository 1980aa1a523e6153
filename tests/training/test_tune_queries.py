"""encoder tune-queries (training.tune_queries): a tiny tune raises its own figure, leaves the index's files as they
were, pairs the model with the index, refuses a model made for another encoder, and resumes after a kill."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.errors import AppError
from encoder.query_model import CARD, INDEX_QUERY_MODEL, read_card, resolve_query_model
from indexer.manifest import Manifest
from tests.conftest import REPO_ROOT, write_jsonl
from training.tune_config import TuneConfig
from training.tune_queries import Tuner, tune_queries

QUERIES = [
    {"query": "Marie Curie was born in <mask> .", "answers": ["Warsaw"]},
    {"query": "The capital of France is <mask> .", "answers": ["Paris"]},
    {"query": "Allan Peiper is an <mask> cyclist .", "answers": ["Australian"]},
    {"query": "The Seine flows through <mask> .", "answers": ["Paris"]},
    {"query": "Marie Curie died in <mask> .", "answers": ["Passy"]},
    {"query": "Allan Peiper was born in <mask> , Victoria .", "answers": ["Alexandra"]},
    {"query": "Paris is the capital of <mask> .", "answers": ["France"]},
    {"query": "Marie Curie was born in Warsaw in <mask> .", "answers": ["1867"]},
]


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file of an index directory but its query model's."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and INDEX_QUERY_MODEL not in p.relative_to(root).parts
    }


def config(index: Path, tmp_path: Path, **kw) -> TuneConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    queries = write_jsonl(tmp_path / "queries.jsonl", QUERIES)
    settings = dict(
        index=index,
        out=tmp_path / "run",
        queries=queries,
        steps=25,
        minutes=None,
        batch_size=4,
        k=16,
        lr=1e-3,
        warmup_steps=0,
        device="cpu",
        save_minutes=10,
    )
    return TuneConfig(**(settings | kw))


def test_a_tiny_tune_raises_its_own_figure_and_leaves_the_index_as_it_was(tiny_index, fresh_copy, tmp_path):
    index = fresh_copy(tiny_index)
    before = file_hashes(index)
    cfg = config(index, tmp_path, steps=60, lr=3e-3, freeze_embeddings=False)
    tuner = Tuner(cfg)
    start = tuner.evaluate(tuner.train)
    tuner.dir.mkdir(parents=True)
    best = tuner.run()
    end = tuner.evaluate(tuner.train)
    assert end["loss"] < 0.7 * start["loss"], (start, end)
    assert end["start_top1"] + end["end_top1"] > start["start_top1"] + start["end_top1"]
    tuner.index.close()
    manifest = Manifest.load(index)
    card = read_card(best)
    assert card is not None and card.corpus_fingerprint == manifest.model.fingerprint and card.steps == 60
    assert file_hashes(index) == before  # no file of the index written


def test_the_tuned_model_is_paired_with_its_index(tiny_index, fresh_copy, tmp_path):
    index = fresh_copy(tiny_index)
    before = file_hashes(index)
    best = tune_queries(config(index, tmp_path, steps=2))
    fingerprint = Manifest.load(index).model.fingerprint
    assert resolve_query_model(index, fingerprint) == index / INDEX_QUERY_MODEL
    assert (index / INDEX_QUERY_MODEL / "model.safetensors").read_bytes() == (best / "model.safetensors").read_bytes()
    assert resolve_query_model(index, fingerprint, "off") is None
    assert file_hashes(index) == before


def test_a_query_model_of_another_encoder_is_refused_naming_both(tiny_index, fresh_copy, tmp_path):
    index = fresh_copy(tiny_index)
    tune_queries(config(index, tmp_path, steps=1))
    card_path = index / INDEX_QUERY_MODEL / CARD
    card = json.loads(card_path.read_text(encoding="utf-8"))
    card["corpus_fingerprint"] = "ab" * 32
    card_path.write_text(json.dumps(card), encoding="utf-8")
    fingerprint = Manifest.load(index).model.fingerprint
    with pytest.raises(AppError, match=rf"abababababab.*{fingerprint[:12]}"):
        resolve_query_model(index, fingerprint)
    with pytest.raises(AppError, match="query model for the corpus encoder abababababab"):
        Tuner(config(index, tmp_path / "again", init=index / INDEX_QUERY_MODEL))


def test_a_second_run_in_the_same_directory_needs_resume(tiny_index, fresh_copy, tmp_path):
    index = fresh_copy(tiny_index)
    tune_queries(config(index, tmp_path, steps=1, pair=False))
    with pytest.raises(AppError, match="pass --resume"):
        tune_queries(config(index, tmp_path, steps=1, pair=False))


def test_a_killed_run_resumes_with_the_same_command(tiny_index, fresh_copy, tmp_path):
    index = fresh_copy(tiny_index)
    queries = write_jsonl(tmp_path / "queries.jsonl", QUERIES)
    run = tmp_path / "run"
    command = [
        sys.executable, "-m", "training", "tune-queries", "--index", str(index), "--out", str(run),
        "--queries", str(queries), "--steps", "400", "--batch-size", "2", "--k", "16", "--device", "cpu",
        "--save-minutes", "0.005", "--no-pair", "--resume",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (run / "latest.json").is_file() and first.poll() is None:
            time.sleep(0.2)  # waits on the run's own checkpoint, however long it takes
        assert first.poll() is None, "the run ended before it could be killed"
        first.send_signal(signal.SIGKILL)
    finally:
        first.wait()
    killed_at = json.loads((run / "latest.json").read_text(encoding="utf-8"))["step"]
    assert killed_at < 400
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed checkpoint-{killed_at:06d} at step {killed_at}" in done.stderr
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert lines[-1]["final"] and lines[-1]["step"] == 400


def test_a_common_answer_of_a_queries_file_keeps_some_places_and_a_self_made_one_is_dropped(tiny_index):
    from indexer.phrase_index import PhraseIndex
    from training.occurrences import find_occurrences
    from training.tune_data import TuneQuery
    from training.tune_targets import Asked

    index = PhraseIndex(tiny_index)
    born = (2141,)  # "born": 3 places in the tiny corpus
    assert len(find_occurrences(index, [list(born)])[0]) == 3
    query = TuneQuery("He was <mask> in Warsaw .", (born,))
    kept = Asked(index, [query], max_occurrences=2, sample=True, seed=0)
    assert len(kept) == 1 and kept.starts[0].size == 2 and kept.ends[0].size == 2
    assert len(Asked(index, [query], max_occurrences=2)) == 0
    assert Asked(index, [query], max_occurrences=3).starts[0].size == 3
    index.close()

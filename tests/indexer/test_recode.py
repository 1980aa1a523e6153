"""`indexer recode`: an index's vectors coded anew from its stored vectors, no text encoded; every other array
copied byte for byte; resumable; refused with a message where it cannot run."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import indexer.recode as recode_module
from common.errors import AppError
from common.files import sha256_file
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.ann_codes import AnnCodes
from indexer.build import BuildConfig, build_index
from indexer.cli import app
from indexer.manifest import MANIFEST_NAME, Manifest
from indexer.phrase_index import PhraseIndex
from indexer.recode import RecodeConfig, run_recode
from indexer.update import DeleteConfig, run_delete
from tests.conftest import CORPUS, write_jsonl

CODES = "OPQ4,IVF4,PQ4"  # 8-bit PQ of the tiny BERT's 32 dimensions: 256 centroids need >= 256 tokens a shard
KEPT = (
    "token_ids.npy",
    "char_starts.npy",
    "char_lengths.npy",
    "block_chars.npy",
    "flags.npy",
    "blocks.npy",
    "docs.arrow",
)


@pytest.fixture(scope="module")
def int8_index(tmp_path_factory, tiny_bert_dir):
    """Two shards of >= 256 tokens with int8 stored vectors (Flat search)."""
    root = tmp_path_factory.mktemp("recode")
    docs = [
        {"id": f"r{i}-{d['id']}", "title": d.get("title", ""), "text": d["text"]} for i in range(14) for d in CORPUS
    ]
    out = root / "int8"
    build_index(
        BuildConfig(
            corpus=write_jsonl(root / "corpus.jsonl", docs),
            out=out,
            model=tiny_bert_dir,
            block_tokens=16,
            shard_tokens=400,
            index_type="flat",
            vector_dtype="int8",
            device="cpu",
            dtype="fp32",
        )
    )
    m = Manifest.load(out)
    assert len(m.shards) >= 2 and min(s.tokens for s in m.shards) >= 256
    return out


def test_recode_codes_the_vectors_anew_and_copies_every_other_array(int8_index, tmp_path):
    out = tmp_path / "codes"
    summary = run_recode(RecodeConfig(index=int8_index, out=out, index_type=CODES))
    src, m = Manifest.load(int8_index), Manifest.load(out)
    assert summary.recoded == summary.shards == len(m.shards) == len(src.shards)
    assert (m.vector_dtype, m.build.vector_dtype, m.index_type) == ("none", "none", CODES)
    assert (m.counts, m.model, m.similarity_scale) == (src.counts, src.model, src.similarity_scale)
    for new, old in zip(m.shards, src.shards):
        assert (new.factory, new.vector_dtype, new.tokens, new.token_base) == (
            CODES,
            "none",
            old.tokens,
            old.token_base,
        )
        assert "vectors.npy" not in new.files and "code_slots.npy" in new.files
        for name in (*KEPT, "docs.arrow"):
            assert sha256_file(out / new.name / name) == sha256_file(int8_index / old.name / name), name
    before, after = PhraseIndex(int8_index), PhraseIndex(out)
    try:
        for old_shard, new_shard in zip(before.shards, after.shards):
            assert isinstance(new_shard.vectors, AnnCodes)
            rows = np.arange(len(old_shard))
            q = old_shard.vectors[rows[:5]]
            exact, coded = old_shard.vectors.dot(rows, q), new_shard.vectors.dot(rows, q)
            assert np.corrcoef(exact.ravel(), coded.ravel())[0, 1] > 0.9  # codes of the same vectors
            own = coded.argmax(axis=0)  # each stored vector as a query: its own token scores near the top
            assert (coded[own, range(5)] - coded[rows[:5], range(5)]).max() < 0.35 * np.abs(exact).max()
        q = before.shards[0].vectors[np.array([3, 40])]
        for j, hits in enumerate(after.search_scored(q, 8)):  # its scores: the codes' products of those tokens
            for score, shard_no, pos in zip(*hits):
                shard = after.shards[list(after.numbers).index(shard_no)]
                assert np.isclose(score, shard.vectors.dot(np.array([pos]), q[j])[0], rtol=1e-4, atol=1e-4)
    finally:
        before.close()
        after.close()


def test_a_recoded_index_fills(int8_index, tmp_path, tiny_bert_dir):
    out = tmp_path / "codes"
    run_recode(RecodeConfig(index=int8_index, out=out, index_type=CODES))
    engine = FillEngine.open(EngineConfig(index=out, model=tiny_bert_dir, device="cpu", dtype="fp32"))
    try:
        for mode in ("dense", "hybrid", "restricted"):
            result = engine.fill(FillRequest(text="Marie Curie was born in <mask> .", mode=mode, evidence=1))
            assert result.masks[0].candidates, mode
    finally:
        engine.close()


def test_auto_recodes_small_shards_as_flat_with_the_vectors_the_build_indexed(int8_index, tmp_path):
    out = tmp_path / "flat"
    run_recode(RecodeConfig(index=int8_index, out=out))
    assert {s.factory for s in Manifest.load(out).shards} == {"Flat"}
    before, after = PhraseIndex(int8_index), PhraseIndex(out)
    try:
        n = len(before.shards[1])  # a Flat source's own float vectors (exact), as float16
        np.testing.assert_allclose(
            after.shards[1].vectors[np.arange(n)], before.shards[1].index.reconstruct_n(0, n), atol=2e-3
        )
    finally:
        before.close()
        after.close()


def test_an_interrupted_recode_resumes_with_the_finished_shards_kept(int8_index, tmp_path, monkeypatch):
    out = tmp_path / "codes"
    real, calls = recode_module._recode_shard, []

    def stop_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(recode_module, "_recode_shard", stop_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_recode(RecodeConfig(index=int8_index, out=out, index_type=CODES))
    assert not (out / MANIFEST_NAME).exists() and (out / "shard_00000" / "shard.json").is_file()
    first = (out / "shard_00000" / "index.faiss").stat().st_mtime_ns
    monkeypatch.setattr(recode_module, "_recode_shard", real)
    summary = run_recode(RecodeConfig(index=int8_index, out=out, index_type=CODES))
    assert summary.recoded == summary.shards - 1
    assert (out / "shard_00000" / "index.faiss").stat().st_mtime_ns == first
    PhraseIndex(out).close()  # opens: every file as its manifest says


def test_recode_refuses_what_it_cannot_do_with_the_fix_named(int8_index, tmp_path):
    with pytest.raises(AppError, match="is the index itself"):
        run_recode(RecodeConfig(index=int8_index, out=int8_index))
    with pytest.raises(AppError, match="--index-type hnsw cannot score"):
        run_recode(RecodeConfig(index=int8_index, out=tmp_path / "h", index_type="hnsw"))
    done = tmp_path / "done"
    run_recode(RecodeConfig(index=int8_index, out=done))
    with pytest.raises(AppError, match="already holds a finished index"):
        run_recode(RecodeConfig(index=int8_index, out=done))
    changed = tmp_path / "changed"
    run_recode(RecodeConfig(index=int8_index, out=changed, vector_dtype="int8", index_type="flat"))
    run_delete(DeleteConfig(index=changed, ids=["r0-d1"]))
    with pytest.raises(AppError, match="indexer compact --index"):
        run_recode(RecodeConfig(index=changed, out=tmp_path / "after_delete"))


def test_the_command_line_recodes(int8_index, tmp_path):
    out = tmp_path / "cli"
    done = CliRunner().invoke(app, ["recode", "--index", str(int8_index), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "recoded" in done.output and Manifest.load(out).vector_dtype == "none"


def test_a_build_without_stored_vectors_keeps_none_and_fills(tmp_path, tiny_bert_dir):
    out = tmp_path / "none"
    build_index(
        BuildConfig(
            corpus=write_jsonl(tmp_path / "c.jsonl", CORPUS),
            out=out,
            model=tiny_bert_dir,
            block_tokens=16,
            shard_tokens=30,
            vector_dtype="none",
            device="cpu",
            dtype="fp32",
        )
    )
    m = Manifest.load(out)
    assert m.vector_dtype == "none" and len(m.shards) >= 2
    assert all(s.factory == "Flat" and not {"vectors.npy", "scales.npy"} & set(s.files) for s in m.shards)
    engine = FillEngine.open(EngineConfig(index=out, model=tiny_bert_dir, device="cpu", dtype="fp32"))
    try:
        assert all(isinstance(s.vectors, AnnCodes) for s in engine.index.shards)
        for mode in ("dense", "hybrid", "restricted"):
            assert engine.fill(FillRequest(text="Marie Curie was born in <mask> .", mode=mode)).masks[0].candidates
    finally:
        engine.close()

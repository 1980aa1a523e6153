"""End-to-end tests of indexer.build: round trip through PhraseIndex, resume, refusal, int8, GPU path, templates
(a damaged index: test_integrity.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from common.errors import AppError
from common.files import sha256_file
from corpus.tokens import WORD_START, tokenize_documents
from encoder.model import BlockInput, Encoder
from indexer.build import BuildConfig, ResolvedBuild, build_index
from indexer.checksums import SUMS_FILE
from indexer.manifest import MANIFEST_NAME, Manifest
from indexer.phrase_index import PhraseIndex
from indexer.shard import SHARD_FILES
from tests.conftest import CORPUS

BLOCK_TOKENS = 16
SHARD_TOKENS = 30
TITLE_TOKENS = 4


def _config(corpus: Path, out: Path, model: Path, **kw) -> BuildConfig:
    args = dict(
        corpus=corpus,
        out=out,
        model=model,
        block_tokens=BLOCK_TOKENS,
        shard_tokens=SHARD_TOKENS,
        title_tokens=TITLE_TOKENS,
        device="cpu",
        dtype="fp32",
        batch_tokens=64,
        vector_dtype="float16",
    )
    args.update(kw)
    return BuildConfig(**args)


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tiny_roberta_dir) -> dict[str, Path]:
    return {"bert": tiny_bert_dir, "roberta": tiny_roberta_dir}


@pytest.fixture(scope="module")
def encoders(model_dirs) -> dict[str, Encoder]:
    return {k: Encoder(d, device="cpu", dtype="fp32") for k, d in model_dirs.items()}


@pytest.fixture(scope="module", params=["bert", "roberta"])
def built(request, tmp_path_factory, tiny_corpus, model_dirs, encoders):
    """(name, index dir, summary, opened PhraseIndex) for each tiny model."""
    which = request.param
    out = tmp_path_factory.mktemp(f"build_{which}") / "idx"
    summary = build_index(_config(tiny_corpus, out, model_dirs[which]))
    index = PhraseIndex(out, verify=True)
    yield which, out, summary, index
    index.close()


def _corpus_tokens(tokenizer) -> list[list[int]]:
    return [tokenizer(r["text"], add_special_tokens=False)["input_ids"] for r in CORPUS]


def _shard_hashes(out: Path) -> dict[str, str]:
    names = {*SHARD_FILES, "vectors.npy"}
    return {f"{p.parent.name}/{p.name}": sha256_file(p) for p in sorted(out.glob("shard_*/*")) if p.name in names}


# ---------------------------------------------------------------- round trip


def test_counts(built, encoders):
    which, out, summary, index = built
    m = index.manifest
    tokens = _corpus_tokens(encoders[which].tokenizer)
    n_tokens = sum(len(t) for t in tokens)
    assert n_tokens > SHARD_TOKENS * 1.5
    assert m.counts.tokens == n_tokens == summary.tokens == index.total_tokens
    assert m.counts.documents == len(CORPUS) == summary.documents
    assert m.counts.empty_documents == sum(1 for r in CORPUS if not r["text"]) == summary.empty_documents == 1
    assert m.counts.shards == len(m.shards) == len(index.shards) == summary.shards >= 2
    assert m.counts.blocks == sum(s.blocks for s in m.shards) == summary.blocks
    assert m.counts.tokens == sum(s.tokens for s in m.shards)
    assert summary.encoded_tokens == n_tokens
    assert m.dim == encoders[which].dim
    assert m.similarity_scale == pytest.approx(1 / np.sqrt(m.dim))
    assert m.model.model_type == which
    assert m.model.mask_token == encoders[which].tokenizer.mask_token
    assert m.build.block_tokens == BLOCK_TOKENS and m.build.shard_tokens == SHARD_TOKENS
    assert m.corpus["format"] == "jsonl"
    line = summary.line()
    for word in ("documents", "blocks", "tokens", "shards"):
        assert word in line


def test_shard_bases_and_sizes(built):
    _, _, _, index = built
    token_base = block_base = 0
    for number, (info, shard) in enumerate(zip(index.manifest.shards, index.shards)):
        assert info.name == f"shard_{number:05d}"
        assert info.token_base == token_base and info.block_base == block_base
        assert info.tokens <= SHARD_TOKENS or info.blocks == 1
        assert shard.vectors.shape == (info.tokens, index.manifest.dim)
        assert shard.vectors.dtype == info.vector_dtype == "float16"
        assert shard.vectors.data.dtype == np.float16
        assert shard.token_ids.shape == (info.tokens,) and shard.flags.shape == (info.tokens,)
        assert shard.offsets.shape == (info.tokens, 2)
        assert shard.blocks.shape == (info.blocks, 3)
        assert shard.docs.num_rows == info.documents
        token_base += info.tokens
        block_base += info.blocks


def test_checksums_match_manifest(built):
    _, out, _, index = built
    for info in index.manifest.shards:
        assert set(info.files) == {*SHARD_FILES, "vectors.npy", SUMS_FILE}  # float16 vectors stored
        on_disk = json.loads((out / info.name / "shard.json").read_text())
        for fname, rec in info.files.items():
            path = out / info.name / fname
            assert rec.sha256 == sha256_file(path)
            assert rec.bytes == path.stat().st_size
            assert on_disk["files"][fname]["sha256"] == rec.sha256


def test_blocks_never_cross_documents(built, encoders):
    which, _, _, index = built
    tok = encoders[which].tokenizer
    texts = {r["id"]: r["text"] for r in CORPUS}
    got_ids: dict[str, list[int]] = {}
    got_offsets: dict[str, list[list[int]]] = {}
    got_flags: dict[str, list[int]] = {}
    order: list[str] = []
    for shard in index.shards:
        ends = []
        for row, a, b in shard.blocks.tolist():
            assert 1 <= b - a <= BLOCK_TOKENS
            ends.append((a, b))
            doc_id = shard.doc_id(row)
            assert shard.doc_text(row) == texts[doc_id]
            if not order or order[-1] != doc_id:
                assert doc_id not in order  # a document's blocks are consecutive
                order.append(doc_id)
            assert int(shard.flags[a]) & WORD_START  # blocks start at a word start (no giant words here)
            got_ids.setdefault(doc_id, []).extend(shard.token_ids[a:b].tolist())
            got_offsets.setdefault(doc_id, []).extend(shard.offsets[a:b].tolist())
            got_flags.setdefault(doc_id, []).extend(shard.flags[a:b].tolist())
        # the blocks tile the shard's tokens
        assert ends[0][0] == 0 and ends[-1][1] == len(shard)
        assert all(b1 == a2 for (_, b1), (a2, _) in zip(ends, ends[1:]))
    full = tokenize_documents(tok, [r["text"] for r in CORPUS])
    assert order == [r["id"] for r in CORPUS if r["text"]]
    for r, dt in zip(CORPUS, full):
        if not r["text"]:
            assert r["id"] not in got_ids
            continue
        assert got_ids[r["id"]] == dt.ids.tolist()
        assert got_offsets[r["id"]] == dt.offsets.tolist()
        assert got_flags[r["id"]] == dt.flags.tolist()


def test_offsets_point_at_the_token_text(built, encoders):
    which, _, _, index = built
    tok = encoders[which].tokenizer
    checked = 0
    for shard in index.shards:
        for row, a, b in shard.blocks.tolist():
            text = shard.doc_text(row)
            for tid, (s, e) in zip(shard.token_ids[a:b].tolist(), shard.offsets[a:b].tolist()):
                assert 0 <= s < e <= len(text)
                piece = tok.convert_ids_to_tokens(tid)
                piece = piece[2:] if piece.startswith("##") else piece.lstrip("Ġ")
                assert piece.lower() == text[s:e].lower(), (piece, text[s:e])
                checked += 1
    assert checked == index.total_tokens


def test_vectors_equal_encoder_recomputed(built, encoders):
    which, _, _, index = built
    enc = encoders[which]
    for shard in index.shards:
        for row, a, b in shard.blocks.tolist():
            title = shard.docs.column("title")[row].as_py()
            prefix = None
            if title:
                prefix = np.asarray(
                    enc.tokenizer(title, add_special_tokens=False)["input_ids"][:TITLE_TOKENS], dtype=np.int32
                )
            (ref,) = enc.encode_blocks([BlockInput(np.asarray(shard.token_ids[a:b]), prefix_ids=prefix)])
            stored = np.asarray(shard.vectors[a:b], dtype=np.float32)
            np.testing.assert_allclose(stored, ref, atol=1e-2, rtol=1e-2)


def test_title_is_used_as_context(built, encoders):
    """The stored vectors of a titled block differ from the same block encoded without its title."""
    which, _, _, index = built
    enc = encoders[which]
    shard = index.shards[0]
    row, a, b = shard.blocks[0].tolist()
    assert shard.docs.column("title")[row].as_py()
    (plain,) = enc.encode_blocks([BlockInput(np.asarray(shard.token_ids[a:b]))])
    assert not np.allclose(np.asarray(shard.vectors[a:b], dtype=np.float32), plain, atol=1e-2)


def test_faiss_matches_brute_force(built):
    _, _, _, index = built
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((5, index.manifest.dim)).astype(np.float32)
    all_scores = []
    for shard in index.shards:
        assert shard.index.ntotal == len(shard)
        vecs = np.asarray(shard.vectors, dtype=np.float32)
        brute = queries @ vecs.T
        scores, ids = shard.index.search(queries, len(shard))
        assert (ids >= 0).all()
        np.testing.assert_allclose(scores, np.take_along_axis(brute, ids, axis=1), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(scores, -np.sort(-brute, axis=1), atol=1e-4, rtol=1e-4)
        assert (ids[:, 0] == brute.argmax(axis=1)).all()
        all_scores.append(brute)
    # the merged search over shards finds the global top-k
    k = 7
    brute = np.concatenate(all_scores, axis=1)
    where = [(s, p) for s, shard in enumerate(index.shards) for p in range(len(shard))]
    for qi, (sh, pos) in enumerate(index.search(queries, k)):
        assert len(sh) == k
        expect = {where[j] for j in np.argsort(-brute[qi])[:k]}
        assert set(zip(sh.tolist(), pos.tolist())) == expect


def test_index_ntotal_equals_tokens(built):
    _, _, _, index = built
    assert sum(s.index.ntotal for s in index.shards) == index.total_tokens


# ---------------------------------------------------------------- resume, refusal, overwrite


def test_resume_after_interruption(tmp_path, tiny_corpus, tiny_bert_dir):
    out = tmp_path / "idx"
    first = build_index(_config(tiny_corpus, out, tiny_bert_dir))
    m1 = Manifest.load(out)
    hashes = _shard_hashes(out)
    assert first.shards >= 2 and len(hashes) == first.shards * (len(SHARD_FILES) + 1)

    last = m1.shards[-1]
    (out / MANIFEST_NAME).unlink()
    shutil.rmtree(out / last.name)
    with pytest.raises(AppError):
        PhraseIndex(out)

    second = build_index(_config(tiny_corpus, out, tiny_bert_dir))
    m2 = Manifest.load(out)
    assert second.encoded_tokens == last.tokens  # only the missing shard was encoded again
    assert m2.counts == m1.counts
    assert [s.model_dump() for s in m2.shards] == [s.model_dump() for s in m1.shards]
    d1, d2 = m1.model_dump(), m2.model_dump()
    for d in (d1, d2):  # the time of each build, and the checksum that covers it
        d.pop("created_at"), d.pop("checksum")
    assert d1 == d2
    assert _shard_hashes(out) == hashes
    assert (second.documents, second.blocks, second.tokens, second.shards) == (
        first.documents,
        first.blocks,
        first.tokens,
        first.shards,
    )
    PhraseIndex(out, verify=True).close()


def test_rebuild_same_config_encodes_nothing(tmp_path, tiny_corpus, tiny_bert_dir):
    out = tmp_path / "idx"
    first = build_index(_config(tiny_corpus, out, tiny_bert_dir))
    hashes = _shard_hashes(out)
    again = build_index(_config(tiny_corpus, out, tiny_bert_dir))
    assert again.encoded_tokens == 0
    assert again.tokens == first.tokens and again.shards == first.shards
    assert _shard_hashes(out) == hashes


def test_different_config_refused_then_overwritten(tmp_path, tiny_corpus, tiny_bert_dir):
    out = tmp_path / "idx"
    build_index(_config(tiny_corpus, out, tiny_bert_dir))
    before = _shard_hashes(out)
    manifest_before = (out / MANIFEST_NAME).read_text()
    with pytest.raises(AppError, match="--overwrite"):
        build_index(_config(tiny_corpus, out, tiny_bert_dir, block_tokens=8))
    # nothing was touched by the refused build
    assert _shard_hashes(out) == before
    assert (out / MANIFEST_NAME).read_text() == manifest_before

    summary = build_index(_config(tiny_corpus, out, tiny_bert_dir, block_tokens=8, shard_tokens=1000, overwrite=True))
    assert summary.shards == 1
    index = PhraseIndex(out, verify=True)
    try:
        assert index.manifest.build.block_tokens == 8
        assert index.manifest.counts.shards == 1
        assert sorted(p.name for p in out.glob("shard_*")) == ["shard_00000"]
        assert all(b - a <= 8 for _, a, b in index.shards[0].blocks.tolist())
    finally:
        index.close()


def test_other_model_refused(tmp_path, tiny_corpus, tiny_bert_dir, tiny_roberta_dir):
    out = tmp_path / "idx"
    build_index(_config(tiny_corpus, out, tiny_bert_dir))
    with pytest.raises(AppError, match="--overwrite"):
        build_index(_config(tiny_corpus, out, tiny_roberta_dir))


def test_out_dir_with_foreign_files_refused(tmp_path, tiny_corpus, tiny_bert_dir):
    out = tmp_path / "idx"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(AppError, match=re.escape(str(out))):
        build_index(_config(tiny_corpus, out, tiny_bert_dir))
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_block_tokens_beyond_model_limit_refused(tmp_path, tiny_corpus, tiny_bert_dir):
    with pytest.raises(AppError, match="--block-tokens"):
        build_index(_config(tiny_corpus, tmp_path / "idx", tiny_bert_dir, block_tokens=127, title_tokens=0))
    assert not (tmp_path / "idx").exists()


def test_resolved_build_derives_everything_once(tmp_path, tiny_corpus, encoders):
    """One resolution: the index type checked, the encoder's facts, the identity settings and the manifest's
    records of the model and the build (the job's own --overwrite left out)."""
    enc = encoders["bert"]
    cfg = _config(tiny_corpus, tmp_path / "idx", enc.model_dir, index_type="FLAT", batch_tokens=None, overwrite=True)
    resolved = ResolvedBuild.resolve(cfg, enc, "jsonl")
    assert resolved.config.index_type == "flat" and cfg.index_type == "FLAT"
    assert (resolved.dim, resolved.dtype, resolved.engine) == (enc.dim, "float32", enc.engine)
    assert resolved.fingerprint == enc.fingerprint == resolved.model.fingerprint
    assert resolved.batch_tokens == 2048  # the CPU default
    assert resolved.model.model_type == "bert" and resolved.model.vocab_size == len(enc.tokenizer)
    assert resolved.identity_settings == {
        "block_tokens": BLOCK_TOKENS,
        "shard_tokens": SHARD_TOKENS,
        "title_tokens": TITLE_TOKENS,
        "index_type": "flat",
        "memory_budget": None,
        "vector_dtype": "float16",
        "dtype": "float32",
        "engine": enc.engine,
    }
    assert "overwrite" not in resolved.settings.model_dump() and resolved.settings.index_type == "flat"
    assert ResolvedBuild.resolve(cfg.model_copy(update={"batch_tokens": 64}), enc, "jsonl").batch_tokens == 64


def test_resolved_build_refuses_a_bad_config(tmp_path, tiny_corpus, encoders):
    enc = encoders["bert"]
    with pytest.raises(AppError, match="--index-type 'nonsense'"):
        ResolvedBuild.resolve(_config(tiny_corpus, tmp_path, enc.model_dir, index_type="nonsense"), enc, "jsonl")
    with pytest.raises(AppError, match="--block-tokens 127 plus 4 title tokens"):
        ResolvedBuild.resolve(_config(tiny_corpus, tmp_path, enc.model_dir, block_tokens=127), enc, "jsonl")


def test_the_manifest_is_written_from_the_resolved_build(built, tiny_corpus, encoders):
    which, out, _, index = built
    cfg = _config(tiny_corpus, out, encoders[which].model_dir)
    resolved = ResolvedBuild.resolve(cfg, encoders[which], "jsonl")
    m = index.manifest
    assert (m.model, m.build, m.dim, m.index_type) == (resolved.model, resolved.settings, resolved.dim, "auto")
    again = resolved.manifest(m.counts, m.shards, m.bm25)
    assert again.model_dump(exclude={"created_at", "checksum"}) == m.model_dump(exclude={"created_at", "checksum"})


def test_all_empty_corpus_refused(tmp_path, tiny_bert_dir):
    corpus = tmp_path / "empty_docs.jsonl"
    corpus.write_text('{"text": ""}\n{"text": "  "}\n')
    with pytest.raises(AppError, match=re.escape(str(corpus))):
        build_index(_config(corpus, tmp_path / "idx", tiny_bert_dir))


def test_int8_vectors_match_float16_build(built, tmp_path, tiny_corpus, model_dirs):
    """An int8 build stores codes + scales that decode to the float16 build's vectors within a step."""
    which, out16, _, index16 = built
    out8 = tmp_path / "int8"
    build_index(_config(tiny_corpus, out8, model_dirs[which], vector_dtype="int8"))
    index8 = PhraseIndex(out8, verify=True)
    assert index8.manifest.vector_dtype == "int8"
    for s8, s16 in zip(index8.shards, index16.shards):
        assert s8.info.vector_dtype == "int8" and "scales.npy" in s8.info.files
        assert s8.vectors.data.dtype == np.int8
        assert s8.vectors.data.nbytes * 2 == s16.vectors.data.nbytes
        rows = np.arange(len(s16))
        v16, v8 = s16.vectors[rows], s8.vectors[rows]
        step = np.abs(v16).max(axis=1, keepdims=True) / 127
        assert (np.abs(v8 - v16) <= step * 0.51 + 1e-3).all()
    index8.close()


def test_gpu_path_build(monkeypatch, caplog, built, tmp_path, tiny_corpus, model_dirs):
    """With the device check reporting a GPU (the CPU stands in), the build encodes in fp16 and says so."""
    import torch

    import encoder.device as device_mod

    which, _, _, index32 = built
    monkeypatch.setattr(device_mod, "accelerator", lambda local_rank=0: torch.device("cpu"))
    out = tmp_path / "gpu"
    with caplog.at_level("INFO"):
        build_index(_config(tiny_corpus, out, model_dirs[which], device="auto", dtype="auto"))
    assert "GPU path" in caplog.text and "float16" in caplog.text
    index = PhraseIndex(out, verify=True)
    assert index.manifest.counts == index32.manifest.counts
    for gpu_shard, ref_shard in zip(index.shards, index32.shards):
        rows = np.arange(len(ref_shard))
        a, b = gpu_shard.vectors[rows].astype(np.float32), ref_shard.vectors[rows].astype(np.float32)
        assert np.array_equal(gpu_shard.token_ids, ref_shard.token_ids)
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cos.min() > 0.99
    index.close()


def _centroids(index_dir: Path, number: int) -> np.ndarray:
    import faiss

    index = faiss.read_index(str(index_dir / f"shard_{number:05d}" / "index.faiss"))
    ivf = faiss.extract_index_ivf(index)  # a view into `index`, which must stay alive
    return faiss.downcast_index(ivf.quantizer).reconstruct_n(0, ivf.nlist).copy()


def test_shards_share_one_trained_template(tmp_path, tiny_corpus, tiny_bert_dir):
    """IVF centroids are trained once, on the first shard, and copied by the later shards of the same factory."""
    out = tmp_path / "ivf"
    build_index(_config(tiny_corpus, out, tiny_bert_dir, index_type="IVF2,Flat"))
    index = PhraseIndex(out, verify=True)
    full = [s.info.name for s in index.shards if s.info.factory == "IVF2,Flat"]
    assert len(full) >= 3
    assert sorted(p.name for p in (out / "trained").iterdir()) == ["IVF2_Flat.faiss"]
    for number in range(1, len(full)):
        assert np.array_equal(_centroids(out, number), _centroids(out, 0))
    index.close()
    # the first shard on disk but its template gone: a resumed build trains the missing shard itself, no hang
    shutil.rmtree(out / "trained")
    shutil.rmtree(out / "shard_00001")
    (out / MANIFEST_NAME).unlink()
    build_index(_config(tiny_corpus, out, tiny_bert_dir, index_type="IVF2,Flat"))
    assert PhraseIndex(out, verify=True).manifest.counts.shards == len(full)

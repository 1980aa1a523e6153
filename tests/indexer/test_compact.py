"""`indexer compact` folds delta shards and tombstones into regular shards equal to a fresh build of the same
documents: the same shard boundaries and files (byte for byte with exact shards), the same BM25 blocks and scores,
the same fills; shards before the first change are kept as they are."""

from __future__ import annotations

import numpy as np
import pytest

from common.files import sha256_file
from corpus.readers import Document
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.build import BuildConfig, build_index
from indexer.compact import CompactConfig, run_compact
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex
from indexer.update import DeleteConfig, IndexUpdate, run_delete
from tests.conftest import CORPUS, write_jsonl

ADDED = [
    {
        "id": "n1",
        "title": "Vexmoor",
        "text": "Vexmoor is a harbour town. Its lighthouse was built in 1888 by Ilse Varga.",
    },
    {"id": "d3", "title": "", "text": "Marie Curie was born in Warsaw. She won two Nobel prizes."},
    {"id": "n2", "title": "Tarn", "text": "The Tarn flows through Albi."},
]
QUERIES = ["Marie Curie was born in <mask> .", "The <mask> flows through Albi .", "Vexmoor is a <mask> town ."]


def _build(corpus, out, model, vector_dtype):
    build_index(
        BuildConfig(
            corpus=corpus,
            out=out,
            model=model,
            block_tokens=16,
            shard_tokens=30,
            vector_dtype=vector_dtype,
            index_type="flat",
            device="cpu",
            dtype="fp32",
        )
    )


def _files(root):
    m = Manifest.load(root)
    return [
        (
            s.tokens,
            s.blocks,
            s.token_base,
            s.block_base,
            s.factory,
            {f: sha256_file(root / s.name / f) for f in s.files},
        )
        for s in m.shards
    ]


def _fills(root, model):
    engine = FillEngine.open(EngineConfig(index=root, model=model, device="cpu", dtype="fp32"))
    try:
        return [
            engine.fill(FillRequest(text=q, mode=mode, evidence=3)).model_dump(exclude={"took_ms", "timings_ms"})
            for q in QUERIES
            for mode in ("dense", "restricted", "hybrid")
        ]
    finally:
        engine.close()


@pytest.mark.parametrize("vector_dtype", ["int8", "float16"])
def test_a_compacted_index_equals_a_fresh_build_of_its_documents(tmp_path, tiny_bert_dir, vector_dtype):
    _build(write_jsonl(tmp_path / "corpus.jsonl", CORPUS), tmp_path / "idx", tiny_bert_dir, vector_dtype)
    root = tmp_path / "idx"
    IndexUpdate(root, model=tiny_bert_dir, device="cpu", dtype="fp32").add(
        [Document(i, r["id"], r["title"], r["text"]) for i, r in enumerate(ADDED)]
    )  # d3 replaced
    run_delete(DeleteConfig(index=root, ids=["d1"]))  # the first shard's first document: a shard boundary moves
    summary = run_compact(CompactConfig(index=root))
    assert summary.dropped_documents == 2 and summary.shards_after < summary.shards_before
    # the same documents, in index order: the build's live ones, then the added ones
    live = [r for r in CORPUS if r["id"] not in ("d1", "d3")] + ADDED
    _build(write_jsonl(tmp_path / "live.jsonl", live), tmp_path / "fresh", tiny_bert_dir, vector_dtype)
    compacted, fresh = Manifest.load(root), Manifest.load(tmp_path / "fresh")
    assert compacted.tombstones is None and all(s.bm25 is None for s in compacted.shards)
    assert compacted.counts == fresh.counts
    assert _files(root) == _files(tmp_path / "fresh")  # every shard file, byte for byte
    a, b = PhraseIndex(root, verify=True), PhraseIndex(tmp_path / "fresh")
    try:
        for text in ("Marie Curie Warsaw", "Tarn Albi Seine", "capital of France"):
            got, want = a.bm25.search_scored(text, 10), b.bm25.search_scored(text, 10)
            assert np.array_equal(got[0], want[0]) and np.allclose(got[1], want[1], rtol=1e-12)
    finally:
        a.close()
        b.close()
    assert _fills(root, tiny_bert_dir) == _fills(tmp_path / "fresh", tiny_bert_dir)


def test_compact_keeps_the_shards_before_the_first_change(tiny_index, fresh_copy, tiny_bert_dir):
    root = fresh_copy(tiny_index)
    before = Manifest.load(root)
    run_delete(DeleteConfig(index=root, ids=["d3"]))  # the last documents: the first shards stay
    run_compact(CompactConfig(index=root))
    after = Manifest.load(root)
    kept = [s for s in after.shards if s.name in {b.name for b in before.shards}]
    assert kept and kept == before.shards[: len(kept)]
    assert after.generation == 2 and after.bm25_name == "bm25_000002.sqlite"
    PhraseIndex(root, verify=True).close()


def test_compact_without_changes_does_nothing(tiny_index, fresh_copy):
    root = fresh_copy(tiny_index)
    before = (root / "manifest.json").read_bytes()
    assert "nothing to compact" in run_compact(CompactConfig(index=root)).line()
    assert (root / "manifest.json").read_bytes() == before

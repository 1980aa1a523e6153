"""`indexer merge`: two builds of halves of a corpus joined into one index serve the fills of one build of the
whole corpus (same phrases, order and evidence; scores equal to 1e-6: the builds encoded in other batches); no
vector is copied (hard links); mismatched or updated inputs are refused
naming the input and the fix; an interrupted merge leaves no index."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from common.errors import AppError
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.build import BuildConfig, build_index
from indexer.manifest import Manifest
from indexer.merge import MergeConfig, merge_indexes
from indexer.phrase_index import PhraseIndex
from indexer.update import DeleteConfig, run_delete
from tests.conftest import CORPUS, write_jsonl

ONE_SHARD = 10**6


def same(a, b) -> bool:
    """Equal JSON values, floats within 1e-6 (separate builds encode in other batches: last bits differ)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture(scope="module")
def halves(tmp_path_factory, tiny_bert_dir):
    """Builds of the corpus's two halves, and one build of the whole (one shard each)."""
    tmp = tmp_path_factory.mktemp("merge")
    out = {}
    for name, rows in (("a", CORPUS[:2]), ("b", CORPUS[2:]), ("whole", CORPUS)):
        corpus = write_jsonl(tmp / f"{name}.jsonl", rows)
        out[name] = tmp / name
        build_index(
            BuildConfig(corpus=corpus, out=out[name], model=tiny_bert_dir, block_tokens=16, shard_tokens=ONE_SHARD)
        )
    return out


def test_a_merged_index_fills_as_one_build_of_the_whole_corpus(halves, tmp_path):
    merged = tmp_path / "merged"
    summary = merge_indexes(MergeConfig(out=merged, inputs=[halves["a"], halves["b"]]))
    m, whole = Manifest.load(merged), Manifest.load(halves["whole"])
    assert (summary.shards, m.counts.documents, m.counts.tokens, m.counts.blocks) == (
        2,
        whole.counts.documents,
        whole.counts.tokens,
        whole.counts.blocks,
    )
    assert [s.block_base for s in m.shards] == [0, Manifest.load(halves["a"]).counts.blocks]
    PhraseIndex(merged, verify=True).close()  # every file matches its sha256
    a = halves["a"] / "shard_00000" / "token_ids.npy"
    assert os.stat(merged / "shard_00000" / "token_ids.npy").st_ino == os.stat(a).st_ino  # linked, not copied
    assert json.loads((merged / "shard_00001" / "shard.json").read_text())["name"] == "shard_00001"
    one, joined = FillEngine.open(EngineConfig(index=halves["whole"])), FillEngine.open(EngineConfig(index=merged))
    compared = 0
    for text in (
        "Allan Peiper was born in <mask> .",
        "Marie Curie died in <mask> .",
        "The <mask> flows through Paris.",
    ):
        for mode in ("dense", "hybrid", "restricted"):
            request = FillRequest(text=text, mode=mode, top_k=5, evidence=3)
            want = one.fill(request).model_dump(exclude={"took_ms", "timings_ms"})
            got = joined.fill(request).model_dump(exclude={"took_ms", "timings_ms"})
            assert same(got, want), (text, mode, got, want)
            compared += bool(want["masks"][0]["candidates"])
    assert compared >= 6


@pytest.mark.slow  # starts a process
def test_the_command_line_merges_and_refuses_an_existing_output(halves, tmp_path):
    merged = tmp_path / "cli"
    cmd = [sys.executable, "-m", "indexer", "merge", "--out", str(merged), str(halves["a"]), str(halves["b"])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "merged 2 indexes" in done.stdout and Manifest.load(merged).counts.shards == 2
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and f"{merged} exists" in again.stderr and "Traceback" not in again.stderr


def test_mismatched_inputs_are_refused_naming_them(halves, tmp_path, tiny_roberta_dir):
    other = tmp_path / "roberta"
    build_index(
        BuildConfig(
            corpus=write_jsonl(tmp_path / "c.jsonl", CORPUS[:2]),
            out=other,
            model=tiny_roberta_dir,
            block_tokens=16,
            shard_tokens=ONE_SHARD,
        )
    )
    with pytest.raises(AppError, match=f"{other} differs from .* in model.fingerprint"):
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[halves["a"], other]))
    with pytest.raises(AppError, match="at least two"):
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[halves["a"]]))
    with pytest.raises(AppError, match="given twice"):
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[halves["a"], halves["a"]]))
    assert not (tmp_path / "x").exists()


def test_an_updated_input_must_be_compacted_first(halves, tmp_path, fresh_copy):
    updated = fresh_copy(halves["b"])
    run_delete(DeleteConfig(index=updated, ids=[CORPUS[2]["id"]]))
    with pytest.raises(AppError, match=f"indexer compact --index {updated}"):
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[halves["a"], updated]))


def test_different_templates_are_refused(halves, tmp_path, fresh_copy):
    a, b = fresh_copy(halves["a"]), fresh_copy(halves["b"])
    for root, content in ((a, b"one"), (b, b"two")):
        (root / "trained").mkdir(exist_ok=True)
        (root / "trained" / "IVF2_Flat.faiss").write_bytes(content)
    with pytest.raises(AppError, match="another FAISS template .*trained/IVF2_Flat.faiss differs"):
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[a, b]))


def test_an_interrupted_merge_leaves_no_index_and_a_new_run_finishes(halves, tmp_path, monkeypatch):
    import indexer.merge as merge

    out = tmp_path / "m"
    monkeypatch.setattr(merge, "build_bm25", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        merge_indexes(MergeConfig(out=out, inputs=[halves["a"], halves["b"]]))
    assert not out.exists() and (tmp_path / "m.partial").exists()
    monkeypatch.undo()
    merge_indexes(MergeConfig(out=out, inputs=[halves["a"], halves["b"]]))
    assert Manifest.load(out).counts.shards == 2 and not (tmp_path / "m.partial").exists()


def test_builds_seeded_with_one_template_merge_into_one_ivf_index(tmp_path, tiny_bert_dir):
    """The documented recipe (docs/OPERATIONS.md, "Beyond one machine"): the second build's output directory gets the
    first's trained/ before it starts, so
    both use one template (not retrained) and the merge accepts them."""
    import shutil

    first, second = tmp_path / "one", tmp_path / "two"
    settings = dict(model=tiny_bert_dir, block_tokens=16, shard_tokens=30, index_type="IVF2,Flat")
    build_index(BuildConfig(corpus=write_jsonl(tmp_path / "1.jsonl", CORPUS[:2]), out=first, **settings))
    second.mkdir()
    shutil.copytree(first / "trained", second / "trained")
    seeded = (second / "trained" / "IVF2_Flat.faiss").read_bytes()
    build_index(BuildConfig(corpus=write_jsonl(tmp_path / "2.jsonl", CORPUS[2:]), out=second, **settings))
    assert (second / "trained" / "IVF2_Flat.faiss").read_bytes() == seeded  # used, not trained again
    merged = tmp_path / "merged"
    merge_indexes(MergeConfig(out=merged, inputs=[first, second]))
    index = PhraseIndex(merged, verify=True)
    assert len(index.shards) == Manifest.load(first).counts.shards + Manifest.load(second).counts.shards
    assert index._lists is not None  # one set of IVF lists: every shard shares the query's assignment
    index.close()

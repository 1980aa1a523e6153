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


def test_ids_held_by_two_inputs_are_refused_naming_them(halves, tmp_path):
    """a (d1, d2) and whole (d1, d2, d3): merged, d1 and d2 would each be served twice (issue 86)."""
    with pytest.raises(AppError) as info:
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[halves["a"], halves["whole"]]))
    message = info.value.message
    assert message.startswith("2 document id(s) are held by more than one input"), message
    assert f"'d1' (in {halves['a']}, {halves['whole']})" in message and "'d2'" in message and "'d3'" not in message
    assert "--on-duplicate keep-first" in message and "indexer delete --index" in message
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()


def test_a_document_in_several_shards_of_one_input_is_no_duplicate(halves, tiny_index, tmp_path):
    """tiny_index (3 shards over the whole corpus: a document crosses a shard's end) and b (d3, d4): only d3."""
    m = Manifest.load(tiny_index)
    assert sum(s.documents for s in m.shards) > m.counts.documents - m.counts.empty_documents  # rows in two shards
    with pytest.raises(AppError, match=r"^1 document id\(s\) are held .*'d3' \(in ") as info:
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[tiny_index, halves["b"]]))
    assert "'d1'" not in info.value.message and "'d2'" not in info.value.message


def test_a_document_deleted_in_one_input_does_not_collide(halves, tmp_path, fresh_copy):
    """Deleted (and compacted: merge wants no tombstone) from whole, d1 is no duplicate; d2 still is."""
    from indexer.compact import CompactConfig, run_compact

    whole = fresh_copy(halves["whole"])
    run_delete(DeleteConfig(index=whole, ids=["d1"]))
    run_compact(CompactConfig(index=whole))
    with pytest.raises(AppError, match=r"^1 document id\(s\) .*: 'd2' \(in ") as info:
        merge_indexes(MergeConfig(out=tmp_path / "x", inputs=[halves["a"], whole]))
    assert "'d1'" not in info.value.message


def test_a_compacted_input_merges(halves, tmp_path, fresh_copy):
    """A compacted index (generation > 0, no delta, no tombstone; BM25 under a generation's name) is an input like
    a build: it was refused with 'run indexer compact', the fix it had already had."""
    from indexer.compact import CompactConfig, run_compact
    from indexer.update import AddConfig, run_add

    b = fresh_copy(halves["b"])
    run_add(AddConfig(index=b, corpus=write_jsonl(tmp_path / "d5.jsonl", [{"id": "d5", "text": "Rome is old."}])))
    run_compact(CompactConfig(index=b))
    assert Manifest.load(b).generation == 2 and Manifest.load(b).bm25_name != "bm25.sqlite"
    merged = tmp_path / "merged"
    merge_indexes(MergeConfig(out=merged, inputs=[b, halves["a"]]))  # first: the manifest is its copy
    m = Manifest.load(merged)
    assert m.counts.documents == Manifest.load(halves["a"]).counts.documents + Manifest.load(b).counts.documents
    assert (merged / m.bm25_name).is_file()
    PhraseIndex(merged, verify=True).close()


@pytest.mark.parametrize("keep", ["keep-first", "keep-last"])
def test_on_duplicate_keeps_one_copy_and_tombstones_the_others(halves, tmp_path, keep):
    """a (d1, d2) + whole (d1, d2, d3): one copy of d1 and d2 served, the other tombstoned as a delete does; a
    delete then deletes the one copy and reports 1; compact drops the copies for good."""
    from indexer.compact import CompactConfig, run_compact
    from indexer.tombstones import Tombstones

    merged = tmp_path / "merged"
    summary = merge_indexes(MergeConfig(out=merged, inputs=[halves["a"], halves["whole"]], on_duplicate=keep))
    m, a, whole = Manifest.load(merged), Manifest.load(halves["a"]), Manifest.load(halves["whole"])
    assert (m.counts.documents, m.counts.deleted_documents, summary.dropped) == (whole.counts.documents, 2, 2)
    assert m.counts.deleted_tokens == a.counts.tokens  # the dropped copies are a's documents, tokenized alike
    assert m.generation == 1 and "2 duplicate copies deleted" in summary.line()
    dead = Tombstones.load(merged, m)
    lost = "shard_00001" if keep == "keep-first" else "shard_00000"  # a's shard is 0, whole's 1
    assert list(dead.rows) == [lost] and dead.of(lost).size == 2
    PhraseIndex(merged, verify=True).close()
    deleted = run_delete(DeleteConfig(index=merged, ids=["d1"]))  # the one live copy
    assert deleted.deleted == 1 and Manifest.load(merged).counts.documents == whole.counts.documents - 1
    run_compact(CompactConfig(index=merged))
    after = Manifest.load(merged)
    assert (after.counts.documents, after.counts.deleted_documents, after.tombstones) == (
        whole.counts.documents - 1,
        0,
        None,
    )


def test_the_command_line_refuses_duplicates_and_takes_on_duplicate(halves, tmp_path):
    from typer.testing import CliRunner

    from indexer.cli import app

    args = ["merge", "--out", str(tmp_path / "m"), str(halves["a"]), str(halves["whole"])]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "error: 2 document id(s) are held by more than one input" in refused.output
    bad = CliRunner().invoke(app, [*args, "--on-duplicate", "keep-any"])
    assert bad.exit_code == 2 and "--on-duplicate (INDEXER_ON_DUPLICATE)" in bad.output, bad.output
    done = CliRunner().invoke(app, [*args, "--on-duplicate", "keep-last"])
    assert done.exit_code == 0 and "2 duplicate copies deleted" in done.output, done.output

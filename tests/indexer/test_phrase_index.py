"""PhraseIndex.search over a batch of requests' queries (`groups`): the same hits as each request alone,
re-scored group by group; `changed` finds the files written since their check."""

from __future__ import annotations

import os

import numpy as np
import pytest

import indexer.phrase_index as phrase_index_mod
from common.errors import AppError
from indexer.phrase_index import PhraseIndex
from tests.indexer.test_ann import DIM, _clustered, _index


@pytest.mark.parametrize("kind", ["IVF4,PQ8x4", "IVF8,Flat", "Flat"])
def test_a_grouped_batch_finds_what_each_group_finds_alone(tmp_path, kind):
    rng = np.random.default_rng(11)
    shards = [_clustered(rng, n) for n in (700, 500, 900)]
    _index(tmp_path, shards, kind, template=True)
    index = PhraseIndex(tmp_path, nprobe=2, refine=3)
    groups = [2, 6, 4]  # e.g. requests of 1, 3 and 2 masks (start and end queries each)
    queries = rng.standard_normal((sum(groups), DIM)).astype(np.float32)
    together = index.search(queries, 25, groups=groups)
    alone, at = [], 0
    for n in groups:
        alone += index.search(queries[at : at + n], 25)
        at += n
    assert len(together) == len(alone) == sum(groups)
    for (s1, p1), (s2, p2) in zip(together, alone):
        assert np.array_equal(s1, s2) and np.array_equal(p1, p2) and s1.size == 25
    index.close()


def test_rescoring_multiplies_each_group_by_its_own_queries_only(tmp_path, monkeypatch):
    rng = np.random.default_rng(12)
    shards = [_clustered(rng, n) for n in (600, 600)]
    _index(tmp_path, shards, "IVF4,PQ8x4", template=True)
    index = PhraseIndex(tmp_path, nprobe=2)
    seen = []
    real = phrase_index_mod._rescore

    def spy(shard, q, ids):
        seen.append(q.shape[0])
        return real(shard, q, ids)

    monkeypatch.setattr(phrase_index_mod, "_rescore", spy)
    queries = rng.standard_normal((8, DIM)).astype(np.float32)
    index.search(queries, 10, groups=[2, 2, 4])
    assert sorted(seen) == sorted([2, 2, 4] * 2)  # per shard, per group
    seen.clear()
    index.search(queries, 10)  # no groups: one group of all the queries
    assert seen == [8, 8]
    index.close()


@pytest.mark.parametrize("groups", [[2, 2], [4, 4, 1], []])
def test_groups_must_add_up_to_the_queries(tmp_path, groups):
    rng = np.random.default_rng(13)
    _index(tmp_path, [_clustered(rng, 300)], "Flat")
    index = PhraseIndex(tmp_path)
    with pytest.raises(ValueError, match="do not add up"):
        index.search(rng.standard_normal((8, DIM)).astype(np.float32), 5, groups=groups)
    index.close()


def test_changed_names_the_files_written_since_their_hash_not_those_removed(tiny_index, fresh_copy):
    root = fresh_copy(tiny_index)
    index = PhraseIndex(root, verify=True)
    assert index.files.changed() == []
    written = root / "shard_00001" / "token_ids.npy"
    mapped = np.load(written, mmap_mode="r+")  # written in place through a shared map: size and inode kept
    mapped[:] = 0
    mapped.flush()
    del mapped
    (root / "shard_00002" / "flags.npy").unlink()
    # a removed file is a superseded generation's collected by a writer (indexer.gc), not damage
    assert [p.relative_to(root).as_posix() for p, _ in index.files.changed()] == ["shard_00001/token_ids.npy"]
    with pytest.raises(AppError, match="token_ids.npy does not match the manifest's sha256"):
        index.files.verify([f for f in index.files.changed() if f[0] == written])
    index.close()


def test_a_file_touched_but_unchanged_is_checked_once_then_quiet(tiny_index, fresh_copy):
    root = fresh_copy(tiny_index)
    index = PhraseIndex(root)  # not hashed at open: changed() takes each file's baseline at first sight
    assert index.files.changed() == []
    tokens = root / "shard_00000" / "token_ids.npy"
    os.utime(tokens, ns=(1, 1))
    assert [p for p, _ in index.files.changed()] == [tokens]
    index.files.verify(index.files.changed())  # the same bytes: found right, the new time recorded
    assert index.files.changed() == []
    index.close()


def test_the_rescoring_reads_refine_times_k_hits_a_query_however_many_shards(tmp_path, monkeypatch):
    """The ANN hits of every shard are merged by their ANN scores before the exact re-scoring: a query's
    re-scored vectors are refine * k in all, not refine * k a shard, and the top k is still the exact top k of
    the hits re-scored (each re-scored hit's score is its stored vector's inner product)."""
    rng = np.random.default_rng(14)
    shards = [_clustered(rng, 500) for _ in range(5)]
    _index(tmp_path, shards, "IVF8,PQ8x4", template=True)
    index = PhraseIndex(tmp_path, nprobe=8, refine=2)
    rescored = np.zeros(3, dtype=np.int64)
    real = phrase_index_mod._rescore

    def spy(shard, q, ids):
        rescored[:] += (ids >= 0).sum(axis=1)
        return real(shard, q, ids)

    monkeypatch.setattr(phrase_index_mod, "_rescore", spy)
    queries = rng.standard_normal((3, DIM)).astype(np.float32)
    found = index.search_scored(queries, 20)
    assert rescored.tolist() == [40, 40, 40]  # 2 x 20 a query, over the 5 shards' 5 x 40 ANN hits
    for q, hits in zip(queries, found):
        assert hits.scores.size == 20 and len(set(hits.shard_no.tolist())) > 1
        exact = [index.shards[s].vectors[p] @ q for s, p in zip(hits.shard_no.tolist(), hits.positions.tolist())]
        np.testing.assert_allclose(hits.scores, exact, rtol=1e-3, atol=1e-3)  # int8 vectors, float32 sums
    index.close()


def test_a_shard_group_probes_as_many_lists_as_the_whole_index(tmp_path, monkeypatch):
    """nprobe follows the tokens of every shard of the index's template (indexer.ann.scaled_nprobe), in a
    shard group too (service.ray_backend opens some shards), so a group searches as the whole index does."""
    monkeypatch.setattr("indexer.ann.SCAN_TOKENS", 1000)  # as an index of millions of tokens scales it
    rng = np.random.default_rng(15)
    _index(tmp_path, [_clustered(rng, 6000) for _ in range(4)], "IVF512,Flat", template=True)
    whole, group = PhraseIndex(tmp_path), PhraseIndex(tmp_path, shard_nos=[1], bm25=False)
    # 24,000 tokens in 512 lists, 46.9 a list: 22 lists hold 1000 (one shard alone: 86, over 512 / 16 = 32)
    assert {s.index.nprobe for s in whole.shards} == {s.index.nprobe for s in group.shards} == {22}
    assert PhraseIndex(tmp_path, nprobe=5).shards[0].index.nprobe == 5  # a given nprobe wins
    whole.close()
    group.close()


@pytest.mark.parametrize("kind", ["IVF8,PQ8x4", "IVF8,Flat"])
def test_shards_asked_in_two_rounds_give_the_hits_of_asking_each_for_all(tmp_path, monkeypatch, kind):
    """indexer.shard_hits: each shard is asked first for twice its share of the hits, again only where it may hold
    more of the best; the hits are those of asking every shard for all of them, for queries whose best hits
    crowd into one shard (asked again there) and for others."""
    from indexer import shard_hits

    rng = np.random.default_rng(16)
    shards = [_clustered(rng, 400) for _ in range(5)]
    _index(tmp_path, shards, kind, template=True)
    index = PhraseIndex(tmp_path, nprobe=8, refine=2)
    queries = np.concatenate([shards[0][:3].astype(np.float32), rng.standard_normal((3, DIM)).astype(np.float32)])
    monkeypatch.setattr(shard_hits, "FIRST_MIN", 4)
    asked: list = []
    real = shard_hits._with_rows
    monkeypatch.setattr(
        shard_hits, "_with_rows", lambda first, rows, again: asked.append(rows) or real(first, rows, again)
    )
    two = index.search_scored(queries, 30)
    monkeypatch.setattr(shard_hits, "first_round", lambda want, shards: want)
    one = index.search_scored(queries, 30)
    assert asked and any(set(rows.tolist()) & {0, 1, 2} for rows in asked)  # the crowded queries asked again
    for a, b in zip(two, one):
        assert np.array_equal(a.scores, b.scores) and np.array_equal(a.shard_no, b.shard_no)
        assert np.array_equal(a.positions, b.positions)
    index.close()


def test_the_text_side_alone_opens_no_faiss_index_and_no_vector(tiny_index):
    """PhraseIndex(dense=False), a Ray ingress's: every shard's text side (tokens, offsets, documents), checked and
    watched, and nothing of its search; asking for one names what is missing."""
    index = PhraseIndex(tiny_index, dense=False)
    try:
        assert len(index.shards) == len(index.manifest.shards) and not any(s.dense for s in index.shards)
        listed = {p.name for p, _ in index.files.all()}
        assert "token_ids.npy" in listed and "docs.arrow" in listed
        assert not listed & {"index.faiss", "vectors.npy", "scales.npy", "code_slots.npy"}
        index.warm(pages=True, hashes=True)  # the text side's pages and sha256, nothing else
        assert {p.name for p in index.files.verified} == listed
        shard = index.shards[0]
        assert shard.doc_text(0) and np.asarray(shard.token_ids[:3]).size == 3
        for what in ("index", "vectors"):
            with pytest.raises(AppError, match="opened without its vectors"):
                getattr(shard, what)
        with pytest.raises(AppError, match="opened without its vectors"):
            index.search_scored(np.zeros((1, index.manifest.dim), dtype=np.float32), 3)
    finally:
        index.close()

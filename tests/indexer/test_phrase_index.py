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

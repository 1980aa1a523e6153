"""Tombstones (indexer.tombstones): saved and read back, checked against the manifest, and what they hide from a
search (a shard's dead blocks, its live-token selector)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from common.errors import AppError
from indexer.manifest import Manifest
from indexer.tombstones import Liveness, Tombstones


def test_liveness_hides_every_token_of_the_dead_rows():
    blocks = np.array([[0, 0, 4], [1, 4, 6], [0, 6, 9], [2, 9, 12]])  # (document row, first, end)
    live = Liveness(blocks, 12, np.array([0]))
    assert live.dead_blocks.tolist() == [0, 2] and live.dead_tokens == 7
    index = faiss.IndexFlatIP(2)
    index.add(np.ones((12, 2), dtype=np.float32))
    _, ids = index.search(np.ones((1, 2), dtype=np.float32), 12, params=faiss.SearchParameters(sel=live.selector))
    assert sorted(i for i in ids[0].tolist() if i >= 0) == [4, 5, 9, 10, 11]


def test_tombstones_round_trip_and_are_checked(tiny_index, fresh_copy):
    root = fresh_copy(tiny_index)
    m = Manifest.load(root)
    name = m.shards[0].name
    rows = np.arange(m.shards[0].documents)[::-1]  # every row of the first shard, given out of order, one twice
    info = Tombstones().plus(name, rows).plus(name, rows[:1]).save(root, 1)
    assert info.rows == rows.size and info.name == "tombstones_000001.json"
    m = m.model_copy(update={"tombstones": info, "generation": 1})
    assert Tombstones.load(root, m).of(name).tolist() == sorted(rows.tolist())
    assert Tombstones().save(root, 2) is None  # nothing deleted: no file
    body = '{"shards": {"shard_99999": [0]}}'  # the same size: a shard the manifest does not hold
    (root / info.name).write_text(body + " " * (info.bytes - len(body)))
    with pytest.raises(AppError, match="tombstones_000001.json lists rows"):
        Tombstones.load(root, m)
    (root / info.name).unlink()
    with pytest.raises(AppError, match="tombstones_000001.json is missing"):
        Tombstones.load(root, m)

"""Garbage collection (indexer.gc): a starting writer removes only what a killed writer left (temporary names,
entries numbered after the manifest); after its commit, a writer removes what neither the new nor the previous
generation names."""

from __future__ import annotations

from indexer.gc import collect_garbage
from indexer.manifest import Manifest
from indexer.update import DeleteConfig, run_delete


def test_a_starting_writer_removes_only_a_killed_writers_leftovers(tiny_index, fresh_copy):
    root = fresh_copy(tiny_index)
    m = Manifest.load(root)
    last = max(int(s.name.split("_")[1]) for s in m.shards)
    leftovers = [
        f"shard_{last + 1:05d}",
        f"bm25_shard_{last + 1:05d}.sqlite",
        "tombstones_000001.json",
        "bm25_000001.sqlite",
        "manifest.json.tmp",
        f"shard_{last + 2:05d}.tmp",
    ]
    for name in leftovers:
        (root / name).mkdir() if name.startswith("shard_") else (root / name).write_text("x")
    older = root / "tombstones_000000.json"  # not after the manifest: a starting writer keeps it
    older.write_text("x")
    assert sorted(collect_garbage(root, m)) == sorted(leftovers)
    assert older.exists() and all((root / s.name).is_dir() for s in m.shards) and (root / m.bm25_name).is_file()


def test_a_commit_keeps_the_previous_generation_and_drops_older_ones(tiny_index, fresh_copy):
    root = fresh_copy(tiny_index)
    run_delete(DeleteConfig(index=root, ids=["d1"]))
    first = Manifest.load(root).tombstones.name
    run_delete(DeleteConfig(index=root, ids=["d2"]))
    second = Manifest.load(root).tombstones.name
    assert (root / first).is_file() and (root / second).is_file()  # generation 1 is the previous one
    run_delete(DeleteConfig(index=root, ids=["d3"]))
    assert not (root / first).exists() and (root / second).is_file()
    assert (root / Manifest.load(root).tombstones.name).is_file()

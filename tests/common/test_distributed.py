"""Tests for common.distributed: a job without torchrun is one process of rank 0."""

from __future__ import annotations

from common.distributed import Rank, join


def test_single_process_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    place = join("gloo")
    assert place == Rank(0, 1, 0) and place.leader
    place.barrier()  # a no-op in one process
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert join("gloo") == Rank()

"""Tests for training.train_config: the settings `encoder train` refuses before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.train_config import TrainConfig


def config(**kw) -> TrainConfig:
    return TrainConfig(corpus=[Path("a.jsonl")], out=Path("run"), **kw)


def test_mixed_positives_need_two_query_views():
    with pytest.raises(ValueError, match="query-views"):
        config(positives="mixed", query_views=1)
    assert config(positives="mixed", query_views=2).positives == "mixed"


def test_salient_words_need_a_salient_rate():
    with pytest.raises(ValueError, match="salient-rate"):  # a list that would never be drawn from
        config(salient_words=Path("words.txt"))
    assert config(salient_words=Path("words.txt"), salient_rate=0.5).salient_rate == 0.5

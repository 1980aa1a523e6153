"""bench/sweep_fill_options.py: a --try's fill options and scoring overrides."""

from __future__ import annotations

import json

import pytest

from bench.sweep_fill_options import parse_try, scoring_for
from fill.schemas import FillOptions
from fill.scoring import Scoring


def test_a_try_gives_typed_fill_options_and_scoring_overrides():
    options, overrides = parse_try("mode=hybrid lexical_weight=8 reader=false blocks=5 reader_weight=0.5")
    assert options == {"mode": "hybrid", "lexical_weight": 8, "reader": False, "blocks": 5}
    assert overrides == {"reader_weight": "0.5"}
    assert FillOptions(**options).lexical_weight == 8.0
    with pytest.raises(ValueError):
        FillOptions(**parse_try("mode=sideways")[0])


def test_scoring_overrides_set_the_reader_weight_of_the_mode_only(tmp_path):
    base = Scoring(reader_weight={"restricted": 0.5, "hybrid": 0.5}, lexical_weight={"hybrid": 2.0})
    changed = scoring_for(base, "hybrid", {"reader_weight": "2"})
    assert changed.reader_weight == {"restricted": 0.5, "hybrid": 2.0} and base.reader_weight["hybrid"] == 0.5
    other = tmp_path / "scoring.json"
    other.write_text(json.dumps({"lexical_weight": {"hybrid": 8.0}}), encoding="utf-8")
    assert scoring_for(base, "hybrid", {"scoring": str(other)}).weight("hybrid") == 8.0

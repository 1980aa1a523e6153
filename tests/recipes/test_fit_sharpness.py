"""recipes.fit_sharpness: the power whose sharpened probabilities fit the labels best, the winner unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fill.choices import sharpen
from recipes.fit_sharpness import fit, load


def _predictions(tmp_path, power: float, n: int = 4000):
    """A set whose true probabilities are shares of votes sharpened by `power`: the votes are under-confident."""
    rng = np.random.default_rng(0)
    share = rng.uniform(0.5, 0.85, n)  # the winner's share of the votes
    truth = sharpen(np.stack([share, 1 - share], axis=1), power)[:, 0]
    right = rng.random(n) < truth  # right with the sharpened probability
    lines = []
    for s, ok in zip(share, right):
        label, other = ("positive", "negative") if rng.random() < 0.5 else ("negative", "positive")
        winner = label if ok else other
        probs = {winner: float(s), ({"positive", "negative"} - {winner}).pop(): float(1 - s)}
        lines.append(json.dumps({"text": "t", "label": label, "probabilities": probs}))
    path = tmp_path / "tune.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_power_of_the_labels_fits_best_and_calibrates(tmp_path):
    probs, truth = load(_predictions(tmp_path, 3.0))
    rows = fit(probs, truth, [1.0, 2.0, 3.0, 4.0, 6.0])
    best = min(rows, key=lambda r: r[1])
    assert best[0] == 3.0
    ece = {power: e for power, _, e in rows}
    assert ece[3.0] < 3.0 < ece[1.0]  # the votes alone are under-confident by more than 3 points


def test_an_empty_file_is_refused_by_name(tmp_path):
    empty = tmp_path / "none.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(SystemExit, match="none.jsonl"):
        load(empty)

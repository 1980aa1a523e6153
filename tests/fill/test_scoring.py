"""The lexical prior, confidence features, calibration and the scoring file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import AppError
from fill.scoring import (
    FEATURES,
    MARGIN_CAP,
    SCORING_NAME,
    Calibration,
    Confidence,
    Scoring,
    mask_features,
    query_overlap,
)
from fill.spans import BlockPrior


def _calibration(coef_score: float = 1.0, **kw) -> Calibration:
    n = len(FEATURES)
    coef = [coef_score] + [0.5] * (n - 1)
    return Calibration(coef=coef, intercept=kw.get("intercept", 0.0), mean=[0.0] * n, scale=[1.0] * n)


# ---------------------------------------------------------------- BlockPrior


def test_block_prior_is_bm25_over_the_best_and_zero_elsewhere():
    prior = BlockPrior.from_bm25(np.array([7, 2, 9]), np.array([4.0, 2.0, 1.0]))
    np.testing.assert_allclose(prior(np.array([2, 7, 9, 3, 100, 0])), [0.5, 1.0, 0.25, 0.0, 0.0, 0.0])


def test_block_prior_without_blocks_is_zero():
    prior = BlockPrior.from_bm25(np.empty(0), np.empty(0))
    np.testing.assert_array_equal(prior(np.array([1, 2])), [0.0, 0.0])


# ---------------------------------------------------------------- features and calibration


def test_mask_features():
    f = mask_features(np.array([0.5, 0.25]), 0.25, 0.8, 12.0, 9.0, 0.75)
    assert f.shape == (2, len(FEATURES))
    np.testing.assert_allclose(f[:, 0], np.log([0.5, 0.25]))
    np.testing.assert_allclose(f[:, 1], [0.0, -np.log(2.0)])
    np.testing.assert_allclose(f[:, 2], np.log(2.0))
    np.testing.assert_allclose(f[:, 3:], [[0.8, 12.0, 9.0, 0.75]] * 2)
    assert mask_features(np.array([1.0]), None, 0.0, 1.0, 1.0)[0, 2] == MARGIN_CAP
    assert mask_features(np.array([]), None, 0.0, 1.0, 1.0).shape == (0, len(FEATURES))
    assert np.isfinite(mask_features(np.array([0.0]), None, 0.0, float("-inf"), 1.0)).all()


def test_query_overlap_is_the_share_of_query_tokens_in_the_block():
    assert query_overlap(frozenset({1, 2, 3, 4}), np.array([9, 2, 4, 4, 7])) == 0.5
    assert query_overlap(frozenset({5}), np.array([1, 2])) == 0.0
    assert query_overlap(frozenset(), np.array([1, 2])) == 0.0


def test_a_legacy_calibration_ignores_the_later_features():
    legacy = Calibration(coef=[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], intercept=0.0, mean=[0.0] * 6, scale=[1.0] * 6)
    rows = mask_features(np.array([0.5]), None, 0.0, 1.0, 1.0, 0.0)
    moved = mask_features(np.array([0.5]), None, 0.0, 1.0, 1.0, 1.0)
    assert legacy(rows)[0] == legacy(moved)[0]
    full = Calibration(coef=[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0], intercept=0.0, mean=[0.0] * 7, scale=[1.0] * 7)
    assert full(moved)[0] > full(rows)[0]
    with pytest.raises(ValueError, match="one entry per feature"):
        Calibration(coef=[1.0] * 7, intercept=0.0, mean=[0.0] * 6, scale=[1.0] * 6)


def test_calibration_is_a_probability_monotone_in_log_score():
    cal = _calibration(2.0)
    rows = mask_features(np.array([0.6, 0.3, 0.05, 0.0]), 0.3, 0.5, 10.0, 8.0)
    p = cal(rows)
    assert ((p >= 0) & (p <= 1)).all()
    assert (np.diff(p) < 0).all()


def test_calibration_refuses_a_negative_score_coefficient():
    with pytest.raises(ValueError, match="monotone"):
        _calibration(-0.1)
    n = len(FEATURES)
    with pytest.raises(ValueError, match="monotone"):
        Calibration(coef=[1.0, -0.1] + [0.0] * (n - 2), intercept=0.0, mean=[0.0] * n, scale=[1.0] * n)


def test_scoring_weights_and_uncalibrated_confidence():
    scoring = Scoring(lexical_weight={"hybrid": 2.0})
    assert scoring.weight("hybrid") == 2.0 and scoring.weight("restricted") == 0.0 and scoring.weight("dense") == 0.0
    feats = mask_features(np.array([0.7, 0.2]), 0.2, 0.0, 1.0, 1.0)
    np.testing.assert_allclose(scoring.confidence_of("dense", feats), [0.7, 0.2])  # the score itself
    confidence = Confidence(top=_calibration(), rest=_calibration(intercept=-2.0))
    calibrated = Scoring(confidence={"dense": confidence})
    np.testing.assert_allclose(calibrated.confidence_of("dense", feats), confidence(feats))


def test_confidence_uses_top_for_the_best_and_ties_rest_below_and_never_rises():
    n = len(FEATURES)
    top = Calibration(coef=[0.0] * n, intercept=-1.0, mean=[0.0] * n, scale=[1.0] * n)  # 0.269 for any row
    generous = Calibration(coef=[0.0] * n, intercept=2.0, mean=[0.0] * n, scale=[1.0] * n)  # 0.881
    rest = Calibration(coef=[1.0] + [0.0] * (n - 1), intercept=1.0, mean=[0.0] * n, scale=[1.0] * n)
    feats = mask_features(np.array([0.3, 0.3, 0.2, 0.1]), 0.3, 0.0, 1.0, 1.0)
    p = Confidence(top=top, rest=rest)(feats)
    np.testing.assert_allclose(p[:2], 1 / (1 + np.exp(1.0)))  # tied with the top: the top model
    np.testing.assert_allclose(p[2], p[1])  # capped: rest would say sigmoid(1 + log 0.2) = 0.35 > 0.27
    np.testing.assert_allclose(p[3], rest(feats[3:])[0])  # below the cap (0.21): rest's own value
    assert p[3] < p[2]
    q = Confidence(top=generous, rest=rest)(feats)
    np.testing.assert_allclose(q[2:], rest(feats[2:]))
    assert Confidence(top=top, rest=rest)(np.zeros((0, n))).shape == (0,)


def test_a_valid_confidence_file_loads(tmp_path):
    path = tmp_path / "scoring.json"
    path.write_text(_confidence_json("0.5"))
    assert Scoring.load(path).confidence["dense"].top.intercept == 0.5


def test_scoring_file_beside_the_model_and_explicit(tmp_path):
    assert Scoring.beside(tmp_path) == Scoring()  # none there: nothing fitted
    (tmp_path / SCORING_NAME).write_text(json.dumps(Scoring(lexical_weight={"hybrid": 4.0}).model_dump(mode="json")))
    assert Scoring.beside(tmp_path).weight("hybrid") == 4.0
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"lexical_weight": {"restricted": 1.5}}))
    assert Scoring.beside(tmp_path, other).weight("restricted") == 1.5


def _confidence_json(value: str) -> str:
    n = len(FEATURES)
    cal = {"coef": [1.0] * n, "intercept": 0.0, "mean": [0.0] * n, "scale": [1.0] * n}
    text = json.dumps({"top": cal, "rest": cal})
    return '{"confidence": {"dense": ' + text.replace('"intercept": 0.0', f'"intercept": {value}', 1) + "}}"


@pytest.mark.parametrize(
    "content",
    [
        "{",
        '{"lexical_weight": {"sparse": 1}}',
        '{"confidence": {"dense": {"coef": [1]}}}',
        '{"lexical_weight": {"hybrid": NaN}}',
        '{"lexical_weight": {"hybrid": -1}}',
        '{"lexical_weight": {"hybrid": 51}}',
        _confidence_json("NaN"),
        _confidence_json("Infinity"),
    ],
)
def test_a_bad_scoring_file_names_the_file(tmp_path, content):
    path = tmp_path / "scoring.json"
    path.write_text(content)
    with pytest.raises(AppError, match="scoring.json"):
        Scoring.load(path)

"""Fitted scoring: the weight of the lexical (BM25 block) prior per mode and the calibration that turns a
candidate's score into `confidence`, the probability that the fill is correct.

Both are fitted by `fill-fit` (evaluation/fit.py) on the train side of the Google-RE split only and read
from `scoring.json` beside the model (or `--scoring FILE`). The confidence is a logistic regression on
features of a candidate and of its mask:

    log_score  log of the candidate's score (its normalised rank value)
    log_ratio  log(score / the mask's top score): 0 for the top phrase, negative below it
               (these two are the only features that differ between the candidates of one mask; their
               coefficients are >= 0, so confidence is monotone in the score for a fixed query)
    margin     log(top score / second score): how far the best phrase is ahead (capped)
    lexical    the lexical prior (BM25 over the best block's, in [0, 1]) of the block of the top
               phrase's best occurrence; 0 in dense mode (no BM25 query)
    start_max, end_max  the best encoder logits q . v * scale among the candidate starts / ends: how
               well anything in the index matches the mask at all
    overlap    the share of the query's distinct tokens (special and mask tokens aside) found in the block
               of the top phrase's best occurrence: near 1 when the query's own sentence is in the corpus,
               lower when the answer must come from other wording (a calibration fitted before this
               feature existed has 6 coefficients and ignores it)

Fills re-ranked by the reader (fill.reading) have their own calibrations (`reader_confidence`, the same
features computed on the re-ranked phrases, start_max / end_max then being the reader's best logits) and
the reader's retrieval weight per mode (`reader_weight`: the power of the retrieval value in the
re-ranking; 1 when not fitted).

Two logistic regressions per mode: `top` for the mask's best phrase (fitted on the top phrase of each
fitting probe: the confidence users threshold on) and `rest` for the others (fitted on the phrases
ranked 2..top_k); a phrase's confidence is then capped by the confidence of every better-scored
phrase, so it never rises as the score falls. Without a calibration for the mode, `confidence` is the
score itself (uncalibrated).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from common.errors import AppError
from fill.schemas import Mode

SCORING_NAME = "scoring.json"
Finite = Annotated[float, Field(allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=0.0, le=50.0, allow_inf_nan=False)]  # the bounds of the request field
FEATURES = ("log_score", "log_ratio", "margin", "lexical", "start_max", "end_max", "overlap")
LEGACY_FEATURES = 6  # calibrations fitted before `overlap` have this many coefficients
MONOTONE = (0, 1)  # the features whose coefficients must be >= 0
LOG_FLOOR = 1e-12
MARGIN_CAP = 10.0


def mask_features(
    scores: np.ndarray, runner_up: float | None, lexical: float, start_max: float, end_max: float, overlap: float = 0.0
) -> np.ndarray:
    """One row of FEATURES per candidate of a mask (`scores`: the candidates' scores, best first;
    `runner_up`: the second best score of the mask, None when there is a single phrase)."""
    scores = np.asarray(scores, dtype=np.float64)
    n = scores.shape[0]
    out = np.zeros((n, len(FEATURES)), dtype=np.float64)
    if n == 0:
        return out
    log_scores = np.log(np.maximum(scores, LOG_FLOOR))
    top = float(log_scores[0])
    margin = MARGIN_CAP if runner_up is None else min(MARGIN_CAP, top - float(np.log(max(runner_up, LOG_FLOOR))))
    out[:, 0] = log_scores
    out[:, 1] = log_scores - top
    out[:, 2] = margin
    out[:, 3] = lexical
    out[:, 4] = start_max if np.isfinite(start_max) else 0.0
    out[:, 5] = end_max if np.isfinite(end_max) else 0.0
    out[:, 6] = overlap
    return out


def query_overlap(query_tokens: frozenset[int], block_tokens: np.ndarray) -> float:
    """The share of `query_tokens` (distinct ids) that occur in `block_tokens`; 0 for an empty query."""
    if not query_tokens:
        return 0.0
    return float(np.isin(np.fromiter(query_tokens, dtype=np.int64), block_tokens).mean())


class Calibration(BaseModel):
    """p(correct) = sigmoid(intercept + coef . (features - mean) / scale)."""

    model_config = ConfigDict(extra="forbid")

    coef: list[Finite] = Field(min_length=LEGACY_FEATURES, max_length=len(FEATURES))
    intercept: Finite
    mean: list[Finite] = Field(min_length=LEGACY_FEATURES, max_length=len(FEATURES))
    scale: list[Finite] = Field(min_length=LEGACY_FEATURES, max_length=len(FEATURES))

    @model_validator(mode="after")
    def _monotone(self) -> "Calibration":
        if any(self.coef[i] < 0 for i in MONOTONE):
            raise ValueError(
                "the coefficients of log_score and log_ratio must be >= 0 (confidence monotone in the score)"
            )
        if any(s <= 0 for s in self.scale):
            raise ValueError("every scale must be > 0")
        if not len(self.coef) == len(self.mean) == len(self.scale):
            raise ValueError("coef, mean and scale must have one entry per feature")
        return self

    def __call__(self, features: np.ndarray) -> np.ndarray:
        n = len(self.coef)  # the first n FEATURES (a legacy calibration ignores the later ones)
        z = (np.asarray(features, dtype=np.float64)[..., :n] - np.array(self.mean)) / np.array(self.scale)
        logit = z @ np.array(self.coef) + self.intercept
        probability: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(logit, -50.0, 50.0)))
        return probability


class Confidence(BaseModel):
    """The calibrated confidence of a mode: `top` for the best phrase (and phrases tied with it), `rest`
    for the others, capped down the ranking (monotone in the score)."""

    model_config = ConfigDict(extra="forbid")

    top: Calibration
    rest: Calibration

    def __call__(self, features: np.ndarray) -> np.ndarray:
        """Confidences of a mask's candidates, `features` in rank order (best first)."""
        features = np.asarray(features, dtype=np.float64)
        if features.shape[0] == 0:
            return np.empty(0)
        tied_with_top = features[:, 1] >= 0.0  # log_ratio: 0 for the top score
        p = np.where(tied_with_top, self.top(features), self.rest(features))
        return np.minimum.accumulate(p)


class Scoring(BaseModel):
    """What `fill-fit` writes: lexical weights, calibrations (per mode) and how they were fitted."""

    model_config = ConfigDict(extra="forbid")

    lexical_weight: dict[Mode, Weight] = Field(default_factory=dict)
    confidence: dict[Mode, Confidence] = Field(default_factory=dict)
    reader_weight: dict[Mode, Weight] = Field(
        default_factory=dict, description="per mode, the power of the retrieval value in the reader's re-ranking"
    )
    reader_confidence: dict[Mode, Confidence] = Field(default_factory=dict)
    fitted: dict[str, Any] = Field(default_factory=dict, description="provenance: data, model, grid, fit quality")

    @classmethod
    def load(cls, path: Path) -> "Scoring":
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, ValidationError) as exc:
            raise AppError(
                f"scoring file {path} is unreadable or invalid ({exc}); refit it with fill-fit or remove it"
            ) from exc

    @classmethod
    def beside(cls, model_dir: Path, path: Path | None = None) -> "Scoring":
        """`path` if given, else scoring.json in the model directory, else no fitted scoring."""
        if path is not None:
            return cls.load(path)
        default = Path(model_dir) / SCORING_NAME
        return cls.load(default) if default.is_file() else cls()

    def weight(self, mode: Mode) -> float:
        return 0.0 if mode == "dense" else float(self.lexical_weight.get(mode, 0.0))

    def reader_weight_of(self, mode: Mode) -> float:
        return float(self.reader_weight.get(mode, 1.0))

    def confidence_of(self, mode: Mode, features: np.ndarray, read: bool = False) -> np.ndarray:
        calibration = (self.reader_confidence if read else self.confidence).get(mode)
        if calibration is None:
            return np.clip(np.exp(features[:, 0]), 0.0, 1.0) if len(features) else np.empty(0)
        confidence: np.ndarray = calibration(features)
        return confidence

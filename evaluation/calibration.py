"""Calibration of a winning answer's confidence: the expected calibration error and the risk-coverage
table (`fill-eval` for fills and for closed-set scores, `fill-fit`)."""

from __future__ import annotations

import numpy as np

THRESHOLDS = (0.3, 0.5, 0.7, 0.9)


def calibration(confidence: list[float | None], correct: list[bool], bins: int = 10) -> dict:
    """Expected calibration error of the top fills (`bins` equal-width bins over [0, 1]; fills with no
    confidence, i.e. abstained, left out) and the risk-coverage table: at each threshold, the share
    of all probes answered with a confidence >= it and the accuracy of those answers."""
    pairs = [(c, ok) for c, ok in zip(confidence, correct) if c is not None]
    conf = np.array([c for c, _ in pairs], dtype=np.float64)
    hit = np.array([ok for _, ok in pairs], dtype=np.float64)
    ece = 0.0
    if conf.size:
        which = np.minimum((conf * bins).astype(np.int64), bins - 1)
        for b in range(bins):
            sel = which == b
            if sel.any():
                ece += sel.sum() / conf.size * abs(hit[sel].mean() - conf[sel].mean())
    total = max(len(correct), 1)
    table = []
    for t in THRESHOLDS:
        kept = conf >= t
        table.append(
            {
                "threshold": t,
                "coverage": 100 * float(kept.sum()) / total,
                "accuracy": 100 * float(hit[kept].mean()) if kept.any() else None,
            }
        )
    return {
        "ece": 100 * ece,
        "mean_confidence": 100 * float(conf.mean()) if conf.size else None,
        "accuracy": 100 * float(hit.mean()) if hit.size else None,
        "risk_coverage": table,
    }


def format_calibration(cal: dict, what: str = "top fill", metric: str = "EM@1") -> list[str]:
    answered = "-" if cal["accuracy"] is None else f"{cal['accuracy']:.1f}"
    mean = "-" if cal["mean_confidence"] is None else f"{cal['mean_confidence']:.1f}"
    lines = [
        f"{what}: accuracy {answered}  mean confidence {mean}  ECE (10 bins) {cal['ece']:.1f}",
        f"{'confidence >=':<14} {'kept %':>7} {metric + ' of kept':>13}",
    ]
    for row in cal["risk_coverage"]:
        acc = "-" if row["accuracy"] is None else f"{row['accuracy']:.1f}"
        lines.append(f"{row['threshold']:<14} {row['coverage']:>7.1f} {acc:>13}")
    return lines

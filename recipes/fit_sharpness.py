"""The power of `/score`'s choice probabilities (ScoreRequest.sharpness) that fits a TUNING set best:

    fill-eval --task classify --index IDX --data data-local/classify2/uci_imdb.jsonl \
        --template "{text} It was <mask> ." --choices positive=great --choices negative=terrible \
        --sharpness 1 --out tune.s1.predictions.jsonl
    python -m recipes.fit_sharpness tune.s1.predictions.jsonl [--powers 1,1.5,2,2.5,3,3.5,4,5,6]

The predictions must come from `--sharpness 1` (each choice's share of the votes). Prints, per power, the mean
negative log-likelihood of the true label and the ECE of the winning probability (fill-eval's: 10 bins), and the
power with the lowest log-likelihood (temperature scaling, Guo et al. 2017): the winner never changes, only how
sure it is. Run it on the tuning set only; the held sets are measured with the power chosen here."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from evaluation.calibration import calibration
from fill.choices import sharpen


def load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities [n, choices], the true label's column [n]) of a fill-eval --out file (abstained rows: uniform)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{path}: no predictions; write them with fill-eval --task classify --out")
    labels = sorted(rows[0]["probabilities"])
    probs = np.array([[r["probabilities"][label] for label in labels] for r in rows], dtype=np.float64)
    return probs, np.array([labels.index(r["label"]) for r in rows])


def fit(probs: np.ndarray, truth: np.ndarray, powers: list[float]) -> list[tuple[float, float, float]]:
    """(power, mean negative log-likelihood, ECE in points) for each power."""
    out = []
    for power in powers:
        p = sharpen(probs, power)
        nll = float(-np.log(np.maximum(p[np.arange(truth.size), truth], 1e-12)).mean())
        won = p.argmax(axis=1)
        ece = calibration(p.max(axis=1).tolist(), (won == truth).tolist())["ece"]
        out.append((power, nll, ece))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("predictions", type=Path, help="fill-eval --task classify --sharpness 1 --out file")
    p.add_argument("--powers", default="1,1.5,2,2.5,3,3.5,4,5,6")
    args = p.parse_args()
    probs, truth = load(args.predictions)
    rows = fit(probs, truth, [float(x) for x in args.powers.split(",")])
    for power, nll, ece in rows:
        print(f"sharpness {power:<5g} log-loss {nll:.4f}  ECE {ece:.1f}")
    print(f"best: sharpness {min(rows, key=lambda r: r[1])[0]:g}")


if __name__ == "__main__":
    main()

"""`fill-fit`: fit the scoring of a model (fill/scoring.py) on probes it was not trained on.

    fill-fit --index DIR --google-re DIR --side train_b --out MODEL_DIR/scoring.json [--model M]

1. Lexical weight, per BM25 mode (restricted, hybrid): the weight of the grid with the best macro EM@1
   (ties: the smallest weight).
2. Confidence, per mode (with its weight): logistic regressions (scikit-learn, `pip install .[fit]`) of
   "this candidate is correct" on its features: one over the top candidate of every probe, one over
   the candidates ranked 2..top_k (fill.scoring.Confidence).

3. With `--part reader` (an engine with a reader): the scoring of the model is kept (scoring.json beside
   it) and only the reader's are fitted, per mode: its retrieval weight (fill.reading: the grid
   `--reader-grid`, best macro EM@1), then the confidence of re-ranked fills. A calibration
   that holds on several kinds of text is fitted on fills of several fitting sets: `--save-fills F` keeps
   one run's fills (per mode: features and correctness), `--with-fills F` adds them to another's fit, and
   `--keep-weights` fits the confidence with the weights already in the model's scoring.

Fit on text and probes the model never saw: the bundled model's scoring was fitted with a model of
the same recipe trained on the train_a fold, on the train_b fold (recipes/fit_scoring.sh). The held
side of the Google-RE split is refused: it is for reporting only.
"""

from __future__ import annotations

import datetime
import io
import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
import typer
from pydantic import ConfigDict, Field

from common.cli import model_command
from common.errors import AppError
from common.files import write_bytes_atomic, write_json_atomic
from common.process import single_thread_blas
from encoder.model_files import model_fingerprint
from evaluation.calibration import calibration
from evaluation.evaluate import Side, normalize, select_probes
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import MODES, FillOptions, FillRequest, Mode
from fill.scoring import FEATURES, MONOTONE, Calibration, Confidence, Scoring

logger = logging.getLogger(__name__)

DEFAULT_GRID = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
READER_GRID = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0]


class FitConfig(EngineConfig):
    """Fit the lexical weight of the BM25 modes and the confidence calibration of every mode."""

    # EngineConfig's `scoring` is not a flag here (model_command's exclude): fitting starts from no scoring.

    model_config = ConfigDict(extra="forbid")

    index: Path = Field(description="index of the fitting corpus, built with the model")
    out: Path = Field(description="scoring file to write (scoring.json in a model directory is its default)")
    probes: Path | None = Field(None, description='JSON lines {"relation", "query", "answers"}')
    google_re: Path | None = Field(None, description="directory with LAMA Google-RE *_test.jsonl files")
    side: Side = Field("train_b", description="side of the Google-RE split to fit on (never held)")
    per_relation: int | None = Field(200, ge=1, description="fit on a fixed random sample per relation")
    seed: int = Field(0, description="seed of the per-relation sample")
    grid: list[float] = Field(DEFAULT_GRID, min_length=1, description="lexical weights tried")
    modes: list[Mode] = Field(list(MODES), min_length=1, description="modes fitted")
    top_k: int = Field(5, ge=1, le=100, description="candidates per probe the calibration is fitted on")
    c: float = Field(1.0, gt=0, description="inverse L2 strength of the logistic regression")
    part: Literal["all", "reader"] = Field(
        "all",
        description="all: lexical weights and confidence of fills without the reader; reader: keep the "
        "model's scoring and fit only the reader's weight and confidence (needs a reader)",
    )
    reader_grid: list[float] = Field(READER_GRID, min_length=1, description="reader retrieval weights tried")
    keep_weights: bool = Field(
        False,
        description="--part reader: keep the reader weights of the model's scoring "
        "(no grid) and fit only the confidence",
    )
    save_fills: Path | None = Field(
        None,
        description="--part reader: write this run's fills (features, correctness) "
        "per mode, for another run's --with-fills",
    )
    with_fills: list[Path] = Field(
        [],
        description="--part reader: fills saved by other runs, fitted on together "
        "with this run's (the reader weight is this run's)",
    )


def run_probes(
    engine: FillEngine, probes: list[dict], options: FillOptions
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per probe: the candidates' confidence features and whether each candidate is correct."""
    feats, labels = [], []
    opts = options.model_dump(exclude={"reader"})
    for probe in probes:
        result, features = engine.fill_detailed(FillRequest(text=probe["query"], **opts, reader=options.reader))
        gold = {normalize(a) for a in probe["answers"]}
        cands = result.masks[0].candidates if result.masks else []
        feats.append(features[0] if features else np.zeros((0, len(FEATURES))))
        labels.append(np.array([normalize(c.phrase) in gold for c in cands], dtype=bool))
    return feats, labels


def macro_em(probes: list[dict], labels: list[np.ndarray]) -> float:
    by_rel: dict[str, list[bool]] = {}
    for probe, lab in zip(probes, labels):
        by_rel.setdefault(probe["relation"], []).append(bool(lab.size and lab[0]))
    return 100 * float(np.mean([np.mean(v) for v in by_rel.values()])) if by_rel else 0.0


def fit_confidence(feats: list[np.ndarray], labels: list[np.ndarray], c: float = 1.0) -> Confidence:
    """`top` fitted on each probe's first candidate, `rest` on the others."""
    return Confidence(
        top=fit_calibration([f[:1] for f in feats], [lab[:1] for lab in labels], c),
        rest=fit_calibration([f[1:] for f in feats], [lab[1:] for lab in labels], c),
    )


def fit_calibration(feats: list[np.ndarray], labels: list[np.ndarray], c: float = 1.0) -> Calibration:
    """Logistic regression of correctness on standardised features of every candidate given."""
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError as exc:
        raise AppError("fill-fit needs scikit-learn: pip install '.[fit]'") from exc
    x = np.concatenate([np.zeros((0, len(FEATURES))), *feats])
    y = np.concatenate([np.zeros(0, dtype=bool), *labels])
    if x.shape[0] == 0 or y.all() or not y.any():
        raise AppError(
            "cannot fit a confidence: the fitting fills are all right or all wrong (or none); use more or other probes"
        )
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    used = np.ones(len(FEATURES), dtype=bool)
    while True:  # a score feature with a negative coefficient is left out (confidence stays monotone)
        model = LogisticRegression(C=c, max_iter=1000).fit(z[:, used], y)
        coef = np.zeros(len(FEATURES))
        coef[used] = model.coef_[0]
        negative = [i for i in MONOTONE if coef[i] < 0]
        if not negative:
            break
        used[negative] = False
    return Calibration(
        coef=coef.tolist(), intercept=float(model.intercept_[0]), mean=mean.tolist(), scale=scale.tolist()
    )


def fit(engine: FillEngine, probes: list[dict], cfg: FitConfig) -> Scoring:
    """Each mode's lexical weight (the grid's best macro EM@1; dense has none), then its confidence,
    fitted on the fills of that very pass (features do not depend on a calibration)."""
    weights: dict[str, float] = {}
    grid_report: dict[str, dict[str, float]] = {}
    calibrations, quality = {}, {}
    for mode in cfg.modes:
        passes, scores = {}, {}
        for w in sorted(cfg.grid) if mode != "dense" else [0.0]:
            passes[w] = run_probes(
                engine, probes, FillOptions(mode=mode, lexical_weight=w, top_k=cfg.top_k, reader=False)
            )
            scores[w] = macro_em(probes, passes[w][1])
            logger.warning("fit %s lexical_weight %g: macro EM@1 %.1f", mode, w, scores[w])
        if mode != "dense":
            weights[mode] = max(scores, key=lambda w: (scores[w], -w))
            grid_report[mode] = {str(w): round(v, 2) for w, v in scores.items()}
        feats, labels = passes[weights.get(mode, 0.0)]
        cal = calibrations[mode] = fit_confidence(feats, labels, cfg.c)
        top_conf = [float(cal(f[:1])[0]) if len(f) else None for f in feats]
        top_ok = [bool(lab.size and lab[0]) for lab in labels]
        quality[mode] = {
            "macro_em@1": round(macro_em(probes, labels), 2),
            "ece": round(float(calibration(top_conf, top_ok)["ece"]), 2),
        }
        logger.warning("fit %s confidence: %s", mode, quality[mode])
    manifest = engine.index.manifest
    fitted = {
        "by": "fill-fit",
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "data": {
            "google_re_side": cfg.side if cfg.google_re else None,
            "probes_file": cfg.probes.name if cfg.probes else None,
            "probes": len(probes),
            "per_relation": cfg.per_relation,
            "seed": cfg.seed,
            "index_tokens": manifest.counts.tokens,
        },
        "model": {"name": engine.encoder.model_dir.name, "fingerprint": model_fingerprint(engine.encoder.model_dir)},
        "grid_macro_em@1": grid_report,
        "on_fit_data": quality,
        "features": list(FEATURES),
    }
    return Scoring(lexical_weight=weights, confidence=calibrations, fitted=fitted)


def save_fills(path: Path, fills: dict[str, tuple[list[np.ndarray], list[np.ndarray]]]) -> None:
    """Per mode, every probe's candidate features and correctness, as one .npz (written atomically)."""
    arrays: dict[str, Any] = {}  # (np.savez's keywords: arrays)
    for mode, (feats, labels) in fills.items():
        arrays[f"{mode}.feats"] = np.concatenate([np.zeros((0, len(FEATURES))), *feats])
        arrays[f"{mode}.labels"] = np.concatenate([np.zeros(0, dtype=bool), *labels])
        arrays[f"{mode}.sizes"] = np.array([len(lab) for lab in labels], dtype=np.int64)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_bytes_atomic(path, buffer.getvalue())


def load_fills(path: Path, mode: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The fills of one mode saved by save_fills, per probe."""
    try:
        with np.load(path) as data:
            feats, labels, sizes = data[f"{mode}.feats"], data[f"{mode}.labels"], data[f"{mode}.sizes"]
    except (OSError, ValueError, KeyError) as exc:
        raise AppError(
            f"{path}: no saved fills of mode {mode} ({exc}); write them with fill-fit --part reader --save-fills"
        ) from exc
    if feats.ndim != 2 or feats.shape[1] != len(FEATURES):
        raise AppError(
            f"{path}: its fills have {feats.shape[-1]} features, this version has {len(FEATURES)} "
            f"({', '.join(FEATURES)}); save them again with fill-fit --part reader --save-fills"
        )
    cuts = np.cumsum(sizes)[:-1]
    return np.split(feats, cuts), np.split(labels, cuts)


def fit_reader(engine: FillEngine, probes: list[dict], cfg: FitConfig) -> Scoring:
    """The engine's scoring with, per mode, the reader's retrieval weight (the grid's best macro EM@1; ties:
    the smallest) and the confidence of re-ranked fills (on this run's fills and those of --with-fills)."""
    base = engine.scoring
    fills: dict[str, tuple[list[np.ndarray], list[np.ndarray]]]
    weights, grids, calibrations, quality, fills = {}, {}, {}, {}, {}
    for mode in cfg.modes:
        scores, passes = {}, {}
        for w in [base.reader_weight_of(mode)] if cfg.keep_weights else sorted(cfg.reader_grid):
            engine.scoring = base.model_copy(update={"reader_weight": {**base.reader_weight, mode: w}})
            passes[w] = run_probes(engine, probes, FillOptions(mode=mode, top_k=cfg.top_k, reader=True))
            scores[w] = macro_em(probes, passes[w][1])
            logger.warning("fit reader %s weight %g: macro EM@1 %.1f", mode, w, scores[w])
        weights[mode] = max(scores, key=lambda w: (scores[w], -w))
        grids[mode] = {str(w): round(v, 2) for w, v in scores.items()}
        feats, labels = fills[mode] = passes[weights[mode]]
        more = [load_fills(path, mode) for path in cfg.with_fills]
        cal = calibrations[mode] = fit_confidence(
            feats + [f for fs, _ in more for f in fs], labels + [lab for _, labs in more for lab in labs], cfg.c
        )
        top_conf = [float(cal(f[:1])[0]) if len(f) else None for f in feats]
        top_ok = [bool(lab.size and lab[0]) for lab in labels]
        quality[mode] = {
            "macro_em@1": round(macro_em(probes, labels), 2),
            "ece": round(float(calibration(top_conf, top_ok)["ece"]), 2),
        }
        logger.warning("fit reader %s confidence (this run's fills): %s", mode, quality[mode])
    engine.scoring = base
    if cfg.save_fills:
        save_fills(cfg.save_fills, fills)
    assert engine.reader is not None  # checked by run before fit_reader
    fitted = {
        **base.fitted,
        "reader": {
            "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "reader": engine.reader.name,
            "probes_file": cfg.probes.name if cfg.probes else None,
            "google_re_side": cfg.side if cfg.google_re else None,
            "probes": len(probes),
            "grid_macro_em@1": grids,
            "with_fills": [p.name for p in cfg.with_fills],
            "on_fit_data": quality,
            "features": list(FEATURES),
        },
    }
    return base.model_copy(
        update={
            "reader_weight": {**base.reader_weight, **weights},
            "reader_confidence": {**base.reader_confidence, **calibrations},
            "fitted": fitted,
        }
    )


def run_fit(cfg: FitConfig) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if cfg.google_re and cfg.side in ("held", "all"):
        raise AppError(
            f"--side {cfg.side} includes the held side, which is for reporting only; fit on train, train_a or train_b",
            kind="validation",
            field="side",
        )
    probes = select_probes(cfg.probes, cfg.google_re, cfg.side, cfg.per_relation, cfg.seed)
    if not probes:
        raise AppError("no probes to fit on", kind="validation")
    single_thread_blas()
    if cfg.part == "reader":
        engine = FillEngine.open(cfg.engine_config())  # the model's scoring, which the reader's joins
        if engine.reader is None:
            engine.close()
            raise AppError("--part reader needs a reader: give --reader-dir, or bundle one", kind="validation")
    else:
        engine = FillEngine.open(cfg.engine_config(), scoring=Scoring())  # never needs the old one
    try:
        scoring = fit_reader(engine, probes, cfg) if cfg.part == "reader" else fit(engine, probes, cfg)
    finally:
        engine.close()
    write_json_atomic(cfg.out, scoring.model_dump(mode="json"))
    quality = scoring.fitted["reader"]["on_fit_data"] if cfg.part == "reader" else scoring.fitted["on_fit_data"]
    print(
        f"wrote {cfg.out}: lexical weights {scoring.lexical_weight}, reader weight {scoring.reader_weight}; "
        f"fit quality {quality}"
    )


app = typer.Typer(add_completion=False)
model_command(app, FitConfig, run_fit, name="fill-fit", env_prefix="FILL_FIT_", exclude=("scoring",))


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="fill-fit")


if __name__ == "__main__":
    main()

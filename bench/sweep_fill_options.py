"""Macro EM@1 (and recall@5, ECE) of several fill settings over one index, the engine opened once.

    python -m bench.sweep_fill_options --index data-local/trex_dev/index \
        --probes data-local/trex_dev/fit_probes.jsonl --per-relation 50 --seed 1 \
        --try 'mode=restricted' --try 'mode=hybrid lexical_weight=8' --try 'mode=restricted reader_weight=1'

Each --try is space-separated key=value pairs: FillRequest fields (mode, blocks, k, alpha, lexical_weight,
reader, ...; JSON values) and two scoring overrides, `reader_weight` (the reader's retrieval weight of the
try's mode) and `scoring=FILE` (another scoring.json). The lever table of docs/QUALITY.md ("T-REx dev half") is
made with it, on probes disjoint from the reported sample (recipes/prepare_trex_dev.sh's fit_probes.jsonl).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from common.process import single_thread_blas
from evaluation.evaluate import evaluate, select_probes
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillOptions
from fill.scoring import Scoring


def parse_try(text: str) -> tuple[dict, dict]:
    """(FillOptions fields, scoring overrides) of one --try."""
    options, scoring = {}, {}
    for pair in text.split():
        key, _, value = pair.partition("=")
        if key in ("reader_weight", "scoring"):
            scoring[key] = value
            continue
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options, scoring


def scoring_for(base: Scoring, mode: str, overrides: dict) -> Scoring:
    scoring = Scoring.load(Path(overrides["scoring"])) if "scoring" in overrides else base
    if "reader_weight" in overrides:
        weights = {**scoring.reader_weight, mode: float(overrides["reader_weight"])}
        scoring = scoring.model_copy(update={"reader_weight": weights})
    return scoring


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--probes", type=Path, required=True)
    ap.add_argument("--per-relation", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--reader-dir", type=Path, default=None)
    ap.add_argument("--try", dest="tries", action="append", required=True)
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per try")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    single_thread_blas()
    probes = select_probes(args.probes, None, "all", args.per_relation, args.seed)
    engine = FillEngine.open(EngineConfig(index=args.index, model=args.model, reader_dir=args.reader_dir))
    base = engine.scoring
    try:
        for text in args.tries:
            fields, overrides = parse_try(text)
            options = FillOptions(**fields)
            engine.scoring = scoring_for(base, options.mode or engine.default_mode(), overrides)
            report = evaluate(engine, probes, options)
            row = {
                "try": text,
                "probes": report["probes"],
                "macro_em@1": round(report["macro_em@1"], 2),
                "macro_recall@5": round(report["macro_recall@5"], 2),
                "ece": round(report.get("calibration", {}).get("ece", float("nan")), 2),
                "p50_ms": round(report["latency_ms"]["p50"], 1),
            }
            print(json.dumps(row), flush=True)
            if args.out:
                with args.out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    finally:
        engine.close()


if __name__ == "__main__":
    main()

"""`fill-eval`: exact match of fills on LAMA-style probes, over the HTTP-free fill engine.

    fill-eval --index DIR --probes probes.jsonl [--per-relation 100] [--out predictions.jsonl]

Probe files: lines of {"relation", "query" (with one <mask>), "answers": [...]}, or LAMA Google-RE
files (`--google-re DIR`: sub_label / obj_label / obj_aliases with LAMA's templates).
A probe is correct when the top phrase, lower-cased with surrounding punctuation and white space
stripped, equals an answer normalised the same way (EM@1); recall@5 looks at the top five.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from encoder.tokens import count_masks
from service.engine import FillEngine, FillParams
from service.spans import strip_phrase

logger = logging.getLogger(__name__)

GOOGLE_RE_TEMPLATES = {
    "place_of_birth": "[X] was born in [Y] .",
    "date_of_birth": "[X] (born [Y]).",
    "place_of_death": "[X] died in [Y] .",
}


def normalize(text: str) -> str:
    a, b = strip_phrase(text)
    return " ".join(text[a:b].lower().split())


def load_probes(path: Path | None = None, google_re: Path | None = None) -> list[dict]:
    probes = []
    if google_re is not None:
        for relation, template in GOOGLE_RE_TEMPLATES.items():
            for line in open(google_re / f"{relation}_test.jsonl", encoding="utf-8"):
                d = json.loads(line)
                probes.append({
                    "relation": relation,
                    "query": template.replace("[X]", d["sub_label"]).replace("[Y]", "<mask>"),
                    "answers": [d["obj_label"], *d.get("obj_aliases", [])],
                })
    if path is not None:
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if line.strip():
                d = json.loads(line)
                if not isinstance(d, dict) or not {"relation", "query", "answers"} <= d.keys():
                    raise ValueError(f"{path}:{n}: a probe is an object with relation, query and answers")
                if not isinstance(d["answers"], list) or count_masks(d["query"]) != 1:
                    raise ValueError(f"{path}:{n}: answers must be a list and the query must hold one <mask>")
                probes.append(d)
    return probes


def subsample(probes: list[dict], per_relation: int | None, seed: int = 0) -> list[dict]:
    """A fixed random sample of at most `per_relation` probes of each relation (all when None)."""
    if not per_relation:
        return probes
    by_rel: dict[str, list[dict]] = defaultdict(list)
    for p in probes:
        by_rel[p["relation"]].append(p)
    rng = np.random.default_rng(seed)
    out = []
    for rel in sorted(by_rel):
        items = by_rel[rel]
        idx = sorted(rng.permutation(len(items))[:per_relation].tolist())
        out += [items[i] for i in idx]
    return out


def score_prediction(phrases: list[str], answers: list[str]) -> tuple[bool, bool]:
    gold = {normalize(a) for a in answers}
    preds = [normalize(p) for p in phrases]
    return bool(preds) and preds[0] in gold, any(p in gold for p in preds[:5])


def evaluate(engine: FillEngine, probes: list[dict], params: FillParams, out: Path | None = None) -> dict:
    stats: dict[str, dict] = defaultdict(lambda: {"n": 0, "em": 0, "r5": 0})
    latencies = []
    sink = open(out, "w", encoding="utf-8") if out else None
    for probe in probes:
        t0 = time.perf_counter()
        result = engine.fill(probe["query"], params)
        latencies.append((time.perf_counter() - t0) * 1000)
        phrases = [c.phrase for c in result.masks[0].candidates] if result.masks else []
        em, r5 = score_prediction(phrases, probe["answers"])
        s = stats[probe["relation"]]
        s["n"] += 1
        s["em"] += em
        s["r5"] += r5
        if sink:
            top = result.masks[0].candidates[:5] if result.masks else []
            sink.write(json.dumps({
                **probe, "predictions": [c.phrase for c in top], "scores": [round(c.score, 5) for c in top],
                "evidence": [c.evidence[0].doc_id if c.evidence else None for c in top], "em": em, "r5": r5,
            }, ensure_ascii=False) + "\n")
    if sink:
        sink.close()
    relations = {r: {"n": s["n"], "em@1": 100 * s["em"] / s["n"], "recall@5": 100 * s["r5"] / s["n"]} for r, s in sorted(stats.items())}
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {
        "relations": relations,
        "macro_em@1": float(np.mean([r["em@1"] for r in relations.values()])) if relations else 0.0,
        "macro_recall@5": float(np.mean([r["recall@5"] for r in relations.values()])) if relations else 0.0,
        "probes": len(probes),
        "latency_ms": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)), "mean": float(lat.mean())},
    }


def format_report(report: dict) -> str:
    lines = [f"{'relation':<20} {'n':>6} {'EM@1':>7} {'R@5':>7}"]
    for rel, r in report["relations"].items():
        lines.append(f"{rel:<20} {r['n']:>6} {r['em@1']:>7.1f} {r['recall@5']:>7.1f}")
    lines.append(f"{'macro':<20} {report['probes']:>6} {report['macro_em@1']:>7.1f} {report['macro_recall@5']:>7.1f}")
    lat = report["latency_ms"]
    lines.append(f"latency ms: p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  mean {lat['mean']:.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="fill-eval", description="Exact match of mask fills on LAMA-style probes.")
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--probes", type=Path, help='JSON lines {"relation", "query", "answers"}')
    ap.add_argument("--google-re", type=Path, help="directory with LAMA Google-RE *_test.jsonl files")
    ap.add_argument("--per-relation", type=int, default=None, help="evaluate a fixed random sample per relation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, default=None, help="encoder dir (default: the manifest's)")
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--max-span-tokens", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=0.0)
    ap.add_argument("--mode", choices=("dense", "restricted", "hybrid"), default="dense")
    ap.add_argument("--aggregate", choices=("max", "sum"), default="max", help="a phrase's mass over its occurrences")
    ap.add_argument("--blocks", type=int, default=3, help="BM25 blocks for restricted / hybrid")
    ap.add_argument("--out", type=Path, help="write every prediction as JSON lines")
    ap.add_argument("--report", type=Path, help="write the summary as JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not args.probes and not args.google_re:
        ap.error("give --probes FILE or --google-re DIR")
    from indexer.errors import IndexerError
    from service.config import Settings
    from service.state import load_engine

    try:
        probes = subsample(load_probes(args.probes, args.google_re), args.per_relation, args.seed)
        engine = load_engine(Settings(index=args.index, model=args.model))
    except (OSError, ValueError, IndexerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    params = FillParams(top_k=5, k=args.k, max_span_tokens=args.max_span_tokens, alpha=args.alpha, evidence=1,
                        mode=args.mode, blocks=args.blocks, aggregate=args.aggregate)
    try:
        report = evaluate(engine, probes, params, args.out)
    except ValueError as exc:  # e.g. a query longer than the model accepts
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(format_report(report))
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

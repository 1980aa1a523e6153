"""`fill-eval`: exact match of fills on LAMA-style probes, over the HTTP-free fill engine.

    fill-eval --index DIR --probes probes.jsonl [--per-relation 100] [--out predictions.jsonl] [--mode dense ...]
    fill-eval --task classify --index DIR --data FILE.jsonl --template "{text} It was <mask> ." --choices ...
      (closed-set scoring, evaluation.classify)

Every fill option of the API (`FillOptions`: --k, --mode, --aggregate, ...) is also a flag here.

Probe files: lines of {"relation", "query" (with one <mask>), "answers": [...]}, or LAMA Google-RE
files (`--google-re DIR`: sub_label / obj_label / obj_aliases with LAMA's templates).
A probe is correct when the top phrase, lower-cased with surrounding punctuation and white space
stripped, equals an answer normalised the same way (EM@1); recall@5 looks at the top five.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Literal

import numpy as np
import typer
from pydantic import Field, ValidationError

from common.cli import describe_errors, model_command
from common.errors import AppError
from common.files import write_bytes_atomic, write_json_atomic
from common.masks import count_masks
from common.process import single_thread_blas
from evaluation.calibration import calibration, format_calibration
from evaluation.classify import classify, format_classify, load_labelled, parse_choices
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import MAX_BLOCKS, MAX_SCORE_BLOCKS, FillOptions, FillRequest, Scorer, ScoreRequest
from fill.spans import strip_phrase

logger = logging.getLogger(__name__)

GOOGLE_RE_TEMPLATES = {
    "place_of_birth": "[X] was born in [Y] .",
    "date_of_birth": "[X] (born [Y]).",
    "place_of_death": "[X] died in [Y] .",
}


def normalize(text: str) -> str:
    a, b = strip_phrase(text)
    return " ".join(text[a:b].lower().split())


Side = Literal["held", "train", "train_a", "train_b", "all"]
# first hex digit of sha256(subject) -> side; train_a / train_b are the two folds of the train side
# (a model trained on train_a is fitted on train_b: scores of a model on text it never saw)
SIDE_DIGITS = {"train": "01234567", "held": "89abcdef", "train_a": "0123", "train_b": "4567"}


def _digit(sub_label: str) -> str:
    return hashlib.sha256(sub_label.encode("utf-8")).hexdigest()[0]


def google_re_side(sub_label: str) -> str:
    """The side of the subject-disjoint Google-RE split: "train" when the first hex digit of
    sha256(sub_label) is 0-7, else "held". Held-side snippets and probes never enter training."""
    return "train" if _digit(sub_label) in SIDE_DIGITS["train"] else "held"


def on_side(sub_label: str, side: Side) -> bool:
    """Whether a subject is on `side` ("all", a side of the split, or a fold of its train side)."""
    return side == "all" or _digit(sub_label) in SIDE_DIGITS[side]


class EvalConfig(FillOptions, EngineConfig):
    """Exact match of mask fills on LAMA-style probes, over the HTTP-free fill engine."""

    index: Path = Field(description="index directory built by `indexer build`")
    task: Literal["fill", "classify"] = Field(
        "fill",
        description="fill: EM of fills on probes; classify: accuracy of closed-set scoring (POST /score) on "
        "--data with --template and --choices",
    )
    data: Path | None = Field(None, description='classify: JSON lines {"text", "label"}')
    template: str | None = Field(
        None, description="classify: the query, {text} standing for each row's text, e.g. '{text} It was <mask> .'"
    )
    choices: list[str] | None = Field(
        None, description="classify: a label, or label=phrase,phrase (repeat the flag per choice)"
    )
    blocks: int = Field(
        FillOptions.model_fields["blocks"].default,
        ge=1,
        le=MAX_SCORE_BLOCKS,
        description=f"BM25 blocks used by restricted and hybrid modes (fill: at most {MAX_BLOCKS}; classify: up to "
        f"{MAX_SCORE_BLOCKS}, default: POST /score's)",
    )
    temperature: float | None = Field(
        None, gt=0.0, description="classify: softmax temperature over the retrieved tokens (default: POST /score's)"
    )
    scorer: Scorer | None = Field(
        None, description="classify: npm (start and end queries) or npm_single (start only) (default: POST /score's)"
    )
    synonyms: int | None = Field(
        None,
        ge=0,
        description="classify: words added per choice from the encoder's word-embedding space (default: POST /score's)",
    )
    calibrate: bool | None = Field(
        None, description="classify: divide each choice's mass by its base rate in the index (default: POST /score's)"
    )
    sharpness: float | None = Field(
        None, gt=0, description="classify: power of the choices' probabilities (default: POST /score's)"
    )
    probes: Path | None = Field(None, description='JSON lines {"relation", "query", "answers"}')
    google_re: Path | None = Field(None, description="directory with LAMA Google-RE *_test.jsonl files")
    side: Side = Field(
        "held",
        description="Google-RE probes of the held side (reported numbers), the train side (fitting), "
        "one of its folds train_a / train_b, or all",
    )
    per_relation: int | None = Field(None, ge=1, description="evaluate a fixed random sample per relation")
    seed: int = Field(0, description="seed of the per-relation sample")
    out: Path | None = Field(None, description="write every prediction as JSON lines")
    report: Path | None = Field(None, description="write the summary as JSON")


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise AppError(f"cannot read probes from {path}: {exc}") from exc


def _json(path: Path, n: int, line: str):
    try:
        return json.loads(line)
    except ValueError as exc:
        raise AppError(f"{path}:{n}: not valid JSON ({exc}); write one JSON object per line") from exc


def load_probes(path: Path | None = None, google_re: Path | None = None, side: Side = "all") -> list[dict]:
    """Probes of a JSON-lines file, and/or of the Google-RE files (those of `side` of the split)."""
    probes = []
    if google_re is not None:
        for relation, template in GOOGLE_RE_TEMPLATES.items():
            file = google_re / f"{relation}_test.jsonl"
            for n, line in enumerate(_read_lines(file), 1):
                d = _json(file, n, line)
                if not on_side(d["sub_label"], side):
                    continue
                probes.append(
                    {
                        "relation": relation,
                        "query": template.replace("[X]", d["sub_label"]).replace("[Y]", "<mask>"),
                        "answers": [d["obj_label"], *d.get("obj_aliases", [])],
                    }
                )
    if path is not None:
        for n, line in enumerate(_read_lines(path), 1):
            if line.strip():
                d = _json(path, n, line)
                if not isinstance(d, dict) or not {"relation", "query", "answers"} <= d.keys():
                    raise AppError(f"{path}:{n}: a probe is an object with relation, query and answers")
                if not isinstance(d["answers"], list) or count_masks(d["query"]) != 1:
                    raise AppError(f"{path}:{n}: answers must be a list and the query must hold one <mask>")
                probes.append(d)
    return probes


def select_probes(
    path: Path | None, google_re: Path | None, side: Side, per_relation: int | None, seed: int
) -> list[dict]:
    """The probes a job runs on (`fill-eval`, `fill-fit`): loaded, then sampled per relation."""
    if not path and not google_re:
        raise AppError("give --probes FILE or --google-re DIR", kind="validation")
    return subsample(load_probes(path, google_re, side), per_relation, seed)


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


def evaluate(engine: FillEngine, probes: list[dict], options: FillOptions, out: Path | None = None) -> dict:
    stats: dict[str, dict] = defaultdict(lambda: {"n": 0, "em": 0, "r5": 0})
    latencies, confidences, correct = [], [], []
    fill_options = options.model_dump(include=set(FillOptions.model_fields))
    lines = []  # predictions, written at the end (atomically) when `out` is given
    for probe in probes:
        t0 = time.perf_counter()
        result = engine.fill(FillRequest(text=probe["query"], **fill_options))
        latencies.append((time.perf_counter() - t0) * 1000)
        top = result.masks[0].candidates[:5] if result.masks else []
        em, r5 = score_prediction([c.phrase for c in top], probe["answers"])
        confidences.append(top[0].confidence if top else None)
        correct.append(em)
        s = stats[probe["relation"]]
        s["n"] += 1
        s["em"] += em
        s["r5"] += r5
        if out:
            lines.append(
                json.dumps(
                    {
                        **probe,
                        "predictions": [c.phrase for c in top],
                        "scores": [round(c.score, 5) for c in top],
                        "confidence": [round(c.confidence, 5) for c in top],
                        "evidence": [c.evidence[0].doc_id if c.evidence else None for c in top],
                        "em": em,
                        "r5": r5,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    if out:
        write_bytes_atomic(out, "".join(lines).encode("utf-8"))
    relations = {
        r: {"n": s["n"], "em@1": 100 * s["em"] / s["n"], "recall@5": 100 * s["r5"] / s["n"]}
        for r, s in sorted(stats.items())
    }
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {
        "relations": relations,
        "macro_em@1": float(np.mean([r["em@1"] for r in relations.values()])) if relations else 0.0,
        "macro_recall@5": float(np.mean([r["recall@5"] for r in relations.values()])) if relations else 0.0,
        "probes": len(probes),
        "calibration": calibration(confidences, correct),
        "latency_ms": {
            "p50": float(np.percentile(lat, 50)),
            "p99": float(np.percentile(lat, 99)),
            "mean": float(lat.mean()),
        },
    }


def format_report(report: dict) -> str:
    lines = [f"{'relation':<20} {'n':>6} {'EM@1':>7} {'R@5':>7}"]
    for rel, r in report["relations"].items():
        lines.append(f"{rel:<20} {r['n']:>6} {r['em@1']:>7.1f} {r['recall@5']:>7.1f}")
    lines.append(f"{'macro':<20} {report['probes']:>6} {report['macro_em@1']:>7.1f} {report['macro_recall@5']:>7.1f}")
    if "calibration" in report:
        lines += format_calibration(report["calibration"])
    lat = report["latency_ms"]
    lines.append(f"latency ms: p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  mean {lat['mean']:.1f}")
    return "\n".join(lines)


def run_eval(cfg: EvalConfig) -> None:
    logging.basicConfig(level=logging.WARNING)
    if cfg.task == "classify":
        return run_classify(cfg)
    try:
        FillRequest(text="<mask>", **cfg.model_dump(include=set(FillOptions.model_fields)))  # checked before loading
    except ValidationError as exc:
        raise AppError(describe_errors(exc), kind="validation") from None
    probes = select_probes(cfg.probes, cfg.google_re, cfg.side, cfg.per_relation, cfg.seed)
    single_thread_blas()
    engine = FillEngine.open(cfg.engine_config())
    report = evaluate(engine, probes, cfg, cfg.out)
    print(format_report(report))
    if cfg.report:
        write_json_atomic(cfg.report, report)


def score_options(cfg: EvalConfig) -> dict:
    """The ScoreRequest fields of a classify run: the flags given, the request's defaults for the others (k, mode,
    blocks, temperature and scorer default differently for fills)."""
    if not cfg.choices or cfg.data is None or cfg.template is None:
        raise AppError(
            "--task classify needs --data FILE, --template TEXT and --choices (two or more)", kind="validation"
        )
    fields = ("k", "mode", "blocks", "temperature", "scorer", "synonyms", "calibrate", "sharpness")
    given = {f: getattr(cfg, f) for f in fields if f in cfg.model_fields_set}
    return {"choices": parse_choices(cfg.choices), "evidence": 0, **given}


def run_classify(cfg: EvalConfig) -> None:
    options = score_options(cfg)
    try:
        ScoreRequest(text="<mask>", **options)  # the options checked before the engine loads
    except ValidationError as exc:
        raise AppError(describe_errors(exc), kind="validation") from None
    assert cfg.data is not None and cfg.template is not None  # checked by score_options
    rows = load_labelled(cfg.data)
    single_thread_blas()
    engine = FillEngine.open(cfg.engine_config())
    report = classify(engine, rows, cfg.template, options, cfg.out)
    print(format_classify(report))
    if cfg.report:
        write_json_atomic(cfg.report, report)


app = typer.Typer(add_completion=False)
model_command(app, EvalConfig, run_eval, name="fill-eval", env_prefix="FILL_EVAL_")


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="fill-eval")


if __name__ == "__main__":
    main()

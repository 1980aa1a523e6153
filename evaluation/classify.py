"""`fill-eval --task classify`: accuracy of closed-set scoring (fill.choices, POST /score) on a labelled set.

    fill-eval --task classify --index DIR --data rt.jsonl --template "{text} It was <mask> ." \
        --choices "positive=great" --choices "negative=terrible" [--scorer npm_single] [--temperature 5]

Data: JSON lines {"text", "label"}. The template holds `{text}` and one or more masks; every mask is scored
and the first one's prediction counts. A choice is `label` (the label is its own phrase) or
`label=phrase,phrase,...`. Printed: accuracy, each class's recall, the majority baseline (the most frequent
label's share), abstentions (no retrieved token voted; counted wrong) and the ECE of the winning
probability. The labels are for reporting: nothing here fits on them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from common.errors import AppError
from common.files import write_bytes_atomic
from evaluation.calibration import calibration, format_calibration
from fill.engine import FillEngine
from fill.schemas import Choice, ScoreRequest

TEXT_FIELD = "{text}"


def parse_choices(specs: list[str]) -> list[Choice]:
    """`label` or `label=phrase,phrase` per spec (AppError naming --choices otherwise)."""
    out = []
    for spec in specs:
        label, _, phrases = spec.partition("=")
        words = [p.strip() for p in phrases.split(",")] if phrases else [label.strip()]
        if not label.strip() or not all(words):
            raise AppError(
                f"--choices {spec!r}: write a label, or label=phrase,phrase (no empty phrase)", kind="validation"
            )
        out.append(Choice(label=label.strip(), phrases=words))
    return out


def load_labelled(path: Path) -> list[dict]:
    """The {"text", "label"} lines of a JSON-lines file (AppError naming the file and line otherwise)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise AppError(f"cannot read --data {path}: {exc}") from exc
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as exc:
            raise AppError(f"{path}:{n}: not valid JSON ({exc}); write one JSON object per line") from exc
        if not isinstance(d, dict) or not isinstance(d.get("text"), str) or not isinstance(d.get("label"), str):
            raise AppError(f"{path}:{n}: each line is an object with a string text and a string label")
        rows.append(d)
    if not rows:
        raise AppError(f"{path}: no labelled lines")
    return rows


def fill_template(template: str, text: str) -> str:
    return template.replace(TEXT_FIELD, text.strip())


def classify(engine: FillEngine, rows: list[dict], template: str, options: dict, out: Path | None = None) -> dict:
    """Score every row's templated text (`options`: ScoreRequest fields but text) and count accuracy."""
    if TEXT_FIELD not in template:
        raise AppError(f"--template must contain {TEXT_FIELD} where each row's text goes", kind="validation")
    labels = [c.label for c in options["choices"]]
    unknown = sorted({r["label"] for r in rows} - set(labels))
    if unknown:
        raise AppError(f"the data has labels {unknown} that no --choices names (choices: {labels})", kind="validation")
    correct, winning, latencies, lines = [], [], [], []
    for row in rows:
        t0 = time.perf_counter()
        mask = engine.score(ScoreRequest(text=fill_template(template, row["text"]), **options)).masks[0]
        latencies.append((time.perf_counter() - t0) * 1000)
        ok = not mask.abstained and mask.predicted == row["label"]
        correct.append(ok)
        winning.append(None if mask.abstained else max(c.probability for c in mask.choices))
        if out:
            lines.append(
                json.dumps(
                    {
                        **row,
                        "predicted": mask.predicted,
                        "correct": ok,
                        "probabilities": {c.label: round(c.probability, 5) for c in mask.choices},
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    if out:
        write_bytes_atomic(out, "".join(lines).encode("utf-8"))
    return report(rows, correct, winning, latencies)


def report(rows: list[dict], correct: list[bool], winning: list[float | None], latencies: list[float]) -> dict:
    counts = Counter(r["label"] for r in rows)
    recall = {
        label: 100 * sum(ok for r, ok in zip(rows, correct) if r["label"] == label) / n
        for label, n in sorted(counts.items())
    }
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {
        "examples": len(rows),
        "accuracy": 100 * float(np.mean(correct)),
        "recall": recall,
        "majority": 100 * counts.most_common(1)[0][1] / len(rows),
        "abstained": sum(w is None for w in winning),
        "calibration": calibration(winning, correct),
        "latency_ms": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99))},
    }


def format_classify(rep: dict) -> str:
    lines = [
        f"examples {rep['examples']}  accuracy {rep['accuracy']:.1f}  majority baseline {rep['majority']:.1f}  "
        f"abstained {rep['abstained']}",
        "recall: " + "  ".join(f"{label} {r:.1f}" for label, r in rep["recall"].items()),
    ]
    lines += format_calibration(rep["calibration"], "winning choice", "accuracy")
    lines.append(f"latency ms: p50 {rep['latency_ms']['p50']:.1f}  p99 {rep['latency_ms']['p99']:.1f}")
    return "\n".join(lines)

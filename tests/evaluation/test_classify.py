"""`fill-eval --task classify` (evaluation.classify): choices and data parsing, the report's figures, the CLI."""

from __future__ import annotations

import json

import pytest

from common.errors import AppError
from evaluation.classify import classify, load_labelled, parse_choices, report
from evaluation.evaluate import main
from fill.config import EngineConfig
from fill.engine import FillEngine


def test_parse_choices():
    a, b = parse_choices(["positive=great, good", "negative"])
    assert (a.label, a.phrases) == ("positive", ["great", "good"])
    assert (b.label, b.phrases) == ("negative", ["negative"])
    for bad in ("=great", "positive=great,,good", " "):
        with pytest.raises(AppError, match="--choices"):
            parse_choices([bad])


def test_load_labelled_names_the_bad_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n\n{"text": "b"}\n')
    with pytest.raises(AppError, match=r"d.jsonl:3: each line is an object with a string text and a string label"):
        load_labelled(path)
    path.write_text('{"text": "a", "label": "x"}\nnot json\n')
    with pytest.raises(AppError, match=r"d.jsonl:2: not valid JSON"):
        load_labelled(path)
    with pytest.raises(AppError, match="cannot read --data"):
        load_labelled(tmp_path / "missing.jsonl")


def test_report_counts_accuracy_recall_majority_and_abstentions():
    rows = [{"label": "a"}, {"label": "a"}, {"label": "a"}, {"label": "b"}]
    rep = report(rows, [True, False, True, False], [0.9, 0.6, None, 0.8], [1.0, 2.0, 3.0, 4.0])
    assert rep["accuracy"] == 50.0 and rep["majority"] == 75.0 and rep["abstained"] == 1
    assert rep["recall"] == {"a": pytest.approx(200 / 3), "b": 0.0}
    assert rep["calibration"]["accuracy"] == pytest.approx(100 / 3)  # the answered ones only


def test_classify_scores_each_row_and_refuses_labels_no_choice_names(tiny_index, tmp_path):
    engine = FillEngine.open(EngineConfig(index=tiny_index))
    rows = [
        {"text": "Marie Curie was born in Warsaw.", "label": "Poland"},
        {"text": "The Seine flows through Paris.", "label": "France"},
    ]
    options = {"choices": parse_choices(["Poland=Warsaw", "France=Paris,France"]), "evidence": 0}
    out = tmp_path / "preds.jsonl"
    rep = classify(engine, rows, "{text} It is about <mask> .", options, out)
    preds = [json.loads(x) for x in out.read_text().splitlines()]
    assert [p["correct"] for p in preds].count(True) / 2 * 100 == rep["accuracy"]
    assert all(sum(p["probabilities"].values()) == pytest.approx(1.0) for p in preds)
    with pytest.raises(AppError, match=r"labels \['Spain'\]"):
        classify(engine, rows + [{"text": "x", "label": "Spain"}], "{text} <mask>", options)
    with pytest.raises(AppError, match=r"\{text\}"):
        classify(engine, rows, "It is about <mask> .", options)


def test_the_cli_prints_the_report(tiny_index, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps({"text": "The Seine flows through Paris.", "label": "France"})
        + "\n"
        + json.dumps({"text": "Marie Curie was born in Warsaw.", "label": "Poland"})
        + "\n"
    )
    rep = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--task",
                "classify",
                "--index",
                str(tiny_index),
                "--data",
                str(data),
                "--template",
                "{text} <mask> .",
                "--choices",
                "France=Paris",
                "--choices",
                "Poland=Warsaw",
                "--scorer",
                "npm_single",
                "--report",
                str(rep),
            ]
        )
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "examples 2" in printed and "majority baseline 50.0" in printed and "winning choice" in printed
    assert json.loads(rep.read_text())["examples"] == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "classify", "--index", str(tiny_index), "--data", str(data)])
    assert exit_info.value.code == 2
    assert "--template" in capsys.readouterr().err


def test_classify_options_default_to_the_score_requests_own(tmp_path):
    from evaluation.evaluate import EvalConfig, score_options
    from fill.schemas import SCORE_BLOCKS, SHARPNESS, ScoreRequest

    base = {
        "index": tmp_path,
        "task": "classify",
        "data": tmp_path / "d.jsonl",
        "template": "{text} <mask>",
        "choices": ["a", "b"],
    }
    options = score_options(EvalConfig(**base))
    request = ScoreRequest(text="<mask>", **options)
    assert {"k", "mode", "blocks", "temperature", "scorer"}.isdisjoint(options)  # EvalConfig's fill defaults unused
    assert (request.blocks, request.temperature, request.k, request.sharpness) == (SCORE_BLOCKS, 1.0, 4096, SHARPNESS)
    assert SCORE_BLOCKS > 100  # more than a fill may ask for: a classify run may too
    given = score_options(EvalConfig(**base, blocks=300, temperature=2.0, scorer="npm_single", sharpness=1.0))
    assert (given["blocks"], given["temperature"], given["scorer"], given["sharpness"]) == (300, 2.0, "npm_single", 1.0)
    with pytest.raises(AppError, match="--template"):
        score_options(EvalConfig(**{**base, "template": None}))

"""Tests for evaluation.evaluate (`fill-eval`): normalisation, scoring, probe loading, evaluation over the tiny
index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import AppError
from evaluation.evaluate import (
    GOOGLE_RE_TEMPLATES,
    evaluate,
    format_report,
    load_probes,
    main,
    normalize,
    score_prediction,
    subsample,
)
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillOptions, FillRequest
from tests.conftest import CORPUS, write_jsonl

PARAMS = FillOptions(top_k=5, k=1024, max_span_tokens=10, alpha=0.0, evidence=1)
QUERIES = [
    "Paris is the capital of <mask>.",
    "Marie Curie was born in <mask> in 1867.",
    "The Seine flows through <mask>.",
    "Allan Peiper is an <mask> cyclist.",
]
DOC_IDS = {d["id"] for d in CORPUS}


# ---------------------------------------------------------------- normalize / score


@pytest.mark.parametrize(
    "text, want",
    [
        ("Paris", "paris"),
        ("  PARIS ", "paris"),
        ("Paris,", "paris"),
        ("«Paris»", "paris"),
        ("(New   York)!", "new york"),
        ("\tThe  Big\nApple .", "the big apple"),
        ("St. Louis", "st. louis"),  # inner punctuation stays
        ("U.S.", "u.s"),
        ("", ""),
        (" ... ", ""),
    ],
)
def test_normalize(text, want):
    assert normalize(text) == want


def test_score_prediction():
    five = ["Lyon", "Nice", "Lille", "Metz", "Paris"]
    assert score_prediction(["Paris", "Lyon"], ["paris"]) == (True, True)
    assert score_prediction(["Lyon", "Paris"], ["Paris"]) == (False, True)
    assert score_prediction(five, ["Paris"]) == (False, True)
    assert score_prediction(five[:4] + ["Brest", "Paris"], ["Paris"]) == (False, False)  # sixth is too late
    assert score_prediction([" Paris."], ["PARIS"]) == (True, True)
    assert score_prediction(["City of  Light"], ["Paris", "city of light"]) == (True, True)  # an alias
    assert score_prediction(["Lutetia"], ["Paris", "city of light"]) == (False, False)
    assert score_prediction([], ["Paris"]) == (False, False)
    assert score_prediction(["Paris"], []) == (False, False)


# ---------------------------------------------------------------- subsample


def _probes(counts: dict[str, int]) -> list[dict]:
    return [
        {"relation": r, "query": f"{r} {i} <mask>", "answers": [str(i)]} for r, n in counts.items() for i in range(n)
    ]


def test_subsample_caps_per_relation_and_is_deterministic():
    probes = _probes({"b": 7, "a": 2, "c": 5})
    assert subsample(probes, None) is probes
    assert subsample(probes, 0) is probes
    got = subsample(probes, 3, seed=0)
    assert [p["relation"] for p in got] == ["a", "a", "b", "b", "b", "c", "c", "c"]
    assert subsample(probes, 3, seed=0) == got
    assert all(p in probes for p in got)
    for rel in "abc":  # original order kept inside a relation, no duplicates
        idx = [probes.index(p) for p in got if p["relation"] == rel]
        assert idx == sorted(set(idx))
    samples = {tuple(probes.index(p) for p in subsample(probes, 3, seed=s)) for s in range(10)}
    assert len(samples) > 1  # the seed matters
    assert len(subsample(probes, 100)) == len(probes)


# ---------------------------------------------------------------- load_probes


def _google_re(root: Path, missing_aliases: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = {
        "place_of_birth": [("Marie Curie", "Warsaw", ["Warszawa"]), ("Allan Peiper", "Alexandra", [])],
        "date_of_birth": [("Allan Peiper", "1960", ["26 April 1960"])],
        "place_of_death": [("Marie Curie", "Passy", ["Passy, France"])],
    }
    for rel, items in rows.items():
        lines = []
        for sub, obj, aliases in items:
            d = {"sub_label": sub, "obj_label": obj, "extra": 1}
            if aliases or not missing_aliases:
                d["obj_aliases"] = aliases
            lines.append(json.dumps(d))
        (root / f"{rel}_test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_load_generic_jsonl(tmp_path):
    rows = [
        {"relation": "capital", "query": "Paris is the capital of <mask>.", "answers": ["France"], "id": 7},
        {"relation": "birth", "query": "Curie was born in <mask>.", "answers": ["Warsaw", "Warszawa"]},
    ]
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n   \n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    assert load_probes(path) == rows


def test_load_google_re(tmp_path):
    root = _google_re(tmp_path / "gre", missing_aliases=True)
    probes = load_probes(google_re=root)
    assert probes == [
        {"relation": "place_of_birth", "query": "Marie Curie was born in <mask> .", "answers": ["Warsaw", "Warszawa"]},
        {"relation": "place_of_birth", "query": "Allan Peiper was born in <mask> .", "answers": ["Alexandra"]},
        {"relation": "date_of_birth", "query": "Allan Peiper (born <mask>).", "answers": ["1960", "26 April 1960"]},
        {"relation": "place_of_death", "query": "Marie Curie died in <mask> .", "answers": ["Passy", "Passy, France"]},
    ]
    assert set(GOOGLE_RE_TEMPLATES) == {"place_of_birth", "date_of_birth", "place_of_death"}
    # both sources: Google-RE first, then the generic file
    extra = write_jsonl(tmp_path / "x.jsonl", [{"relation": "r", "query": "q <mask>", "answers": ["a"]}])
    both = load_probes(extra, root)
    assert len(both) == 5 and both[-1]["relation"] == "r" and both[:4] == probes


def test_load_probes_errors(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"relation": "r", "query": "q <mask>", "answers": ["a"]})
        + "\n"
        + json.dumps({"relation": "r", "query": "q <mask>"})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(AppError, match=r"bad\.jsonl:2"):
        load_probes(path)
    incomplete = tmp_path / "gre"
    incomplete.mkdir()
    (incomplete / "place_of_birth_test.jsonl").write_text(json.dumps({"sub_label": "A", "obj_label": "B"}) + "\n")
    with pytest.raises(AppError, match="date_of_birth_test.jsonl"):
        load_probes(google_re=incomplete)
    assert load_probes() == []


# ---------------------------------------------------------------- evaluate over the tiny index


@pytest.fixture(scope="module")
def engine(tiny_index):
    return FillEngine.open(EngineConfig(index=tiny_index, device="cpu", dtype="fp32"))


@pytest.fixture(scope="module")
def tops(engine) -> dict[str, list[str]]:
    """The engine's own top-5 phrases for each query."""
    out = {}
    for q in QUERIES:
        cands = engine.fill(FillRequest(text=q, **PARAMS.model_dump())).masks[0].candidates
        assert cands, q
        out[q] = [c.phrase for c in cands]
    return out


def _probe_set(tops) -> list[dict]:
    right = [{"relation": "right", "query": q, "answers": [tops[q][0].upper() + " "]} for q in QUERIES]
    wrong = [{"relation": "wrong", "query": q, "answers": ["zzqx nonsense"]} for q in QUERIES]
    second = [
        {"relation": "second", "query": q, "answers": [tops[q][1]]}
        for q in QUERIES
        if len(tops[q]) > 1 and normalize(tops[q][1]) != normalize(tops[q][0])
    ]
    return right + wrong + second


def test_evaluate_numbers(engine, tops, tmp_path):
    probes = _probe_set(tops)
    n_second = sum(p["relation"] == "second" for p in probes)
    assert n_second >= 1
    out = tmp_path / "pred.jsonl"
    report = evaluate(engine, probes, PARAMS, out)
    rel = report["relations"]
    assert list(rel) == ["right", "second", "wrong"]
    assert rel["right"] == {"n": len(QUERIES), "em@1": 100.0, "recall@5": 100.0}
    assert rel["wrong"] == {"n": len(QUERIES), "em@1": 0.0, "recall@5": 0.0}
    assert rel["second"] == {"n": n_second, "em@1": 0.0, "recall@5": 100.0}
    assert report["macro_em@1"] == pytest.approx(100 / 3)
    assert report["macro_recall@5"] == pytest.approx(200 / 3)
    assert report["probes"] == len(probes)
    lat = report["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p99"] and lat["mean"] > 0

    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == len(probes)
    for probe, line in zip(probes, lines):
        assert {k: line[k] for k in probe} == probe
        assert line["predictions"] == tops[probe["query"]][:5]
        assert len(line["scores"]) == len(line["predictions"]) == len(line["evidence"])
        assert line["scores"] == sorted(line["scores"], reverse=True)
        assert set(line["evidence"]) <= DOC_IDS
        want = {"right": (True, True), "wrong": (False, False), "second": (False, True)}[probe["relation"]]
        assert (line["em"], line["r5"]) == want
    table = format_report(report)
    assert "right" in table and "macro" in table and "33.3" in table


def test_evaluate_without_output_and_empty(engine, tops):
    probes = [{"relation": "r", "query": QUERIES[0], "answers": [tops[QUERIES[0]][0]]}]
    report = evaluate(engine, probes, PARAMS)
    assert report["relations"] == {"r": {"n": 1, "em@1": 100.0, "recall@5": 100.0}}
    empty = evaluate(engine, [], PARAMS)
    assert empty["relations"] == {} and empty["macro_em@1"] == 0.0 and empty["probes"] == 0


def run_main(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:  # the command line exits 0 when done
        main(args)
    assert exc.value.code in (0, None)


def test_fill_eval_main(tiny_index, tops, tmp_path, capsys):
    probes = _probe_set(tops)
    path = write_jsonl(tmp_path / "probes.jsonl", probes)
    report_path, pred_path = tmp_path / "report.json", tmp_path / "pred.jsonl"
    run_main(["--index", str(tiny_index), "--probes", str(path), "--report", str(report_path), "--out", str(pred_path)])
    report = json.loads(report_path.read_text())
    assert report["relations"]["right"]["em@1"] == 100.0
    assert report["relations"]["wrong"]["em@1"] == 0.0
    assert report["macro_em@1"] == pytest.approx(100 / 3)
    assert report["probes"] == len(probes)
    assert len(pred_path.read_text().splitlines()) == len(probes)
    printed = capsys.readouterr().out
    assert "macro" in printed and "right" in printed

    # --per-relation 1: one probe per relation
    run_main(["--index", str(tiny_index), "--probes", str(path), "--report", str(report_path), "--per-relation", "1"])
    report = json.loads(report_path.read_text())
    assert report["probes"] == 3 and all(r["n"] == 1 for r in report["relations"].values())


def test_fill_eval_main_google_re(tiny_index, tmp_path):
    root = _google_re(tmp_path / "gre")
    report_path = tmp_path / "r.json"
    run_main(["--index", str(tiny_index), "--google-re", str(root), "--side", "all", "--report", str(report_path)])
    report = json.loads(report_path.read_text())
    assert report["probes"] == 4
    assert {r: v["n"] for r, v in report["relations"].items()} == {
        "date_of_birth": 1,
        "place_of_birth": 2,
        "place_of_death": 1,
    }


def test_fill_eval_google_re_defaults_to_the_held_side(tiny_index, tmp_path):
    root = _google_re(tmp_path / "gre")
    with open(root / "place_of_birth_test.jsonl", "a", encoding="utf-8") as f:  # a train-side subject
        f.write(json.dumps({"sub_label": "Ada Lovelace", "obj_label": "London", "obj_aliases": []}) + "\n")
    report_path = tmp_path / "r.json"
    run_main(["--index", str(tiny_index), "--google-re", str(root), "--report", str(report_path)])
    assert len(load_probes(google_re=root, side="all")) == 5
    assert json.loads(report_path.read_text())["probes"] == len(load_probes(google_re=root, side="held")) == 4


def test_fill_eval_main_errors(tiny_index, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--index", str(tiny_index)])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["--index", str(tiny_index), "--probes", str(tmp_path / "missing.jsonl")])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"relation": "r", "query": "q <mask>"}) + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["--index", str(tiny_index), "--probes", str(bad)])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["--index", str(tmp_path / "no_index"), "--probes", str(bad)])
    assert exc.value.code == 2
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"relation": "r", "query": "q <mask>", "answers": ["a"]}) + "\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # a classify run may ask for 400 blocks, a fill for 100
        main(["--index", str(tiny_index), "--probes", str(good), "--blocks", "200"])
    assert exc.value.code == 2 and "--blocks" in capsys.readouterr().err


# ---------------------------------------------------------------- the subject-disjoint Google-RE split


def test_google_re_side_follows_the_first_hex_digit_of_sha256():
    import hashlib

    from evaluation.evaluate import google_re_side

    names = [f"Person {i}" for i in range(200)] + ["Marie Curie", "Allan Peiper", "Zoë Ø"]
    for name in names:
        digit = hashlib.sha256(name.encode("utf-8")).hexdigest()[0]
        assert google_re_side(name) == ("train" if int(digit, 16) < 8 else "held")
    sides = [google_re_side(n) for n in names]
    assert 60 < sides.count("train") < 140  # about half


def test_the_train_folds_split_the_train_side():
    from evaluation.evaluate import google_re_side, on_side

    names = [f"Person {i}" for i in range(300)]
    for name in names:
        a, b, held = on_side(name, "train_a"), on_side(name, "train_b"), on_side(name, "held")
        assert (a or b) == (google_re_side(name) == "train") and not (a and b) and held == (not (a or b))
        assert on_side(name, "all") and on_side(name, "train") == (a or b)
    assert 40 < sum(on_side(n, "train_a") for n in names) < 110  # about a quarter


def test_load_probes_by_side(tmp_path):
    from evaluation.evaluate import google_re_side

    root = _google_re(tmp_path / "gre")
    with open(root / "date_of_birth_test.jsonl", "a", encoding="utf-8") as f:  # a train-side subject
        f.write(json.dumps({"sub_label": "Ada Lovelace", "obj_label": "1815", "obj_aliases": []}) + "\n")
    every = load_probes(google_re=root)
    train, held = load_probes(google_re=root, side="train"), load_probes(google_re=root, side="held")
    assert len(train) + len(held) == len(every) == 5 and len(train) == 1
    subject = {p["query"]: p["query"].split(" (born")[0].split(" was born")[0].split(" died")[0] for p in every}
    assert all(google_re_side(subject[p["query"]]) == "train" for p in train)
    assert all(google_re_side(subject[p["query"]]) == "held" for p in held)

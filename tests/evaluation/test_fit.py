"""fill-fit: the lexical weight grid, the confidence calibration and the scoring file it writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import AppError
from evaluation.calibration import calibration
from evaluation.fit import FitConfig, fit_calibration, load_fills, main
from fill.scoring import FEATURES, SCORING_NAME, Scoring
from tests.conftest import CORPUS, write_jsonl


def test_calibration_metrics_by_hand():
    report = calibration([0.95, 0.95, 0.15, 0.15, None], [True, False, False, False, False])
    # bin 9: accuracy 0.5, confidence 0.95; bin 1: accuracy 0, confidence 0.15; each half the answers
    assert report["ece"] == pytest.approx(100 * (0.5 * 0.45 + 0.5 * 0.15))
    assert report["accuracy"] == pytest.approx(25.0) and report["mean_confidence"] == pytest.approx(55.0)
    rows = {r["threshold"]: r for r in report["risk_coverage"]}
    assert rows[0.3]["coverage"] == pytest.approx(40.0) and rows[0.3]["accuracy"] == pytest.approx(50.0)
    assert rows[0.9]["coverage"] == pytest.approx(40.0)
    none = calibration([None], [False])
    assert none["ece"] == 0.0 and all(r["coverage"] == 0.0 and r["accuracy"] is None for r in none["risk_coverage"])


def test_fit_calibration_recovers_a_calibrated_probability():
    rng = np.random.default_rng(0)
    n = 6000
    x = rng.standard_normal((n, len(FEATURES)))
    true_logit = 1.5 * x[:, 0] + 0.5 * x[:, 1] - 0.7 * x[:, 2]
    y = rng.random(n) < 1 / (1 + np.exp(-true_logit))
    cal = fit_calibration([x[: n // 2]], [y[: n // 2]])
    p = cal(x[n // 2 :])
    assert cal.coef[0] > 1.0 and cal.coef[1] > 0.2 and cal.coef[2] < -0.3
    # calibrated on fresh data from the same law
    assert calibration(p.tolist(), y[n // 2 :].tolist())["ece"] < 3.0


def test_fit_calibration_never_decreases_with_the_score():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((500, len(FEATURES)))
    y = rng.random(500) < 1 / (1 + np.exp(2.0 * x[:, 0] - x[:, 3]))  # higher score, less often right
    cal = fit_calibration([x], [y])
    assert cal.coef[0] == 0.0 and cal.coef[3] > 0.3  # left out; the other features still fitted


def test_fit_refuses_the_held_side(tmp_path, tiny_index, capsys):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--index",
                str(tiny_index),
                "--google-re",
                str(tmp_path),
                "--side",
                "held",
                "--out",
                str(tmp_path / "s.json"),
            ]
        )
    assert exc.value.code == 2
    assert "held side" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def _right_and_wrong_probes(tmp_path):
    """Probes over the tiny corpus whose fills are right (every run of up to 12 words of the corpus is an
    answer of the first two) and wrong (the third's answer is nowhere): both classes to fit on."""
    runs = [d["text"].split() for d in CORPUS]
    words = sorted({" ".join(ws[i : i + n]) for ws in runs for n in range(1, 13) for i in range(len(ws))})
    return write_jsonl(
        tmp_path / "probes.jsonl",
        [
            {"relation": "any_word", "query": "Marie Curie was born in <mask> .", "answers": words},
            {"relation": "any_word", "query": "Paris is the capital of <mask> .", "answers": words},
            {"relation": "nothing", "query": "The Seine flows through <mask> .", "answers": ["zzz"]},
        ],
    )


def test_fit_writes_a_scoring_file_the_engine_uses(tmp_path, tiny_index, tiny_bert_dir):
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.schemas import FillRequest

    probes = _right_and_wrong_probes(tmp_path)
    out = tmp_path / "model" / SCORING_NAME
    out.parent.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--index",
                str(tiny_index),
                "--probes",
                str(probes),
                "--out",
                str(out),
                "--grid",
                "0",
                "--grid",
                "50",
                "--per-relation",
                "5",
            ]
        )
    assert exc.value.code == 0
    written = json.loads(out.read_text())
    scoring = Scoring.model_validate(written)
    assert set(scoring.lexical_weight) == {"restricted", "hybrid"}
    for mode, weight in scoring.lexical_weight.items():  # the best of the grid; a tie goes to the smaller
        grid = {float(w): em for w, em in written["fitted"]["grid_macro_em@1"][mode].items()}
        assert weight == min(w for w, em in grid.items() if em == max(grid.values()))
    assert set(scoring.confidence) == {"dense", "restricted", "hybrid"}
    assert written["fitted"]["data"]["probes"] == 3 and written["fitted"]["features"] == list(FEATURES)
    assert set(written["fitted"]["grid_macro_em@1"]["hybrid"]) == {"0.0", "50.0"}
    engine = FillEngine.open(EngineConfig(index=tiny_index, model=tiny_bert_dir, scoring=out))
    assert engine.scoring == scoring
    cands = engine.fill(FillRequest(text="Paris is the capital of <mask> .", mode="hybrid")).masks[0].candidates
    np.testing.assert_allclose(
        [c.confidence for c in cands],
        scoring.confidence["hybrid"](
            engine.fill_detailed(FillRequest(text="Paris is the capital of <mask> .", mode="hybrid"))[1][0]
        ),
    )
    assert FitConfig.model_fields["side"].default == "train_b"


def test_fit_ignores_a_broken_scoring_file_beside_the_model(tmp_path, tiny_index, tiny_bert_dir):
    """fill-fit is how a broken scoring.json is replaced: it must not need the old one."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    (model / SCORING_NAME).write_text("{ not json")
    probes = _right_and_wrong_probes(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--index",
                str(tiny_index),
                "--model",
                str(model),
                "--probes",
                str(probes),
                "--grid",
                "0",
                "--modes",
                "dense",
                "--out",
                str(model / SCORING_NAME),
            ]
        )
    assert exc.value.code == 0
    assert set(Scoring.load(model / SCORING_NAME).confidence) == {"dense"}


def test_fit_part_reader_fits_the_reader_weight_and_calibration_and_keeps_the_rest(tmp_path, tiny_index, tiny_bert_dir):
    from encoder.reader_files import ReaderCard, vocab_fingerprint
    from encoder.reader_model import load_model, save_reader

    model, tokenizer = load_model(tiny_bert_dir)  # an untrained reader: identity heads
    reader = tmp_path / "reader"
    reader.mkdir()
    save_reader(model, tokenizer, ReaderCard(vocab=vocab_fingerprint(tokenizer), window=3, phrases=4), reader)
    probes = _right_and_wrong_probes(tmp_path)
    out = tmp_path / SCORING_NAME
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--part",
                "reader",
                "--index",
                str(tiny_index),
                "--reader-dir",
                str(reader),
                "--probes",
                str(probes),
                "--reader-grid",
                "0",
                "--reader-grid",
                "3",
                "--out",
                str(out),
            ]
        )
    assert exc.value.code == 0
    written = json.loads(out.read_text())
    scoring = Scoring.model_validate(written)
    for mode in ("dense", "restricted", "hybrid"):  # per mode, the best of the grid; a tie goes to the smaller
        grid = {float(w): em for w, em in written["fitted"]["reader"]["grid_macro_em@1"][mode].items()}
        assert set(grid) == {0.0, 3.0}
        assert scoring.reader_weight[mode] == min(w for w, em in grid.items() if em == max(grid.values()))
    assert set(scoring.reader_confidence) == {"dense", "restricted", "hybrid"}
    assert scoring.lexical_weight == {} and scoring.confidence == {}  # the model's own (none here): kept
    saved = tmp_path / "fills.npz"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--part",
                "reader",
                "--index",
                str(tiny_index),
                "--reader-dir",
                str(reader),
                "--probes",
                str(probes),
                "--reader-grid",
                "3",
                "--modes",
                "hybrid",
                "--save-fills",
                str(saved),
                "--out",
                str(tmp_path / "a.json"),
            ]
        )
    assert exc.value.code == 0
    feats, labels = load_fills(saved, "hybrid")
    assert len(feats) == len(labels) == 3 and all(len(f) == len(lab) for f, lab in zip(feats, labels))
    assert json.loads((tmp_path / "a.json").read_text())["fitted"]["reader"]["features"] == list(FEATURES)
    old = tmp_path / "old.npz"  # fills saved by a version with fewer features: refused, naming the file
    with np.load(saved) as data:
        np.savez(old, **{k: (v[:, :6] if k.endswith(".feats") else v) for k, v in data.items()})
    with pytest.raises(AppError, match="old.npz: its fills have 6 features"):
        load_fills(old, "hybrid")
    with pytest.raises(SystemExit) as exc:  # fitted on its own fills and the saved ones: twice the data
        main(
            [
                "--part",
                "reader",
                "--index",
                str(tiny_index),
                "--reader-dir",
                str(reader),
                "--probes",
                str(probes),
                "--reader-grid",
                "3",
                "--modes",
                "hybrid",
                "--with-fills",
                str(saved),
                "--out",
                str(tmp_path / "b.json"),
            ]
        )
    assert exc.value.code == 0
    doubled = Scoring.load(tmp_path / "b.json").reader_confidence["hybrid"].top
    want = fit_calibration([f[:1] for f in feats] * 2, [lab[:1] for lab in labels] * 2)
    np.testing.assert_allclose(doubled.coef, want.coef, rtol=1e-6, atol=1e-9)
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--part",
                "reader",
                "--index",
                str(tiny_index),
                "--no-use-reader",
                "--probes",
                str(probes),
                "--out",
                str(tmp_path / "x.json"),
            ]
        )
    assert exc.value.code != 0 and not (tmp_path / "x.json").exists()

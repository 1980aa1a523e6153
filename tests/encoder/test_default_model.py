"""The bundled default model (encoder/default_model): present, small, documented, and it fills facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from encoder.model_files import BUNDLED_MODEL, base_model_dir, default_model_dir, model_fingerprint
from encoder.reader import BUNDLED_READER
from tests.conftest import CORPUS, write_jsonl


def test_the_bundled_model_is_the_default():
    assert (BUNDLED_MODEL / "config.json").is_file(), "encoder/default_model is missing"
    assert default_model_dir() == BUNDLED_MODEL
    assert model_fingerprint(BUNDLED_MODEL) != model_fingerprint(base_model_dir())


def test_weights_are_fp16_safetensors_under_50_mb():
    from safetensors import safe_open

    weights = BUNDLED_MODEL / "model.safetensors"
    assert weights.stat().st_size < 50 * 2**20
    with safe_open(str(weights), framework="pt") as f:
        dtypes = {str(f.get_slice(name).get_dtype()) for name in f.keys()}
    assert dtypes == {"F16"}


def test_model_card_gives_recipe_data_license_and_quality():
    card = (BUNDLED_MODEL / "README.md").read_text(encoding="utf-8")
    for needed in (
        "all-MiniLM-L6-v2",
        "Apache-2.0",
        "CC-BY-NC",
        "recipes/train_default_model.sh",
        "EM@1",
        "restricted",
    ):
        assert needed in card, needed
    cfg = json.loads((BUNDLED_MODEL / "train_config.json").read_text(encoding="utf-8"))
    # the subject binding: similar groups and the title (the subject) in every query
    assert cfg["grouping"] == "similar" and cfg["positives"] in ("self", "mixed") and cfg["query_title_dropout"] == 0


def test_the_bundled_scoring_is_fitted_for_every_mode_away_from_the_held_side():
    from fill.schemas import MODES
    from fill.scoring import SCORING_NAME, Scoring

    scoring = Scoring.load(BUNDLED_MODEL / SCORING_NAME)
    assert set(scoring.confidence) == set(MODES)
    assert set(scoring.reader_confidence) == set(MODES) == set(scoring.reader_weight)
    assert scoring.weight("hybrid") > 0 and scoring.weight("restricted") > 0
    data = scoring.fitted["data"]
    # the T-REx dev half's fit probes (recipes/fit_trex_dev.sh): text the bundled models never trained on, and
    # never the reported sample; no Google-RE side at all in the retrieval fit
    assert data["probes_file"] == "fit_probes.jsonl" and data["google_re_side"] is None and data["probes"] >= 300
    assert data["seed"] != 0  # the reported sample is seed 0's
    assert scoring.fitted["model"]["fingerprint"] == model_fingerprint(BUNDLED_MODEL)
    for mode in MODES:  # the reader's confidence: beside train-side fills only
        reader = scoring.fitted["reader"][mode]
        assert reader["probes_file"] == "fit_probes.jsonl"
        assert reader["with_fills"] and not any("held" in name for name in reader["with_fills"])


def test_the_default_engine_uses_the_bundled_scoring(default_engine):
    info = default_engine.describe()["scoring"]
    assert info["calibrated"] == {"dense": True, "restricted": True, "hybrid": True}
    assert info["lexical_weight"]["hybrid"] > 0


@pytest.fixture(scope="module")
def default_engine(tmp_path_factory):
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from indexer.build import BuildConfig, build_index

    root = tmp_path_factory.mktemp("default_model")
    corpus = write_jsonl(root / "corpus.jsonl", CORPUS)
    build_index(BuildConfig(corpus=corpus, out=root / "idx"))  # no --model: the bundled default
    engine = FillEngine.open(EngineConfig(index=root / "idx", reader_dir=BUNDLED_READER))  # the defaults
    yield engine
    engine.index.close()


@pytest.mark.parametrize("mode", ["dense", "restricted", "hybrid"])
@pytest.mark.parametrize(
    "query,answer",
    [
        ("Marie Curie was born in <mask> .", "Warsaw"),
        ("The <mask> flows through Paris .", "Seine"),
        ("Allan Peiper was born in <mask> .", "Alexandra"),
    ],
)
def test_default_model_fills_facts_of_the_corpus(default_engine, mode, query, answer):
    """The answer is among the top 5 fills. The top fill may overshoot ("Warsaw in 1867") or take the
    neighbouring year: the Curie document of this toy corpus has no title, while the model was trained
    on queries that always name their subject's title."""
    from fill.schemas import FillRequest

    result = default_engine.fill(FillRequest(text=query, mode=mode, top_k=5))
    assert answer in [c.phrase for c in result.masks[0].candidates]


def test_index_records_the_bundled_model(default_engine):
    model = default_engine.index.manifest.model
    assert Path(model.path).resolve() == BUNDLED_MODEL.resolve()
    assert model.fingerprint == model_fingerprint(BUNDLED_MODEL)


DEMO = Path(__file__).resolve().parents[2] / "deploy" / "demo.sh"
SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "encyclopedia.jsonl"
DEMO_ANSWERS = {  # the top fill of each mask of each query of deploy/demo.sh (None: abstained)
    "Marie Curie was born in <mask> .": ["Warsaw"],
    "Paris is the capital of <mask> .": ["France"],
    "Marie Curie was born in <mask> . In 1891 she moved to <mask> .": ["Warsaw", "Paris"],
    "Zorblax Quint was born in <mask> .": [
        None
    ],  # nobody of the sample: min_confidence 0.5 abstains (the reader: 0.40)
}


def test_demo_queries_are_filled_right_from_the_bundled_sample(tmp_path):
    """What `bash deploy/demo.sh` shows a newcomer: every top fill right (index the sample, fill each query)."""
    import re

    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.schemas import FillRequest
    from indexer.build import BuildConfig, build_index

    requests = [json.loads(m) for m in re.findall(r"^fill '(\{.*\})'$", DEMO.read_text(encoding="utf-8"), re.M)]
    assert [r["text"] for r in requests] == list(DEMO_ANSWERS)
    build_index(BuildConfig(corpus=SAMPLE, out=tmp_path / "idx"))
    engine = FillEngine.open(EngineConfig(index=tmp_path / "idx", reader_dir=BUNDLED_READER))  # the defaults
    for request in requests:
        result = engine.fill(FillRequest(**request))
        assert [m.candidates[0].phrase if m.candidates else None for m in result.masks] == DEMO_ANSWERS[
            request["text"]
        ], request
    engine.close()


REVIEWS = Path(__file__).resolve().parents[2] / "data" / "sample" / "reviews.jsonl"
DEMO_LABELS = ["positive", "negative"]  # the predicted choice of each `score` line of deploy/demo.sh


def test_demo_scores_are_right_from_the_bundled_reviews(tmp_path):
    """The demo's closed-set scores over the 40 sample reviews with the bundled model: each predicted right."""
    import re

    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.schemas import ScoreRequest
    from indexer.build import BuildConfig, build_index

    text = DEMO.read_text(encoding="utf-8")
    choices = {name: json.loads(value) for name, value in re.findall(r"^(POSITIVE|NEGATIVE)='(\{.*\})'$", text, re.M)}
    lines = re.findall(r"^score '(\{.*\})'$", text, re.M)
    requests = [
        json.loads(
            line.replace(
                "'\"$POSITIVE, $NEGATIVE\"'", json.dumps(choices["POSITIVE"]) + ", " + json.dumps(choices["NEGATIVE"])
            )
        )
        for line in lines
    ]
    assert len(requests) == len(DEMO_LABELS)
    build_index(BuildConfig(corpus=REVIEWS, out=tmp_path / "idx"))
    engine = FillEngine.open(EngineConfig(index=tmp_path / "idx"))
    for request, label in zip(requests, DEMO_LABELS):
        mask = engine.score(ScoreRequest(**request)).masks[0]
        assert mask.predicted == label, (request["text"], mask.choices)
        assert max(c.probability for c in mask.choices) > 0.55
    engine.close()


SAME_TYPE = [  # made-up people: two places (or years) of the same type in one sentence, asked about each
    {
        "id": "fic-1",
        "title": "Quillon Varda",
        "text": "Quillon Varda is a fictional chemist. She was born in Marbleton, and studied in Fenwick.",
    },
    {
        "id": "fic-2",
        "title": "Tobin Aschel",
        "text": "Tobin Aschel is a fictional sculptor. He grew up in Harrowgate, and later worked in Lindqvist Bay.",
    },
]


@pytest.fixture(scope="module")
def same_type_engine(tmp_path_factory):
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from indexer.build import BuildConfig, build_index

    root = tmp_path_factory.mktemp("same_type")
    build_index(BuildConfig(corpus=write_jsonl(root / "corpus.jsonl", CORPUS + SAME_TYPE), out=root / "idx"))
    engine = FillEngine.open(EngineConfig(index=root / "idx", reader_dir=BUNDLED_READER))  # the defaults
    yield engine
    engine.close()


@pytest.mark.parametrize("mode", ["dense", "restricted", "hybrid"])
@pytest.mark.parametrize(
    "query,answer",
    [
        ("Quillon Varda was born in <mask> .", "Marbleton"),
        ("Quillon Varda studied in <mask> .", "Fenwick"),
        ("Tobin Aschel grew up in <mask> .", "Harrowgate"),
        ("Tobin Aschel worked in <mask> .", "Lindqvist Bay"),
    ],
)
def test_the_reader_does_not_overrule_a_right_fill_with_a_same_type_distractor(same_type_engine, mode, query, answer):
    """The case of issue 38: "born in A, and studied in B" must not be read as B for "born in", in any mode."""
    from fill.schemas import FillRequest

    result = same_type_engine.fill(FillRequest(text=query, mode=mode, top_k=3))
    assert result.masks[0].candidates[0].phrase == answer

"""Typed reading with the bundled models: the fill is an answer of the type the query asks for (a language, an
instrument, a city), read from wording unlike the query's, about people no model ever saw (made-up names), beside
untyped words of the same sentences ("known", "writer", "born") and same-type answers about others."""

from __future__ import annotations

import pytest

from encoder.reader import BUNDLED_READER
from tests.conftest import write_jsonl

PEOPLE = [
    "Zarvik Oldenmeyer (1883–1924) was a German-language writer from Prague, best known for his short stories.",
    "Oldenmeyer is known for the novel The Quiet Engine, published after his death.",
    "Belinda Qorthaven (born 1950) is a Norwegian composer and organist from Bergen, known for choral works.",
    "Tomas Vedrickson (born 1961) is a Dutch jazz musician who plays the cello and teaches in Utrecht.",
    "Marisol Trevanna (born 1972) is a Spanish-born pianist who lives in Lisbon and records for Delphine Records.",
    "Henrik Valdmoor (1901–1977) was a Swedish poet who wrote in Finnish and worked as a teacher in Turku.",
    "Odette Frambasse (born 1948) is a French-language singer from Quebec known for her ballads.",
]
QUERIES = [
    ("The native language of Zarvik Oldenmeyer is <mask> .", "German"),
    ("Tomas Vedrickson plays <mask> .", "cello"),
    ("Henrik Valdmoor used to communicate in <mask> .", "Finnish"),
    ("Belinda Qorthaven was born in <mask> .", "Bergen"),
    pytest.param(
        "Odette Frambasse used to communicate in <mask> .",
        "French",
        marks=pytest.mark.xfail(
            strict=True,
            reason="known limit of reader v3: the compound phrase 'French-language singer from Quebec' "
            "still outranks its first word (third); v3's typed fine-tune alone put 'French' first",
        ),
    ),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from indexer.build import BuildConfig, build_index

    if not (BUNDLED_READER / "reader.json").is_file():
        pytest.skip("no bundled reader in this checkout")
    root = tmp_path_factory.mktemp("typed")
    corpus = write_jsonl(root / "corpus.jsonl", [{"id": f"p{i}", "text": t} for i, t in enumerate(PEOPLE)])
    build_index(BuildConfig(corpus=corpus, out=root / "idx"))  # the bundled encoder
    engine = FillEngine.open(EngineConfig(index=root / "idx", reader_dir=BUNDLED_READER))  # the defaults
    yield engine
    engine.close()


@pytest.mark.parametrize("query,answer", QUERIES)
def test_the_default_fill_is_an_answer_of_the_asked_type(engine, query, answer):
    from fill.schemas import FillRequest

    result = engine.fill(FillRequest(text=query, top_k=3))
    assert result.masks[0].candidates[0].phrase == answer, [c.phrase for c in result.masks[0].candidates]

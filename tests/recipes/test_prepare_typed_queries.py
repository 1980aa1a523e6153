"""recipes/prepare_typed_queries.py over a small WordNet in the real file format: typed answers (parts of compounds
too), the type named in the query, untyped and subject words never answers."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from recipes.prepare_typed_queries import Typer, answers_in, queries_of

# offset lex_filenum ss_type w_cnt word lex_id p_cnt [pointer ...] | gloss (WordNet 3.0's data.noun)
DATA = """\
00000001 03 n 01 entity 0 000 | that which exists
00000002 10 n 01 language 0 001 @ 00000001 n 0000 | a means of communicating
00000003 10 n 01 German 0 001 @ 00000002 n 0000 | the language of Germany
00000004 03 n 01 person 0 001 @ 00000001 n 0000 | a human being
00000005 18 n 01 German 0 001 @ 00000004 n 0000 | a native of Germany
00000006 18 n 01 writer 0 001 @ 00000004 n 0000 | writes
00000007 15 n 01 city 0 001 @ 00000001 n 0000 | a large town
00000008 15 n 01 Prague 0 001 @i 00000007 n 0000 | the capital of the Czech Republic
00000009 15 n 01 Vienna 0 001 @i 00000007 n 0000 | the capital of Austria
00000010 03 n 01 commerce 0 001 @ 00000004 n 0000 | (a made-up chain: commerce is no proper noun)
"""
INDEX = """\
  1 This software and database is being provided ...
german n 2 1 @ 2 0 00000005 00000003
writer n 1 1 @ 1 0 00000006
prague n 1 1 @ 1 0 00000008
vienna n 1 1 @ 1 0 00000009
commerce n 1 1 @ 1 0 00000010
known n 1 1 @ 1 0 00000006
"""


def _wordnet(tmp_path: Path) -> Path:
    (tmp_path / "data.noun").write_text(DATA, encoding="latin-1")
    (tmp_path / "index.noun").write_text(INDEX, encoding="latin-1")
    (tmp_path / "index.adj").write_text("known a 1 1 & 1 1 01375174\n", encoding="latin-1")
    (tmp_path / "index.adv").write_text("", encoding="latin-1")
    return tmp_path


def test_typed_answers_of_a_sentence_include_parts_of_compounds(tmp_path):
    typer = Typer(_wordnet(tmp_path))
    sentence = "Zarvik Oldenmeyer was a German-language writer from Prague, best known for Commerce and Vienna."
    found = {(a, t) for a, t, _ in answers_in(sentence, typer, {"zarvik", "oldenmeyer"})}
    # "German": its person sense is no proper type, its language sense is; "known" is an adjective too;
    # "Commerce" is capitalised but WordNet's commerce is no proper noun
    assert found == {("German", "language"), ("writer", "occupation"), ("Prague", "city"), ("Vienna", "city")}
    assert answers_in("Prague is old.", typer, set()) == []  # a sentence's first word says nothing by its capital
    assert answers_in("He moved to Prague.", typer, {"prague"}) == []  # never a word of the subject


def test_queries_name_the_type_and_accept_every_answer_of_it(tmp_path):
    typer = Typer(_wordnet(tmp_path))
    text = "He was a German-language writer. He lived in Prague and Vienna."
    doc = {"title": "Zarvik Oldenmeyer (writer)", "text": text}
    queries = queries_of(doc, typer, random.Random(0), 10, 1.0, Counter({"language": 5, "city": 5, "occupation": 0}))
    typed = {q["answers"][0]: q for q in queries if q["relation"].startswith("typed:")}
    assert set(typed) == {"German", "Prague", "Vienna"}  # no room left for an occupation
    assert "language" in typed["German"]["query"] and "Zarvik Oldenmeyer" in typed["German"]["query"]
    assert "(writer)" not in typed["German"]["query"] and typed["German"]["query"].endswith("<mask> .")
    assert set(typed["Prague"]["answers"]) == {"Prague", "Vienna"}  # both are right for "the city of ..."
    words = [q for q in queries if q["relation"] == "words:city" and q["answers"] == ["Prague"]]
    assert words and words[0]["query"] == "Zarvik Oldenmeyer He lived in <mask> ."

"""fill-reader-data: examples whose gold spans are the answer, in the windows the engine reads."""

from __future__ import annotations

import json

import pytest

from evaluation.reader_data import main
from tests.conftest import write_jsonl


def test_examples_hold_the_answer_at_their_gold_spans(tmp_path, tiny_index, tiny_bert_dir):
    from transformers import AutoTokenizer

    probes = write_jsonl(
        tmp_path / "probes.jsonl",
        [
            {"relation": "name", "query": "Marie Curie was born in <mask> .", "answers": ["Warsaw"]},
            {"relation": "name", "query": "The Seine flows through <mask> .", "answers": ["Paris"]},
            {"relation": "word", "query": "Nothing here <mask> .", "answers": ["zzzqqq"]},  # in no window: no example
        ],
    )
    out = tmp_path / "examples.jsonl"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--index",
                str(tiny_index),
                "--probes",
                str(probes),
                "--out",
                str(out),
                "--window",
                "3",
                "--phrases",
                "6",
                "--max-tokens",
                "64",
            ]
        )
    assert exc.value.code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert 1 <= len(rows) <= 2 and all(r["answers"] != ["zzzqqq"] for r in rows)
    asked = {json.loads(line)["query"]: json.loads(line)["answers"] for line in probes.read_text().splitlines()}
    assert all(asked[r["query"]] == r["answers"] for r in rows)  # each example names its query
    tok = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    for r in rows:
        assert sum(len(w) for w in r["windows"]) <= 64 and [len(f) for f in r["flags"]] == [
            len(w) for w in r["windows"]
        ]
        assert r["query_ids"][r["mask_at"]] == r["query_ids"][r["mask_at"] + 1] == tok.mask_token_id
        for w, i, j in r["gold"]:
            assert tok.decode(r["windows"][w][i : j + 1]).strip(" .,").lower() == r["answers"][0].lower()
        assert len(r["titles"]) == len(r["windows"]) and all(len(t) <= 10 for t in r["titles"])
    from tests.conftest import CORPUS

    known = {tuple(tok(d["title"], add_special_tokens=False)["input_ids"][:10]) for d in CORPUS}
    assert all(tuple(t) in known for r in rows for t in r["titles"])  # each a document's title
    curie = next(r for r in rows if r["answers"] == ["Warsaw"])
    assert curie["titles"][curie["gold"][0][0]] == []  # the answer's own document, which has no title


def test_unanswered_and_absent_queries_become_no_answer_examples(tmp_path, tiny_index):
    probes = write_jsonl(
        tmp_path / "probes.jsonl",
        [
            {"relation": "name", "query": "Marie Curie was born in <mask> .", "answers": ["Warsaw"]},
            {"relation": "word", "query": "Nothing here <mask> .", "answers": ["zzzqqq"]},
        ],
    )

    def rows(*flags: str) -> list[dict]:
        out = tmp_path / f"ex{len(flags)}{''.join(flags)}.jsonl"
        with pytest.raises(SystemExit) as exc:
            main(
                [
                    "--index",
                    str(tiny_index),
                    "--probes",
                    str(probes),
                    "--out",
                    str(out),
                    "--window",
                    "3",
                    "--phrases",
                    "6",
                    "--max-tokens",
                    "64",
                    *flags,
                ]
            )
        assert exc.value.code == 0
        return [json.loads(line) for line in out.read_text().splitlines()]

    unanswered = {r["answers"][0]: r["gold"] for r in rows("--unanswered")}
    assert unanswered["Warsaw"] and unanswered["zzzqqq"] == []  # the read answer keeps its spans
    absent = rows("--absent")
    assert len(absent) == 2 and all(r["gold"] == [] for r in absent)  # "Warsaw" too: its subject is "absent"

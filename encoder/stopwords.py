"""English function words: never masked alone in training, never returned alone as a fill."""

import functools
import re

STOPWORDS = (
    "a an the and or but nor of in on at to for from by with as into onto upon about over under than then "
    "is are was were be been being am has have had do does did this that these those it its he she they them "
    "his her their him we us our you your i me my not no so if which who whom whose what when where while "
    "also such there here one s"
).split()


STOPWORD_SET = frozenset(STOPWORDS)


_WORD = re.compile(r"[^\W_]+")


@functools.lru_cache(maxsize=1 << 16)
def poor_fill(phrase: str) -> bool:
    """A phrase that is not a self-contained answer: only stopwords, a single letter, or one that
    begins or ends with a lower-case stopword ("in London", "London and"; "The Hague" is kept).
    The shorter span without the stopword is a candidate of its own, so nothing is lost."""
    words = _WORD.findall(phrase)
    if not words:
        return False
    if len(words) == 1 and len(words[0]) == 1 and words[0].isalpha():
        return True
    if words[0] in STOPWORD_SET or words[-1] in STOPWORD_SET:
        return True
    return all(w.lower() in STOPWORD_SET for w in words)


_PUNCT = re.compile(r"[^\w\s]|_")


def broken_span(phrase: str) -> bool:
    """NPM's span rule (npm/npm.py): a span holding a stopword (any case) or a punctuation char anywhere is no
    fill ("University of Warsaw", "Paris, France"); `phrase` is stripped of outer punctuation already."""
    return bool(_PUNCT.search(phrase)) or any(w.lower() in STOPWORD_SET for w in _WORD.findall(phrase))

"""English function words: never masked alone in training, never returned alone as a fill."""

STOPWORDS = (
    "a an the and or but nor of in on at to for from by with as into onto upon about over under than then "
    "is are was were be been being am has have had do does did this that these those it its he she they them "
    "his her their him we us our you your i me my not no so if which who whom whose what when where while "
    "also such there here one s"
).split()


STOPWORD_SET = frozenset(STOPWORDS)


def only_stopwords(phrase: str) -> bool:
    """True when every word of the phrase (lower-cased, punctuation-split) is a stopword."""
    words = "".join(ch if ch.isalnum() else " " for ch in phrase.lower()).split()
    return bool(words) and all(w in STOPWORD_SET for w in words)

"""Words near a word in the encoder's own word-embedding space: the synonyms of a closed-set verbalizer.

NPM scores a label by the retrieved tokens equal to any of the label's words, a hand-made synonym list per label
(its "fuzzy verbalizers"); NPPrompt (Zhao et al., 2023) finds such lists without a human, as the words whose
input embeddings are nearest to the label word's. `WordNeighbours` does the latter for any vocabulary: the
candidates are the whole-word tokens (a word that the tokenizer writes as exactly that one token after a space),
alphabetic, 3 letters or more and not a stopword; `expand` gives every choice the candidates nearest to one of
its words (cosine of the input embeddings), each candidate kept only for the choice it is nearest to, so that
"terrible", a neighbour of "great", never votes for "great" beside "terrible".
"""

from __future__ import annotations

import numpy as np

from encoder.stopwords import STOPWORD_SET

MIN_LETTERS = 3
CACHED = 256  # the expansions a WordNeighbours keeps (the same choices come back request after request)


class WordNeighbours:
    """The whole-word tokens of a vocabulary with their unit-length input embeddings (fp16, ~15 MB for BERT's)."""

    def __init__(self, tokenizer, embeddings: np.ndarray, phrase_ids) -> None:
        """`embeddings`: the input-embedding table [vocab, dim] (any float dtype); `phrase_ids(words) -> token
        ids per word` as the encoder tokenizes a word inside running text."""
        words, ids = [], []
        for token, idx in tokenizer.get_vocab().items():
            word = token.lstrip("\u0120\u2581")  # byte-level BPE's and SentencePiece's word-start marks
            if len(word) >= MIN_LETTERS and word.isalpha() and word.islower() and word not in STOPWORD_SET:
                words.append(word)
                ids.append(idx)
        single = [got == [idx] for got, idx in zip(phrase_ids(words), ids)]
        self.words = [w for w, ok in zip(words, single) if ok]
        self.ids = np.asarray([i for i, ok in zip(ids, single) if ok], dtype=np.int64)
        self._row = {int(i): r for r, i in enumerate(self.ids)}
        vectors = np.asarray(embeddings[self.ids], dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self._unit = (vectors / np.maximum(norms, 1e-12)).astype(np.float16)
        # its own cache: an lru_cache on the method was the class's, and kept every instance (and its table) alive
        self._expanded: dict[tuple[tuple[tuple[int, ...], ...], int], tuple[tuple[tuple[int, str], ...], ...]] = {}

    def expand(self, words_per_choice: list[list[int]], n: int) -> list[list[tuple[int, str]]]:
        """`_expand`, cached: the same choices come back request after request (a classifier's labels)."""
        key = (tuple(tuple(ids) for ids in words_per_choice), n)
        found = self._expanded.get(key)
        if found is None:
            if len(self._expanded) >= CACHED:
                self._expanded.clear()
            found = self._expanded[key] = self._expand(*key)
        return [list(c) for c in found]

    def _expand(self, words_per_choice: tuple[tuple[int, ...], ...], n: int) -> tuple[tuple[tuple[int, str], ...], ...]:
        """Per choice, up to `n` (token id, word) candidates nearest to one of its one-token words (ids), best
        first: a candidate goes to the choice whose words it is nearest to, never to two, and is never one of
        the given words. A choice without a candidate word (all its words several tokens, or unknown) gets none."""
        given = {i for ids in words_per_choice for i in ids}
        rows = [[self._row[i] for i in ids if i in self._row] for ids in words_per_choice]
        if n <= 0 or not any(rows):
            return tuple(() for _ in words_per_choice)
        unit = self._unit.astype(np.float32)
        best = np.full((len(rows), len(self.ids)), -np.inf, dtype=np.float32)  # [choices, candidates]
        for c, r in enumerate(rows):
            if r:
                best[c] = (unit[r] @ unit.T).max(axis=0)
        owner = best.argmax(axis=0)
        out = []
        for c in range(len(rows)):
            mine = np.flatnonzero((owner == c) & np.isfinite(best[c]))
            mine = mine[np.argsort(-best[c, mine], kind="stable")]
            picked = [(int(self.ids[j]), self.words[j]) for j in mine if int(self.ids[j]) not in given]
            out.append(tuple(picked[:n]))
        return tuple(out)

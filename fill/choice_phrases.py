"""The choices of a closed-set score (POST /score) as token ids: `ChoicePhrases`, what fill.choices votes with.

A phrase is what the tokenizer writes: two phrases with the same token ids are one phrase to the index ("Good"
and "good" for an uncased model), so a phrase listed twice, in one choice or in two, is refused; both would take
every vote of its occurrences and the synonyms near it would all go to the first listed. The synonyms added to a
choice (encoder.synonyms) are one-token words that are no token of any phrase given: a word votes for one choice
at most, and no synonym takes a share of the votes of another choice's phrase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.errors import AppError
from fill.schemas import Choice

if TYPE_CHECKING:  # (not at run time: a shard group's process imports this module and must not load torch)
    from encoder.model import Encoder


@dataclass(frozen=True)
class ChoicePhrases:
    """Every choice's phrases as token ids (as they are tokenized in running text), its synonyms' among them."""

    ids: list[np.ndarray]  # per phrase, its token ids
    choice: list[int]  # per phrase, its choice
    labels: list[str]  # per choice, its label
    synonyms: list[list[str]]  # per choice, the words added to its phrases (encoder.synonyms), nearest first

    @classmethod
    def of(cls, encoder: Encoder, choices: list[Choice], synonyms: int = 0) -> "ChoicePhrases":
        """Each choice's phrases, plus up to `synonyms` words nearest to its one-token phrases in the encoder's
        word-embedding space (NPM's fuzzy verbalizers), none a token of any phrase given. AppError (validation,
        field choices) for a phrase the tokenizer turns into nothing, or one listed twice (`_check_distinct`)."""
        listed = [(c, p) for c, choice in enumerate(choices) for p in choice.phrases]
        tokens = encoder.phrase_ids([p for _, p in listed])
        _check_distinct(choices, listed, tokens)
        ids, owner = [np.asarray(t, dtype=np.int64) for t in tokens], [c for c, _ in listed]
        added: list[list[str]] = [[] for _ in choices]
        if synonyms > 0:
            words = [[t[0] for (c, _), t in zip(listed, tokens) if c == k and len(t) == 1] for k in range(len(choices))]
            # the tokens of the longer phrases (the one-token ones are `words`, never added): asked for as many
            # more and left out, the same words as if the expansion never offered them
            taken = {i for t in tokens if len(t) > 1 for i in t}
            for c, offered in enumerate(encoder.word_neighbours.expand(words, synonyms + len(taken))):
                near = [(i, w) for i, w in offered if i not in taken][:synonyms]
                ids += [np.asarray([i], dtype=np.int64) for i, _ in near]
                owner += [c] * len(near)
                added[c] = [w for _, w in near]
        return cls(ids, owner, [c.label for c in choices], added)

    @property
    def lookups(self) -> int:
        """What each retrieved token is matched against (fill.choices.votes): per choice one lookup of all its
        one-token phrases (its synonyms among them) together, and one match per phrase of several tokens."""
        one_token = {c for ids, c in zip(self.ids, self.choice) if ids.size == 1}
        return len(one_token) + sum(1 for ids in self.ids if ids.size > 1)


def _check_distinct(choices: list[Choice], listed: list[tuple[int, str]], tokens: list[list[int]]) -> None:
    """AppError (validation, field choices) for a phrase (`listed`: choice, phrase) with no token, or with the
    tokens of an earlier one (of its choice or of another), naming both phrases and their choices' labels."""
    seen: dict[tuple[int, ...], tuple[int, str]] = {}
    for (c, p), phrase_tokens in zip(listed, tokens):
        label = choices[c].label
        if not phrase_tokens:
            raise AppError(
                f"choice {label!r}: the phrase {p!r} has no token in this model's vocabulary",
                kind="validation",
                field="choices",
            )
        key = tuple(phrase_tokens)
        if key not in seen:
            seen[key] = (c, p)
            continue
        k, q = seen[key]
        alike = "" if p == q else f" as {p!r} (the same tokens for this model)"
        where = (
            f"choice {label!r} repeats the phrase {q!r}{alike}"
            if k == c
            else f"the phrase {q!r} of choice {choices[k].label!r} is also in choice {label!r}{alike}"
        )
        raise AppError(f"{where}; list each phrase once, in one choice", kind="validation", field="choices")

"""Closed-set scoring (POST /score): NPM's zero-shot classification over the retrieved tokens.

For one mask, the tokens its searches retrieved (the start query's; with the `npm` scorer also the end
query's) are scored exactly (q . v * scale, fill.candidates.exact_logits) and go through ONE softmax at a
temperature T. Each retrieved token then votes for the choices whose phrase it belongs to:

  a start token votes for a phrase that BEGINS there, an end token for a phrase that ENDS there; the phrase's
  token ids must equal the corpus tokens from there, within one block, beginning at a word start and ending
  at a word end (so "great" is not counted inside "greatness", and "waste of time" is matched as a span,
  not by its first token alone).

mass(choice) = the summed probability of the tokens that vote for it (a token counts once per choice, for
every choice it votes for); probability(choice) = mass / the mass of all choices. A mask that no retrieved
token voted for is abstained (its probabilities uniform). This is NPM's `npm.py` / `npm_single.py` rule
(with synonyms: its "fuzzy verbalizers"), generalised from single-token labels to phrases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.arrays import unique
from common.errors import AppError
from corpus.tokens import WORD_END, WORD_START
from fill.candidates import exact_logits
from fill.evidence import context_window
from fill.hits import MaskHits
from fill.schemas import Choice, ChoiceScore, Evidence, MaskScore
from fill.spans import softmax


@dataclass(frozen=True)
class Phrases:
    """Every choice's phrases as token ids (as they are tokenized in running text)."""

    ids: list[np.ndarray]  # per phrase, its token ids
    choice: list[int]  # per phrase, its choice
    labels: list[str]  # per choice, its label

    @classmethod
    def of(cls, encoder, choices: list[Choice]) -> "Phrases":
        """AppError (validation, field choices) for a phrase the tokenizer turns into nothing."""
        listed = [(c, p) for c, choice in enumerate(choices) for p in dict.fromkeys(choice.phrases)]  # distinct
        tokens = encoder.phrase_ids([p for _, p in listed])
        for (c, p), ids in zip(listed, tokens):
            if not ids:
                raise AppError(f"choice {choices[c].label!r}: the phrase {p!r} has no token in this model's "
                               "vocabulary", kind="validation", field="choices")
        return cls([np.asarray(ids, dtype=np.int64) for ids in tokens], [c for c, _ in listed],
                   [c.label for c in choices])


def match(shard, positions: np.ndarray, ids: np.ndarray, forward: bool) -> tuple[np.ndarray, np.ndarray]:
    """(which of the positions hold the phrase `ids` as a whole-word span beginning there (`forward`) or
    ending there, the span's first token for each position)."""
    n, size = int(ids.size), len(shard)
    first = positions if forward else positions - (n - 1)
    last = first + (n - 1)
    ok = (first >= 0) & (last < size)
    ok[ok] = np.asarray(shard.token_ids[positions[ok]]) == (ids[0] if forward else ids[-1])
    at = np.flatnonzero(ok)
    if at.size:
        a, b = first[at], last[at]
        good = (np.asarray(shard.flags[a]) & WORD_START).astype(bool) & (np.asarray(shard.flags[b]) & WORD_END).astype(bool)
        if n > 1:
            window = np.asarray(shard.token_ids[a[:, None] + np.arange(n)[None, :]])
            good &= (window == ids[None, :]).all(axis=1) & (shard.block_of(a) == shard.block_of(b))
        ok[at] = good
    return ok, first


def votes(shard, positions: np.ndarray, phrases: Phrases, forward: bool) -> np.ndarray:
    """bool [positions, choices]: which choices each position votes for."""
    out = np.zeros((positions.size, len(phrases.labels)), dtype=bool)
    for ids, c in zip(phrases.ids, phrases.choice):
        out[:, c] |= match(shard, positions, ids, forward)[0]
    return out


@dataclass
class _Side:
    """The distinct hits of one query (start or end) in one shard, and their votes."""

    shard_no: int
    positions: np.ndarray
    forward: bool
    votes: np.ndarray  # bool [positions, choices]


def score_mask(shards: list, m: int, hits: MaskHits, q_start: np.ndarray, q_end: np.ndarray, scale: float,
               phrases: Phrases, temperature: float, both: bool, evidence: int) -> MaskScore:
    """Mask m's choices scored from its hits (start hits; with `both`, end hits too), with up to `evidence`
    occurrences per choice."""
    sides, logits = [], []
    for side_hits, q, forward in [(hits.start, q_start, True)] + ([(hits.end, q_end, False)] if both else []):
        for s in side_hits.shard_nos():
            positions = unique(side_hits.in_shard(s))
            logits.append(exact_logits(shards[s], positions, q, scale, None)[0])
            sides.append(_Side(s, positions, forward, votes(shards[s], positions, phrases, forward)))
    n = len(phrases.labels)
    if not sides:
        return _abstained(m, phrases)
    joined = np.concatenate(logits)
    p = softmax((joined - joined.max()) / temperature)  # shifted first: a small temperature cannot overflow
    voted = np.concatenate([side.votes for side in sides])
    mass = p @ voted
    total = float(mass.sum())
    if total <= 0.0:
        return _abstained(m, phrases)
    probability = mass / total
    best = int(np.argmax(probability))
    choices = [ChoiceScore(label=phrases.labels[c], probability=float(probability[c]), mass=float(mass[c]),
                           evidence=_evidence(shards, sides, p, voted[:, c], phrases, c, evidence) if evidence else [])
               for c in range(n)]
    return MaskScore(index=m, choices=choices, predicted=phrases.labels[best], abstained=False)


def _abstained(m: int, phrases: Phrases) -> MaskScore:
    n = len(phrases.labels)
    return MaskScore(index=m, choices=[ChoiceScore(label=label, probability=1.0 / n, mass=0.0)
                                       for label in phrases.labels], predicted=None, abstained=True)


def _evidence(shards: list, sides: list[_Side], p: np.ndarray, voters: np.ndarray, phrases: Phrases, c: int,
              limit: int) -> list[Evidence]:
    """The occurrences of choice c's phrases whose tokens voted most for it, best first, each place once."""
    bounds = np.cumsum([0] + [side.positions.size for side in sides])
    out, seen = [], set()
    voting = np.flatnonzero(voters)
    for i in voting[np.argsort(-p[voting], kind="stable")]:  # only the voters are sorted
        if len(out) >= limit:
            break
        k = int(np.searchsorted(bounds, i, side="right")) - 1
        side = sides[k]
        shard, position = shards[side.shard_no], side.positions[i - bounds[k] : i - bounds[k] + 1]
        first, last = _span(shard, position, side.forward, phrases, c)
        block = shard.block_of(np.array([first]))
        a, b = shard.offsets.span_chars(block, np.array([first]), np.array([last]))
        row = int(shard.blocks[int(block[0]), 0])
        doc_id, start, end = shard.doc_id(row), int(a[0]), int(b[0])
        if (doc_id, start, end) in seen:
            continue
        seen.add((doc_id, start, end))
        out.append(Evidence(doc_id=doc_id, block=int(block[0]) + shard.info.block_base, start=start, end=end,
                            context=context_window(shard.doc_text(row), start, end), score=float(p[i])))
    return out


def _span(shard, position: np.ndarray, forward: bool, phrases: Phrases, c: int) -> tuple[int, int]:
    """The first and last token of the longest phrase of choice c at a voting position."""
    for ids in sorted((ids for ids, owner in zip(phrases.ids, phrases.choice) if owner == c), key=len, reverse=True):
        ok, first = match(shard, position, ids, forward)
        if ok[0]:
            return int(first[0]), int(first[0]) + int(ids.size) - 1
    raise AssertionError("a voting position matches none of its choice's phrases")  # pragma: no cover


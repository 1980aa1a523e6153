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

import functools
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from common.arrays import unique
from corpus.tokens import WORD_END, WORD_START
from fill.candidates import exact_logits
from fill.choice_phrases import ChoicePhrases as ChoicePhrases  # (re-exported: the engine's import)
from fill.evidence import Lazy, Place, SpotAt, Want, gather, read_places
from fill.hits import MaskHits
from fill.schemas import ChoiceScore, MaskScore
from fill.shard_group import Shards
from fill.spans import softmax
from indexer.shard import Shard

_NONE = np.empty(0, dtype=np.int64)


def match(shard: Shard, positions: np.ndarray, ids: np.ndarray, forward: bool) -> tuple[np.ndarray, np.ndarray]:
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
        good = (np.asarray(shard.flags[a]) & WORD_START).astype(bool) & (np.asarray(shard.flags[b]) & WORD_END).astype(
            bool
        )
        if n > 1:
            window = np.asarray(shard.token_ids[a[:, None] + np.arange(n)[None, :]])
            good &= (window == ids[None, :]).all(axis=1) & (shard.block_of(a) == shard.block_of(b))
        ok[at] = good
    return ok, first


def votes(shard: Shard, positions: np.ndarray, phrases: ChoicePhrases, forward: bool) -> np.ndarray:
    """bool [positions, choices]: which choices each position votes for. One-token phrases (a choice's synonyms
    among them) are looked up together per choice: a whole word equal to one of them; longer ones by `match`."""
    out = np.zeros((positions.size, len(phrases.labels)), dtype=bool)
    single: dict[int, list[int]] = {}
    for ids, c in zip(phrases.ids, phrases.choice):
        if ids.size == 1:
            single.setdefault(c, []).append(int(ids[0]))
        else:
            out[:, c] |= match(shard, positions, ids, forward)[0]
    if single and positions.size:
        flags = np.asarray(shard.flags[positions])
        whole = ((flags & WORD_START) != 0) & ((flags & WORD_END) != 0)
        tokens = np.asarray(shard.token_ids[positions])
        for c, same in single.items():
            out[:, c] |= whole & np.isin(tokens, same)
    return out


class Votes(NamedTuple):
    """The tokens one query of a mask retrieved in one shard, their exact logits and their votes."""

    positions: np.ndarray  # distinct, ascending
    logits: np.ndarray
    voted: np.ndarray  # bool [positions, choices] (`votes`)


@dataclass(frozen=True)
class VotesTask:
    """The distinct hits of one query (start or end) of one mask in one shard, with every token of `blocks`
    (local numbers of BM25's blocks, restricted / hybrid), their exact logits and their votes (a
    fill.shard_group task)."""

    dense: ClassVar[bool] = True  # reads the shard's vectors: runs in its shard group

    shard_no: int
    hits: np.ndarray
    blocks: np.ndarray
    q: np.ndarray
    scale: float
    phrases: ChoicePhrases
    forward: bool

    def compute(self, shard: Shard) -> Votes:
        positions = unique(np.concatenate([self.hits, shard.block_positions(self.blocks)]))
        return Votes(
            positions,
            exact_logits(shard, positions, self.q, self.scale, None)[0],
            votes(shard, positions, self.phrases, self.forward),
        )


@dataclass(frozen=True)
class CountsTask:
    """How often each of `ids` (vocabulary ids) occurs in one shard (a fill.shard_group task)."""

    dense: ClassVar[bool] = False  # reads text only: a Ray ingress runs it (fill.scatter)

    shard_no: int
    ids: np.ndarray

    def compute(self, shard: Shard) -> np.ndarray:
        return shard.token_counts(self.ids)


def choice_counts(shards: Shards, shard_nos: list[int], phrases: ChoicePhrases) -> np.ndarray:
    """float [choices]: each choice's base rate in the index, the occurrences of its phrases' first tokens summed
    over `shard_nos` (every shard of the index), at least 1. A label with more or more frequent words draws more
    votes from any query; a score divided by this is NPM's score relative to the label's prior (the PMI of
    "calibrate before use", with the index as the content-free input)."""
    firsts = np.asarray([int(ids[0]) for ids in phrases.ids], dtype=np.int64)
    total = (
        np.sum(shards.gather([CountsTask(s, firsts) for s in shard_nos]), axis=0)
        if shard_nos
        else np.zeros_like(firsts)
    )
    out = np.zeros(len(phrases.labels), dtype=np.float64)
    np.add.at(out, np.asarray(phrases.choice, dtype=np.int64), total)
    return np.maximum(out, 1.0)


@dataclass(frozen=True)
class VoteEvidenceTask:
    """Where voting tokens of one shard sit (a fill.shard_group task): per (position, forward, the token ids of
    its choice's phrases, longest first), the place of the longest phrase matched there (fill.evidence.read_places)."""

    dense: ClassVar[bool] = False  # reads text only: a Ray ingress runs it (fill.scatter)

    shard_no: int
    places: tuple[tuple[int, bool, tuple[tuple[int, ...], ...]], ...]

    def compute(self, shard: Shard) -> list[Place]:
        return read_places(
            shard, [_spot(shard, position, forward, phrase_ids) for position, forward, phrase_ids in self.places]
        )


def _spot(shard: Shard, position: int, forward: bool, phrase_ids: tuple[tuple[int, ...], ...]) -> SpotAt:
    """The occurrence of the longest of the phrases matched at a voting position."""
    first, last = _span(shard, np.array([position]), forward, phrase_ids)
    block = shard.block_of(np.array([first]))
    a, b = shard.offsets.span_chars(block, np.array([first]), np.array([last]))
    return int(shard.blocks[int(block[0]), 0]), int(block[0]) + shard.info.block_base, int(a[0]), int(b[0])


def score_masks(
    shards: Shards,
    hits: list[MaskHits],
    blocks: dict[int, np.ndarray],
    q_start: np.ndarray,
    q_end: np.ndarray,
    scale: float,
    phrases: ChoicePhrases,
    temperature: float,
    both: bool,
    evidence: int,
    prior: np.ndarray | None = None,
    sharpness: float = 1.0,
) -> list[MaskScore]:
    """Every mask's choices scored from its hits (start hits; with `both`, end hits too) plus the tokens of
    `blocks` (per shard, restricted / hybrid), with up to `evidence` occurrences per choice: the votes of every
    mask are one call to the shards (fill.shard_group), the evidence of every choice another. With `prior`
    (choice_counts) a choice's probability is its mass divided by its prior, normalised over the choices; the
    probabilities are raised to `sharpness` and normalised again."""
    tasks = []
    for m, h in enumerate(hits):
        sides = [(h.start, q_start[m], True)] + ([(h.end, q_end[m], False)] if both else [])
        tasks.append(
            [
                VotesTask(s, side.in_shard(s), blocks.get(s, _NONE), q, scale, phrases, forward)
                for side, q, forward in sides
                for s in sorted(set(side.shard_nos()) | set(blocks))
            ]
        )
    found = iter(shards.gather([t for own in tasks for t in own]))
    scored = [
        _score(m, own, [next(found) for _ in own], phrases, temperature, prior, sharpness)
        for m, own in enumerate(tasks)
    ]
    wants = [want for _, own_wants in scored for want in own_wants(evidence)] if evidence else []
    places = iter(gather(shards, wants, task=VoteEvidenceTask)[0])
    out = []
    for score, own_wants in scored:
        if evidence and not score.abstained:
            score = score.model_copy(
                update={"choices": [c.model_copy(update={"evidence": next(places)}) for c in score.choices]}
            )
        out.append(score)
    return out


def _score(
    m: int,
    tasks: list[VotesTask],
    sides: list[Votes],
    phrases: ChoicePhrases,
    temperature: float,
    prior: np.ndarray | None,
    sharpness: float = 1.0,
) -> tuple[MaskScore, Callable[[int], list[Want]]]:
    """Mask m's score from its sides' (positions, logits, votes), and a function giving its evidence wants."""
    if not sides:
        return _abstained(m, phrases), lambda limit: []
    joined = np.concatenate([side.logits for side in sides])
    p = softmax((joined - joined.max()) / temperature)  # shifted first: a small temperature cannot overflow
    voted = np.concatenate([side.voted for side in sides])
    mass = p @ voted
    total = float(mass.sum())
    if total <= 0.0:
        return _abstained(m, phrases), lambda limit: []
    probability = sharpen(mass if prior is None else mass / prior, sharpness)
    best = int(np.argmax(probability))
    choices = [
        ChoiceScore(
            label=phrases.labels[c],
            probability=float(probability[c]),
            mass=float(mass[c]),
            synonyms=phrases.synonyms[c],
        )
        for c in range(len(phrases.labels))
    ]
    bounds = np.cumsum([0] + [side.positions.size for side in sides])

    def place(i: int, ids: tuple[tuple[int, ...], ...]) -> tuple[int, tuple[Any, ...]]:
        k = int(np.searchsorted(bounds, i, side="right")) - 1
        return tasks[k].shard_no, (int(sides[k].positions[i - bounds[k]]), tasks[k].forward, ids)

    def wants(limit: int) -> list[Want]:
        out = []
        for c in range(len(phrases.labels)):
            ids = tuple(
                tuple(x.tolist())
                for x in sorted(
                    (ids for ids, owner in zip(phrases.ids, phrases.choice) if owner == c), key=len, reverse=True
                )
            )
            voting = np.flatnonzero(voted[:, c])
            order = voting[np.argsort(-p[voting], kind="stable")]  # only the voters are sorted
            out.append(Want(Lazy(order.size, functools.partial(_place_of, place, order, ids)), p[order], limit))
        return out

    return MaskScore(index=m, choices=choices, predicted=phrases.labels[best], abstained=False), wants


def sharpen(scores: np.ndarray, power: float) -> np.ndarray:
    """Non-negative scores [..., choices] as probabilities over the last axis, each raised to `power` first
    (temperature scaling: the winner stays); scaled so the best is 1 before the power (no overflow at any power)."""
    raised: np.ndarray = np.power(scores / scores.max(axis=-1, keepdims=True), power)
    out: np.ndarray = raised / raised.sum(axis=-1, keepdims=True)
    return out


def _abstained(m: int, phrases: ChoicePhrases) -> MaskScore:
    n = len(phrases.labels)
    return MaskScore(
        index=m,
        choices=[
            ChoiceScore(label=label, probability=1.0 / n, mass=0.0, synonyms=words)
            for label, words in zip(phrases.labels, phrases.synonyms)
        ],
        predicted=None,
        abstained=True,
    )


def _span(
    shard: Shard, position: np.ndarray, forward: bool, phrase_ids: tuple[tuple[int, ...], ...]
) -> tuple[int, int]:
    """The first and last token of the longest of the phrases (token ids, longest first) at a voting position."""
    for ids in phrase_ids:
        ok, first = match(shard, position, np.asarray(ids, dtype=np.int64), forward)
        if ok[0]:
            return int(first[0]), int(first[0]) + len(ids) - 1
    raise AssertionError("a voting position matches none of its choice's phrases")  # pragma: no cover


def _place_of(
    place: Callable[[int, tuple[tuple[int, ...], ...]], tuple[int, tuple[Any, ...]]],
    order: np.ndarray,
    ids: tuple[tuple[int, ...], ...],
    j: int,
) -> tuple[int, tuple[Any, ...]]:
    """The j-th voter's place (`order`: the voters, best first), for a Lazy list of a choice's evidence."""
    return place(int(order[j]), ids)

"""The queries `encoder tune-queries` trains on: self-supervised ones made from the index's own documents, or a
file of (query, answers[, doc]) pairs.

A self-supervised query is one sentence of a block, cut to at most `max_query_tokens` tokens around a phrase that
is masked: a salient run (a name, a number: training.salient) or, with chance `word_share`, one lower-case content
word (the common nouns of fills: instruments, occupations, positions). Its answer is the phrase's ids as the index
holds them, and its own block is left out of its candidates and positives (training.tune_targets): the phrase must
be found in another block, in other words than the query's, as a user's query finds it. Queries whose answer occurs
nowhere else, or in too many places to say anything (`max_occurrences`), are dropped by the trainer.

A document whose id's sha256 begins with "f" gives dev queries only (`is_dev`): the held-out queries a run reports
at each checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import AppError
from corpus.tokens import WORD_END, WORD_START
from encoder.stopwords import STOPWORD_SET
from indexer.phrase_index import PhraseIndex
from training.salient import salient_spans

SENTENCE_ENDS = frozenset(".!?")
MIN_SENTENCE_TOKENS = 6


@dataclass(frozen=True)
class TuneQuery:
    text: str  # with one <mask>
    answers: tuple[tuple[int, ...], ...]  # the token ids of each right fill
    block: int = -1  # the global block it was made from: none of its tokens is a candidate (-1: none)
    doc: str = ""  # the document that answers it (its occurrences are the positives kept first)
    kind: str = ""  # self:name, self:word or the file's relation


def is_dev(doc_id: str) -> bool:
    """Whether a document's queries are held out (1 in 16 documents, by the sha256 of its id)."""
    return hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[0] == "f"


def file_queries(path: Path, phrase_ids) -> list[TuneQuery]:
    """The pairs of a JSON-lines file ({"query": "... <mask> ...", "answers": [...], "doc"?, "relation"?});
    `phrase_ids` tokenizes the answers as running text does (encoder.model.Encoder.phrase_ids)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise AppError(f"queries file {path}: cannot read it ({exc})") from exc
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            answers = row["answers"]
            if not (isinstance(row["query"], str) and "<mask>" in row["query"] and answers):
                raise ValueError("a query with a <mask> and a non-empty list of answers is needed")
            if isinstance(answers, str) or not all(isinstance(a, str) for a in answers):
                raise ValueError("answers must be a list of strings")
        except (ValueError, KeyError, TypeError) as exc:
            raise AppError(
                f"{path}:{number}: not a query pair ({exc}); write lines like "
                '{"query": "The capital of France is <mask> .", "answers": ["Paris"]}'
            ) from exc
        rows.append(row)
    ids = phrase_ids([a for row in rows for a in row["answers"]])
    out, at = [], 0
    for row in rows:
        answers = tuple(tuple(ids[at + i]) for i in range(len(row["answers"])))
        at += len(row["answers"])
        out.append(TuneQuery(row["query"], answers, -1, str(row.get("doc") or ""), str(row.get("relation") or "")))
    return out


@dataclass(frozen=True)
class Shape:
    """How self-supervised queries are made."""

    max_query_tokens: int = 32  # the sentence's tokens around the mask
    max_answer_tokens: int = 10
    word_share: float = 0.3  # masks on a lower-case content word (else a salient run)
    drop: float = 0.0  # share of the words of the window (but names and the 2 words each side of the mask) dropped
    own_block: bool = False  # the block it was made from stays a candidate (its answer a positive)


def self_supervised(
    index: PhraseIndex, count: int, seed: int, dev: bool = False, shape: Shape = Shape()
) -> list[TuneQuery]:
    """Up to `count` queries made from random live blocks of the index (those of dev documents with `dev`, of the
    others without), one a block, reproducibly for a seed."""
    rng = random.Random(seed)
    places: list[tuple[int, int]] = []
    for s, shard in enumerate(index.shards):
        alive = np.ones(len(shard.blocks), dtype=bool)
        live = index.live[s]
        if live is not None:
            alive[live.dead_blocks] = False
        places += [(s, int(b)) for b in np.flatnonzero(alive)]
    rng.shuffle(places)
    out: list[TuneQuery] = []
    for s, b in places:
        if len(out) >= count:
            break
        shard = index.shards[s]
        row = int(shard.blocks[b][0])
        doc = shard.doc_id(row)
        if is_dev(doc) != dev:
            continue
        query = _block_query(index, s, b, rng, shape)
        if query is not None:
            out.append(query)
    return out


def _block_query(index: PhraseIndex, s: int, b: int, rng: random.Random, shape: "Shape") -> TuneQuery | None:
    """One query of block b of shard s (its place among the opened shards), or None when no sentence of it has a
    phrase to mask."""
    shard = index.shards[s]
    row, first, end = (int(v) for v in shard.blocks[b])
    text = shard.doc_text(row)
    ids = np.asarray(shard.token_ids[first:end], dtype=np.int64)
    flags = np.asarray(shard.flags[first:end])
    offsets = np.asarray(shard.offsets[np.arange(first, end)], dtype=np.int64)
    sentences = _sentences(text, offsets, flags)
    rng.shuffle(sentences)
    for a, z in sentences:
        span = _pick_span(text, offsets[a:z], flags[a:z], rng, shape.max_answer_tokens, shape.word_share)
        if span is None:
            continue
        lo, hi = _window(flags[a:z], span, shape.max_query_tokens)
        i, j = span
        chars = offsets[a:z]
        query = _query_text(text, chars, flags[a:z], (lo, hi), span, rng, shape.drop)
        kind = "self:word" if text[chars[i, 0]].islower() else "self:name"
        block = -1 if shape.own_block else index.manifest.shards[index.numbers[s]].block_base + b
        return TuneQuery(query, (tuple(ids[a + i : a + j + 1].tolist()),), block, shard.doc_id(row), kind)
    return None


def _sentences(text: str, offsets: np.ndarray, flags: np.ndarray) -> list[tuple[int, int]]:
    """[a, z) token ranges of a block's sentences (ended by . ! or ?, a word of its own), at least
    MIN_SENTENCE_TOKENS long."""
    out, a = [], 0
    for t in range(len(flags)):
        if text[offsets[t, 0] : offsets[t, 1]] in SENTENCE_ENDS:
            if t + 1 - a >= MIN_SENTENCE_TOKENS:
                out.append((a, t + 1))
            a = t + 1
    if len(flags) - a >= MIN_SENTENCE_TOKENS:
        out.append((a, len(flags)))
    return out


def _pick_span(
    text: str, offsets: np.ndarray, flags: np.ndarray, rng: random.Random, max_answer: int, word_share: float
) -> tuple[int, int] | None:
    """An inclusive token range of a sentence to mask: a salient run, or with chance `word_share` a lower-case
    content word (the other kind when the sentence has none of the one drawn); never most of the sentence."""
    salient = [(int(a), int(b)) for a, b in salient_spans(text, offsets, flags, max_answer)]
    words = [
        (a, b) for a, b in _words(flags) if b - a < max_answer and _content_word(text[offsets[a, 0] : offsets[b, 1]])
    ]
    kinds = [words, salient] if rng.random() < word_share else [salient, words]
    for spans in kinds:
        spans = [(a, b) for a, b in spans if 2 * (b - a + 1) <= len(flags) and (a > 0 or b < len(flags) - 1)]
        if spans:
            return rng.choice(spans)
    return None


def _words(flags: np.ndarray) -> list[tuple[int, int]]:
    out, first = [], None
    for t, f in enumerate(flags.tolist()):
        if f & WORD_START:
            first = t
        if f & WORD_END and first is not None:
            out.append((first, t))
            first = None
    return out


def _content_word(word: str) -> bool:
    return len(word) >= 3 and word.isalpha() and word.islower() and word not in STOPWORD_SET


def _window(flags: np.ndarray, span: tuple[int, int], limit: int) -> tuple[int, int]:
    """The inclusive token range of at most `limit` tokens of the sentence around the span, cut at word
    boundaries."""
    n = len(flags)
    i, j = span
    if n <= limit:
        return 0, n - 1
    room = max(0, limit - (j - i + 1))
    lo = max(0, i - room // 2)
    hi = min(n - 1, lo + limit - 1)
    lo = max(0, min(lo, hi - limit + 1))
    while lo < i and not flags[lo] & WORD_START:
        lo += 1
    while hi > j and not flags[hi] & WORD_END:
        hi -= 1
    return lo, hi


def _query_text(
    text: str,
    chars: np.ndarray,
    flags: np.ndarray,
    window: tuple[int, int],
    span: tuple[int, int],
    rng: random.Random,
    drop: float,
) -> str:
    """The window's text with the span as <mask>; with `drop`, each word of it but names, numbers and the two
    words each side of the mask left out with that chance (the query then is not the block's own words)."""
    lo, hi = window
    i, j = span
    words = [(p, q) for p, q in _words(flags) if lo <= p and q <= hi and (q < i or p > j)]
    before = [w for w in words if w[1] < i]
    near = set(before[-2:]) | set([w for w in words if w[0] > j][:2])
    kept = []
    for p, q in words:
        word = text[chars[p, 0] : chars[q, 1]]
        if (p, q) in near or _name(word) or rng.random() >= drop:
            kept.append((p, word))
    pieces = [w for p, w in kept if p < i] + ["<mask>"] + [w for p, w in kept if p > j]
    return " ".join(pieces)


def _name(word: str) -> bool:
    return bool(word) and (word[0].isupper() or word[0].isdigit())

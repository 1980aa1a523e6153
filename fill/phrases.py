"""Phrases of candidate spans without a Python string per span: the same phrases, masses and order as
grouping the stripped span texts as strings (the reference in tests/fill/reference.py), computed with numpy.

Every span's text is a segment of one code-point buffer per shard (`shard_span_texts`, in the candidate
stage), in which the overlapping spans of a block share one piece (ASCII blocks read straight from the
shard's UTF-8 bytes, other blocks decoded once each; indexer.doc_text); the ranker joins the shards'
buffers. Each span is stripped of surrounding white space and punctuation (`strip_phrases`) and grouped by exact
content (fill.ragged.group_phrases: two phrases are never merged). The stopword filter runs on the distinct
keys (vectorized for ASCII keys, `poor_fill` for the others), case folding likewise. Strings are built only for
the phrases that can be shown.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from common.arrays import piece_starts, unique_inverse
from encoder.stopwords import STOPWORD_SET, broken_span, poor_fill
from fill.ragged import Ragged, group_phrases, next_true, prev_true
from fill.spans import masses, strip_chars, top_values
from indexer.doc_text import DocText
from indexer.shard import Shard

_PACKED = 7  # chars of a word packed into one uint64 (a byte each, the length in the top byte)


@functools.lru_cache(maxsize=1)
def _strip_table() -> np.ndarray:
    table = np.zeros(0x110000, dtype=bool)
    table[np.frombuffer(strip_chars().encode("utf-32-le"), dtype="<u4")] = True
    return table


@functools.lru_cache(maxsize=1)
def _stopword_codes() -> np.ndarray:
    if any(len(w) > _PACKED or not w.isascii() for w in STOPWORD_SET):
        raise ValueError(f"stopwords must be ASCII words of at most {_PACKED} chars to pack into one integer")
    return np.array(sorted(_pack(w.encode()) for w in STOPWORD_SET), dtype=np.uint64)


def _pack(word: bytes) -> int:
    return int.from_bytes(word, "little") | (len(word) << 56)


def poor_fills(keys: Ragged) -> np.ndarray:
    """`encoder.stopwords.poor_fill` of each non-empty segment: vectorized where a segment is ASCII. A word
    is a maximal run of [A-Za-z0-9] inside the segment; the first and the last word may be runs of `codes`
    cut by the segment's ends, the words between them are whole runs of `codes`."""
    n = keys.length.size
    out = np.zeros(n, dtype=bool)
    if n == 0 or keys.codes.size == 0:  # no segment, or only empty ones (no words)
        return out
    c = keys.codes.astype(np.int64)
    s, e = keys.start, keys.start + keys.length
    wide = np.zeros(c.size + 1, dtype=np.int64)
    np.cumsum(c >= 128, out=wide[1:])
    non_ascii = (wide[e] - wide[s]) > 0
    lower_c = np.where((c >= 65) & (c <= 90), c + 32, c)
    alpha = (lower_c >= 97) & (lower_c <= 122)
    alnum = alpha | ((c >= 48) & (c <= 57))
    first_of_run = alnum & ~np.concatenate([[False], alnum[:-1]])
    run_start = prev_true(first_of_run)  # of the run holding an alnum position
    run_end = next_true(alnum & ~np.concatenate([alnum[1:], [False]])) + 1  # one past it
    first_at = next_true(alnum)[s]  # the first word's first char
    has = first_at < e
    last_at = prev_true(alnum)[np.maximum(e - 1, 0)]  # the last word's last char
    first_in, last_in = np.minimum(first_at, max(c.size - 1, 0)), np.maximum(last_at, 0)  # clipped into `codes`
    first_end = np.minimum(run_end[first_in], e)  # the first word is [first_at, first_end)
    last_start = np.maximum(run_start[last_in], s)  # the last word is [last_start, last_at + 1)
    runs_before = np.zeros(c.size + 1, dtype=np.int64)  # runs starting before each position
    np.cumsum(first_of_run, out=runs_before[1:])
    n_words = 1 + runs_before[e] - runs_before[np.minimum(first_at + 1, c.size)]
    single_letter = (n_words == 1) & (first_end - first_at == 1) & alpha[first_in]
    exact, folded = _word_codes(c), _word_codes(lower_c)
    in_first = _is_stopword(exact, first_in, first_end - first_at)
    in_last = _is_stopword(exact, last_start, last_at + 1 - last_start)
    # words between the first and the last: whole runs starting in [first_end, last_start); count those not stopwords
    runs = np.flatnonzero(first_of_run)
    not_stop = np.zeros(c.size + 1, dtype=np.int64)
    not_stop[runs + 1] = ~_is_stopword(folded, runs, run_end[runs] - runs)
    np.cumsum(not_stop, out=not_stop)
    inner = np.where(
        n_words >= 3, not_stop[np.maximum(last_start, first_end)] - not_stop[np.minimum(first_end, last_start)], 0
    )
    all_stop = (
        _is_stopword(folded, first_in, first_end - first_at)
        & _is_stopword(folded, last_start, last_at + 1 - last_start)
        & (inner == 0)
    )
    out = has & (single_letter | in_first | in_last | all_stop)
    other = np.flatnonzero(non_ascii)
    out[other] = [poor_fill(text) for text in keys.texts(other)]
    poor: np.ndarray = out
    return poor


def _word_codes(c: np.ndarray) -> np.ndarray:
    """Per position i: codes[i : i + _PACKED] packed a byte each (clipped to 255), low byte first."""
    clipped = np.minimum(c, 255).astype(np.uint64)
    padded = np.concatenate([clipped, np.zeros(_PACKED, dtype=np.uint64)])
    packed = np.zeros(c.size, dtype=np.uint64)
    for t in range(_PACKED):
        packed |= padded[t : t + c.size] << np.uint64(8 * t)
    return packed


def _is_stopword(packed: np.ndarray, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Whether each word (`length` chars from position `at`, ASCII) is a stopword: words no longer than the
    longest stopword, packed exactly (a byte per char, the length on top), looked up among the packed
    stopwords (sorted)."""
    out = np.zeros(at.size, dtype=bool)
    stop = _stopword_codes()
    if stop.size == 0 or packed.size == 0:
        return out
    longest = int(stop.max() >> np.uint64(56))
    short = np.flatnonzero((length >= 1) & (length <= longest))
    ln = length[short].astype(np.uint64)
    word = packed[at[short]] & ((np.uint64(1) << (np.uint64(8) * ln)) - np.uint64(1)) | (ln << np.uint64(56))
    i = np.minimum(np.searchsorted(stop, word), stop.size - 1)
    out[short] = stop[i] == word
    return out


def lower_phrases(keys: Ragged) -> Ragged:
    """Each segment case-folded as str.lower() does: ASCII by table, the others by str.lower (which may
    change a segment's length)."""
    seg, rel = keys.flat_index()
    c = keys.codes[keys.start[seg] + rel]
    non_ascii = np.zeros(keys.length.size, dtype=bool)
    non_ascii[seg[c >= 128]] = True
    c = np.where((c >= 65) & (c <= 90), c + 32, c).astype(np.uint32)
    if not non_ascii.any():
        return Ragged(c, piece_starts(keys.length), keys.length.copy())
    pieces, lengths = [], keys.length.copy()
    first = piece_starts(keys.length)
    for i in range(keys.length.size):
        if non_ascii[i]:
            piece = np.frombuffer(keys.text(i).lower().encode("utf-32-le"), dtype="<u4")
        else:
            piece = c[first[i] : first[i] + keys.length[i]]
        pieces.append(piece)
        lengths[i] = piece.size
    return Ragged(np.concatenate(pieces).astype(np.uint32), piece_starts(lengths), lengths)


def strip_phrases(raw: Ragged) -> Ragged:
    """Each segment without its surrounding white space and punctuation (`fill.spans.strip_phrase`); a
    segment of only such characters becomes empty (length 0)."""
    keep = ~_strip_table()[raw.codes]
    s, e = raw.start, raw.start + raw.length
    first = next_true(keep)[s]
    last = prev_true(keep)[np.maximum(e - 1, 0)] if raw.codes.size else np.full(s.size, -1)
    has = (raw.length > 0) & (first < e)
    lead = np.where(has, first - s, 0).astype(np.int64)
    return Ragged(raw.codes, s + lead, np.where(has, last + 1 - first, 0).astype(np.int64))


def shard_span_texts(shard: Shard, block: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[Ragged, np.ndarray]:
    """(the text of each span [first, last] of one shard as a segment of one code-point buffer, the span's
    first char in its document). Spans of one block whose chars overlap share one piece of the buffer (a
    mask's spans are a few tokens either side of its hits, so most of them overlap), pieces in block order,
    each followed by a NUL; ASCII blocks are read straight from the shard's UTF-8 bytes, other blocks
    decoded once each (indexer.doc_text). `block` is each span's block in the shard."""
    n = first.size
    char_a, char_b = shard.offsets.span_chars(block, first, last)
    char_b = np.maximum(char_b, char_a)
    # pieces: the unions of overlapping [char_a, char_b) within a block, blocks in order
    key_a, key_b = block << 32 | char_a, block << 32 | char_b
    order = np.argsort(key_a, kind="stable")
    reach = np.maximum.accumulate(key_b[order])
    new = np.ones(n, dtype=bool)
    new[1:] = key_a[order][1:] > reach[:-1]
    piece_of = np.empty(n, dtype=np.int64)
    piece_of[order] = np.cumsum(new) - 1
    heads = order[new]  # a piece's first span: its block and first char
    p_block, p_a = block[heads], char_a[heads]
    p_len = np.maximum.reduceat(key_b[order], np.flatnonzero(new)) - key_a[heads] if n else np.empty(0, np.int64)
    p_at = piece_starts(p_len + 1)  # where each piece starts in the buffer
    codes = _piece_codes(shard.text, p_block, p_a, p_len, p_at)
    return Ragged(codes, p_at[piece_of] + (char_a - p_a[piece_of]), char_b - char_a), char_a


def _piece_codes(
    text: DocText, p_block: np.ndarray, p_a: np.ndarray, p_len: np.ndarray, p_at: np.ndarray
) -> np.ndarray:
    """The buffer of the pieces: piece i's code points at p_at[i], a NUL after each."""
    codes = np.zeros(int((p_len + 1).sum()), dtype=np.uint32)
    ascii_block, byte = text.ascii_bytes(p_block, p_a)
    fast = np.flatnonzero(ascii_block)
    if fast.size:
        seg, rel = Ragged(text.data, byte[fast], p_len[fast]).flat_index()
        codes[p_at[fast][seg] + rel] = text.data[byte[fast][seg] + rel]
    slow = np.flatnonzero(~ascii_block)
    if slow.size:  # the other blocks decoded once each, all in one call
        blocks, which = unique_inverse(p_block[slow])
        block_codes, code_at = text.blocks_codes(blocks)
        first = code_at[which] + (p_a[slow] - text.block_chars[p_block[slow]])
        seg, rel = Ragged(block_codes, first, p_len[slow]).flat_index()
        codes[p_at[slow][seg] + rel] = block_codes[first[seg] + rel]
    return codes


@dataclass
class PhraseTable:
    """The phrases of one mask's spans: `code` numbers each span's phrase (-1: dropped), phrases in order of
    their first span; the key of span i is keys segment i."""

    keys: Ragged
    code: np.ndarray
    first: np.ndarray
    mass: np.ndarray
    tokens: np.ndarray

    def text(self, phrase: int) -> str:
        return self.keys.text(int(self.first[phrase]))

    def occurrences(self, phrase: int) -> np.ndarray:
        return np.flatnonzero(self.code == phrase)


def phrase_table(
    keys: Ragged,
    scores: np.ndarray,
    span_tokens: np.ndarray,
    case_sensitive: bool,
    how: str,
    drop_stopwords: bool,
    strict_spans: bool = False,
) -> PhraseTable:
    """The phrases of the spans whose stripped texts are `keys` (empty: dropped): each span's phrase, each
    phrase's mass over its spans (max or sum) and its length in tokens (that of its first span). Dropped too:
    with `drop_stopwords`, poor fills (`poor_fills`); with `strict_spans`, spans breaking NPM's rule (`broken_span`)."""
    keep = np.flatnonzero(keys.length > 0)
    kept = Ragged(keys.codes, keys.start[keep], keys.length[keep])
    exact, exact_first = group_phrases(kept)  # distinct keys, case kept
    distinct = Ragged(kept.codes, kept.start[exact_first], kept.length[exact_first])
    if drop_stopwords or strict_spans:
        good = ~poor_fills(distinct) if drop_stopwords else np.ones(distinct.length.size, dtype=bool)
        if strict_spans:
            every = np.arange(distinct.length.size)
            good &= ~np.array([broken_span(text) for text in distinct.texts(every)], dtype=bool)
        keep, exact = keep[good[exact]], exact[good[exact]]
        renumber = np.cumsum(good) - 1
        exact, distinct = renumber[exact], Ragged(distinct.codes, distinct.start[good], distinct.length[good])
    if case_sensitive:
        code_of_distinct = np.arange(distinct.length.size)
    else:
        code_of_distinct, _ = group_phrases(lower_phrases(distinct))
    # phrases numbered by their first kept span (a distinct key's first span is its group's first)
    pre = code_of_distinct[exact] if exact.size else np.empty(0, dtype=np.int64)
    n_pre = int(pre.max()) + 1 if pre.size else 0
    first_of = np.full(n_pre, np.iinfo(np.int64).max)
    np.minimum.at(first_of, pre, np.arange(pre.size))
    order = np.argsort(first_of, kind="stable")
    number = np.empty(n_pre, dtype=np.int64)
    number[order] = np.arange(n_pre)
    code = np.full(keys.length.size, -1, dtype=np.int64)
    code[keep] = number[pre]
    firsts = keep[first_of[order]]
    mass = masses(code[keep], np.asarray(scores, dtype=np.float64)[keep], n_pre, how)
    return PhraseTable(keys, code, firsts, mass, np.asarray(span_tokens, dtype=np.int64)[firsts])


def rank_table(table: PhraseTable, alpha: float, n: int) -> list[tuple[int, float]]:
    """The table's phrases ranked by mass * len^alpha: (phrase, value over all phrases' values), best first,
    ties by text; the first n only, texts built only for the phrases that can be among them."""
    if alpha:  # len ** alpha by Python's pow, as the reference does (numpy's power may round differently)
        factor = {t: t**alpha for t in np.unique(table.tokens).tolist()}
        values = table.mass * np.array([factor[t] for t in table.tokens.tolist()], dtype=np.float64)
    else:
        values = table.mass * 1.0
    return top_values(values, table.text, n)

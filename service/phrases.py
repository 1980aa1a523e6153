"""Phrases of candidate spans without a Python string per span: the same phrases, masses and order as
`service.spans.aggregate` + `rank` over the stripped span texts, computed with numpy.

Every span's text is gathered as code points into one flat array (ASCII blocks straight from the shard's
UTF-8 bytes, other blocks decoded once each; indexer.doc_text), stripped of surrounding white space and
punctuation with a lookup table, and grouped by exact content: a 64-bit hash of each key finds the groups,
then every key is compared with its group's first key element by element, so a hash collision can never
merge two phrases (it raises `Collision` and the engine takes the string path). The stopword filter runs
on the distinct keys (vectorized for ASCII keys, `poor_fill` for the others), case folding likewise.
Strings are built only for the phrases that can be shown.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from encoder.stopwords import STOPWORD_SET, poor_fill
from service.spans import masses, strip_chars, top_values

_MULT = np.uint64(0x9E3779B97F4A7C15)


class Collision(Exception):
    """Two different keys hashed alike: the caller falls back to grouping by strings."""


@functools.lru_cache(maxsize=1)
def _strip_table() -> np.ndarray:
    table = np.zeros(0x110000, dtype=bool)
    table[np.frombuffer(strip_chars().encode("utf-32-le"), dtype="<u4")] = True
    return table


@functools.lru_cache(maxsize=1)
def _stopword_codes() -> np.ndarray:
    if any(len(w) > 7 or not w.isascii() for w in STOPWORD_SET):
        raise ValueError("stopwords must be ASCII words of at most 7 chars to pack into 56 bits")
    return np.array(sorted(_pack(w.encode()) for w in STOPWORD_SET), dtype=np.uint64)


def _pack(word: bytes) -> int:
    return int.from_bytes(word, "little") | (len(word) << 56)


def _hash_table(n: int) -> np.ndarray:
    return np.random.default_rng(0x5EED).integers(1, 2**63, size=max(n, 1), dtype=np.uint64) | np.uint64(1)


@dataclass
class Ragged:
    """Segments of a flat code-point array: segment i is codes[start[i] : start[i] + length[i]]."""

    codes: np.ndarray
    start: np.ndarray
    length: np.ndarray

    def flat_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(segment of each element, its position within the segment) over all segments in order."""
        seg = np.repeat(np.arange(self.length.size), self.length)
        first = np.cumsum(self.length) - self.length
        return seg, np.arange(seg.size) - first[seg]

    def elements(self, seg: np.ndarray, rel: np.ndarray) -> np.ndarray:
        """The elements of all segments in order (`seg`, `rel` from flat_index)."""
        if self.codes.size == seg.size and np.array_equal(self.start, np.cumsum(self.length) - self.length):
            return self.codes  # the segments are the whole array, in order
        return self.codes[self.start[seg] + rel]

    def text(self, i: int) -> str:
        a = int(self.start[i])
        return self.codes[a : a + int(self.length[i])].astype("<u4").tobytes().decode("utf-32-le")


def group(keys: Ragged) -> tuple[np.ndarray, np.ndarray]:
    """(group of each segment, numbered in order of first appearance; the first segment of each group) for
    non-empty segments, by exact content. Raises Collision when two different segments hash alike."""
    n = keys.length.size
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    seg, rel = keys.flat_index()
    values = keys.codes[keys.start[seg] + rel].astype(np.uint64)
    table = _hash_table(int(keys.length.max()) + 1)
    h = np.add.reduceat((values + np.uint64(1)) * table[rel], np.cumsum(keys.length) - keys.length)
    h ^= keys.length.astype(np.uint64) * _MULT
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    number = np.empty(order.size, dtype=np.int64)
    number[order] = np.arange(order.size)
    groups, firsts = number[inverse.ravel()], first[order]
    rep = firsts[groups]
    if np.any(keys.length[rep] != keys.length) or np.any(keys.codes[keys.start[rep][seg] + rel] != keys.codes[keys.start[seg] + rel]):
        raise Collision
    return groups, firsts


def poor(keys: Ragged) -> np.ndarray:
    """`encoder.stopwords.poor_fill` of each segment: vectorized where a segment is ASCII."""
    out = np.zeros(keys.length.size, dtype=bool)
    if keys.length.size == 0:
        return out
    seg, rel = keys.flat_index()
    c = keys.codes[keys.start[seg] + rel].astype(np.int64)
    non_ascii = np.zeros(keys.length.size, dtype=bool)
    non_ascii[seg[c >= 128]] = True
    for i in np.flatnonzero(non_ascii).tolist():
        out[i] = poor_fill(keys.text(i))
    lower = np.where((c >= 65) & (c <= 90), c + 32, c)
    alpha = ((lower >= 97) & (lower <= 122))
    alnum = alpha | ((c >= 48) & (c <= 57))
    # words: maximal runs of [A-Za-z0-9] inside a segment
    starts = alnum & ((rel == 0) | ~np.concatenate([[False], alnum[:-1]]))
    word_at = np.flatnonzero(starts)
    ends_at = np.flatnonzero(alnum & ((rel == keys.length[seg] - 1) | ~np.concatenate([alnum[1:], [False]])))
    word_seg, word_len = seg[word_at], ends_at - word_at + 1
    n_words = np.bincount(word_seg, minlength=keys.length.size)
    if word_seg.size == 0:
        return out
    first_word = np.searchsorted(word_seg, np.arange(keys.length.size))
    last_word = np.searchsorted(word_seg, np.arange(keys.length.size), side="right") - 1
    has = n_words > 0
    fw, lw = first_word[has], last_word[has]
    # case kept: only a key's first and last words are looked up; case folded: every word
    in_first, in_last = _stopwords_at(c, word_at[fw], word_len[fw]), _stopwords_at(c, word_at[lw], word_len[lw])
    folded = _stopwords_at(lower, word_at, word_len)
    all_stop = np.bincount(word_seg, weights=~folded, minlength=keys.length.size) == 0
    single_letter = (n_words[has] == 1) & (word_len[fw] == 1) & alpha[word_at[fw]]
    vec = np.zeros(keys.length.size, dtype=bool)
    vec[has] = single_letter | in_first | in_last | all_stop[has]
    return np.where(non_ascii, out, vec)


def _stopwords_at(c: np.ndarray, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Whether each word (chars c[at : at + length], ASCII) is a stopword: words no longer than the longest
    stopword, packed exactly into an integer (a byte per char, the length on top), looked up among the
    packed stopwords (sorted)."""
    out = np.zeros(at.size, dtype=bool)
    stop = _stopword_codes()
    longest = int(stop.max() >> np.uint64(56)) if stop.size else 0
    short = np.flatnonzero(length <= longest)
    if short.size == 0:
        return out
    steps = np.arange(longest)
    inside = steps[None, :] < length[short][:, None]
    chars = c[np.minimum(at[short][:, None] + steps[None, :], c.size - 1)]
    packed = (np.where(inside, chars, 0).astype(np.uint64) << (8 * steps).astype(np.uint64)).sum(axis=1, dtype=np.uint64)
    packed |= length[short].astype(np.uint64) << np.uint64(56)
    i = np.minimum(np.searchsorted(stop, packed), stop.size - 1)
    out[short] = stop[i] == packed
    return out


def lower(keys: Ragged) -> Ragged:
    """Each segment case-folded as str.lower() does: ASCII by table, the others by str.lower (which may
    change a segment's length)."""
    seg, rel = keys.flat_index()
    c = keys.codes[keys.start[seg] + rel]
    non_ascii = np.zeros(keys.length.size, dtype=bool)
    non_ascii[seg[c >= 128]] = True
    c = np.where((c >= 65) & (c <= 90), c + 32, c).astype(np.uint32)
    if not non_ascii.any():
        return Ragged(c, np.cumsum(keys.length) - keys.length, keys.length.copy())
    pieces, lengths = [], keys.length.copy()
    first = np.cumsum(keys.length) - keys.length
    for i in range(keys.length.size):
        if non_ascii[i]:
            piece = np.frombuffer(keys.text(i).lower().encode("utf-32-le"), dtype="<u4")
        else:
            piece = c[first[i] : first[i] + keys.length[i]]
        pieces.append(piece)
        lengths[i] = piece.size
    return Ragged(np.concatenate(pieces).astype(np.uint32), np.cumsum(lengths) - lengths, lengths)


def strip(raw: Ragged) -> tuple[np.ndarray, np.ndarray]:
    """(lead, end) per segment such that segment[lead:end] has no surrounding white space or punctuation
    (`service.spans.strip_phrase`); end <= lead for a segment of only such characters."""
    seg, rel = raw.flat_index()
    keep = np.flatnonzero(~_strip_table()[raw.elements(seg, rel)])
    kept_seg = seg[keep]
    n = raw.length.size
    a = np.searchsorted(kept_seg, np.arange(n))
    b = np.searchsorted(kept_seg, np.arange(n), side="right") - 1
    has = b >= a
    lead = np.where(has, rel[keep[np.minimum(a, keep.size - 1)]] if keep.size else 0, 0)
    end = np.where(has, rel[keep[np.clip(b, 0, max(keep.size - 1, 0))]] + 1 if keep.size else 0, 0)
    return lead.astype(np.int64), end.astype(np.int64)


def span_texts(shards: list, shard: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[Ragged, np.ndarray, np.ndarray, np.ndarray]:
    """(the text of each span [start, end] as code points, its local block, its document row, its first char)."""
    n = shard.size
    block, row = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    char_a, char_b = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    where: list[tuple[int, np.ndarray]] = []
    for s in np.unique(shard).tolist():
        sh = shards[s]
        sel = np.flatnonzero(shard == s)
        block[sel] = sh.block_of(start[sel])
        row[sel] = sh.blocks[block[sel], 0]
        char_a[sel], char_b[sel] = sh.offsets.span_chars(block[sel], start[sel], end[sel])
        where.append((s, sel))
    length = np.maximum(char_b - char_a, 0)
    first = np.cumsum(length) - length
    codes = np.zeros(int(length.sum()), dtype=np.uint32)
    raw = Ragged(codes, first, length)
    for s, sel in where:
        text = shards[s].text
        ascii_block, byte = text.ascii_bytes(block[sel], char_a[sel])
        fast = sel[ascii_block]
        if fast.size:
            part = Ragged(text.data, byte[ascii_block], length[fast])
            seg, rel = part.flat_index()
            codes[first[fast][seg] + rel] = text.data[part.start[seg] + rel]
        for b in np.unique(block[sel[~ascii_block]]).tolist():  # decoded once per block
            spans = sel[~ascii_block][block[sel[~ascii_block]] == b]
            block_codes = text.block_codes(b)
            part = Ragged(block_codes, char_a[spans] - text.block_chars[b], length[spans])
            seg, rel = part.flat_index()
            codes[first[spans][seg] + rel] = block_codes[part.start[seg] + rel]
    return raw, block, row, char_a


@dataclass
class PhraseTable:
    """The phrases of one mask's spans: `code` numbers each span's phrase (-1: dropped), phrases in order of
    their first span; the key of span i is keys segment i (lead chars after the span's first char)."""

    keys: Ragged
    lead: np.ndarray
    code: np.ndarray
    first: np.ndarray
    mass: np.ndarray
    tokens: np.ndarray

    def text(self, phrase: int) -> str:
        return self.keys.text(int(self.first[phrase]))

    def occurrences(self, phrase: int) -> np.ndarray:
        return np.flatnonzero(self.code == phrase)


def phrase_table(raw: Ragged, scores: np.ndarray, span_tokens: np.ndarray, case_sensitive: bool, how: str,
                 drop_stopwords: bool) -> PhraseTable:
    """`service.spans.aggregate` over the stripped texts of `raw`, without strings. Raises Collision."""
    lead, end = strip(raw)
    keys = Ragged(raw.codes, raw.start + lead, np.maximum(end - lead, 0))
    keep = np.flatnonzero(keys.length > 0)
    kept = Ragged(keys.codes, keys.start[keep], keys.length[keep])
    exact, exact_first = group(kept)  # distinct keys, case kept
    distinct = Ragged(kept.codes, kept.start[exact_first], kept.length[exact_first])
    if drop_stopwords:
        good = ~poor(distinct)
        keep, exact = keep[good[exact]], exact[good[exact]]
        renumber = np.cumsum(good) - 1
        exact, distinct = renumber[exact], Ragged(distinct.codes, distinct.start[good], distinct.length[good])
    if case_sensitive:
        code_of_distinct = np.arange(distinct.length.size)
    else:
        code_of_distinct, _ = group(lower(distinct))
    # phrases numbered by their first kept span (a distinct key's first span is its group's first)
    pre = code_of_distinct[exact] if exact.size else np.empty(0, dtype=np.int64)
    n_pre = int(pre.max()) + 1 if pre.size else 0
    first_of = np.full(n_pre, np.iinfo(np.int64).max)
    np.minimum.at(first_of, pre, np.arange(pre.size))
    order = np.argsort(first_of, kind="stable")
    number = np.empty(n_pre, dtype=np.int64)
    number[order] = np.arange(n_pre)
    code = np.full(raw.length.size, -1, dtype=np.int64)
    code[keep] = number[pre]
    firsts = keep[first_of[order]]
    mass = masses(code[keep], np.asarray(scores, dtype=np.float64)[keep], n_pre, how)
    return PhraseTable(keys, lead, code, firsts, mass, np.asarray(span_tokens, dtype=np.int64)[firsts])


def rank_table(table: PhraseTable, alpha: float, n: int) -> list[tuple[int, float]]:
    """`service.spans.rank` of the table: (phrase, normalised value), best first; texts only for the pool."""
    if alpha:  # len ** alpha by Python's pow, as Phrase.rank_value (numpy's power may round differently)
        factor = {t: t**alpha for t in np.unique(table.tokens).tolist()}
        values = table.mass * np.array([factor[t] for t in table.tokens.tolist()], dtype=np.float64)
    else:
        values = table.mass * 1.0
    return top_values(values, table.text, n)

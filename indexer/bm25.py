"""A BM25 index over the blocks of an index (SQLite FTS5: in the standard library, on disk, no server).

Used by the restricted and hybrid fill modes (NPM's open-set setting): the blocks that BM25 ranks
highest for the query (with its masks blanked) supply every one of their tokens as candidates.

FTS5 ranks every block that shares a word with the query before it applies the LIMIT (~100 ms for a
24-word query at 10M tokens, most of it on words such as "the"). So bm25.sqlite also holds FTS5's own
postings, copied out of it at build time (fts5vocab), as arrays (indexer.bm25_postings: term -> block ids and
the term's bm25() weight in each, computed with FTS5's formula in its order of operations, a common term's in
pieces). A query finds its top blocks by MaxScore (indexer.bm25_top: its common words read only at the blocks
that can still make the top), adding its words' weights in FTS5's order, so the blocks and scores are FTS5's to
the last bit (tests/indexer/test_bm25.py); a file written before the pieces adds every posting. A word FTS5 may
tokenize differently from Python (anything but ASCII letters and digits: "foo_bar" is the phrase "foo bar" to
FTS5, "café" is "cafe") gets its weights from FTS5 as the score of the one-word query; indexes built before the
postings existed use the whole FTS5 query.

A file under IN_MEMORY_BELOW bytes (a delta shard's, indexer.update) is searched from a copy in memory, so that it
holds no file descriptor (`connect_read_only`): a server with many delta shards would run out of them.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from pathlib import Path

import numpy as np

from common.files import atomic_path
from indexer.bm25_postings import BaseStats, Posting, Postings, weights_at, write_postings
from indexer.bm25_top import maxscore_top, top_blocks
from indexer.shard import Shard

logger = logging.getLogger(__name__)

BM25_NAME = "bm25.sqlite"
_WORD = re.compile(r"\w+", re.UNICODE)
_PLAIN = re.compile(r"[a-z0-9]+")  # a word FTS5's unicode61 tokenizer keeps as one token, unchanged
# From this many blocks on (~40M tokens of ~40-token blocks), a query skips its words found in half the blocks or more:
# FTS5 clamps their idf to 1e-6, so each adds at most 1e-6 x (K1 + 1) to a block's score, and their postings are the
# longest a query reads (the, of, a, in). Below it every word is read, and the scores are FTS5's to the last bit.
SKIP_COMMON_FROM_BLOCKS = 1_000_000
# SQLite's largest page: a posting blob spans 16x fewer overflow pages than with the default 4 KiB (bench/bench_bm25.py
# over a 10M-token index's BM25 built with each page size, 2026-12-01: 6.0-6.9 ms a query against 9.7-11.3)
PAGE_SIZE = 65536


def block_text(shard: Shard, block: int) -> str:
    row, first, end = (int(x) for x in shard.blocks[block])
    text = shard.doc_text(row)
    return text[int(shard.offsets[first, 0]) : int(shard.offsets[end - 1, 1])]


def build_bm25(root: Path, shards: list[Shard], base: "BaseStats | None" = None, name: str = BM25_NAME) -> Path:
    """Write `name` (title + block text per global block id, and its postings) atomically (common.files).

    With `base` (a delta shard's BM25, indexer.update) the blocks are numbered from 0 in this file and their
    weights use the base index's statistics (BaseStats), so that they rank among the base's blocks."""
    final = root / name
    with atomic_path(final) as tmp:
        con = sqlite3.connect(tmp)
        try:
            con.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            # contentless: the text already lives in docs.arrow; BM25 needs only the inverted index and lengths
            con.execute(
                "CREATE VIRTUAL TABLE blocks USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2')"
            )
            rows = 0
            for shard in shards:
                first = rows if base is not None else shard.info.block_base
                rows += shard.blocks.shape[0]
                body = (
                    (first + b, f"{shard.doc_title(int(shard.blocks[b, 0]))}\n{block_text(shard, b)}")
                    for b in range(shard.blocks.shape[0])
                )
                con.executemany("INSERT INTO blocks(rowid, body) VALUES (?, ?)", body)
            con.commit()
            con.execute("INSERT INTO blocks(blocks) VALUES ('optimize')")
            write_postings(con, rows, base)
            con.commit()
        finally:
            con.close()
    return final


def query_words(text: str) -> list[str]:
    """The distinct lower-cased words of `text`, sorted: the phrases of the FTS5 query, in its order."""
    return sorted({w.lower() for w in _WORD.findall(text)})


def match_query(text: str) -> str | None:
    """An FTS5 query that ORs the words of `text` (quoted, so no user text is FTS5 syntax)."""
    return " OR ".join(f'"{w}"' for w in query_words(text)) or None


IN_MEMORY_BELOW = 1 << 20  # bytes: a smaller BM25 file is read into memory (one per delta shard, 0 descriptors)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a BM25 file, for any thread: a file under IN_MEMORY_BELOW bytes is read into memory
    (the same database, holding no descriptor), a larger one is opened read-only (one descriptor)."""
    if path.stat().st_size >= IN_MEMORY_BELOW:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    con = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        con.deserialize(path.read_bytes())
        con.execute("PRAGMA query_only = ON")
    except sqlite3.Error:
        con.close()
        raise
    return con


class BM25:
    """Read-only BM25 search over bm25.sqlite; safe to call from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con = connect_read_only(path)
        self._lock = threading.Lock()
        has = self._con.execute("SELECT 1 FROM sqlite_master WHERE name = 'postings_meta'").fetchone()
        self._postings = Postings(self._con) if has else None
        # blocks; None: no postings (an index built before them), FTS5 queries only
        self.rows: int | None = self._postings.rows if self._postings is not None else None

    def search_scored(self, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(global block ids, BM25 scores) of the top-n blocks for `text`, best first (ties: lower block id
        first); scores are positive, higher is better (FTS5's bm25() with its sign flipped)."""
        words = query_words(text)
        if not words:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        if self._postings is None:
            return self.search_fts5(text, n)
        if not self._postings.pieces:  # a file written before term_stats: every posting added
            return top_blocks(self.block_scores(words), n)
        postings = self._postings
        with self._lock:
            stats = postings.stats([w for w in words if _PLAIN.fullmatch(w)])
            plain, loaded = self._terms(words, {t: stat.df for t, stat in stats.items()})
            tops = {t: stats[t].top for t in plain if t in stats}
            tops.update((t, float(p.weights.max())) for t, p in loaded.items() if p.blocks.size)
            return maxscore_top(
                [w for w in words if w in tops],
                tops,
                lambda w: loaded[w] if w in loaded else postings.whole([w])[w],
                lambda w, at: weights_at(loaded[w], at) if w in loaded else postings.at(w, stats[w], at),
                postings.rows,
                n,
                {t: stat.df for t, stat in stats.items()} | {t: p.blocks.size for t, p in loaded.items()},
            )

    def search_fts5(self, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """`search_scored` by an FTS5 query (the reference the postings path must equal)."""
        query = match_query(text)
        if query is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        with self._lock:
            rows = self._con.execute(
                "SELECT rowid, bm25(blocks) FROM blocks WHERE blocks MATCH ? ORDER BY bm25(blocks), rowid LIMIT ?",
                (query, n),
            ).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64), np.array([-r[1] for r in rows], dtype=np.float64)

    def block_scores(self, words: list[str]) -> np.ndarray:
        """FTS5's bm25() of every block of this file for the query `words` (query_words; 0 where none occurs):
        each word's weight in a block added to the block's score word by word in query order, as fts5_aux.c
        sums its phrases. From SKIP_COMMON_FROM_BLOCKS blocks on, without the words in half the blocks or more."""
        assert self._postings is not None  # only a file with postings is searched by them
        with self._lock:
            plain, found = self._terms(words)
            found.update(self._postings.whole(plain))
        score = np.zeros(self._postings.rows, dtype=np.float64)
        for word in words:  # a word in no block adds 0 to every block (FTS5's nHit = 0)
            if word in found:
                score[found[word].blocks] += found[word].weights
        return score

    def _terms(
        self, words: list[str], frequencies: dict[str, int] | None = None
    ) -> tuple[list[str], dict[str, Posting]]:
        """(the words the postings serve, those found in half the blocks or more left out from
        SKIP_COMMON_FROM_BLOCKS blocks on, by `frequencies` where the caller read them; the postings of the others,
        from FTS5). The caller holds the lock."""
        assert self._postings is not None
        plain = [w for w in words if _PLAIN.fullmatch(w)]
        if self._postings.rows >= SKIP_COMMON_FROM_BLOCKS:
            found = self._postings.frequencies(plain) if frequencies is None else frequencies
            plain = [w for w in plain if 2 * found.get(w, 0) < self._postings.rows]
        other = {}
        for word in words:
            if not _PLAIN.fullmatch(word):
                # FTS5 may cut it into several tokens (a phrase) or fold it: its weights by FTS5 itself, as
                # the bm25() of the one-phrase query, which is minus that phrase's term of the sum
                rows = self._con.execute(
                    "SELECT rowid, bm25(blocks) FROM blocks WHERE blocks MATCH ? ORDER BY rowid", (f'"{word}"',)
                ).fetchall()
                other[word] = Posting(
                    np.array([r[0] for r in rows], dtype=np.int64), -np.array([r[1] for r in rows], dtype=np.float64)
                )
        return plain, other

    def close(self) -> None:
        self._con.close()


class BlockSearch:
    """BM25 over every live block of an index: the build's bm25.sqlite (blocks 0 .. its rows), each delta
    shard's own file (at the shard's block base, indexer.update), tombstoned blocks left out (indexer.tombstones).
    The same `search_scored` as BM25, whose blocks and scores it returns unchanged on an index never updated."""

    def __init__(self, base: BM25, deltas: list[tuple[int, BM25]], dead_blocks: np.ndarray, blocks: int) -> None:
        self.base, self.deltas, self.dead_blocks, self.blocks = base, deltas, dead_blocks, blocks
        self.path = base.path
        if (deltas or dead_blocks.size) and base.rows is None:
            raise ValueError("an index with delta shards or tombstones needs BM25 postings")

    def search_scored(self, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.deltas and not self.dead_blocks.size:
            return self.base.search_scored(text, n)
        words = query_words(text)
        score = np.zeros(self.blocks, dtype=np.float64)
        if words:
            score[: self.base.rows] = self.base.block_scores(words)
            for block_base, delta in self.deltas:
                assert delta.rows is not None  # a delta's file has postings (build_bm25 writes them)
                score[block_base : block_base + delta.rows] = delta.block_scores(words)
        score[self.dead_blocks] = 0.0
        return top_blocks(score, n)

    def close(self, deltas: list[BM25] | None = None) -> None:
        """Close the build's BM25 and `deltas` (default: every delta's; an index closes only those it still owns)."""
        for bm25 in (self.base, *([d for _, d in self.deltas] if deltas is None else deltas)):
            bm25.close()

"""A BM25 index over the blocks of an index (SQLite FTS5: in the standard library, on disk, no server).

Used by the restricted and hybrid fill modes (NPM's open-set setting): the blocks that BM25 ranks
highest for the query (with its masks blanked) supply every one of their tokens as candidates.

FTS5 ranks every block that shares a word with the query before it applies the LIMIT (~100 ms for a
24-word query at 10M tokens, most of it on words such as "the"). So bm25.sqlite also holds FTS5's own
postings, copied out of it at build time (fts5vocab), as arrays: a `postings` table (term -> block ids and
frequencies) and the length of every block. `BM25.search_scored` scores a query from them with numpy,
with FTS5's bm25() formula, in its order of operations, so the blocks and scores are FTS5's to the last
bit (tests/indexer/test_bm25.py). Queries with a word FTS5 may tokenize differently from Python (anything
but ASCII letters and digits), and indexes built before the postings existed, use the FTS5 query.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
from pathlib import Path

import numpy as np

from common.files import atomic_path
from indexer.store import Shard

logger = logging.getLogger(__name__)

BM25_NAME = "bm25.sqlite"
_WORD = re.compile(r"\w+", re.UNICODE)
_PLAIN = re.compile(r"[a-z0-9]+")  # a word FTS5's unicode61 tokenizer keeps as one token, unchanged
K1, B = 1.2, 0.75  # FTS5's bm25() constants


def block_text(shard: Shard, block: int) -> str:
    row, first, end = (int(x) for x in shard.blocks[block])
    text = shard.doc_text(row)
    return text[int(shard.offsets[first, 0]) : int(shard.offsets[end - 1, 1])]


def build_bm25(root: Path, shards: list[Shard]) -> Path:
    """Write bm25.sqlite (title + block text per global block id, and its postings) atomically (common.files)."""
    final = root / BM25_NAME
    with atomic_path(final) as tmp:
        con = sqlite3.connect(tmp)
        try:
            # contentless: the text already lives in docs.arrow; BM25 needs only the inverted index and lengths
            con.execute(
                "CREATE VIRTUAL TABLE blocks USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2')"
            )
            rows = 0
            for shard in shards:
                titles = shard.docs.column("title")
                rows += shard.blocks.shape[0]
                body = (
                    (shard.info.block_base + b, f"{titles[int(shard.blocks[b, 0])].as_py()}\n{block_text(shard, b)}")
                    for b in range(shard.blocks.shape[0])
                )
                con.executemany("INSERT INTO blocks(rowid, body) VALUES (?, ?)", body)
            con.commit()
            con.execute("INSERT INTO blocks(blocks) VALUES ('optimize')")
            _write_postings(con, rows)
            con.commit()
        finally:
            con.close()
    return final


def _write_postings(con: sqlite3.Connection, rows: int) -> None:
    """Copy FTS5's postings out of it: per term the block ids and in-block frequencies (sorted by block id),
    and per block its token count (FTS5's document length)."""
    con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, blocks, instance)")
    con.execute("CREATE TABLE postings(term TEXT PRIMARY KEY, blocks BLOB NOT NULL, freqs BLOB NOT NULL) WITHOUT ROWID")
    con.execute("CREATE TABLE postings_meta(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
    lengths = np.zeros(rows, dtype=np.int64)
    block_dtype = "<u4" if rows < 2**32 else "<i8"
    cur = con.execute("SELECT term, doc, count(*) FROM temp.vocab GROUP BY term, doc")
    term, blocks, freqs = None, [], []

    def flush() -> None:
        b, f = np.asarray(blocks, dtype=np.int64), np.asarray(freqs, dtype=np.int64)
        lengths[b] += f  # a term's blocks are distinct
        con.execute("INSERT INTO postings VALUES (?, ?, ?)", (term, b.astype(block_dtype).tobytes(), f.astype("<u4").tobytes()))

    for t, doc, count in cur:
        if t != term:
            if term is not None:
                flush()
            term, blocks, freqs = t, [], []
        blocks.append(doc)
        freqs.append(count)
    if term is not None:
        flush()
    con.execute("DROP TABLE temp.vocab")
    con.executemany("INSERT INTO postings_meta VALUES (?, ?)",
                    [("rows", str(rows).encode()), ("block_dtype", block_dtype.encode()),
                     ("lengths", lengths.astype("<u4").tobytes())])


def query_words(text: str) -> list[str]:
    """The distinct lower-cased words of `text`, sorted: the phrases of the FTS5 query, in its order."""
    return sorted({w.lower() for w in _WORD.findall(text)})


def match_query(text: str) -> str | None:
    """An FTS5 query that ORs the words of `text` (quoted, so no user text is FTS5 syntax)."""
    return " OR ".join(f'"{w}"' for w in query_words(text)) or None


class BM25:
    """Read-only BM25 search over bm25.sqlite; safe to call from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self.lengths: np.ndarray | None = None  # FTS5's length of each block; None: no postings (an older index)
        has = self._con.execute("SELECT 1 FROM sqlite_master WHERE name = 'postings_meta'").fetchone()
        if has:
            meta = dict(self._con.execute("SELECT key, value FROM postings_meta").fetchall())
            self.rows = int(meta["rows"])
            self._block_dtype = meta["block_dtype"].decode()
            self.lengths = np.frombuffer(meta["lengths"], dtype="<u4").astype(np.int64)
            avgdl = float(int(self.lengths.sum())) / float(self.rows) if self.rows else 1.0
            self._norm = K1 * ((1 - B) + B * self.lengths.astype(np.float64) / avgdl)  # k1 * (1 - b + b * D / avgdl)

    def search(self, text: str, n: int) -> np.ndarray:
        """Global block ids of the top-n blocks for `text`, best first."""
        return self.search_scored(text, n)[0]

    def search_scored(self, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(global block ids, BM25 scores) of the top-n blocks for `text`, best first (ties: lower block id
        first); scores are positive, higher is better (FTS5's bm25() with its sign flipped)."""
        words = query_words(text)
        if not words:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        if self.lengths is not None and all(_PLAIN.fullmatch(w) for w in words):
            return self._from_postings(words, n)
        return self.search_fts5(text, n)

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

    def _from_postings(self, words: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        """FTS5's bm25() over the blocks holding any of `words`: per phrase (word, in query order)
        idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl))) added to the block's score, as fts5_aux.c does."""
        with self._lock:
            found = dict((t, (b, f)) for t, b, f in self._con.execute(
                f"SELECT term, blocks, freqs FROM postings WHERE term IN ({','.join('?' * len(words))})", words))
        score = np.zeros(self.lengths.shape[0], dtype=np.float64)
        hit = np.zeros(self.lengths.shape[0], dtype=bool)
        for word in words:  # a word in no block adds 0 to every block (FTS5's nHit = 0)
            if word not in found:
                continue
            blocks = np.frombuffer(found[word][0], dtype=self._block_dtype)
            freq = np.frombuffer(found[word][1], dtype="<u4").astype(np.float64)
            idf = math.log((self.rows - blocks.size + 0.5) / (blocks.size + 0.5))
            idf = idf if idf > 0.0 else 1e-6
            score[blocks] += idf * ((freq * (K1 + 1.0)) / (freq + self._norm[blocks]))
            hit[blocks] = True
        matched = np.flatnonzero(hit)
        if matched.size > n:
            cut = np.partition(-score[matched], n - 1)[n - 1]  # the n-th best score
            matched = matched[-score[matched] <= cut]  # ties at the cut included, trimmed below
        order = np.lexsort((matched, -score[matched]))[:n]
        return matched[order], score[matched[order]]

    def close(self) -> None:
        self._con.close()

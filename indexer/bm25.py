"""A BM25 index over the blocks of an index (SQLite FTS5: in the standard library, on disk, no server).

Used by the restricted and hybrid fill modes (NPM's open-set setting): the blocks that BM25 ranks
highest for the query (with its masks blanked) supply every one of their tokens as candidates.
"""

from __future__ import annotations

import logging
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


def block_text(shard: Shard, block: int) -> str:
    row, first, end = (int(x) for x in shard.blocks[block])
    text = shard.doc_text(row)
    return text[int(shard.offsets[first, 0]) : int(shard.offsets[end - 1, 1])]


def build_bm25(root: Path, shards: list[Shard]) -> Path:
    """Write bm25.sqlite (title + block text per global block id) atomically (common.files)."""
    final = root / BM25_NAME
    with atomic_path(final) as tmp:
        con = sqlite3.connect(tmp)
        try:
            # contentless: the text already lives in docs.arrow; BM25 needs only the inverted index and lengths
            con.execute(
                "CREATE VIRTUAL TABLE blocks USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2')"
            )
            for shard in shards:
                titles = shard.docs.column("title")
                rows = (
                    (shard.info.block_base + b, f"{titles[int(shard.blocks[b, 0])].as_py()}\n{block_text(shard, b)}")
                    for b in range(shard.blocks.shape[0])
                )
                con.executemany("INSERT INTO blocks(rowid, body) VALUES (?, ?)", rows)
            con.commit()
            con.execute("INSERT INTO blocks(blocks) VALUES ('optimize')")
            con.commit()
        finally:
            con.close()
    return final


def match_query(text: str) -> str | None:
    """An FTS5 query that ORs the words of `text` (quoted, so no user text is FTS5 syntax)."""
    words = {w.lower() for w in _WORD.findall(text)}
    return " OR ".join(f'"{w}"' for w in sorted(words)) or None


class BM25:
    """Read-only BM25 search over bm25.sqlite; safe to call from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    def search(self, text: str, n: int) -> np.ndarray:
        """Global block ids of the top-n blocks for `text`, best first."""
        return self.search_scored(text, n)[0]

    def search_scored(self, text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(global block ids, BM25 scores) of the top-n blocks for `text`, best first; scores are
        positive, higher is better (FTS5's bm25() with its sign flipped)."""
        query = match_query(text)
        if query is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        with self._lock:
            rows = self._con.execute(
                "SELECT rowid, bm25(blocks) FROM blocks WHERE blocks MATCH ? ORDER BY bm25(blocks) LIMIT ?", (query, n)
            ).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64), np.array([-r[1] for r in rows], dtype=np.float64)

    def close(self) -> None:
        self._con.close()

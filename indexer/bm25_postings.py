"""BM25's postings in bm25.sqlite: per term its block ids (ascending) and its bm25() weight in each, copied out of
FTS5 at build time (indexer.bm25), and how a query reads them.

  postings      term -> all its block ids and weights (two blobs): every term of a file written before pieces
                existed; in a newer file only the terms in fewer than LONG_FROM blocks
  pieces        (term, first block) -> PIECE postings: a term in LONG_FROM blocks or more, so that a query can
                read its weights at a few hundred blocks without reading the term's millions (indexer.bm25_top)
  term_stats    term -> the blocks it is in, its largest weight (what the top-n search bounds a term by) and, for a
                term in pieces, the first block of each piece
  postings_meta rows (the blocks of the file), block_dtype, and layout "pieces" in a newer file

A file without term_stats (written before it) is read whole, term by term, as before."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from common.arrays import unique
from indexer.integrity import fts5_totals_of

K1, B = 1.2, 0.75  # FTS5's bm25() constants
LONG_FROM = 4096  # a term in this many blocks or more is stored in pieces
PIECE = 256  # postings a piece
_CHUNK = 500  # SQL parameters a statement


@dataclass(frozen=True)
class BaseStats:
    """What a delta's BM25 weights borrow from the base index: its block count, mean block length (FTS5's
    averages record) and each term's block frequency, so idf = log((N - n + 0.5) / (n + 0.5)) counts the base's
    blocks and the delta's together and D / avgdl compares with the base's blocks (`indexer compact` recomputes
    everything exactly, as a build does)."""

    rows: int
    avgdl: float
    path: Path

    @classmethod
    def of(cls, path: Path) -> "BaseStats":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows, tokens = fts5_totals_of(con)
        finally:
            con.close()
        return cls(rows, tokens / rows if rows else 1.0, path)

    def frequencies(self, terms: list[str]) -> dict[str, int]:
        """The base's block frequency of each term that it holds."""
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            return Postings(con).frequencies(terms)
        finally:
            con.close()


class Posting(NamedTuple):
    """One term's postings: block ids (ascending) and its weight in each."""

    blocks: np.ndarray
    weights: np.ndarray


def write_postings(con: sqlite3.Connection, rows: int, base: "BaseStats | None" = None) -> None:
    """Copy FTS5's postings out of it (the tables above): per term its weight in each of its blocks,
    idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl))) as fts5_aux.c computes it (f: the term's count in
    the block, D: the block's token count); they depend on the index only, so a query adds them. With `base`,
    N, n and avgdl count the base's blocks too (BaseStats)."""
    con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, blocks, instance)")
    lengths = np.zeros(rows, dtype=np.int64)  # first pass: each block's token count
    for doc, count in con.execute("SELECT doc, count(*) FROM temp.vocab GROUP BY doc"):
        lengths[doc] = count
    avgdl = float(int(lengths.sum())) / float(rows) if rows else 1.0
    total, base_df = rows, {}
    if base is not None:
        avgdl, total = base.avgdl, rows + base.rows
        base_df = base.frequencies([t for (t,) in con.execute("SELECT DISTINCT term FROM temp.vocab")])
    norm = K1 * ((1 - B) + B * lengths.astype(np.float64) / avgdl)  # k1 * (1 - b + b * D / avgdl)
    block_dtype = "<u4" if rows < 2**32 else "<i8"
    con.execute(
        "CREATE TABLE postings(term TEXT PRIMARY KEY, blocks BLOB NOT NULL, weights BLOB NOT NULL) WITHOUT ROWID"
    )
    con.execute(
        "CREATE TABLE pieces(term TEXT, first INTEGER, blocks BLOB NOT NULL, weights BLOB NOT NULL, "
        "PRIMARY KEY (term, first)) WITHOUT ROWID"
    )
    con.execute(
        "CREATE TABLE term_stats(term TEXT PRIMARY KEY, df INTEGER NOT NULL, top REAL NOT NULL, firsts BLOB) "
        "WITHOUT ROWID"
    )
    con.execute("CREATE TABLE postings_meta(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")

    def insert(term: str, blocks: list[int], freqs: list[int]) -> None:
        b, f = np.asarray(blocks, dtype=np.int64), np.asarray(freqs, dtype=np.float64)
        n = b.size + base_df.get(term, 0)
        idf = math.log((total - n + 0.5) / (n + 0.5))
        idf = idf if idf > 0.0 else 1e-6
        weights = idf * ((f * (K1 + 1.0)) / (f + norm[b]))
        ids, w = b.astype(block_dtype), weights.astype("<f8")
        firsts = ids[::PIECE].tobytes() if b.size >= LONG_FROM else None
        con.execute("INSERT INTO term_stats VALUES (?, ?, ?, ?)", (term, int(b.size), float(weights.max()), firsts))
        if firsts is None:
            con.execute("INSERT INTO postings VALUES (?, ?, ?)", (term, ids.tobytes(), w.tobytes()))
            return
        con.executemany(
            "INSERT INTO pieces VALUES (?, ?, ?, ?)",
            (
                (term, int(b[a]), ids[a : a + PIECE].tobytes(), w[a : a + PIECE].tobytes())
                for a in range(0, b.size, PIECE)
            ),
        )

    _each_term(con, insert)
    con.execute("DROP TABLE temp.vocab")
    meta = [("rows", str(rows)), ("block_dtype", block_dtype), ("layout", "pieces")]
    con.executemany("INSERT INTO postings_meta VALUES (?, ?)", [(k, v.encode()) for k, v in meta])


def _each_term(con: sqlite3.Connection, insert) -> None:
    """insert(term, blocks, counts) for each term of FTS5's vocabulary, a term at a time (memory: one term's)."""
    term: str | None
    blocks: list[int]
    freqs: list[int]
    term, blocks, freqs = None, [], []
    instances = con.execute("SELECT term, doc, count(*) FROM temp.vocab GROUP BY term, doc").fetchmany
    while batch := instances(65536):
        for t, doc, count in batch:  # by term, then block
            if t != term:
                if term is not None:
                    insert(term, blocks, freqs)
                term, blocks, freqs = t, [], []
            blocks.append(doc)
            freqs.append(count)
    if term is not None:
        insert(term, blocks, freqs)


class Postings:
    """Reads the postings of one open bm25.sqlite (the caller holds its connection's lock)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        meta = dict(con.execute("SELECT key, value FROM postings_meta").fetchall())
        self.rows = int(meta["rows"])
        self.block_dtype = meta["block_dtype"].decode()
        self.pieces = meta.get("layout") == b"pieces"  # term_stats and pieces exist

    def _select(self, sql: str, values: list, lead: tuple = ()) -> list[tuple]:
        """`sql` with its one `IN ({})` over `values`, _CHUNK at a time (`lead`: the parameters before it)."""
        out: list[tuple] = []
        for a in range(0, len(values), _CHUNK):
            chunk = values[a : a + _CHUNK]
            out += self.con.execute(sql.format(",".join("?" * len(chunk))), (*lead, *chunk)).fetchall()
        return out

    def stats(self, terms: list[str]) -> dict[str, "TermStats"]:
        """What term_stats holds of each term of `terms` this file holds (a file with pieces)."""
        rows = self._select("SELECT term, df, top, firsts FROM term_stats WHERE term IN ({})", terms)
        return {
            t: TermStats(df, top, None if f is None else np.frombuffer(f, dtype=self.block_dtype))
            for t, df, top, f in rows
        }

    def frequencies(self, terms: list[str]) -> dict[str, int]:
        """The number of blocks holding each term of `terms` this file holds (the postings themselves not read)."""
        if self.pieces:
            return {t: stat.df for t, stat in self.stats(terms).items()}
        width = np.dtype(self.block_dtype).itemsize
        sql = f"SELECT term, length(blocks) / {width} FROM postings WHERE term IN ({{}})"
        return dict(self._select(sql, terms))

    def whole(self, terms: list[str]) -> dict[str, Posting]:
        """Every posting of each term of `terms` this file holds."""
        found = {
            t: Posting(np.frombuffer(b, dtype=self.block_dtype), np.frombuffer(w, dtype="<f8"))
            for t, b, w in self._select("SELECT term, blocks, weights FROM postings WHERE term IN ({})", terms)
        }
        if self.pieces:
            for term in (t for t in terms if t not in found):
                rows = self.con.execute(
                    "SELECT blocks, weights FROM pieces WHERE term = ? ORDER BY first", (term,)
                ).fetchall()
                if rows:
                    found[term] = _joined(rows, self.block_dtype)
        return found

    def at(self, term: str, stat: "TermStats", blocks: np.ndarray) -> np.ndarray:
        """The term's weight in each of `blocks` (ascending), 0 where it is not: of a term in pieces, only the pieces
        holding them read (all of them when they are a third of its pieces or more)."""
        if stat.firsts is None:
            return weights_at(self.whole([term])[term], blocks)
        needed = unique(np.searchsorted(stat.firsts, blocks, side="right") - 1)
        needed = needed[needed >= 0]
        if 3 * needed.size >= stat.firsts.size:
            return weights_at(self.whole([term])[term], blocks)
        sql = "SELECT blocks, weights FROM pieces WHERE term = ? AND first IN ({}) ORDER BY first"
        return weights_at(_joined(self._select(sql, stat.firsts[needed].tolist(), (term,)), self.block_dtype), blocks)


class TermStats(NamedTuple):
    """A term's row of term_stats: its block count, its largest weight, its pieces' first blocks (None: whole)."""

    df: int
    top: float
    firsts: np.ndarray | None


def _joined(rows: list[tuple], block_dtype: str) -> Posting:
    """The postings of pieces (or of one postings row), in block order."""
    if len(rows) == 1:
        return Posting(np.frombuffer(rows[0][0], dtype=block_dtype), np.frombuffer(rows[0][1], dtype="<f8"))
    return Posting(
        np.frombuffer(b"".join(r[0] for r in rows), dtype=block_dtype),
        np.frombuffer(b"".join(r[1] for r in rows), dtype="<f8"),
    )


def weights_at(posting: Posting, blocks: np.ndarray) -> np.ndarray:
    """The posting's weight in each of `blocks`, 0 where the term is not."""
    out = np.zeros(blocks.size, dtype=np.float64)
    if not posting.blocks.size or not blocks.size:
        return out
    place = np.minimum(np.searchsorted(posting.blocks, blocks), posting.blocks.size - 1)
    hit = posting.blocks[place] == blocks
    out[hit] = posting.weights[place[hit]]
    return out

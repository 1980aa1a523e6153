"""Cheap structural checks of an index's files, run every time an index is opened (`PhraseIndex`, `Shard`),
so that a damaged index is refused at start with the file named instead of failing request after request.

What is checked without reading the files' payload (a few ms per million tokens, tests/indexer/test_integrity.py):
  every file    exists, and its byte size equals the manifest's (a truncated or extended file)
  .npy files    the header parses; dtype and shape agree with the manifest (tokens, blocks, dim, vector_dtype);
                header + data fill the file exactly
  flags.npy     every value is a combination of WORD_START and WORD_END
  scales.npy    every int8 scale is a finite float16 >= 0
  blocks.npy    blocks tile the shard's tokens in order; document rows lie inside docs.arrow
  docs.arrow    opens as an Arrow IPC file with the writer's schema (id, title, text) and one row per document of
                the shard, and passes Arrow's full validation (offsets inside their buffers, valid UTF-8)
  index.faiss   reads, and holds the shard's tokens at the index's dimension with inner-product metric
  bm25.sqlite   opens as SQLite; the FTS5 table and the postings tables exist; the postings cover the index's
                blocks; one term's postings and FTS5's own match for it agree (a probe query, see `check_bm25`)

What they cannot find: bytes changed in place, the file keeping its size, inside the vectors' payload (any byte
of it is a valid float16 or int8), or inside any other payload whose every value is valid (token ids, character
offsets, FAISS's codes and lists, a document's text changed into other valid UTF-8, SQLite pages the probe does not
read). Only a hash of every byte finds those: `PhraseIndex(verify=True)` (the service's `--verify`) reads every
file in full and compares its sha256 with the manifest's (4.5 GB at 10.5M tokens: not the default). A FAISS file
damaged in its payload may also read without error, or fail inside FAISS.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from common.errors import AppError, IndexDamaged
from common.files import npy_layout
from corpus.tokens import WORD_END, WORD_START
from indexer.ann import index_codes_problem
from indexer.manifest import VECTOR_DTYPES, FileInfo, ShardInfo

# the recovery: a damaged delta shard or tombstones file holds live changes that a rebuild from the build's corpus
# would lose, and `indexer compact` reads the damaged file too
FIX = (
    "restore the file (or the index directory) from a backup; without one, rebuild with `indexer build --overwrite` "
    "from a corpus that holds the documents added live since the build, then delete again those deleted since (a "
    "rebuild knows only its corpus; `indexer compact` cannot repair a damaged file); `--verify` checks every "
    "file's sha256"
)

# the columns the writer (indexer.shard_writer.write_shard) gives docs.arrow
DOCS_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.large_string())])

_ARROW_MAGIC = b"ARROW1"
_UNSIGNED = ("uint8", "uint16", "uint32", "uint64")  # char offsets are stored in the smallest that fits
_FLAG_BITS = WORD_START | WORD_END
_FLOAT16_INF = 0x7C00  # bits of float16 +inf: a finite float16 >= 0 has bits below it
_FTS5_TABLES = ("blocks", "blocks_data", "blocks_idx", "blocks_config")  # the FTS5 table and its shadow tables
_PLAIN = re.compile(r"[a-z0-9]+")  # a term FTS5's tokenizer gives back unchanged when it is queried
_PROBE_ROWS = 64  # blocks of a term compared between FTS5 and the postings


def damaged(path: Path, problem: str) -> IndexDamaged:
    """The error for an index file that cannot be served: names the file, what is wrong and the fix."""
    return IndexDamaged(f"index file {path} {problem}; {FIX}", str(path))


def check_size(path: Path, record: FileInfo) -> None:
    """The file exists and has the manifest's byte size."""
    if not path.is_file():
        raise damaged(path, "is missing")
    size = path.stat().st_size
    if size != record.bytes:
        raise damaged(path, f"has {size} bytes, the manifest says {record.bytes} (truncated or overwritten)")


def npy_specs(info: ShardInfo, dim: int) -> dict[str, tuple[tuple[str, ...], tuple[int, ...]]]:
    """The .npy files of a shard and, for each, the dtypes it may have and its shape (see indexer.shard)."""
    n, b = info.tokens, info.blocks
    specs = {
        "token_ids.npy": (("uint16", "int32"), (n,)),
        "char_starts.npy": (_UNSIGNED, (n,)),
        "char_lengths.npy": (_UNSIGNED, (n,)),
        "block_chars.npy": (("int64",), (b,)),
        "flags.npy": (("uint8",), (n,)),
        "blocks.npy": (("int64",), (b, 3)),
    }
    if info.vector_dtype != "none":
        specs["vectors.npy"] = ((info.vector_dtype,), (n, dim))
    if info.vector_dtype == "int8":
        specs["scales.npy"] = (("float16",), (n,))
    if info.vector_dtype == "none" and "IVF" in info.factory:
        specs["code_slots.npy"] = (("uint32",), (n,))
    return specs


def check_npy(path: Path, dtypes: tuple[str, ...], shape: tuple[int, ...]) -> None:
    """The header of a .npy file parses, its dtype is one of `dtypes`, its shape is `shape` (C order), and
    header and data fill the file exactly. Reads the header only."""
    try:
        found, fortran, dtype, offset = npy_layout(path)
    except (ValueError, TypeError, OSError, SyntaxError) as exc:
        raise damaged(path, f"has no valid .npy header ({exc})") from exc
    if fortran or dtype not in {np.dtype(d) for d in dtypes} or tuple(found) != tuple(shape):
        want = dtypes[0] if len(dtypes) == 1 else "/".join(dtypes)
        raise damaged(
            path, f"holds {dtype} {tuple(found)}{' (Fortran order)' if fortran else ''}, expected {want} {tuple(shape)}"
        )
    size = path.stat().st_size
    if offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != size:
        raise damaged(path, f"has {size} bytes, which its header ({dtype} {tuple(shape)}) does not account for")


def check_shard_files(directory: Path, info: ShardInfo, dim: int) -> None:
    """Every file of a shard: present at the manifest's size; every .npy header, the flags, the int8 scales
    and the blocks as `check_npy`, `check_values` say. docs.arrow and index.faiss: `open_docs`, `read_faiss`."""
    if info.vector_dtype not in VECTOR_DTYPES:
        raise AppError(
            f"the manifest of {directory.parent} gives {info.name} the vector dtype {info.vector_dtype!r}, "
            f"not one of {VECTOR_DTYPES}; {FIX}"
        )
    specs = npy_specs(info, dim)
    for fname in [*specs, "docs.arrow", "index.faiss"]:
        if fname not in info.files:
            raise damaged(directory / fname, "is not listed in the manifest")
    for fname, record in info.files.items():
        check_size(directory / fname, record)
    for fname, (dtypes, shape) in specs.items():
        check_npy(directory / fname, dtypes, shape)
    check_values(directory, info)


def check_values(directory: Path, info: ShardInfo) -> None:
    """The values of the small arrays whose every byte can be checked cheaply (headers already checked)."""
    flags = np.load(directory / "flags.npy", mmap_mode="r")
    if flags.size and int(flags.max()) > _FLAG_BITS:
        bad = int(np.flatnonzero(flags > _FLAG_BITS)[0])
        raise damaged(directory / "flags.npy", f"holds {int(flags[bad])} at token {bad}; flags are 0 to {_FLAG_BITS}")
    if info.vector_dtype == "int8":
        scales = np.load(directory / "scales.npy", mmap_mode="r").view(np.uint16)
        if scales.size and int(scales.max()) >= _FLOAT16_INF:  # negative, inf or NaN
            raise damaged(directory / "scales.npy", "holds a negative or non-finite scale")
    blocks = np.load(directory / "blocks.npy")
    problem = blocks_problem(blocks, info.tokens, info.documents)
    if problem:
        raise damaged(directory / "blocks.npy", problem)


def blocks_problem(blocks: np.ndarray, tokens: int, documents: int) -> str | None:
    """What is wrong with a shard's (document row, first token, end token) rows, or None: they must cover the
    tokens 0..tokens in order, one block after the other, each with a document row of docs.arrow."""
    if blocks.shape[0] == 0:
        return None if tokens == 0 else f"holds no blocks for {tokens} tokens"
    rows, first, end = blocks[:, 0], blocks[:, 1], blocks[:, 2]
    if first[0] != 0 or end[-1] != tokens or np.any(end < first) or np.any(first[1:] != end[:-1]):
        return f"does not tile the shard's {tokens} tokens with its blocks"
    if int(rows.min()) < 0 or int(rows.max()) >= documents:
        return f"names document rows outside 0..{documents - 1}"
    return None


def open_docs(path: Path, documents: int) -> pa.Table:
    """docs.arrow memory-mapped: an Arrow IPC file (its leading magic and schema message too, which a reader of
    the file format skips) with DOCS_SCHEMA, `documents` rows, valid offsets and valid UTF-8."""
    return open_docs_mapped(path, documents)[0]


def open_docs_mapped(path: Path, documents: int) -> tuple[pa.Table, int]:
    """`open_docs`, and the address of the file's mapping (a buffer's file offset is its address minus it). The
    file is closed on return: the table's buffers keep the mapping, not a descriptor."""
    try:
        with pa.memory_map(str(path), "r") as source:
            base = source.read_buffer(source.size()).address
            source.seek(0)
            if source.read(6) != _ARROW_MAGIC:
                raise damaged(path, "does not start as an Arrow IPC file")
            source.seek(8)  # the magic's padding, then the file's stream: its schema message first
            schemas = [pa.ipc.read_schema(pa.ipc.read_message(source))]
            table = pa.ipc.open_file(source).read_all()
        table.validate(full=True)  # offsets and UTF-8 of every string: ~1 ms per MB of text
    except (pa.ArrowException, OSError) as exc:
        raise damaged(path, f"is not a valid Arrow IPC file ({exc})") from exc
    for schema in (*schemas, table.schema):
        if not schema.equals(DOCS_SCHEMA, check_metadata=False):
            found = ", ".join(f"{f.name}: {f.type}" for f in schema)
            raise damaged(path, f"has columns ({found}), expected (id: string, title: string, text: large_string)")
    if table.num_rows != documents:
        raise damaged(path, f"holds {table.num_rows} documents, the manifest says {documents}")
    return table, base


def read_faiss(path: Path, info: ShardInfo, dim: int) -> faiss.Index:
    """index.faiss, holding the shard's tokens as `dim`-d inner-product vectors, memory-mapped where FAISS can: with
    IO_FLAG_MMAP_IFC an IVF index's lists (codes and ids) and a Flat index's vectors are views into the file (page
    cache, not anonymous memory; no descriptor held); a fast-scan IVF index's packed lists cannot be, and are read
    into memory (indexer.ann chooses IVF-RaBitQ for new shards). A shard without stored vectors is read the same way
    (its scorer reads the codes in place through one view of the mapping, indexer.ann_codes; its coarse centroids
    file-backed too: ~6 MB a shard of IVF4096 that IO_FLAG_MMAP, its reading before, held in anonymous memory), else
    with IO_FLAG_MMAP (OnDiskInvertedLists, codes at byte offsets)."""
    flags = [faiss.IO_FLAG_MMAP_IFC] + ([faiss.IO_FLAG_MMAP] if info.vector_dtype == "none" else [])
    try:
        index = _read_mapped(path, flags)
    except (RuntimeError, MemoryError) as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise damaged(path, f"is not a readable FAISS index ({reason})") from exc
    if index.d != dim or index.ntotal != info.tokens:
        raise damaged(path, f"holds {index.ntotal} vectors of dimension {index.d}, expected {info.tokens} of {dim}")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise damaged(path, f"uses FAISS metric {index.metric_type}, not inner product")
    problem = index_codes_problem(index, "its index") if info.vector_dtype == "none" else None
    if problem:
        raise damaged(path, f"is the only copy of the shard's vectors, but {problem}")
    return index


def _read_mapped(path: Path, flags: list[int]) -> faiss.Index:
    """The index read with the first of `flags` FAISS takes for it, else read into memory."""
    for flag in flags:
        try:
            return faiss.read_index(str(path), flag)
        except RuntimeError:
            continue
    return faiss.read_index(str(path))


def check_bm25(path: Path, record: FileInfo, blocks: int) -> None:
    """bm25.sqlite: the manifest's size, then a probe rather than `PRAGMA quick_check` (which reads every page:
    0.66 s cold, 0.05 s cached for the 89 MB of a 10.5M-token index, and it grows with the corpus). The probe
    reads the header and schema pages, FTS5's configuration and the last block's size entry, the first and the last
    term of the postings (both ends of their B-tree) and FTS5's own doclist of those terms, whose first blocks must
    be the postings' (the postings serve the queries, FTS5 the words they lack, indexer.bm25)."""
    check_size(path, record)
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise damaged(path, f"cannot be opened as SQLite ({exc})") from exc
    try:
        problem = _bm25_problem(con, blocks)
    except sqlite3.Error as exc:
        raise damaged(path, f"is not a readable BM25 database ({exc})") from exc
    finally:
        con.close()
    if problem:
        raise damaged(path, problem)


def _bm25_problem(con: sqlite3.Connection, blocks: int) -> str | None:
    tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in _FTS5_TABLES if t not in tables]
    if missing:
        return f"lacks the table(s) {', '.join(missing)}"
    con.execute("SELECT rowid FROM blocks WHERE blocks MATCH '\"a\"' LIMIT 1").fetchall()  # FTS5's config, structure
    if "blocks_docsize" in tables:  # one row per block, ids 0..blocks-1: the right end of its B-tree
        last = con.execute("SELECT max(id) FROM blocks_docsize").fetchone()[0]
        if (last if last is not None else -1) != blocks - 1:
            return f"indexes blocks up to {last}, the manifest says {blocks} blocks"
    if "postings" not in tables and "postings_meta" not in tables:
        return None  # an index built before the postings: FTS5 queries only (indexer.bm25)
    if "postings" not in tables or "postings_meta" not in tables:
        return "has one of the tables postings, postings_meta without the other"
    meta = dict(con.execute("SELECT key, value FROM postings_meta").fetchall())
    dtype, rows = _text(meta.get("block_dtype")), _text(meta.get("rows"))
    if dtype not in ("<u4", "<i8") or rows != str(blocks):
        return f"has postings for {rows!r} blocks of type {dtype!r}, the manifest says {blocks} blocks"
    pieces = _text(meta.get("layout")) == "pieces"
    if pieces and not {"pieces", "term_stats"} <= tables:
        return "has postings in pieces without the tables pieces and term_stats"
    for table in ("postings", "pieces") if pieces else ("postings",):
        for order in ("ASC", "DESC"):  # the first and the last term: both ends of the B-tree
            row = con.execute(f"SELECT term, blocks, weights FROM {table} ORDER BY term {order} LIMIT 1").fetchone()
            if row is None:  # no term at all: right only when FTS5 counted no token (blocks of punctuation alone)
                empty = not pieces or con.execute("SELECT 1 FROM term_stats LIMIT 1").fetchone() is None
                if empty and blocks and fts5_totals_of(con)[1]:
                    return "holds no postings"
                break
            problem = _posting_problem(con, row, dtype, blocks, whole=table == "postings")
            if problem:
                return problem
    return None


def _posting_problem(con: sqlite3.Connection, row: tuple, dtype: str, blocks: int, whole: bool) -> str | None:
    """A problem of one row of the postings (a term's postings `whole`, else its first piece)."""
    term, raw, weights = row
    width = np.dtype(dtype).itemsize
    if not (
        isinstance(term, str)
        and isinstance(raw, bytes)
        and isinstance(weights, bytes)
        and raw
        and len(raw) % width == 0
        and len(weights) == 8 * (len(raw) // width)
    ):
        return f"has damaged postings for the term {term!r}"
    ids = np.frombuffer(raw, dtype=dtype).astype(np.int64)
    if ids[0] < 0 or ids[-1] >= blocks or np.any(np.diff(ids) <= 0):  # ascending block ids of this index
        return f"has damaged postings for the term {term!r}"
    if whole and _PLAIN.fullmatch(term):  # FTS5's own doclist of the term lists the same first blocks
        found = [
            r
            for (r,) in con.execute(
                "SELECT rowid FROM blocks WHERE blocks MATCH ? ORDER BY rowid LIMIT ?", (f'"{term}"', _PROBE_ROWS)
            )
        ]
        if found != ids[:_PROBE_ROWS].tolist():
            return f"has FTS5 entries for the term {term!r} that disagree with its postings"
    return None


def _text(value) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


def fts5_totals_of(con: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens) of the FTS5 table `blocks`: its averages record (the SQLite varints of the row count and
    the token count of its one column)."""
    blob = con.execute("SELECT block FROM blocks_data WHERE id = 1").fetchone()[0]
    out: list[int] = []
    i = 0
    while i < len(blob) and len(out) < 2:
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out[0], out[1]

"""On-disk shard format: writing a shard atomically and opening it memory-mapped.

A shard directory holds
  vectors.npy    float16 [n, d]  token vectors for exact re-scoring (or int8 codes, see indexer.vectors)
  scales.npy     float16 [n]     per-token scale of int8 vectors (int8 only)
  token_ids.npy  uint16 [n]      vocabulary ids (int32 when an id does not fit 16 bits)
  char_starts.npy, char_lengths.npy, block_chars.npy
                 char offsets of each token into its document text, compact (indexer.offsets)
  flags.npy      uint8 [n]       WORD_START / WORD_END bits
  blocks.npy     int64 [b, 3]    (document row in docs.arrow, first token, end token) per block
  docs.arrow     Arrow IPC file  columns id, title, text of the documents the blocks come from
  index.faiss    FAISS index (inner product) over the vectors; its type is chosen per shard (indexer.ann)
  shard.json     counts and a checksum per file, written last
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from indexer.ann import build_faiss_index, resolve_factory
from indexer.errors import IndexerError
from indexer.files import file_record, write_json_atomic, write_npy_atomic
from indexer.manifest import ShardInfo
from indexer.offsets import OFFSET_FILES, CharOffsets, pack_offsets
from indexer.vectors import StoredVectors, quantize_int8

logger = logging.getLogger(__name__)

SHARD_FILES = ("vectors.npy", "token_ids.npy", *OFFSET_FILES, "flags.npy", "blocks.npy", "docs.arrow", "index.faiss")


def shard_name(number: int) -> str:
    return f"shard_{number:05d}"


@dataclass
class ShardContent:
    """Everything one shard holds, in memory, before it is written."""

    vectors: np.ndarray  # float16 [n, d]
    token_ids: np.ndarray
    offsets: np.ndarray
    flags: np.ndarray
    blocks: np.ndarray
    doc_ids: list[str]
    doc_titles: list[str]
    doc_texts: list[str]


def write_shard(
    root: Path, number: int, content: ShardContent, index_type: str, token_base: int, block_base: int,
    vector_dtype: str = "float16", memory_budget: int | None = None, trained: faiss.Index | None = None,
) -> ShardInfo:
    """Write a shard under a temporary name, then rename it into place.

    `index_type` is an `indexer.ann` type or a FAISS factory string; `memory_budget` is per shard;
    `trained` is an empty trained index of the resolved factory to copy instead of training one."""
    name = shard_name(number)
    final = root / name
    tmp = root / (name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    files = list(SHARD_FILES)
    if vector_dtype == "int8":
        codes, scales = quantize_int8(content.vectors)
        write_npy_atomic(tmp / "vectors.npy", codes)
        write_npy_atomic(tmp / "scales.npy", scales)
        files.append("scales.npy")
    else:
        write_npy_atomic(tmp / "vectors.npy", content.vectors.astype(np.float16, copy=False))
    ids_dtype = np.uint16 if content.token_ids.size == 0 or int(content.token_ids.max()) < 2**16 else np.int32
    write_npy_atomic(tmp / "token_ids.npy", content.token_ids.astype(ids_dtype, copy=False))
    for fname, array in pack_offsets(content.offsets, content.blocks[:, 1]).items():
        write_npy_atomic(tmp / fname, array)
    write_npy_atomic(tmp / "flags.npy", content.flags.astype(np.uint8, copy=False))
    write_npy_atomic(tmp / "blocks.npy", content.blocks.astype(np.int64, copy=False))
    table = pa.table(
        {
            "id": pa.array(content.doc_ids, pa.string()),
            "title": pa.array(content.doc_titles, pa.string()),
            "text": pa.array(content.doc_texts, pa.large_string()),
        }
    )
    with pa.OSFile(str(tmp / "docs.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    n, dim = content.vectors.shape
    factory = resolve_factory(index_type, n, dim, memory_budget)
    faiss.write_index(build_faiss_index(content.vectors, factory, seed=number, trained=trained), str(tmp / "index.faiss"))
    info = ShardInfo(
        name=name,
        documents=len(content.doc_ids),
        blocks=int(content.blocks.shape[0]),
        tokens=int(content.token_ids.shape[0]),
        token_base=token_base,
        block_base=block_base,
        factory=factory,
        vector_dtype=vector_dtype,
        files={f: file_record(tmp / f) for f in files},
    )
    write_json_atomic(tmp / "shard.json", info.model_dump(mode="json"))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return info


def read_shard_info(root: Path, number: int) -> ShardInfo | None:
    """The info of a finished shard, or None when it is missing or incomplete."""
    path = root / shard_name(number) / "shard.json"
    if not path.is_file():
        return None
    try:
        return ShardInfo.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError:
        return None


class Shard:
    """A finished shard opened read-only; large arrays are memory-mapped."""

    def __init__(self, root: Path, info: ShardInfo, dim: int) -> None:
        self.info = info
        self.dir = root / info.name
        for fname, rec in info.files.items():
            path = self.dir / fname
            if not path.is_file():
                raise IndexerError(f"index shard file {path} is missing; rebuild the index")
            if path.stat().st_size != rec.bytes:
                raise IndexerError(f"index shard file {path} has {path.stat().st_size} bytes, manifest says {rec.bytes}; rebuild")
        self.vectors = StoredVectors(self.dir, info.vector_dtype)
        self.token_ids = np.load(self.dir / "token_ids.npy", mmap_mode="r")
        self.flags = np.load(self.dir / "flags.npy", mmap_mode="r")
        self.blocks = np.load(self.dir / "blocks.npy")
        self.block_starts = np.ascontiguousarray(self.blocks[:, 1])
        self.offsets = CharOffsets(self.dir, self.block_starts)
        if self.vectors.shape != (info.tokens, dim):
            raise IndexerError(f"{self.dir}/vectors.npy has shape {self.vectors.shape}, expected ({info.tokens}, {dim})")
        self.docs = pa.ipc.open_file(pa.memory_map(str(self.dir / "docs.arrow"), "r")).read_all()
        self.index = _read_index(self.dir / "index.faiss")
        if self.index.ntotal != info.tokens:
            raise IndexerError(f"{self.dir}/index.faiss holds {self.index.ntotal} vectors, expected {info.tokens}")

    def __len__(self) -> int:
        return self.info.tokens

    def block_of(self, positions: np.ndarray) -> np.ndarray:
        """Local block number of each token position."""
        return np.searchsorted(self.block_starts, positions, side="right") - 1

    def doc_row(self, block: int) -> int:
        return int(self.blocks[block, 0])

    def doc_text(self, row: int) -> str:
        return self.docs.column("text")[row].as_py()

    def doc_id(self, row: int) -> str:
        return self.docs.column("id")[row].as_py()


def _read_index(path: Path) -> faiss.Index:
    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP)
    except RuntimeError:
        return faiss.read_index(str(path))

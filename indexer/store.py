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

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from common.files import atomic_path, file_record, load_mapped
from corpus.blocking import Block
from indexer.ann import build_faiss_index, resolve_factory
from indexer.doc_text import DocText
from indexer.integrity import DOCS_SCHEMA, check_shard_files, open_docs, read_faiss
from indexer.manifest import ShardInfo
from indexer.offsets import OFFSET_FILES, CharOffsets, pack_offsets
from indexer.vectors import StoredVectors, quantize_int8, touch_pages

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

    @classmethod
    def from_blocks(cls, blocks: list[Block], vectors: np.ndarray) -> "ShardContent":
        """The content of a shard made of `blocks` (in order) whose token vectors are `vectors`."""
        doc_rows: dict[int, int] = {}
        ids, titles, texts, block_rows = [], [], [], []
        pos = 0
        for b in blocks:
            if b.doc.row not in doc_rows:
                doc_rows[b.doc.row] = len(ids)
                ids.append(b.doc.id)
                titles.append(b.doc.title)
                texts.append(b.doc.text)
            block_rows.append((doc_rows[b.doc.row], pos, pos + len(b)))
            pos += len(b)
        return cls(
            vectors=vectors,
            token_ids=np.concatenate([b.tokens.ids for b in blocks]),
            offsets=np.concatenate([b.tokens.offsets for b in blocks]),
            flags=np.concatenate([b.tokens.flags for b in blocks]),
            blocks=np.asarray(block_rows, dtype=np.int64).reshape(-1, 3),
            doc_ids=ids,
            doc_titles=titles,
            doc_texts=texts,
        )


def _save(path: Path, array: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def write_shard(
    root: Path, number: int, content: ShardContent, index_type: str, token_base: int, block_base: int,
    vector_dtype: str = "float16", memory_budget: int | None = None, trained: faiss.Index | None = None,
) -> ShardInfo:
    """Write a shard directory under a temporary name, then put it in place atomically (common.files).

    `index_type` is an `indexer.ann` type or a FAISS factory string; `memory_budget` is per shard;
    `trained` is an empty trained index of the resolved factory to copy instead of training one."""
    name = shard_name(number)
    files = list(SHARD_FILES)
    n, dim = content.vectors.shape
    factory = resolve_factory(index_type, n, dim, memory_budget)
    with atomic_path(root / name) as tmp:
        tmp.mkdir(parents=True)
        if vector_dtype == "int8":
            codes, scales = quantize_int8(content.vectors)
            _save(tmp / "vectors.npy", codes)
            _save(tmp / "scales.npy", scales)
            files.append("scales.npy")
        else:
            _save(tmp / "vectors.npy", content.vectors.astype(np.float16, copy=False))
        ids_dtype = np.uint16 if content.token_ids.size == 0 or int(content.token_ids.max()) < 2**16 else np.int32
        _save(tmp / "token_ids.npy", content.token_ids.astype(ids_dtype, copy=False))
        for fname, array in pack_offsets(content.offsets, content.blocks[:, 1]).items():
            _save(tmp / fname, array)
        _save(tmp / "flags.npy", content.flags.astype(np.uint8, copy=False))
        _save(tmp / "blocks.npy", content.blocks.astype(np.int64, copy=False))
        table = pa.table([content.doc_ids, content.doc_titles, content.doc_texts], schema=DOCS_SCHEMA)
        with pa.OSFile(str(tmp / "docs.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        index = build_faiss_index(content.vectors, factory, seed=number, trained=trained)
        faiss.write_index(index, str(tmp / "index.faiss"))
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
        (tmp / "shard.json").write_text(json.dumps(info.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
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
    """A finished shard opened read-only; large arrays are memory-mapped. Opening checks every file's
    structure against the shard's info (indexer.integrity), not its every byte (PhraseIndex.verify)."""

    def __init__(self, root: Path, info: ShardInfo, dim: int) -> None:
        self.info = info
        self.dir = root / info.name
        check_shard_files(self.dir, info, dim)  # sizes, .npy headers, flags, scales, blocks (indexer.integrity)
        self.vectors = StoredVectors(self.dir, info.vector_dtype)
        self.token_ids = load_mapped(self.dir / "token_ids.npy")
        self.flags = load_mapped(self.dir / "flags.npy")
        self.blocks = np.load(self.dir / "blocks.npy")
        self.block_starts = np.ascontiguousarray(self.blocks[:, 1])
        self.offsets = CharOffsets(self.dir, self.block_starts)
        self.docs = open_docs(self.dir / "docs.arrow", info.documents)
        self.text = DocText(self.docs.column("text"), self.blocks, self.offsets)
        self.index = read_faiss(self.dir / "index.faiss", info, dim)

    def __len__(self) -> int:
        return self.info.tokens

    def warm(self) -> None:
        """Map every page of the files a fill reads at random (vectors, flags, offsets) into this process,
        and locate the blocks' text (DocText.load)."""
        self.vectors.warm()
        self.text.load()
        for array in (self.flags, self.offsets.starts, self.offsets.lengths):
            touch_pages(array)

    def block_of(self, positions: np.ndarray) -> np.ndarray:
        """Local block number of each token position."""
        return np.searchsorted(self.block_starts, positions, side="right") - 1

    def doc_row(self, block: int) -> int:
        return int(self.blocks[block, 0])

    def doc_text(self, row: int) -> str:
        return self.docs.column("text")[row].as_py()

    def doc_id(self, row: int) -> str:
        return self.docs.column("id")[row].as_py()

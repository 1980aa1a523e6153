"""The write side of a shard: its plan (place in the index, FAISS factory) and content, written atomically.

The files and their layout are described in indexer.shard, which opens what is written here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import faiss
import numpy as np
import pyarrow as pa

from common.files import atomic_path, file_record
from corpus.blocking import Block
from indexer.ann import build_faiss_index
from indexer.ann_codes import CODE_SLOTS, code_slots, needs_slots
from indexer.checksums import write_sums
from indexer.integrity import DOCS_SCHEMA
from indexer.manifest import ShardInfo
from indexer.offsets import pack_offsets
from indexer.shard import SHARD_FILES, shard_name
from indexer.vectors import quantize_int8


@dataclass(frozen=True)
class ShardPlan:
    """One shard's place in the index: its size, where its tokens and blocks start, its FAISS factory."""

    number: int
    tokens: int
    blocks: int
    token_base: int
    block_base: int
    factory: str  # a FAISS factory string, already resolved (indexer.ann.resolve_factory)

    def matches(self, info: ShardInfo | None) -> TypeGuard[ShardInfo]:
        return info is not None and (info.tokens, info.blocks, info.token_base, info.block_base) == (
            self.tokens,
            self.blocks,
            self.token_base,
            self.block_base,
        )


@dataclass
class ShardContent:
    """Everything one shard holds, in memory, before it is written."""

    vectors: np.ndarray  # float16 [n, d]
    token_ids: np.ndarray
    offsets: np.ndarray
    flags: np.ndarray
    blocks: np.ndarray
    doc_ids: list[str]
    doc_titles: Sequence[str | None]  # None: a null title copied from a shard (indexer.compact, Shard.doc_title)
    doc_texts: list[str]
    stored: tuple[np.ndarray, np.ndarray | None] | None = None  # the stored vectors as written (codes, int8
    # scales) when copied from another shard (indexer.compact); None: from `vectors`, quantized per vector_dtype

    @classmethod
    def from_blocks(cls, blocks: list[Block], vectors: np.ndarray) -> "ShardContent":
        """The content of a shard made of `blocks` (in order) whose token vectors are `vectors`."""
        doc_rows: dict[int, int] = {}
        ids: list[str]
        titles: list[str]
        texts: list[str]
        block_rows: list[tuple[int, int, int]]
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


def write_shard(
    root: Path,
    plan: ShardPlan,
    content: ShardContent,
    vector_dtype: str = "float16",
    trained: faiss.Index | None = None,
) -> ShardInfo:
    """Write the shard of `plan` under a temporary name, then put it in place atomically (common.files).

    `content` must hold the plan's tokens and blocks; the FAISS index is of `plan.factory`, a copy of
    `trained` (an empty trained index of that factory) when given, else trained here."""
    tokens, blocks = int(content.token_ids.shape[0]), int(content.blocks.shape[0])
    if (tokens, blocks) != (plan.tokens, plan.blocks):
        raise ValueError(
            f"shard {plan.number} is planned with {plan.tokens} tokens in {plan.blocks} blocks, "
            f"its content holds {tokens} in {blocks}"
        )
    name = shard_name(plan.number)
    with atomic_path(root / name) as tmp:
        tmp.mkdir(parents=True)
        index = build_faiss_index(content.vectors, plan.factory, seed=plan.number, trained=trained)
        faiss.write_index(index, str(tmp / "index.faiss"))
        files = _write_arrays(tmp, content, vector_dtype)
        if vector_dtype == "none" and needs_slots(index):  # where each token's code lies (indexer.ann_codes)
            _save(tmp / CODE_SLOTS, code_slots(index))
            files.append(CODE_SLOTS)
        _write_docs(tmp / "docs.arrow", content)
        files.append(write_sums(tmp, files))  # block checksums of the files just written (indexer.checksums)
        info = ShardInfo(
            name=name,
            documents=len(content.doc_ids),
            blocks=blocks,
            tokens=tokens,
            token_base=plan.token_base,
            block_base=plan.block_base,
            factory=plan.factory,
            vector_dtype=vector_dtype,
            files={f: file_record(tmp / f) for f in files},
        )
        (tmp / "shard.json").write_text(json.dumps(info.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    return info


def _save(path: Path, array: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def _write_arrays(directory: Path, content: ShardContent, vector_dtype: str) -> list[str]:
    """Write the .npy files of `content` into `directory`; the names of every file of the shard, in order."""
    files = list(SHARD_FILES)
    if vector_dtype == "none":
        pass  # the ANN index's codes are the only copy (indexer.ann_codes)
    elif content.stored is not None:  # copied as they are: the same bytes a build wrote for these tokens
        files.append("vectors.npy")
        _save(directory / "vectors.npy", content.stored[0])
        if content.stored[1] is not None:
            _save(directory / "scales.npy", content.stored[1])
            files.append("scales.npy")
    elif vector_dtype == "int8":
        codes, scales = quantize_int8(content.vectors)
        _save(directory / "vectors.npy", codes)
        _save(directory / "scales.npy", scales)
        files += ["vectors.npy", "scales.npy"]
    else:
        _save(directory / "vectors.npy", content.vectors.astype(np.float16, copy=False))
        files.append("vectors.npy")
    ids_dtype = np.uint16 if content.token_ids.size == 0 or int(content.token_ids.max()) < 2**16 else np.int32
    _save(directory / "token_ids.npy", content.token_ids.astype(ids_dtype, copy=False))
    for fname, array in pack_offsets(content.offsets, content.blocks[:, 1]).items():
        _save(directory / fname, array)
    _save(directory / "flags.npy", content.flags.astype(np.uint8, copy=False))
    _save(directory / "blocks.npy", content.blocks.astype(np.int64, copy=False))
    return files


def _write_docs(path: Path, content: ShardContent) -> None:
    """docs.arrow: the id, title and text of each document of the shard, one row each
    (indexer.integrity.DOCS_SCHEMA)."""
    table = pa.table([content.doc_ids, content.doc_titles, content.doc_texts], schema=DOCS_SCHEMA)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)

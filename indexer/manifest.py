"""The index manifest: what an index directory holds, written last by the build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from common.errors import AppError
from common.files import write_json_atomic

FORMAT_VERSION = 3  # 3: compact char offsets (indexer.offsets)
MANIFEST_NAME = "manifest.json"


class FileInfo(BaseModel):
    bytes: int
    sha256: str


class ShardInfo(BaseModel):
    name: str
    documents: int
    blocks: int
    tokens: int
    token_base: int  # global number of this shard's first token
    block_base: int  # global number of this shard's first block
    factory: str = "Flat"  # FAISS factory string of index.faiss
    vector_dtype: str = "float16"  # storage of vectors.npy: float16, or int8 with scales.npy
    files: dict[str, FileInfo]


class ModelInfo(BaseModel):
    path: str
    fingerprint: str
    model_type: str
    tokenizer: str
    vocab_size: int
    mask_token: str | None


class Counts(BaseModel):
    documents: int
    empty_documents: int
    blocks: int
    tokens: int
    shards: int


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    created_at: str
    model: ModelInfo
    dim: int
    metric: str = "inner_product"
    index_type: str  # as requested (auto, flat, ivfpq, ivfsq, hnsw or a factory); each shard records its factory
    vector_dtype: str = "float16"
    similarity_scale: float  # scores are q.c * scale (1 / sqrt(dim))
    build: dict[str, Any]  # the build config that produced this index
    corpus: dict[str, Any]
    counts: Counts
    shards: list[ShardInfo]
    bm25: FileInfo | None = None  # bm25.sqlite: BM25 over the blocks, for restricted / hybrid fills

    def save(self, root: Path) -> None:
        write_json_atomic(root / MANIFEST_NAME, self.model_dump(mode="json"))

    @classmethod
    def load(cls, root: str | Path) -> "Manifest":
        path = Path(root) / MANIFEST_NAME
        if not path.is_file():
            raise AppError(f"{root} is not a finished index: {MANIFEST_NAME} is missing (run `indexer build`)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            manifest = cls.model_validate(data)
        except (json.JSONDecodeError, ValidationError) as exc:
            raise AppError(f"{path} is not a valid manifest: {exc}") from exc
        if manifest.format_version != FORMAT_VERSION:
            raise AppError(
                f"{path} has format version {manifest.format_version}; this software reads {FORMAT_VERSION}"
            )
        return manifest

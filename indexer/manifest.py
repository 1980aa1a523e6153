"""The index manifest: what an index directory holds, written last by the build."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.cli import parse_bytes
from common.errors import AppError, IndexDamaged
from common.files import write_json_atomic
from encoder.runtime_options import RuntimeOptions

FORMAT_VERSION = 3  # 3: compact char offsets (indexer.offsets)
UPDATED_FORMAT_VERSION = 4  # 4: an index changed after its build (delta shards, tombstones: indexer.update)
READABLE_VERSIONS = (FORMAT_VERSION, UPDATED_FORMAT_VERSION)
MANIFEST_NAME = "manifest.json"
VECTOR_DTYPES = ("float16", "int8", "none")  # vectors.npy's storage (indexer.vectors); none: no vectors.npy, the
# ANN index's own codes score (indexer.ann_codes)


def content_sha256(data: dict) -> str:
    """The sha256 of a manifest's fields (JSON, keys sorted, no white space), its checksum left out."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


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
    vector_dtype: str = "float16"  # storage of vectors.npy: float16, int8 with scales.npy, or none (the ANN's codes)
    files: dict[str, FileInfo]
    bm25: FileInfo | None = None  # a delta shard's own BM25 (bm25_<name>.sqlite beside it), indexer.update


class TombstoneInfo(FileInfo):
    """The tombstones file of an updated index (indexer.tombstones): the deleted documents' rows per shard."""

    name: str
    rows: int  # the deleted documents' rows it lists (a document has a row in each shard that holds a block of it)


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
    deleted_documents: int = 0  # stored but deleted (tombstoned) documents, not counted in `documents`
    deleted_tokens: int = 0  # their tokens, still counted in `tokens` until `indexer compact`


class BuildSettings(RuntimeOptions):
    """The settings of a build, as the manifest records them (`indexer build`'s `BuildConfig` is these plus
    the job's own flags): the one definition of each setting and its default, read back typed."""

    model_config = ConfigDict(extra="allow")  # a setting of another version is kept (and shown in /info)

    corpus: Path = Field(description="corpus: HF save_to_disk dir, .arrow, .parquet, .jsonl, .txt or dir of .txt")
    out: Path = Field(description="output index directory")
    model: Path | None = Field(None, description="HuggingFace encoder directory (default: the bundled model)")
    block_tokens: int = Field(256, ge=8, description="corpus tokens per block")
    shard_tokens: int | None = Field(
        None,
        ge=1,
        description="tokens per shard (default: from the corpus size, 1M up to ~18M tokens, 8M from ~96M: "
        "indexer.shard_size)",
    )
    title_tokens: int = Field(32, ge=0, description="title tokens prefixed to each block as context (0: none)")
    index_type: str = Field(
        "auto",
        description="ANN index per shard: auto, flat, ivfrabitq, ivfpq, ivfsq, hnsw, or a FAISS factory string "
        "(inner product)",
    )
    memory_budget: int | None = Field(
        None, ge=1, description="RAM for the ANN indexes with --index-type auto, e.g. 2G or 500M"
    )
    vector_dtype: Literal["int8", "float16", "none"] = Field(
        "int8",
        description="stored re-scoring vectors: int8 (386 B/token at d=384, exact re-scoring), float16 (768), or "
        "none (the ANN index's own codes score every token: ~95 B/token in all, dense fills less exact)",
    )
    batch_tokens: int | None = Field(
        None, ge=64, description="padded tokens per encoder batch (default: 2048 on CPU, 16384 on GPU)"
    )

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _size(cls, value):
        return parse_bytes(value) if isinstance(value, str) else value


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    created_at: str
    model: ModelInfo
    dim: int
    metric: str = "inner_product"
    index_type: str  # as requested (auto, flat, ivfrabitq, ivfpq, ivfsq, hnsw, a factory); each shard records its own
    vector_dtype: str = "float16"
    similarity_scale: float  # scores are q.c * scale (1 / sqrt(dim))
    build: BuildSettings  # the build settings that produced this index
    corpus: dict[str, Any]
    counts: Counts
    shards: list[ShardInfo]
    bm25: FileInfo | None = None  # BM25 over the blocks, for restricted / hybrid fills
    bm25_name: str = "bm25.sqlite"  # its file: the build's bm25.sqlite; `indexer compact` writes a new name
    updated_at: str | None = None  # the time of the last change since the build
    generation: int = 0  # changes since the build (indexer.update): each add, delete or compact adds one
    tombstones: TombstoneInfo | None = None  # deleted documents (indexer.tombstones)
    # sha256 of the rest of the manifest (`content_sha256`), written by `save` and checked by `load`: a manifest
    # changed by hand or damaged is refused as such, not blamed on the model or a file it names (absent: older)
    checksum: str | None = None

    def save(self, root: Path) -> None:
        """Write the manifest atomically, with its checksum: the commit point of a build and of every update."""
        version = UPDATED_FORMAT_VERSION if self.generation else FORMAT_VERSION
        data = self.model_copy(update={"format_version": version}).model_dump(mode="json", exclude={"checksum"})
        write_json_atomic(root / MANIFEST_NAME, {**data, "checksum": content_sha256(data)})

    @property
    def delta_shards(self) -> int:
        """Shards added by live updates and not yet compacted (each has a BM25 file of its own)."""
        return sum(info.bm25 is not None for info in self.shards)

    @classmethod
    def load(cls, root: str | Path) -> "Manifest":
        path = Path(root) / MANIFEST_NAME
        if not path.is_file():
            raise AppError(f"{root} is not a finished index: {MANIFEST_NAME} is missing (run `indexer build`)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AppError(f"{path} is not a valid manifest: {exc}") from exc
        if isinstance(data, dict) and data.get("checksum") is not None:
            rest = {k: v for k, v in data.items() if k != "checksum"}
            if data["checksum"] != content_sha256(rest):
                raise IndexDamaged(
                    f"index manifest {path} does not match its own checksum (edited or corrupted since it was "
                    "written); restore it (or the index directory) from a backup, or rebuild with `indexer build "
                    "--overwrite`",
                    str(path),
                )
        version = data.get("format_version", FORMAT_VERSION) if isinstance(data, dict) else FORMAT_VERSION
        if version not in READABLE_VERSIONS:  # before validation: another version's fields may differ
            raise AppError(
                f"{path} has format version {version}; this software reads {' and '.join(map(str, READABLE_VERSIONS))}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise AppError(f"{path} is not a valid manifest: {exc}") from exc

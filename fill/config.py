"""`EngineConfig`: what the fill engine needs to open an index (the server's `Settings`, `fill-eval`'s and
`fill-fit`'s configs each extend it, so every job spells these flags the same way)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from common.errors import AppError
from encoder.runtime_options import RuntimeOptions


class EngineConfig(RuntimeOptions):
    """The index, the encoder and how they run. A plain model: it reads no environment variable (a job's
    config that extends it decides where its values come from)."""

    index: Path | None = Field(None, description="index directory built by `indexer build` (required)")
    model: Path | None = Field(None, description="encoder directory (default: the one named in the manifest)")
    query_model: str | None = Field(
        None,
        description="query model directory (written by encoder tune-queries) or off (the corpus encoder encodes "
        "the queries); default: the index's own query_model/, else the bundled one made for its encoder",
    )
    scoring: Path | None = Field(
        None,
        description="fitted lexical weights and confidence calibration (default: scoring.json in the model "
        "directory, if there; written by fill-fit)",
    )
    reader_dir: Path | None = Field(
        None, description="reader directory (default: the bundled reader, encoder/default_reader, when present)"
    )
    use_reader: bool = Field(
        True, description="load the reader and use it for fills that do not say `reader`; false: no reader at all"
    )
    verify: bool = Field(False, description="check every index file's sha256 at start (slow on big indexes)")
    nprobe: int | None = Field(
        None, ge=1, description="IVF lists searched per query (default: indexer.ann.scaled_nprobe of the index size)"
    )
    ef_search: int | None = Field(None, ge=1, description="HNSW search breadth (default 256)")
    refine: int | None = Field(
        None, ge=1, description="the best refine * k ANN hits over all shards (default 4) are re-scored exactly"
    )

    def index_dir(self) -> Path:
        """The index directory, or a validation AppError saying how to give one."""
        if self.index is None:
            raise AppError("no index given: pass --index DIR or set FILL_INDEX", kind="validation")
        return self.index

    def engine_config(self) -> "EngineConfig":
        """Only the engine's fields (of a job config that extends this one)."""
        return EngineConfig.model_validate(self.model_dump(include=set(EngineConfig.model_fields)))

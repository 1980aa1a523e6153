"""The server's one config object: every field is a flag of `python -m service` and a FILL_* variable."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.errors import AppError

ENV_PREFIX = "FILL_"


class Settings(BaseSettings):
    """Serve POST /fill over a phrase index."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    index: Path | None = Field(None, description="index directory built by `indexer build` (required)")
    host: str = Field("127.0.0.1", description="bind address")
    port: int = Field(8000, ge=0, le=65535, description="port")
    model: Path | None = Field(None, description="encoder directory (default: the one named in the manifest)")
    scoring: Path | None = Field(
        None, description="fitted lexical weights and confidence calibration (default: scoring.json in the model "
        "directory, if there; written by fill-fit)")
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N")
    dtype: str = Field("auto", description="auto, fp32, bf16 or fp16")
    verify: bool = Field(False, description="check every index file's sha256 at start (slow on big indexes)")
    nprobe: int | None = Field(None, ge=1, description="IVF lists searched per query (default: 1/16 of the lists, >= 16)")
    ef_search: int | None = Field(None, ge=1, description="HNSW search breadth (default 256)")
    refine: int | None = Field(None, ge=1, description="ANN shards return refine * k hits (default 2), re-scored exactly")
    warm: bool = Field(True, description="after start, map every page of the stored vectors into the process in the "
                       "background, so re-scoring takes no page faults (the file-backed RSS grows to the vectors' size; "
                       "those pages stay reclaimable page cache)")
    max_concurrency: int = Field(4, ge=1, description="requests computed at once; more get 429")
    log_level: str = Field("info", description="debug, info, warning or error")

    def index_dir(self) -> Path:
        """The index directory, or a validation AppError saying how to give one."""
        if self.index is None:
            raise AppError("no index given: pass --index DIR or set FILL_INDEX", kind="validation")
        return self.index


@lru_cache
def get_settings() -> Settings:
    return Settings()

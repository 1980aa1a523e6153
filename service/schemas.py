"""The HTTP layer's own types (the fill's request and result are `fill.schemas`; a document of an update is
`corpus.readers.DocumentRecord`, the same for `indexer add`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ReloadRequest(BaseModel):
    """POST /admin/reload: the index directory to serve next (on the server), or none for the configured
    one, read again (e.g. after the directory or a symlink to it was replaced)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    index: str | None = Field(None, min_length=1, max_length=4096, description="index directory on the server")


class ErrorResponse(BaseModel):
    error: str
    error_type: str
    detail: list[dict[str, Any]] | None = None

"""The HTTP layer's own types (the fill's request and result are `fill.schemas`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from corpus.readers import PRINTABLE_ID


class ReloadRequest(BaseModel):
    """POST /admin/reload: the index directory to serve next (on the server), or none for the configured
    one, read again (e.g. after the directory or a symlink to it was replaced)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    index: str | None = Field(None, min_length=1, max_length=4096, description="index directory on the server")


class DocumentRecord(BaseModel):
    """One document of POST /admin/documents: added to the served index, or replacing the document with its id."""

    id: str = Field(min_length=1, max_length=1024, pattern=PRINTABLE_ID,
                    description="the document's id (printable: no control characters); an id in the index is replaced")
    text: str = Field(min_length=1, max_length=10_000_000, pattern=r"\S",
                      description="the document's text (not empty nor blank: delete a document to remove it)")
    title: str = Field("", max_length=10_000, description="its title (indexed as each block's context)")


class ErrorResponse(BaseModel):
    error: str
    error_type: str
    detail: list[dict] | None = None

"""POST /admin/documents and DELETE /admin/documents/{id}: change the served index's corpus live (admin keys
only: service.auth). The change is written to the index directory (indexer.update) and the new generation is
served as soon as it is committed, without a restart and without failing a request (service.updates.DocumentChanges)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from starlette.convertors import PathConvertor, register_url_convertor

from common.errors import AppError
from corpus.readers import PRINTABLE_ID, Document, DocumentRecord
from indexer.documents import check_documents
from indexer.update import UpdateSummary
from service.auth import ADMIN_PREFIX
from service.dependencies import ERRORS, ready_state
from service.limits import JSON_LINES
from service.schemas import ErrorResponse
from service.state import ServiceState

router = APIRouter(prefix=ADMIN_PREFIX)


class DocumentIdConvertor(PathConvertor):
    """The rest of the path, line breaks too. Starlette's `path` (`.*`) stops at a newline, so that an id with one
    (`a%0Ab`) matched no route (a generic 404) and, its `$` matching before a last newline, `d1%0A` was taken as
    `d1`: the whole id reaches the route, whose pattern refuses every control character (422)."""

    regex = r"(?s:.*)"


register_url_convertor("document_id", DocumentIdConvertor())

RESPONSES = {**ERRORS, 403: {"model": ErrorResponse}, 409: {"model": ErrorResponse}}
BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"type": "array", "minItems": 1, "items": DocumentRecord.model_json_schema()},
                        DocumentRecord.model_json_schema(),
                    ]
                }
            },
            "application/x-ndjson": {"schema": {"type": "string", "description": "one JSON document per line"}},
        },
    }
}


def parse_documents(body: bytes, content_type: str) -> list[Document]:
    """The documents of a body: a JSON array of records, one record (a JSON object, pretty-printed or not), or JSON
    lines (one record per line); a validation AppError naming the record (its number and id) and the field
    otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AppError(f"body is not UTF-8 ({exc})", kind="validation", field="documents") from None
    lines = content_type.split(";", 1)[0].strip().lower() in JSON_LINES or not text.lstrip().startswith(("[", "{"))
    try:
        records = None
        if not lines and text.lstrip().startswith("{"):  # one record (also pretty-printed), else JSON lines
            try:
                records = [json.loads(text)]
            except ValueError:
                lines = True
        if records is None:
            records = [json.loads(line) for line in text.splitlines() if line.strip()] if lines else json.loads(text)
    except ValueError as exc:
        form = "JSON lines (one JSON object per line)" if lines else "a JSON array"
        raise AppError(f"body is not {form}: {exc}", kind="validation", field="documents") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise AppError(
            "body is nested too deeply: send a JSON array or JSON lines of flat {id, text, title?} records",
            kind="validation",
            field="documents",
        ) from None
    if not records:
        raise AppError(
            "no document given: send a JSON array or JSON lines of {id, text, title?}",
            kind="validation",
            field="documents",
        )
    out = []
    for i, record in enumerate(records):
        try:
            doc = DocumentRecord.model_validate(record)
        except ValidationError as exc:
            given = f" (id {record.get('id')!r})" if isinstance(record, dict) and "id" in record else ""
            raise AppError(
                f"document {i}{given}: {DocumentRecord.problems(exc)}", kind="validation", field=f"documents[{i}]"
            ) from None
        out.append(Document(row=i, id=doc.id, title=doc.title, text=doc.text))
    return check_documents(out)  # the rules `indexer add` applies too (printable ids, some text, each id once)


@router.post("/documents", response_model=UpdateSummary, responses=RESPONSES, openapi_extra=BODY)
async def add_documents(http: Request, state: ServiceState = Depends(ready_state)) -> UpdateSummary:
    """Add documents to the served index (a document whose id is in it replaces it): encoded with the served
    model into a new delta shard, searchable once this returns. Body: a JSON array of {id, text, title?}, one such
    object, or JSON lines (Content-Type application/x-ndjson). 409 while another writer changes the index."""
    documents = parse_documents(await http.body(), http.headers.get("content-type", ""))
    return await run_in_threadpool(
        state.documents.apply, lambda update: update.add(documents), "add documents (POST /admin/documents)", True
    )


@router.delete(
    "/documents/{doc_id:document_id}",
    response_model=UpdateSummary,
    responses={**RESPONSES, 404: {"model": ErrorResponse}},
)
async def delete_document(
    doc_id: Annotated[str, Path(pattern=PRINTABLE_ID, description="a printable document id")],
    state: ServiceState = Depends(ready_state),
) -> UpdateSummary:
    """Delete a document of the served index by id: it is never returned again (candidates, evidence, BM25).
    404 when the index does not hold it."""
    return await run_in_threadpool(
        state.documents.apply, lambda update: update.delete([doc_id]), "delete documents (DELETE /admin/documents)"
    )

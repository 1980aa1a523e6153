"""The documents of an update, checked and found: the rules every update's documents meet (`indexer add` and
POST /admin/documents alike: printable ids, some text, each id once, every document giving tokens), and the live
rows of documents by id (what a replacement or a delete tombstones)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.errors import AppError
from corpus.blocking import Block
from corpus.readers import PRINTABLE_ID, Document
from indexer.integrity import open_docs
from indexer.manifest import Manifest
from indexer.shard import Shard
from indexer.tombstones import Tombstones


def id_problem(doc_id: str) -> str | None:
    """Why `doc_id` cannot name a document of an update (None when it can): ids are printable text, so that
    every id added can be deleted again (by URL path, by an --ids-file line) and logged as it is."""
    if not doc_id:
        return "the id is empty"
    if not re.fullmatch(PRINTABLE_ID, doc_id):
        return "the id holds a control character (newline, tab, NUL...); ids must be printable"
    return None


def each_with_tokens(blocks: Iterator[Block], docs: list[Document]) -> Iterator[Block]:
    """The blocks of `docs` (in their order), refusing a document whose text gives no token (only blank, control
    or format characters: it would be a document without rows, neither replaceable nor deletable) with a validation
    AppError naming it, as soon as the blocks of a later document begin (nothing is committed then)."""
    at = {id(d): i for i, d in enumerate(docs)}
    following = 0  # the document whose first block comes next
    for block in blocks:
        i = at[id(block.doc)]
        if i > following:
            raise _no_tokens(following, docs[following])
        following = max(following, i + 1)
        yield block
    if following < len(docs):
        raise _no_tokens(following, docs[following])


def _no_tokens(i: int, doc: Document) -> AppError:
    return AppError(
        f"document {i} (id {doc.id!r}): its text gives no token of this model's vocabulary (only blank, control or "
        "format characters); give it text, or delete the document to remove it",
        kind="validation",
        field=f"documents[{i}].text",
    )


def check_documents(documents: Iterable[Document]) -> list[Document]:
    """The documents of an update, or a validation AppError naming the first bad one (by number and id): the
    same rules for `indexer add` and POST /admin/documents. An empty text is refused (it would give a document
    without rows, which could be neither replaced nor deleted; delete a document to remove its text)."""
    docs = list(documents)
    if not docs:
        raise AppError("an update holds no documents", kind="validation")
    seen: set[str] = set()
    for i, d in enumerate(docs):
        if problem := id_problem(d.id):
            raise AppError(f"document {i} (id {d.id!r}): {problem}", kind="validation", field=f"documents[{i}].id")
        if not d.text.strip():
            raise AppError(
                f"document {i} (id {d.id!r}): the text is empty; give it text, or delete the document to remove it",
                kind="validation",
                field=f"documents[{i}].text",
            )
        if d.id in seen:
            raise AppError(
                f"document id {d.id!r} appears twice in one update; give each document once",
                kind="validation",
                field=f"documents[{i}].id",
            )
        seen.add(d.id)
    return docs


def document_rows(
    root: Path, manifest: Manifest, tombstones: Tombstones, ids: list[str], opened: dict[str, Shard] | None = None
) -> dict[str, list[tuple[str, int]]]:
    """Per id that the index holds, its live places: [(shard name, row of its docs.arrow), ...]. `opened`: shards
    already open (a server's), whose checked documents table is used instead of opening the file again."""
    wanted = pa.array(sorted(set(ids)), type=pa.string())
    found: dict[str, list[tuple[str, int]]] = {}
    opened = opened or {}
    for info in manifest.shards:
        shard = opened.get(info.name)
        if shard is not None and shard.info == info:
            shard.columns["id"].check_all()  # every id is read (indexer.checksums)
            docs = shard.docs
        else:
            docs = open_docs(root / info.name / "docs.arrow", info.documents)
        doc_ids = docs.column("id")
        rows = np.flatnonzero(pc.is_in(doc_ids, value_set=wanted).to_numpy(zero_copy_only=False))
        rows = np.setdiff1d(rows, tombstones.of(info.name))
        for row in rows.tolist():
            found.setdefault(doc_ids[row].as_py(), []).append((info.name, row))
    return found

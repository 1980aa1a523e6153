"""Corpus readers: stream Documents out of HF datasets, Arrow, Parquet, JSON lines and text files.
Columnar formats are converted to Python strings one (sliced) record batch at a time."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.errors import AppError

logger = logging.getLogger(__name__)

FORMATS = ("hf_dataset", "arrow", "parquet", "jsonl", "text", "text_dir")
SUPPORTED = (
    "a HuggingFace `save_to_disk` directory (with state.json), a .arrow file (IPC stream or file), "
    "a .parquet file, a .jsonl/.json file (one JSON object per line), a .txt file (one document "
    "per line) or a directory of .txt files (one document per file)"
)
_SUFFIXES = {
    ".arrow": "arrow",
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".txt": "text",
}
_COLUMNS = ("id", "title", "text")
_ARROW_ERRORS = (pa.ArrowException, OSError)
Raw = tuple[Any, Any, Any]  # (id, title, text) before normalisation; row numbers are added later


# an id a live update accepts: no control characters, C0, DEL or C1 (Unicode's Cc; indexer.update)
PRINTABLE_ID = r"^[^\x00-\x1f\x7f-\x9f]+$"


# a character that is not blank: not white space by JSON Schema's, Rust's (pydantic) nor Python's rules (str.strip
# also strips the separators \x1c-\x1f and NEL \x85, which JSON Schema's and Rust's \s do not hold)
TEXT_PATTERN = r"[^\s\x1c-\x1f\x85]"


class DocumentRecord(BaseModel):
    """One document of a live update, as POST /admin/documents and `indexer add` take it (the one validation of
    both): added to the index, or replacing the document with its id. Fields other than these are refused, as
    every route refuses them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(
        min_length=1,
        max_length=1024,
        pattern=PRINTABLE_ID,
        description="the document's id (printable: no control characters); an id in the index is replaced",
    )
    text: str = Field(
        min_length=1,
        max_length=10_000_000,
        pattern=TEXT_PATTERN,
        description="the document's text (not empty nor blank: delete a document to remove it)",
    )
    title: str = Field("", max_length=10_000, description="its title (indexed as each block's context; null: none)")

    @field_validator("title", mode="before")
    @classmethod
    def _no_title(cls, value):
        return "" if value is None else value

    @staticmethod
    def problems(exc: ValidationError) -> str:
        """A ValidationError of a record as one line naming each field and what is wrong."""
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors())


@dataclass(frozen=True)
class Document:
    row: int  # 0-based row number across the whole corpus, in reading order
    id: str  # the `id` value as a string; str(row) when absent or null
    title: str  # `title` value or ""; the file stem for a directory of text files
    text: str


def detect_format(path: Path) -> str:
    """Return the corpus format of ``path`` (one of FORMATS) or raise AppError."""
    path = Path(path)
    if not path.exists():
        raise AppError(f"corpus path {path} does not exist; check the path (supported: {SUPPORTED})")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            splits = _dataset_dict_splits(path)
            example = splits[0] if splits else "train"
            raise AppError(
                f"{path} is a HuggingFace DatasetDict with splits {', '.join(splits) or '(none)'}; "
                f"pass one split directory instead, e.g. {path / example}"
            )
        if (path / "state.json").is_file():
            return "hf_dataset"
        if any(p.is_file() for p in path.rglob("*.txt")):
            return "text_dir"
        raise AppError(f"directory {path} has neither state.json nor .txt files; supported corpus formats: {SUPPORTED}")
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise AppError(
            f"unknown corpus format for {path} (suffix {path.suffix!r}); supported corpus formats: {SUPPORTED}"
        )
    return fmt


def read_corpus(path: str | Path, batch_rows: int = 1024, records: bool = False) -> Iterator[Document]:
    """Stream the documents of the corpus at ``path``.

    The path and format are checked immediately; columns are checked before the first document is
    yielded; an AppError is raised at the end of iteration if the corpus held no documents, and with
    `records` (an update's documents) at the first document that is not a valid DocumentRecord (an update
    names the documents it replaces by their string ids).
    """
    path = Path(path)
    if batch_rows < 1:
        raise AppError(f"batch_rows must be >= 1, got {batch_rows}")
    fmt = detect_format(path)
    logger.info("reading %s corpus from %s", fmt, path)
    if fmt in ("hf_dataset", "arrow", "parquet"):
        raw = {"hf_dataset": _read_hf, "arrow": _read_arrow, "parquet": _read_parquet}[fmt](path, batch_rows)
    else:
        raw = {"jsonl": _read_jsonl, "text": _read_text, "text_dir": _read_text_dir}[fmt](path)
    return _numbered(path, raw, records)


def count_documents(path: str | Path) -> int | None:
    """Row count from metadata (arrow/parquet/hf) or a line scan (jsonl/text); None for text dirs."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "hf_dataset":
        return sum(_count_arrow(p) for p in _hf_files(path))
    if fmt == "arrow":
        return _count_arrow(path)
    if fmt == "parquet":
        try:
            return pq.ParquetFile(path).metadata.num_rows
        except _ARROW_ERRORS as exc:
            raise _unreadable(path, "Parquet", exc) from exc
    if fmt in ("jsonl", "text"):  # a scan of the bytes: one document per non-blank line
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    return None


def _numbered(path: Path, raw: Iterator[Raw], records: bool = False) -> Iterator[Document]:
    row = 0
    for id_, title, text in raw:
        if records:
            yield _record(path, row, id_, title, text)
        else:
            yield Document(
                row=row,
                id=str(row) if id_ is None else str(id_),
                title="" if title is None else str(title),
                text="" if text is None else str(text),
            )
        row += 1
    if row == 0:
        raise AppError(f"corpus {path} holds no documents; point to a non-empty corpus")
    logger.info("read %d documents from %s", row, path)


def _record(path: Path, row: int, id_: Any, title: Any, text: Any) -> Document:
    """Document `row` of an update's corpus, validated as a DocumentRecord (else an AppError naming it)."""
    if id_ is None or id_ == "":
        raise AppError(
            f"{path}: document {row + 1} has no `id`; an update needs an id for every document "
            "(a document whose id is in the index replaces it)",
            kind="validation",
        )
    try:
        doc = DocumentRecord.model_validate({"id": id_, "title": title, "text": text})
    except ValidationError as exc:
        raise AppError(
            f"{path}: document {row + 1} (id {id_!r}): {DocumentRecord.problems(exc)}", kind="validation"
        ) from None
    return Document(row=row, id=doc.id, title=doc.title, text=doc.text)


def _unreadable(path: Path, kind: str, exc: BaseException) -> AppError:
    return AppError(
        f"cannot read {path} as {kind}: {exc}; check that the file is complete and "
        f"really is {kind} (supported: {SUPPORTED})"
    )


def _check_columns(path: Path, names: list[str]) -> list[str]:
    if "text" not in names:
        raise AppError(
            f"{path} has no `text` column (columns found: {', '.join(names) or 'none'}); "
            f"rename the document text column to `text`"
        )
    return [c for c in _COLUMNS if c in names]


def _dataset_dict_splits(path: Path) -> list[str]:
    try:
        return [str(s) for s in json.loads((path / "dataset_dict.json").read_text("utf-8")).get("splits", [])]
    except (OSError, ValueError, AttributeError):
        return sorted(p.name for p in path.iterdir() if (p / "state.json").is_file())


def _hf_files(path: Path) -> list[Path]:
    state = path / "state.json"
    try:
        files = [path / f["filename"] for f in json.loads(state.read_text("utf-8"))["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AppError(f"cannot read {state} ({exc}); re-save the dataset with save_to_disk") from exc
    for f in files:
        if not f.is_file():
            raise AppError(f"{state} lists {f.name} but {f} does not exist; re-save the dataset")
    return files


def _read_hf(path: Path, batch_rows: int) -> Iterator[Raw]:
    files = _hf_files(path)
    for f in files:  # check every shard's columns before yielding anything
        with pa.memory_map(str(f)) as source:
            _check_columns(f, _open_ipc(f, source).schema.names)
    for f in files:
        yield from _read_arrow(f, batch_rows)


def _open_ipc(path: Path, source: pa.NativeFile) -> Any:
    try:
        is_file = source.read(6) == b"ARROW1"
        source.seek(0)
        return ipc.open_file(source) if is_file else ipc.open_stream(source)
    except _ARROW_ERRORS as exc:
        raise _unreadable(path, "Arrow IPC", exc) from exc


def _ipc_batches(path: Path, reader: Any) -> Iterator[pa.RecordBatch]:
    if isinstance(reader, ipc.RecordBatchFileReader):
        batches: Iterator[pa.RecordBatch] = (reader.get_batch(i) for i in range(reader.num_record_batches))
    else:
        batches = iter(reader)
    return _guarded(batches, path, "Arrow IPC")


def _guarded(batches: Iterator[pa.RecordBatch], path: Path, kind: str) -> Iterator[pa.RecordBatch]:
    """The batches, with a read error half-way through turned into an AppError naming the file."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except _ARROW_ERRORS as exc:
            raise _unreadable(path, kind, exc) from exc
        yield batch


def _count_arrow(path: Path) -> int:
    with pa.memory_map(str(path)) as source:
        reader = _open_ipc(path, source)
        return sum(b.num_rows for b in _ipc_batches(path, reader))


def _batch_rows(batch: pa.RecordBatch, columns: list[str], batch_rows: int) -> Iterator[Raw]:
    """Convert one record batch to Python values, ``batch_rows`` rows (a zero-copy slice) at a time."""
    for start in range(0, batch.num_rows, batch_rows):
        part = batch.slice(start, batch_rows)
        values = {c: part.column(c).to_pylist() for c in columns}
        none = [None] * part.num_rows
        yield from zip(values.get("id", none), values.get("title", none), values["text"])


def _read_arrow(path: Path, batch_rows: int) -> Iterator[Raw]:
    with pa.memory_map(str(path)) as source:  # zero copy: batches point into the mapped file
        reader = _open_ipc(path, source)
        columns = _check_columns(path, reader.schema.names)
        for batch in _ipc_batches(path, reader):
            yield from _batch_rows(batch, columns, batch_rows)


def _read_parquet(path: Path, batch_rows: int) -> Iterator[Raw]:
    try:
        pf = pq.ParquetFile(path, memory_map=True)
    except _ARROW_ERRORS as exc:
        raise _unreadable(path, "Parquet", exc) from exc
    columns = _check_columns(path, pf.schema_arrow.names)
    for batch in _guarded(pf.iter_batches(batch_size=batch_rows, columns=columns), path, "Parquet"):
        yield from _batch_rows(batch, columns, batch_rows)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open("r", encoding="utf-8") as fh:
            yield from enumerate(fh, start=1)
    except UnicodeDecodeError as exc:
        raise AppError(f"{path} is not valid UTF-8 ({exc}); re-encode the file as UTF-8") from exc


def _read_jsonl(path: Path) -> Iterator[Raw]:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise AppError(
                f"{path} line {lineno} is not valid JSON: {exc}; fix the line (one JSON object per line)"
            ) from exc
        if not isinstance(obj, dict):
            raise AppError(
                f"{path} line {lineno} is a JSON {type(obj).__name__}, not an object; "
                f"write one JSON object with a `text` field per line"
            )
        if "text" not in obj:
            raise AppError(
                f"{path} line {lineno} has no `text` field (fields found: "
                f"{', '.join(obj) or 'none'}); add a `text` field to every line"
            )
        yield obj.get("id"), obj.get("title"), obj["text"]


def _read_text(path: Path) -> Iterator[Raw]:
    for _, line in _lines(path):
        if line.strip():
            yield None, None, line.rstrip("\r\n")


def _read_text_dir(path: Path) -> Iterator[Raw]:
    files = sorted((p for p in path.rglob("*.txt") if p.is_file()), key=lambda p: p.relative_to(path).as_posix())
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise AppError(f"{f} is not valid UTF-8 ({exc}); re-encode the file as UTF-8") from exc
        yield f.relative_to(path).as_posix(), f.stem, text

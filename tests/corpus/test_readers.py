"""Tests for corpus.readers: every corpus format yields the same documents; errors name the file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.errors import AppError
from corpus.readers import Document, count_documents, detect_format, read_corpus

TEXTS = ["The cat sat on the mat.", "Zürich ist schön — 東京タワー 🚀", "No title here.", "Last one, ça va?"]
TITLES = ["Cats", "Städte", None, "Ende"]
STR_IDS = ["doc-a", "doc-b", "doc-c", "doc-d"]
INT_IDS = [10, 20, 30, 40]


def _columns(ids: list) -> dict[str, list]:
    return {"id": ids, "title": TITLES, "text": TEXTS}


def _table(columns: dict[str, list]) -> pa.Table:
    return pa.table({k: pa.array(v) if v else pa.array([], pa.string()) for k, v in columns.items()})


def write_hf(path: Path, columns: dict[str, list]) -> Path:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict(columns).save_to_disk(str(path / "hf"))
    return path / "hf"


def write_arrow_stream(path: Path, columns: dict[str, list]) -> Path:
    table = _table(columns)
    with pa.OSFile(str(path / "corpus.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=3)  # two record batches: 3 + 1 rows
    return path / "corpus.arrow"


def write_arrow_file(path: Path, columns: dict[str, list]) -> Path:
    table = _table(columns)
    with pa.OSFile(str(path / "corpus.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=3)
    return path / "corpus.arrow"


def write_parquet(path: Path, columns: dict[str, list]) -> Path:
    pq.write_table(_table(columns), path / "corpus.parquet", row_group_size=2)
    return path / "corpus.parquet"


def write_jsonl(path: Path, columns: dict[str, list]) -> Path:
    lines = []
    for i in range(len(next(iter(columns.values())))):
        obj = {k: v[i] for k, v in columns.items() if not (k == "title" and v[i] is None)}  # untitled: no key
        lines.append(json.dumps(obj, ensure_ascii=False))
    lines.insert(2, "   ")  # blank lines are skipped
    (path / "corpus.jsonl").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    return path / "corpus.jsonl"


COLUMNAR = {
    "hf": write_hf,
    "arrow_stream": write_arrow_stream,
    "arrow_file": write_arrow_file,
    "parquet": write_parquet,
    "jsonl": write_jsonl,
}


def expected(ids: list) -> list[Document]:
    return [Document(row=i, id=str(ids[i]), title=TITLES[i] or "", text=TEXTS[i]) for i in range(len(TEXTS))]


@pytest.mark.parametrize("ids", [STR_IDS, INT_IDS], ids=["str_ids", "int_ids"])
@pytest.mark.parametrize("writer", COLUMNAR.values(), ids=COLUMNAR.keys())
def test_columnar_formats_give_same_documents(tmp_path: Path, writer, ids: list) -> None:
    path = writer(tmp_path, _columns(ids))
    assert list(read_corpus(path)) == expected(ids)
    assert list(read_corpus(str(path), batch_rows=1)) == expected(ids)


@pytest.mark.parametrize(
    "writer,fmt",
    [
        (write_hf, "hf_dataset"),
        (write_arrow_stream, "arrow"),
        (write_arrow_file, "arrow"),
        (write_parquet, "parquet"),
        (write_jsonl, "jsonl"),
    ],
)
def test_detect_format_and_count(tmp_path: Path, writer, fmt: str) -> None:
    path = writer(tmp_path, _columns(STR_IDS))
    assert detect_format(path) == fmt
    assert count_documents(path) == len(TEXTS)  # jsonl: a line count


@pytest.mark.parametrize("writer", [write_arrow_stream, write_parquet, write_hf, write_jsonl])
def test_missing_or_null_id_defaults_to_row(tmp_path: Path, writer) -> None:
    docs = list(read_corpus(writer(tmp_path, {"text": TEXTS})))
    assert [(d.row, d.id, d.title) for d in docs] == [(i, str(i), "") for i in range(len(TEXTS))]
    other = tmp_path / "other"
    other.mkdir()
    docs = list(read_corpus(writer(other, {"id": ["x", None, "z", None], "text": [None, "b", "c", "d"]})))
    assert [(d.id, d.text) for d in docs] == [("x", ""), ("1", "b"), ("z", "c"), ("3", "d")]


def test_text_file_one_document_per_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join([TEXTS[0], "", TEXTS[1], "  ", TEXTS[2], TEXTS[3]]) + "\n\n", encoding="utf-8")
    docs = list(read_corpus(path))
    assert detect_format(path) == "text" and count_documents(path) == len(TEXTS)
    assert [d.text for d in docs] == TEXTS
    assert [(d.row, d.id, d.title) for d in docs] == [(i, str(i), "") for i in range(len(TEXTS))]


def test_text_dir_one_document_per_file(tmp_path: Path) -> None:
    names = ["m.txt", "z/b.txt", "a/y.txt", "z/c.txt"]  # by relative path: a/y, m, z/b, z/c
    for name, text in zip(names, [TEXTS[1], TEXTS[2], TEXTS[0], TEXTS[3]]):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "notes.md").write_text("ignored", encoding="utf-8")
    assert detect_format(tmp_path) == "text_dir"
    docs = list(read_corpus(tmp_path))
    assert [d.text for d in docs] == TEXTS
    assert [(d.row, d.id, d.title) for d in docs] == [
        (0, "a/y.txt", "y"),
        (1, "m.txt", "m"),
        (2, "z/b.txt", "b"),
        (3, "z/c.txt", "c"),
    ]


@pytest.mark.parametrize("writer", [write_arrow_stream, write_arrow_file])
def test_arrow_batch_rows_one_keeps_order(tmp_path: Path, writer) -> None:
    n = 10
    path = writer(tmp_path, {"id": list(range(n)), "text": [f"row {i}" for i in range(n)]})
    docs = read_corpus(path, batch_rows=1)
    first = next(docs)
    assert first == Document(row=0, id="0", title="", text="row 0")
    assert [(d.row, d.text) for d in docs] == [(i, f"row {i}") for i in range(1, n)]
    assert count_documents(path) == n


def test_hf_multiple_shards_in_listed_order(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(6)]})
    ds.save_to_disk(str(tmp_path / "hf"), num_shards=3)
    assert [d.text for d in read_corpus(tmp_path / "hf")] == [f"t{i}" for i in range(6)]
    assert count_documents(tmp_path / "hf") == 6


def test_hf_checks_every_shard_before_yielding(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": ["a", "b", "c", "d"]}).save_to_disk(str(tmp_path / "hf"), num_shards=2)
    shards = [f["filename"] for f in json.loads((tmp_path / "hf" / "state.json").read_text())["_data_files"]]
    write_arrow_stream(tmp_path, {"body": ["x"]}).replace(tmp_path / "hf" / shards[1])
    docs = read_corpus(tmp_path / "hf")
    with pytest.raises(AppError, match=shards[1].replace(".", r"\.") + ".*body"):
        next(docs)


def test_dataset_dict_gives_helpful_error(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a"]})
    datasets.DatasetDict({"train": ds, "validation": ds}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(AppError) as err:
        read_corpus(tmp_path / "dd")
    msg = str(err.value)
    assert "train" in msg and "validation" in msg and str(tmp_path / "dd" / "train") in msg


# --- errors --------------------------------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(AppError, match="nope.parquet.*does not exist"):
        read_corpus(tmp_path / "nope.parquet")


def test_unknown_format_lists_supported(tmp_path: Path) -> None:
    path = tmp_path / "corpus.csv"
    path.write_text("id,text\n1,a\n", encoding="utf-8")
    with pytest.raises(AppError, match=r"corpus\.csv.*parquet"):
        read_corpus(path)
    empty_dir = tmp_path / "emptydir"
    empty_dir.mkdir()
    (empty_dir / "x.csv").write_text("a", encoding="utf-8")
    with pytest.raises(AppError, match="emptydir.*state.json"):
        detect_format(empty_dir)


@pytest.mark.parametrize(
    "name,data",
    [
        ("garbage.arrow", b"\x00\x01this is not arrow at all" * 10),
        ("garbage.arrow", b"ARROW1\x00\x00" + b"\xff" * 50),
        ("garbage.parquet", b"PAR1" + b"\x00" * 40 + b"PAR1"),
        ("garbage.parquet", b"just text"),
    ],
)
def test_corrupt_files(tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(AppError, match=name.replace(".", r"\.")):
        list(read_corpus(tmp_path / name))


def test_truncated_arrow_stream(tmp_path: Path) -> None:
    path = write_arrow_stream(tmp_path, {"text": [f"some text {i}" * 20 for i in range(100)]})
    path.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(AppError, match=r"corpus\.arrow"):
        list(read_corpus(path))


@pytest.mark.parametrize("writer", [write_hf, write_arrow_stream, write_arrow_file, write_parquet, write_jsonl])
def test_missing_text_column_before_any_document(tmp_path: Path, writer) -> None:
    path = writer(tmp_path, {"id": ["a", "b"], "body": ["x", "y"]})
    docs = read_corpus(path)
    with pytest.raises(AppError) as err:
        next(docs)  # nothing is yielded before the schema check
    msg = str(err.value)
    assert "`text`" in msg and "body" in msg and "id" in msg
    assert (path.name if writer is not write_hf else ".arrow") in msg


def test_malformed_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n\n{"text": "broken"\n', encoding="utf-8")
    docs = read_corpus(path)
    assert next(docs).text == "ok"
    with pytest.raises(AppError, match=r"bad\.jsonl line 3"):
        next(docs)


def test_jsonl_array_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "arr.json"
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(AppError, match=r"arr\.json line 1.*not an object"):
        list(read_corpus(path))


@pytest.mark.parametrize("name,content", [("empty.jsonl", ""), ("blank.txt", "\n  \n\n")])
def test_empty_text_corpus(tmp_path: Path, name: str, content: str) -> None:
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(AppError, match=name.replace(".", r"\.") + ".*holds no documents"):
        list(read_corpus(tmp_path / name))


@pytest.mark.parametrize("writer", [write_arrow_stream, write_arrow_file, write_parquet, write_hf])
def test_empty_columnar_corpus(tmp_path: Path, writer) -> None:
    path = writer(tmp_path, {"text": []})
    with pytest.raises(AppError, match="holds no documents") as err:
        list(read_corpus(path))
    assert path.name in str(err.value)


def test_empty_error_raised_lazily_after_documents(tmp_path: Path) -> None:
    path = tmp_path / "one.txt"
    path.write_text("only line\n", encoding="utf-8")
    assert [d.text for d in read_corpus(path)] == ["only line"]  # no error when something was yielded


def test_hf_missing_shard(tmp_path: Path) -> None:
    path = write_hf(tmp_path, _columns(STR_IDS))
    shard = next(path.glob("*.arrow"))
    shard.unlink()
    with pytest.raises(AppError, match=shard.name.replace(".", r"\.")):
        list(read_corpus(path))
    with pytest.raises(AppError, match=shard.name.replace(".", r"\.")):
        count_documents(path)


def test_bad_batch_rows(tmp_path: Path) -> None:
    path = write_parquet(tmp_path, _columns(STR_IDS))
    with pytest.raises(AppError, match="batch_rows"):
        read_corpus(path, batch_rows=0)

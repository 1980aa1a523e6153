"""indexer.integrity: a damaged index is refused when it is opened (without --verify), by an AppError that names
the damaged file and the fix. Every case damages a copy of the built tiny index (tests/conftest.py)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pytest

from common.errors import AppError
from indexer.build import BuildConfig, build_index
from indexer.integrity import DOCS_SCHEMA
from indexer.manifest import MANIFEST_NAME
from indexer.phrase_index import PhraseIndex
from tests.manifests import resealed

SHARD = "shard_00001"


@pytest.fixture()
def index_copy(tmp_path, tiny_index) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(tiny_index, dst)
    return dst


@pytest.fixture(scope="module")
def float16_index(tmp_path_factory, tiny_bert_dir, tiny_corpus) -> Path:
    """tiny_index stores int8 vectors + scales; this one float16 vectors."""
    out = tmp_path_factory.mktemp("float16") / "idx"
    build_index(
        BuildConfig(
            corpus=tiny_corpus, out=out, model=tiny_bert_dir, block_tokens=16, shard_tokens=30, vector_dtype="float16"
        )
    )
    return out


def refused(root: Path, path: Path, problem: str = "") -> str:
    """Opening `root` raises an AppError of kind input that names `path` (and says `problem`) and the fix."""
    with pytest.raises(AppError) as info:
        PhraseIndex(root).close()
    message = info.value.message
    assert info.value.kind == "input"
    assert f"index file {path} " in message, message
    assert re.search(problem, message), message
    assert "indexer build" in message and "--verify" in message
    assert "from a backup" in message and "deleted since" in message  # a rebuild alone would lose live changes
    return message


def truncate(path: Path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


def overwrite(path: Path, at: int, data: bytes) -> None:
    """Replace bytes in place: the file keeps its size, so only a structural check can tell."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)
    assert path.stat().st_size == size


def match_manifest_size(root: Path, path: Path) -> None:
    """Record `path`'s present size in the manifest, so that the size check passes and a deeper check must tell."""
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    record = (
        manifest["bm25"]
        if path.parent == root
        else next(s for s in manifest["shards"] if s["name"] == path.parent.name)["files"][path.name]
    )
    record["bytes"] = path.stat().st_size
    (root / MANIFEST_NAME).write_text(json.dumps(resealed(manifest)))


def test_intact_copy_opens(index_copy):
    index = PhraseIndex(index_copy)
    try:
        assert len(index.shards) == 3 and index.bm25 is not None
        assert index.bm25.search_scored("Paris", 3)[0].size > 0
    finally:
        index.close()


def test_intact_float16_index_opens(float16_index):
    index = PhraseIndex(float16_index)
    try:
        assert index.shards[0].vectors.scales is None and index.shards[0].vectors.data.dtype == np.float16
    finally:
        index.close()


# ---------------------------------------------------------------- bm25.sqlite


def test_truncated_bm25(index_copy):
    path = index_copy / "bm25.sqlite"
    truncate(path)
    refused(index_copy, path, "bytes, the manifest says")


def test_truncated_bm25_found_by_the_probe_alone(index_copy):
    path = index_copy / "bm25.sqlite"
    truncate(path)
    match_manifest_size(index_copy, path)
    refused(index_copy, path, "BM25 database|lacks|indexes blocks|postings")


def test_garbage_in_bm25_header_page(index_copy):
    path = index_copy / "bm25.sqlite"
    overwrite(path, 0, np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    refused(index_copy, path, "not a readable BM25 database")


def test_bm25_postings_that_disagree_with_fts5(index_copy):
    path = index_copy / "bm25.sqlite"
    con = sqlite3.connect(path)
    term, blocks = con.execute("SELECT term, blocks FROM postings ORDER BY term LIMIT 1").fetchone()
    shifted = (np.frombuffer(blocks, dtype="<u4") + 1).astype("<u4")  # the next blocks, still in range
    con.execute("UPDATE postings SET blocks = ? WHERE term = ?", (shifted.tobytes(), term))
    con.commit()
    con.close()
    match_manifest_size(index_copy, path)
    refused(index_copy, path, "disagree with its postings|damaged postings")


@pytest.mark.parametrize(
    "change, problem",
    [
        ("DROP TABLE postings_meta", "without the other"),
        ("UPDATE postings_meta SET value = CAST('999' AS BLOB) WHERE key = 'rows'", "postings for '999' blocks"),
        ("DELETE FROM blocks_docsize WHERE id = (SELECT max(id) FROM blocks_docsize)", "indexes blocks up to"),
        ("DROP TABLE term_stats", "without the tables pieces and term_stats"),
        (
            "INSERT INTO pieces VALUES ('zzz', 0, x'0300000001000000', zeroblob(16))",
            "damaged postings for the term 'zzz'",
        ),
    ],
)
def test_bm25_of_another_shape(index_copy, change, problem):
    path = index_copy / "bm25.sqlite"
    con = sqlite3.connect(path)
    con.execute(change)
    con.commit()
    con.close()
    match_manifest_size(index_copy, path)
    refused(index_copy, path, problem)


# ---------------------------------------------------------------- .npy files


def test_truncated_vectors(index_copy):
    path = index_copy / SHARD / "vectors.npy"
    truncate(path)
    refused(index_copy, path, "bytes, the manifest says")


def _rewrite_shape(path: Path, shape: tuple[int, ...]) -> None:
    """Rewrite a v1.0 .npy header to claim `shape`, keeping the header's length (and so the file's size)."""
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[8:10], "little")
    header = data[10 : 10 + length].decode("latin1")
    new = re.sub(r"'shape': \([^)]*\)", f"'shape': {shape!r}", header).rstrip("\n").ljust(length - 1) + "\n"
    assert len(new) == length and new != header
    overwrite(path, 10, new.encode("latin1"))


def test_vectors_header_with_wrong_shape(index_copy):
    path = index_copy / SHARD / "vectors.npy"
    stored = np.load(path, mmap_mode="r")
    (n, d), dtype = stored.shape, stored.dtype
    _rewrite_shape(path, (n - 1, d))
    refused(index_copy, path, rf"expected {dtype} \({n}, {d}\)")


def test_vectors_header_overwritten(index_copy):
    path = index_copy / SHARD / "vectors.npy"
    overwrite(path, 0, b"\x00" * 16)
    refused(index_copy, path, "no valid .npy header")


def test_token_ids_header_with_wrong_dtype(index_copy):
    path = index_copy / SHARD / "token_ids.npy"
    data = bytearray(path.read_bytes())
    at = data.index(b"'descr': '<u2'")
    overwrite(path, at, b"'descr': '<i2'")
    refused(index_copy, path, "int16")


def test_truncated_flags(index_copy):
    path = index_copy / SHARD / "flags.npy"
    truncate(path, keep=path.stat().st_size - 1)
    refused(index_copy, path, "bytes, the manifest says")


def test_flags_out_of_range(index_copy):
    path = index_copy / SHARD / "flags.npy"
    size = path.stat().st_size
    overwrite(path, size - 1, bytes([7]))  # the last token: WORD_START | WORD_END is 3
    refused(index_copy, path, "holds 7 at token")


def test_blocks_that_do_not_tile_the_tokens(index_copy):
    path = index_copy / SHARD / "blocks.npy"
    blocks = np.load(path)
    offset = path.stat().st_size - blocks.nbytes
    overwrite(path, offset + 8 * 2, np.int64(blocks[0, 2] + 5).tobytes())  # the first block's end token
    refused(index_copy, path, "does not tile")


@pytest.mark.parametrize("value", [np.inf, np.nan, -1.0])
def test_int8_scale_not_finite(index_copy, value):
    path = index_copy / SHARD / "scales.npy"
    assert np.load(path).dtype == np.float16
    overwrite(path, path.stat().st_size - 2, np.array([value], dtype="<f2").tobytes())
    refused(index_copy, path, "negative or non-finite scale")


# ---------------------------------------------------------------- docs.arrow, index.faiss, missing files


@pytest.mark.parametrize("where", ["start", "schema message", "middle"])
def test_garbled_docs(index_copy, where):
    """Bytes overwritten: the leading magic, the schema message after it (a reader of the Arrow file format
    skips both: it reads the footer's copy of the schema), or 64 bytes in the middle of the record batch."""
    path = index_copy / SHARD / "docs.arrow"
    at, length = {"start": (0, 8), "schema message": (8, 64), "middle": (path.stat().st_size // 2 - 32, 64)}[where]
    overwrite(path, at, b"\xff" * length)
    refused(index_copy, path, "Arrow IPC file")


def test_docs_text_that_is_not_utf8(index_copy):
    """Two bytes of a document's text overwritten: the file's structure holds, Arrow's full validation does not."""
    path = index_copy / SHARD / "docs.arrow"
    text = pa.ipc.open_file(path).read_all().column("text")[0].as_py()
    overwrite(path, path.read_bytes().index(text[:12].encode()), b"\xff\xfe")
    refused(index_copy, path, "Arrow IPC file .*UTF-?8")


def test_docs_with_another_schema(index_copy):
    path = index_copy / SHARD / "docs.arrow"
    table = pa.ipc.open_file(path).read_all()
    assert table.schema.equals(DOCS_SCHEMA)
    other = table.cast(pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())]))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, other.schema) as writer:
        writer.write_table(other)
    match_manifest_size(index_copy, path)
    refused(index_copy, path, "text: string")


def test_truncated_faiss(index_copy):
    path = index_copy / SHARD / "index.faiss"
    truncate(path)
    refused(index_copy, path, "bytes, the manifest says")


def test_faiss_of_another_shard(index_copy):
    path = index_copy / SHARD / "index.faiss"
    shutil.copyfile(index_copy / "shard_00000" / "index.faiss", path)
    match_manifest_size(index_copy, path)
    manifest = json.loads((index_copy / MANIFEST_NAME).read_text())
    tokens = [s["tokens"] for s in manifest["shards"][:2]]
    assert tokens[0] != tokens[1]
    refused(index_copy, path, rf"holds {tokens[0]} vectors of dimension \d+, expected {tokens[1]}")


@pytest.mark.parametrize("kind", ["L2 metric", "other dimension"])
def test_faiss_of_another_kind(index_copy, kind):
    path = index_copy / SHARD / "index.faiss"
    tokens = faiss.read_index(str(path)).ntotal
    dim = json.loads((index_copy / MANIFEST_NAME).read_text())["dim"]
    index = faiss.IndexFlatL2(dim) if kind == "L2 metric" else faiss.IndexFlatIP(dim // 2)
    index.add(np.zeros((tokens, index.d), dtype=np.float32))
    faiss.write_index(index, str(path))
    match_manifest_size(index_copy, path)
    refused(index_copy, path, "not inner product" if kind == "L2 metric" else f"of dimension {dim // 2}, expected")


@pytest.mark.parametrize("name", [f"{SHARD}/flags.npy", f"{SHARD}/docs.arrow", f"{SHARD}/index.faiss", "bm25.sqlite"])
def test_missing_file(index_copy, name):
    path = index_copy / name
    path.unlink()
    refused(index_copy, path, "is missing")


def test_file_left_out_of_the_manifest(index_copy):
    manifest = json.loads((index_copy / MANIFEST_NAME).read_text())
    del manifest["shards"][1]["files"]["flags.npy"]
    (index_copy / MANIFEST_NAME).write_text(json.dumps(resealed(manifest)))
    refused(index_copy, index_copy / SHARD / "flags.npy", "not listed in the manifest")


def test_a_changed_byte_in_the_vectors_is_found_by_checksums_and_by_verify(index_copy):
    """Same-size damage inside the vectors' payload passes the structural checks; the block checksums see it (a
    small file is read and checked whole when the shard opens, indexer.checksums), and --verify's sha256."""
    path = index_copy / SHARD / "vectors.npy"
    data = path.read_bytes()
    overwrite(path, len(data) - 1, bytes([data[-1] ^ 0xFF]))
    with pytest.raises(AppError, match=re.escape(str(path)) + ".*do not match their checksum"):
        PhraseIndex(index_copy)
    with pytest.raises(AppError, match=re.escape(str(path))):
        PhraseIndex(index_copy, verify=True)


# ---------------------------------------------------------------- damage found by --verify, missing files


def test_intact_copy_passes_verification(index_copy):
    PhraseIndex(index_copy, verify=True).close()


def test_truncated_vectors_raise(index_copy):
    path = index_copy / "shard_00000" / "vectors.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 64])
    with pytest.raises(AppError, match="vectors.npy"):
        PhraseIndex(index_copy)


@pytest.mark.parametrize("fname", ["vectors.npy", "docs.arrow", "index.faiss"])
def test_flipped_byte_fails_verification(index_copy, fname):
    shards = sorted(p.name for p in index_copy.glob("shard_*"))
    path = index_copy / shards[-1] / fname
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(AppError, match=re.escape(fname)):
        PhraseIndex(index_copy, verify=True)


def test_missing_shard_file_raises(index_copy):
    (index_copy / "shard_00001" / "index.faiss").unlink()
    with pytest.raises(AppError, match="index.faiss"):
        PhraseIndex(index_copy)


def test_missing_manifest_raises(index_copy):
    (index_copy / MANIFEST_NAME).unlink()
    with pytest.raises(AppError, match=MANIFEST_NAME):
        PhraseIndex(index_copy)

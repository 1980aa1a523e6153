"""Live updates (indexer.update): added documents are searched (FAISS and BM25), replaced and deleted ones are
never returned again (not by FAISS, not by BM25, also after a reopen), bad input is refused with nothing changed,
and the files of an updated index are covered by its integrity checks."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from pydantic import ValidationError

from common.errors import AppError
from corpus.readers import Document, DocumentRecord
from encoder.model import Encoder
from indexer.build import BuildConfig, build_index
from indexer.compact import CompactConfig, run_compact
from indexer.lock import writer_lock
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex
from indexer.update import AddConfig, DeleteConfig, IndexUpdate, run_add, run_delete
from tests.conftest import CORPUS, write_jsonl

NEW = Document(0, "n1", "Zorblax", "Zorblax quintessence glimmers over Vexmoor harbour.")


@pytest.fixture(scope="module", params=["flat", "IVF2,Flat"])
def built(request, tmp_path_factory, tiny_bert_dir):
    """The tiny corpus indexed with exact shards, or with IVF shards sharing one trained template."""
    root = tmp_path_factory.mktemp("upd")
    corpus = write_jsonl(root / "corpus.jsonl", CORPUS)
    build_index(
        BuildConfig(
            corpus=corpus,
            out=root / "idx",
            model=tiny_bert_dir,
            block_tokens=16,
            shard_tokens=30,
            index_type=request.param,
            device="cpu",
            dtype="fp32",
        )
    )
    return root / "idx"


@pytest.fixture()
def index(built, fresh_copy):
    return fresh_copy(built)


def _update(root, tiny_bert_dir) -> IndexUpdate:
    return IndexUpdate(root, model=tiny_bert_dir, device="cpu", dtype="fp32")


def _live_docs(index: PhraseIndex) -> set[tuple[str, str]]:
    """(id, text) of every document a block of which any search can return."""
    out = set()
    for shard, live in zip(index.shards, index.live):
        dead = set() if live is None else set(live.dead_blocks.tolist())
        for b in range(shard.blocks.shape[0]):
            if b not in dead:
                row = int(shard.blocks[b, 0])
                out.add((shard.doc_id(row), shard.doc_text(row)))
    return out


def _every_hit(index: PhraseIndex) -> set[tuple[int, int]]:
    """(shard, position) of every hit of a search with every stored token's own vector, k = all tokens."""
    queries = np.concatenate([s.vectors[np.arange(len(s))] for s in index.shards])
    found = index.search(queries, k=index.total_tokens)
    return {(int(s), int(p)) for shard_no, pos in found for s, p in zip(shard_no, pos)}


def _doc_of(index: PhraseIndex, shard: int, position: int) -> str:
    s = index.shards[shard]
    return s.doc_id(int(s.blocks[s.block_of(np.array([position]))[0], 0]))


def test_an_added_document_is_searched_by_faiss_and_bm25(index, tiny_bert_dir):
    summary = _update(index, tiny_bert_dir).add([NEW])
    assert (summary.generation, summary.added, summary.replaced) == (1, 1, 0) and summary.tokens > 0
    pi = PhraseIndex(index)
    try:
        new = pi.shards[-1]
        assert pi.manifest.shards[-1].bm25 is not None and new.doc_id(0) == "n1"
        q = new.vectors[np.arange(len(new))]  # each new token's own vector finds it first
        top = pi.search(q, k=1)
        assert [(int(s[0]), int(p[0])) for s, p in top] == [(len(pi.shards) - 1, i) for i in range(len(new))]
        blocks, scores = pi.bm25.search_scored("Vexmoor quintessence", 5)
        assert blocks.tolist() == [new.info.block_base] and scores[0] > 0
        assert pi.manifest.counts.documents == len(CORPUS) + 1 and pi.manifest.format_version == 4
    finally:
        pi.close()


def test_a_replaced_document_returns_only_its_new_text_also_after_a_reopen(index, tiny_bert_dir):
    _update(index, tiny_bert_dir).add([Document(0, "d2", "Rome", "Rome is the capital of Italy.")])
    for _ in range(2):  # the index as written, then opened again (a restart)
        pi = PhraseIndex(index)
        try:
            docs = _live_docs(pi)
            assert ("d2", "Rome is the capital of Italy.") in docs and not any("Seine" in t for _, t in docs)
            hits = _every_hit(pi)
            assert hits and {_doc_of(pi, s, p) for s, p in hits} == {"d1", "d2", "d3"}
            assert not any(
                "Seine" in pi.shards[s].doc_text(int(pi.shards[s].blocks[pi.shards[s].block_of(np.array([p]))[0], 0]))
                for s, p in hits
            )
            assert pi.bm25.search_scored("Seine flows", 10)[0].size == 0  # the old text is gone from BM25 too
            assert pi.bm25.search_scored("Italy", 10)[0].size == 1
        finally:
            pi.close()


def test_the_next_generation_lends_the_shared_shards_keeps_the_search_settings_and_checks_the_new_files(
    index, tiny_bert_dir
):
    current = PhraseIndex(index, nprobe=3, refine=3)
    _update(index, tiny_bert_dir).add([NEW])
    following = current.next_generation()
    try:
        assert following.manifest.generation == current.manifest.generation + 1
        assert len(following.shards) == len(current.shards) + 1  # the delta shard
        assert all(a is b for a, b in zip(following.shards, current.shards))  # lent, not reopened
        assert following.refine == 3 and following._search_params == (3, None)
        assert ("n1", NEW.text) in _live_docs(following)
    finally:
        following.close()
    _update(index, tiny_bert_dir).add([Document(1, "n2", "Quint", "Quint Ada was born in Porto.")])
    newest = max((p for p in index.glob("shard_*") if p.is_dir()), key=lambda p: p.name) / "token_ids.npy"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF  # the new delta shard's bytes damaged, its size kept: only its hash can tell
    newest.write_bytes(bytes(data))
    try:
        with pytest.raises(AppError, match="token_ids.npy"):
            current.next_generation()
    finally:
        current.close()


def test_a_deleted_document_is_never_returned(index, tiny_bert_dir):
    summary = run_delete(DeleteConfig(index=index, ids=["d3"]))
    assert (summary.deleted, summary.generation) == (1, 1)
    pi = PhraseIndex(index)
    try:
        assert "d3" not in {_doc_of(pi, s, p) for s, p in _every_hit(pi)}
        assert pi.bm25.search_scored("Marie Curie Warsaw", 10)[0].size == 0
        m = pi.manifest
        assert (m.counts.documents, m.counts.deleted_documents) == (len(CORPUS) - 1, 1) and m.counts.deleted_tokens > 0
    finally:
        pi.close()


def test_deleting_an_unknown_id_changes_nothing_and_names_it(index):
    before = (index / "manifest.json").read_bytes()
    with pytest.raises(AppError, match="'nope'") as err:
        run_delete(DeleteConfig(index=index, ids=["d1", "nope"]))
    assert err.value.kind == "not_found" and "nothing was deleted" in err.value.message
    assert (index / "manifest.json").read_bytes() == before


def test_ids_file_and_a_missing_one(index, tmp_path):
    (tmp_path / "ids.txt").write_text("d1\n\nd2\n")
    assert run_delete(DeleteConfig(index=index, ids_file=tmp_path / "ids.txt")).deleted == 2
    with pytest.raises(AppError, match="ids file .*missing.txt"):
        run_delete(DeleteConfig(index=index, ids_file=tmp_path / "missing.txt"))
    with pytest.raises(AppError, match="no document id given"):
        run_delete(DeleteConfig(index=index))


def test_one_update_may_not_name_a_document_twice(index, tiny_bert_dir):
    with pytest.raises(AppError, match="'n1' appears twice"):
        _update(index, tiny_bert_dir).add([NEW, NEW])
    assert Manifest.load(index).generation == 0


def test_an_update_refuses_empty_texts_and_unprintable_ids(index, tiny_bert_dir):
    """An empty document would have no rows (never replaced nor deleted); an id with a newline could not be
    deleted by URL or --ids-file: both refused before anything is written, by `indexer add` and HTTP alike."""
    for doc, what in (
        (Document(row=0, id="e1", title="", text="  "), "text is empty"),
        (Document(row=0, id="a\nb", title="", text="some text"), "control character"),
        (Document(row=0, id="trailing\n", title="", text="some text"), "control character"),
        (Document(row=0, id="", title="", text="some text"), "id is empty"),
    ):
        with pytest.raises(AppError, match=what) as err:
            _update(index, tiny_bert_dir).add([NEW, doc])
        assert err.value.kind == "validation" and "document 1" in err.value.message
    with pytest.raises(AppError, match="control character"):
        run_delete(DeleteConfig(index=index, ids=["d1", "x\x00y"]))
    assert Manifest.load(index).generation == 0


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_text_that_gives_no_token_is_refused_and_nothing_is_committed(index, tiny_bert_dir, where):
    """Control or format characters only (a text neither empty nor blank, but the tokenizer keeps nothing): it
    would be a document without rows, so it is refused naming it, wherever it sits in the update."""
    docs = [NEW, Document(row=0, id="n2", title="", text="Another new text.")]
    docs.insert(where, Document(row=0, id="ctl", title="", text="\x0f\ufeff\u200b"))
    before = sorted(p.name for p in index.iterdir())
    with pytest.raises(AppError, match=f"document {where} \\(id 'ctl'\\): its text gives no token") as err:
        _update(index, tiny_bert_dir).add(docs)
    assert err.value.kind == "validation" and err.value.field == f"documents[{where}].text"
    assert Manifest.load(index).generation == 0
    assert sorted(p.name for p in index.iterdir()) == before  # the delta shards written before the refusal are gone
    assert _update(index, tiny_bert_dir).add([d for d in docs if d.id != "ctl"]).added == 2


def test_a_blank_text_by_pythons_rules_is_refused_by_the_record_schema():
    """The record's pattern holds the separators str.strip removes and JSON Schema's \\s does not (\\x1c-\\x1f,
    \\x85): such a text fails validation as a schema says, not later as an empty text."""
    for blank in ("\x1f", "\x1c \x85", " \t"):
        with pytest.raises(ValidationError, match="text"):
            DocumentRecord(id="b", text=blank)
    assert DocumentRecord(id="b", text="\x1fa").text == "\x1fa"


@pytest.mark.parametrize(
    "record, problem",
    [
        ({"id": 7, "text": "An integer id."}, "id: Input should be a valid string"),
        ({"id": "n7", "text": None}, "text: Input should be a valid string"),
        ({"id": "n7", "text": "Text.", "title": 3}, "title: Input should be a valid string"),
        ({"id": "n\x01", "text": "Text."}, "id: String should match pattern"),
    ],
)
def test_indexer_add_validates_each_record_as_http_does(index, tiny_bert_dir, tmp_path, record, problem):
    """`indexer add` reads its corpus as corpus.readers.DocumentRecord, POST /admin/documents's record: an integer
    id or a null text is refused naming the file and the document, and nothing changes."""
    corpus = write_jsonl(tmp_path / "new.jsonl", [{"id": "ok", "text": "Fine text."}, record])
    with pytest.raises(AppError, match=re.escape(problem)) as err:
        run_add(AddConfig(index=index, corpus=corpus, model=tiny_bert_dir, device="cpu", dtype="fp32"))
    assert err.value.kind == "validation" and "new.jsonl: document 2" in err.value.message
    assert Manifest.load(index).generation == 0
    untitled = write_jsonl(tmp_path / "untitled.jsonl", [{"id": "ok", "text": "Fine text.", "title": None}])
    assert run_add(AddConfig(index=index, corpus=untitled, model=tiny_bert_dir, device="cpu", dtype="fp32")).added == 1


@pytest.mark.parametrize("kind", ["missing", "not_an_index"])
def test_changes_to_a_path_that_is_not_an_index_are_refused_without_a_trace(kind, tmp_path):
    """`indexer add|delete|compact --index X`: exit 2 naming X (an AppError), no lock file left in a stray directory."""
    root = tmp_path / "nowhere" if kind == "missing" else tmp_path
    corpus = write_jsonl(tmp_path / "new.jsonl", [{"id": "n1", "text": "New text."}])
    for run in (
        lambda: run_add(AddConfig(index=root, corpus=corpus)),
        lambda: run_delete(DeleteConfig(index=root, ids=["d1"])),
        lambda: run_compact(CompactConfig(index=root)),
    ):
        with pytest.raises(AppError, match=re.escape(str(root))) as err:
            run()
        assert err.value.kind == "validation" and "--index" in err.value.message
    assert not (root / "writer.lock").exists()


def test_an_update_encodes_with_the_index_model_only(index, tiny_roberta_dir):
    with pytest.raises(AppError, match="not the model the index"):
        IndexUpdate(index, encoder=Encoder(tiny_roberta_dir, device="cpu", dtype="fp32")).add([NEW])


def test_tombstones_and_delta_files_are_checked_at_open(index, tiny_bert_dir):
    _update(index, tiny_bert_dir).add([NEW, Document(1, "d1", "Allan", "Allan Peiper rides again.")])
    m = Manifest.load(index)
    tomb = index / m.tombstones.name
    data = json.loads(tomb.read_text())
    data["shards"] = {name: [999] for name in data["shards"]}
    tomb.write_text(json.dumps(data))
    with pytest.raises(AppError, match="tombstones"):
        PhraseIndex(index)
    tomb.write_text(json.dumps({"shards": json.loads(json.dumps(data["shards"]))}))
    token_ids = index / m.shards[-1].name / "token_ids.npy"
    raw = bytearray(token_ids.read_bytes())
    raw[-1] ^= 0xFF  # same size: only the sha256 sees it
    token_ids.write_bytes(bytes(raw))
    with pytest.raises(AppError, match="token_ids.npy"):
        PhraseIndex(index, verify=True)


def test_a_second_writer_is_refused_with_the_holder_named(index):
    with writer_lock(index, "indexer add"):
        with pytest.raises(AppError, match="another writer \\(indexer add, pid") as err:
            run_delete(DeleteConfig(index=index, ids=["d1"]))
        assert err.value.kind == "conflict"
    assert run_delete(DeleteConfig(index=index, ids=["d1"])).deleted == 1


def test_a_build_does_not_resume_over_an_updated_index(index, tiny_bert_dir, tiny_corpus):
    run_delete(DeleteConfig(index=index, ids=["d1"]))
    cfg = BuildConfig(corpus=tiny_corpus, out=index, model=tiny_bert_dir, block_tokens=16, shard_tokens=30)
    with pytest.raises(AppError, match="changed since its build .*indexer compact"):
        build_index(cfg)
    assert os.path.exists(index / Manifest.load(index).tombstones.name)


def test_a_change_stopped_by_its_check_commits_nothing_and_leaves_no_file(index, tiny_bert_dir):
    """`check` (a server's time limit or drain) raises between encoding batches: the manifest is unchanged and the
    delta shards written before the stop are removed; the next change works."""
    before, entries = Manifest.load(index), sorted(p.name for p in index.iterdir())
    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) > 2:  # past the first delta shard's batches: files of this change exist by now
            raise AppError("stopped", kind="timeout")

    docs = [
        Document(i, f"s{i}", "", f"Stopped document number {i} about Vexmoor harbour and its glimmers. " * 4)
        for i in range(12)
    ]
    update = IndexUpdate(index, model=tiny_bert_dir, device="cpu", dtype="fp32", check=check)
    with pytest.raises(AppError, match="stopped"):
        update.add(docs)
    assert len(calls) == 3
    assert Manifest.load(index) == before and sorted(p.name for p in index.iterdir()) == entries
    assert _update(index, tiny_bert_dir).add([NEW]).added == 1


def _descriptors_under(root) -> int:
    """How many of this process's open descriptors name a file under `root`."""
    inside, found = f"{root.resolve()}{os.sep}", 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith(inside)
        except OSError:  # the listing's own descriptor, closed since
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts the descriptors in /proc/self/fd")
def test_one_document_updates_served_one_after_the_other_hold_no_more_descriptors(index, tiny_bert_dir):
    """As a server serves them (service.updates): each update's generation opened beside the served one, which is
    closed. A small delta shard holds no descriptor (docs.arrow mapped without one, indexer.checksums.map_file; its
    BM25 file searched from memory, indexer.bm25.connect_read_only), so 12 updates leave the count where it was
    (it was two per delta shard: a server taking its 64th update held 148)."""
    served = PhraseIndex(index)
    at_open, encoder = _descriptors_under(index), _update(index, tiny_bert_dir).encoder
    try:
        for i in range(12):
            doc = Document(0, f"u{i}", "", f"Update {i} says Vexmoor harbour glimmers.")
            IndexUpdate(index, encoder=encoder, opened=served.shards_by_name()).add([doc])
            following = served.next_generation()
            served.close()
            served = following
        assert served.manifest == Manifest.load(index)  # the last generation is served
        assert _descriptors_under(index) <= at_open
        assert served.bm25 is not None and served.bm25.search_scored("Vexmoor harbour", 20)[0].size == 12
        assert {served.shards[-1 - i].doc_id(0) for i in range(12)} == {f"u{i}" for i in range(12)}
    finally:
        served.close()

"""The ONNX Runtime engine: the same vectors and logits as the torch path, exported once per model and
cached by fingerprint, refused where it cannot run."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from common.errors import AppError
from encoder import onnx_engine
from encoder.model import Encoder
from encoder.onnx_engine import CPU_DEFAULT, resolve_engine
from encoder.reader import Reader, ReaderInput
from training.reader_train import ReaderTrainConfig, ReaderTrainer

QUERIES = ["Paris is the capital of <mask> .", "The river <mask> flows through <mask> and Rouen ."]
BLOCK_TEXT = "Paris is the capital of France. The river Seine flows through Paris."


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture
def model_dir(tmp_path, tiny_bert_dir):
    out = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, out, ignore=shutil.ignore_patterns("onnx"))  # without exports other tests made
    return out


@pytest.mark.parametrize("name", ["tiny_bert_dir", "tiny_roberta_dir"])
def test_onnx_gives_the_torch_vectors_of_queries_and_blocks(name, request, tmp_path):
    from encoder.model import BlockInput

    model = tmp_path / "model"
    # with and without token types; without exports other tests made
    shutil.copytree(request.getfixturevalue(name), model, ignore=shutil.ignore_patterns("onnx"))
    torch_path = Encoder(model, device="cpu", dtype="fp32").for_inference()
    ids = np.asarray(torch_path.tokenizer(BLOCK_TEXT, add_special_tokens=False)["input_ids"])
    blocks = [BlockInput(ids=ids), BlockInput(ids=ids[:7], prefix_ids=ids[:2])]
    for engine in ("onnx", "openvino"):
        other = Encoder(model, device="cpu", dtype="fp32", engine=engine).for_inference()
        for want, got in zip(torch_path.encode_queries(QUERIES), other.encode_queries(QUERIES)):
            np.testing.assert_allclose(got.q_start, want.q_start, atol=1e-4)
            np.testing.assert_allclose(got.q_end, want.q_end, atol=1e-4)
        for want, got in zip(torch_path.encode_blocks(blocks), other.encode_blocks(blocks)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, atol=1e-4)


def test_the_export_is_made_once_and_named_by_the_models_fingerprint(model_dir, monkeypatch):
    Encoder(model_dir, device="cpu", engine="onnx-int8").for_inference()
    files = list((model_dir / "onnx").glob("*.onnx"))
    assert len(files) == 1 and files[0].name.startswith("encoder-onnx-int8-")
    monkeypatch.setattr(onnx_engine, "write_onnx", lambda *a: pytest.fail("exported again"))
    again = Encoder(model_dir, device="cpu", engine="onnx-int8").for_inference()
    assert again.onnx_path == files[0]
    cfg = (model_dir / "config.json").read_text()
    (model_dir / "config.json").write_text(cfg.replace("}", ', "note": "changed"}', 1))
    monkeypatch.undo()
    Encoder(model_dir, device="cpu", engine="onnx-int8").for_inference()  # another fingerprint: a new export
    assert len(list((model_dir / "onnx").glob("*.onnx"))) == 2


def test_openvino_caches_its_compiled_model_beside_the_export(model_dir, monkeypatch):
    first = Encoder(model_dir, device="cpu", engine="openvino").for_inference()
    cache = model_dir / "onnx" / onnx_engine.OV_CACHE
    blobs = sorted(p.name for p in cache.iterdir())
    assert blobs  # the compiled model
    again = Encoder(model_dir, device="cpu", engine="openvino").for_inference()  # loaded from the cache
    assert sorted(p.name for p in cache.iterdir()) == blobs
    for a, b in zip(first.encode_queries(QUERIES), again.encode_queries(QUERIES)):
        np.testing.assert_array_equal(a.q_start, b.q_start)
    (model_dir / "onnx" / "blocked").write_text("a file where the cache folder would be")
    monkeypatch.setattr(onnx_engine, "OV_CACHE", "blocked")  # a cache it cannot make: compiled without it
    blocked = Encoder(model_dir, device="cpu", engine="openvino").for_inference()
    np.testing.assert_array_equal(blocked.encode_queries(QUERIES)[0].q_start, first.encode_queries(QUERIES)[0].q_start)


def test_int8_weights_keep_the_vectors_close(model_dir):
    want = Encoder(model_dir, device="cpu", dtype="fp32").for_inference().encode_queries(QUERIES)
    got = Encoder(model_dir, device="cpu", engine="onnx-int8").for_inference().encode_queries(QUERIES)
    for w, g in zip(want, got):
        assert cosines(w.q_start, g.q_start).min() > 0.9
        assert not np.array_equal(w.q_start, g.q_start)  # quantized: close, not equal


def test_a_read_only_model_directory_exports_into_the_user_cache(model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(onnx_engine.os, "access", lambda path, mode: False)
    encoder = Encoder(model_dir, device="cpu", engine="onnx").for_inference()
    assert encoder.onnx_path.parent == tmp_path / "cache" / "npm-retrieval" / "onnx"
    assert not (model_dir / "onnx").exists()


def test_reader_logits_agree_between_engines(model_dir, tmp_path, monkeypatch):
    trainer = ReaderTrainer(
        ReaderTrainConfig(
            examples=[write_example(model_dir, tmp_path)],
            out=tmp_path / "run",
            init=model_dir,
            epochs=1,
            batch_size=1,
            device="cpu",
        )
    )
    reader_dir = trainer.run()
    encoder = Encoder(model_dir, device="cpu", dtype="fp32")
    ids, at = encoder.query_layout(QUERIES[0])
    tok = encoder.tokenizer
    windows = [np.asarray(tok(t, add_special_tokens=False)["input_ids"]) for t in ("Paris is in France", "and Rome")]
    items = [ReaderInput(ids, at[0], windows), ReaderInput(ids, at[0], windows[:1])]
    want = Reader(reader_dir, device="cpu", dtype="fp32").logits(items)
    for engine in ("onnx", "openvino"):
        reader = Reader(reader_dir, device="cpu", dtype="fp32", engine=engine)
        assert reader.model is None  # the torch copy is freed
        got = reader.logits(items)
        for (ws, we), (gs, ge) in zip(want, got):
            np.testing.assert_allclose(gs, ws, atol=1e-3)
            np.testing.assert_allclose(ge, we, atol=1e-3)
    assert (reader_dir / "onnx").is_dir()
    from encoder import reader_model

    monkeypatch.setattr(reader_model, "load_model", lambda *a, **k: pytest.fail("the torch copy was built"))
    cached = Reader(reader_dir, device="cpu", dtype="fp32", engine="openvino")  # the export there: no torch model
    np.testing.assert_array_equal(cached.logits(items)[0][0], reader.logits(items)[0][0])


def write_example(model_dir, tmp_path):
    import json

    tok = Encoder(model_dir, device="cpu", dtype="fp32")
    ids, at = tok.query_layout(QUERIES[0])
    window = tok.tokenizer("Paris is the capital of France", add_special_tokens=False)["input_ids"]
    path = tmp_path / "ex.jsonl"
    path.write_text(
        json.dumps(
            {
                "query_ids": ids,
                "mask_at": at[0],
                "windows": [window],
                "flags": [[3] * len(window)],
                "gold": [[0, len(window) - 1, len(window) - 1]],
            }
        )
        + "\n"
    )
    return path


def test_engines_are_checked_against_the_device():
    assert resolve_engine("auto", "cpu", "encoder") == CPU_DEFAULT["encoder"] == "torch"
    assert resolve_engine("auto", "cpu", "reader") == CPU_DEFAULT["reader"] == "openvino"
    assert resolve_engine("auto", "cuda", "reader") == "torch"
    assert resolve_engine("onnx", "cpu", "encoder") == "onnx"
    assert resolve_engine("openvino", "cpu", "encoder") == "openvino"
    with pytest.raises(AppError, match="runs on the CPU"):
        resolve_engine("onnx-int8", "cuda", "reader")
    with pytest.raises(AppError, match="engine must be one of"):
        resolve_engine("tensorrt", "cpu", "encoder")


def test_export_onnx_command_exports_ahead_and_names_bad_engines(model_dir, tmp_path, monkeypatch, capsys):
    from training.cli import main as cli_main

    monkeypatch.setattr("encoder.reader.BUNDLED_READER", tmp_path / "no_reader")
    with pytest.raises(SystemExit) as done:
        cli_main(["export-onnx", "--model", str(model_dir), "--engine", "onnx"])
    assert done.value.code == 0
    assert [p.name.split("-")[:2] for p in (model_dir / "onnx").glob("*.onnx")] == [["encoder", "onnx"]]
    with pytest.raises(SystemExit) as done:
        cli_main(["export-onnx", "--model", str(model_dir), "--engine", "fp8"])
    assert done.value.code != 0
    assert "--engine must be auto, openvino, onnx or onnx-int8" in capsys.readouterr().err


@pytest.mark.slow  # starts a process
def test_exports_started_together_make_one_file(model_dir, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    calls = []
    real = onnx_engine.write_onnx

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(onnx_engine, "write_onnx", counted)
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda _: Encoder(model_dir, device="cpu", engine="onnx").for_inference(), range(2)))
    assert len(calls) == 1  # the second waited for the first's file instead of racing it
    assert done[0].onnx_path == done[1].onnx_path and done[0].onnx_path.is_file()


def test_an_encoder_on_an_onnx_engine_loads_no_torch_model_once_exported(model_dir):
    first = Encoder(model_dir, device="cpu", dtype="fp32", engine="openvino", lean=True).for_inference()
    assert "model" in first.__dict__  # loaded to export it
    again = Encoder(model_dir, device="cpu", dtype="fp32", engine="openvino", lean=True).for_inference()
    vectors = again.encode_queries(QUERIES)
    assert "model" not in again.__dict__ and again.onnx_path == first.onnx_path  # the export there: no torch model
    assert again.dim == first.dim and again.max_length == first.max_length
    want = Encoder(model_dir, device="cpu", dtype="fp32").for_inference().encode_queries(QUERIES)
    for w, g in zip(want, vectors):
        np.testing.assert_allclose(g.q_start, w.q_start, atol=1e-4)
    table = again.model.embeddings.word_embeddings.weight.detach().numpy()  # (loads it now: the synonyms' table,
    assert (
        again.word_neighbours.words
        and np.allclose(  # read from the file, is the model's)
            again.word_neighbours._unit[:5].astype(np.float32),
            table[again.word_neighbours.ids[:5]]
            / np.linalg.norm(table[again.word_neighbours.ids[:5]], axis=1)[:, None],
            atol=1e-3,
        )
    )


NO_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError("the server imported " + name)
sys.meta_path.insert(0, NoTorch())
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest, ScoreRequest
engine = FillEngine.open(EngineConfig(index=sys.argv[1], reader_dir=sys.argv[2], engine="openvino"))
fill = engine.fill(FillRequest(text="Marie Curie was born in <mask> .", mode="hybrid"))
score = engine.score(ScoreRequest(text="Marie Curie was born in <mask> .", choices=["Warsaw", "Rome"], synonyms=2))
print(engine.encoder.engine, engine.reader.engine, fill.masks[0].candidates[0].phrase, score.masks[0].predicted)
"""


def test_a_server_on_openvino_fills_and_scores_without_importing_torch(tmp_path):
    """The bundled encoder and reader on OpenVINO (exported here first, as `encoder export-onnx` does at
    setup), opened and used as a server does, in a process where importing torch or transformers fails."""
    import subprocess
    import sys

    from encoder.reader import BUNDLED_READER
    from indexer.build import BuildConfig, build_index
    from tests.conftest import CORPUS, write_jsonl

    Encoder(device="cpu", engine="openvino", lean=True).for_inference()
    Reader(BUNDLED_READER, device="cpu", engine="openvino")
    build_index(BuildConfig(corpus=write_jsonl(tmp_path / "corpus.jsonl", CORPUS), out=tmp_path / "idx"))
    run = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(tmp_path / "idx"), str(BUNDLED_READER)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["openvino", "openvino", "Warsaw", "Warsaw"]

"""Shared fixtures: tiny randomly initialised encoders saved to temp dirs (no download) and a tiny index."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

CORPUS = [
    {
        "id": "d1",
        "title": "Allan Peiper",
        "text": "Allan Peiper (born 26 April 1960) is an Australian cyclist. He was born in Alexandra, Victoria.",
    },
    {"id": "d2", "title": "Paris", "text": "Paris is the capital of France. The Seine flows through Paris."},
    {"id": "d3", "title": "", "text": "Marie Curie was born in Warsaw in 1867. She died in Passy, France, in 1934."},
    {"id": "d4", "title": "Empty", "text": ""},
]


@pytest.fixture(scope="session", autouse=True)
def no_bundled_reader(tmp_path_factory):
    """In-process engines of this suite fill without the bundled reader unless a test names it
    (`reader_dir=BUNDLED_READER`): the tiny indexes test the retrieval path; the reader has its own tests
    (tests/fill/test_reading.py, the demo's in tests/encoder/test_default_model.py). Servers the suite
    starts as processes get the real default."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fill.loading.BUNDLED_READER", tmp_path_factory.mktemp("no_bundled_reader"))
        yield


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def assert_same_fields(a, b) -> None:
    """Two dataclasses equal field for field: arrays with their dtype and shape, dataclasses inside them the same
    way, everything else by ==."""
    from dataclasses import fields, is_dataclass

    import numpy as np

    assert type(a) is type(b)
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f.name
        elif is_dataclass(x):
            assert_same_fields(x, y)
        else:
            assert x == y, f.name


def run_module(module: str, *args: str) -> str:
    """`python -m MODULE ARGS` from the repository root (bench, recipes, tools); its standard output (it must
    succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _minilm_dir() -> Path:
    from encoder.model_files import base_model_dir

    return base_model_dir()


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 BERT with the real uncased WordPiece tokenizer of the default model."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(cfg).save_pretrained(out)
    AutoTokenizer.from_pretrained(str(_minilm_dir())).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    """A 2-layer RoBERTa with a byte-level BPE tokenizer trained here on a few sentences."""
    import torch
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    out = tmp_path_factory.mktemp("tiny_roberta")
    bpe = ByteLevelBPETokenizer()
    texts = [r["text"] for r in CORPUS] * 5 + ["The quick brown fox jumps over the lazy dog."]
    bpe.train_from_iterator(
        texts, vocab_size=400, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    bpe._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True)
    tok = RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )
    tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = RobertaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    RobertaModel(cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    """The tiny BERT-vocabulary encoder, loaded once a module (fp32 on the CPU)."""
    from encoder.model import Encoder

    return Encoder(tiny_bert_dir, device="cpu", dtype="fp32")


@pytest.fixture(scope="module")
def roberta(tiny_roberta_dir):
    """The tiny RoBERTa-vocabulary encoder (byte-level BPE), loaded once a module."""
    from encoder.model import Encoder

    return Encoder(tiny_roberta_dir, device="cpu", dtype="fp32")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", CORPUS)


@pytest.fixture(scope="session")
def tiny_index(tmp_path_factory, tiny_bert_dir, tiny_corpus) -> Path:
    """An index over CORPUS built with the tiny BERT, 3 shards (small --shard-tokens), with int8 stored vectors
    (the default; the files the integrity and checksum tests damage; without stored vectors:
    tests/indexer/test_recode.py and test_ann_codes.py)."""
    from indexer.build import BuildConfig, build_index

    out = tmp_path_factory.mktemp("index") / "idx"
    build_index(
        BuildConfig(
            corpus=tiny_corpus, out=out, model=tiny_bert_dir, block_tokens=16, shard_tokens=30, vector_dtype="int8"
        )
    )
    return out


@pytest.fixture()
def fresh_copy(tmp_path):
    def copy(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        return dst

    return copy

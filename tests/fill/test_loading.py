"""Which models an engine serves an index with (fill.loading): the index's own query model encodes the queries
(without a flag), `query_model="off"` or a directory overrides, the corpus encoder still encodes the documents of a
live add, and a query model made for another corpus encoder is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from common.errors import AppError
from corpus.readers import Document
from encoder.model import Encoder
from encoder.query_model import CARD, INDEX_QUERY_MODEL, QueryModelCard
from fill.config import EngineConfig
from fill.engine import FillEngine
from indexer.manifest import Manifest
from indexer.update import IndexUpdate


def make_query_model(index: Path, tiny_bert_dir: Path, out: Path, fingerprint: str | None = None) -> Path:
    """A query model for the index: the tiny BERT with its weights changed, and a card naming the index's encoder."""
    from transformers import BertModel

    model = BertModel.from_pretrained(str(tiny_bert_dir))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=generator))
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_bert_dir / name).is_file():
            shutil.copy(tiny_bert_dir / name, out / name)
    card = QueryModelCard(corpus_fingerprint=fingerprint or Manifest.load(index).model.fingerprint, steps=3)
    (out / CARD).write_text(card.model_dump_json(), encoding="utf-8")
    return out


@pytest.fixture()
def paired(tiny_index, fresh_copy, tiny_bert_dir):
    index = fresh_copy(tiny_index)
    make_query_model(index, tiny_bert_dir, index / INDEX_QUERY_MODEL)
    return index


def test_the_index_own_query_model_encodes_the_queries(paired, tiny_bert_dir):
    engine = FillEngine.open(EngineConfig(index=paired, device="cpu"))
    off = FillEngine.open(EngineConfig(index=paired, device="cpu", query_model="off"))
    try:
        assert engine.encoder.model_dir == paired / INDEX_QUERY_MODEL
        assert off.encoder.model_dir == tiny_bert_dir and off.models is not None and off.models.corpus is None
        text = "Marie Curie was born in <mask> ."
        (tuned,), (plain,) = engine.encoder.encode_queries([text]), off.encoder.encode_queries([text])
        assert not np.allclose(tuned.q_start, plain.q_start, atol=1e-3)
        assert engine.fill(_request(text)).masks[0].candidates  # it fills
        info = engine.describe()
        assert info["query_model"]["name"] == INDEX_QUERY_MODEL and info["query_model"]["steps"] == 3
        assert off.describe()["query_model"] is None and info["model"]["name"] == tiny_bert_dir.name
        assert engine.models is not None and engine.models.corpus is not None
        assert not engine.models.corpus.loaded  # loaded only when an update needs it
    finally:
        engine.close()
        off.close()


def test_a_live_add_is_encoded_by_the_corpus_encoder(paired, tiny_bert_dir):
    engine = FillEngine.open(EngineConfig(index=paired, device="cpu"))
    try:
        corpus = engine.corpus_encoder
        assert corpus.model_dir == tiny_bert_dir and corpus is not engine.encoder
        IndexUpdate(paired, encoder=corpus).add([Document(0, "new", "", "Alan Turing was born in London.")])
    finally:
        engine.close()
    manifest = Manifest.load(paired)
    delta = manifest.shards[-1]
    stored = np.load(paired / delta.name / "vectors.npy").astype(np.float32)
    plain = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    ids = np.load(paired / delta.name / "token_ids.npy")
    from encoder.model import BlockInput

    (expected,) = plain.encode_blocks([BlockInput(ids=np.asarray(ids, dtype=np.int64))])
    scales = np.load(paired / delta.name / "scales.npy").astype(np.float32)
    assert np.allclose(stored * scales[:, None], expected, atol=0.05 * np.abs(expected).max())


def test_a_query_model_for_another_corpus_encoder_is_refused_naming_both(tiny_index, fresh_copy, tiny_bert_dir):
    index = fresh_copy(tiny_index)
    make_query_model(index, tiny_bert_dir, index / INDEX_QUERY_MODEL, fingerprint="cd" * 32)
    fingerprint = Manifest.load(index).model.fingerprint
    with pytest.raises(AppError, match=rf"cdcdcdcdcdcd.*{fingerprint[:12]}"):
        FillEngine.open(EngineConfig(index=index, device="cpu"))
    engine = FillEngine.open(EngineConfig(index=index, device="cpu", query_model="off"))  # the way out it names
    engine.close()


def test_a_query_model_directory_overrides_and_must_have_a_card(tiny_index, fresh_copy, tiny_bert_dir, tmp_path):
    index = fresh_copy(tiny_index)
    other = make_query_model(index, tiny_bert_dir, tmp_path / "qm")
    engine = FillEngine.open(EngineConfig(index=index, device="cpu", query_model=str(other)))
    try:
        assert engine.encoder.model_dir == other
    finally:
        engine.close()
    (other / CARD).unlink()
    with pytest.raises(AppError, match="query_model.json"):
        FillEngine.open(EngineConfig(index=index, device="cpu", query_model=str(other)))


def _request(text: str):
    from fill.schemas import FillRequest

    return FillRequest.model_validate(json.loads(json.dumps({"text": text, "mode": "dense"})))

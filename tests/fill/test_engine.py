"""fill.engine.FillEngine's own API beyond the fill steps (those: test_engine_bruteforce, test_modes)."""

from __future__ import annotations

from corpus.readers import Document
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.update import IndexUpdate


def test_the_next_generation_serves_an_update_with_the_same_models(tiny_index, fresh_copy, tiny_bert_dir):
    root = fresh_copy(tiny_index)
    engine = FillEngine.open(EngineConfig(index=root, device="cpu", dtype="fp32", reader_dir=None, use_reader=False))
    text = "Zorblax Quint was born in <mask> ."
    request = FillRequest(text=text, mode="restricted", top_k=100, evidence=1)

    def docs(result) -> set[str]:
        return {e.doc_id for m in result.masks for c in m.candidates for e in c.evidence}

    before = engine.fill(request)
    IndexUpdate(root, encoder=engine.encoder).add([Document(0, "zq", "Zorblax Quint",
                                                            "Zorblax Quint was born in Vexmoor harbour.")])
    following = engine.next_generation()
    try:
        assert (following.encoder, following.scoring, following.reader) == (engine.encoder, engine.scoring,
                                                                             engine.reader)
        assert following.index.manifest.generation == engine.index.manifest.generation + 1
        assert "zq" not in docs(before) and "zq" in docs(following.fill(request))  # BM25 finds the new block
    finally:
        following.close()
        engine.close()

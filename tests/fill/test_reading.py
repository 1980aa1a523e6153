"""fill.reading and the engine with a reader: the joint span softmax over the window spans, the re-ranking,
a trained reader in the fill path, switched off per request, and readers the engine refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import AppError
from encoder.reader import Reader, ReadingSpec, TitleIds
from encoder.reader_files import ReaderCard, vocab_fingerprint
from encoder.reader_model import load_model, save_reader
from evaluation.reader_data import examples
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.ranker import RankedMask
from fill.reading import joint_pool, plan_reading, rerank
from fill.schemas import FillOptions, FillRequest
from fill.windows import mask_windows, reader_parts, window_spans
from training.reader_train import ReaderTrainConfig, train_reader

QUERY = "Marie Curie was born in <mask> ."


@pytest.fixture(scope="module")
def engine(tiny_index):
    e = FillEngine.open(EngineConfig(index=tiny_index, use_reader=False))
    yield e
    e.close()


def retrieved(engine: FillEngine, text: str = QUERY, **options) -> tuple[RankedMask, list[int], int]:
    planned = engine.plan(FillRequest(text=text, **options))
    ranked, _ = engine.retrieve(engine.prepare([planned])[0], read=True)
    return ranked[0], planned.ids, planned.mask_at[0]


def random_reading(engine: FillEngine, phrases: int, seed: int, spread: float = 1.0):
    """The retrieval ranking of QUERY, its window spans and random reader logits per window token."""
    ranked, _, _ = retrieved(engine)
    shards = engine.shards
    spans = window_spans(shards, mask_windows(ranked, phrases=phrases, window=3, budget=200), max_len=4)
    rng = np.random.default_rng(seed)
    n = len(spans.starts)
    return ranked, spans, rng.standard_normal(n) * spread, rng.standard_normal(n) * spread


def test_joint_pool_is_the_softmax_of_start_plus_end_over_all_window_spans(engine):
    _, spans, start, end = random_reading(engine, phrases=4, seed=0)
    pool = joint_pool(reader_parts(spans, start, end))
    index = {(int(s), int(p)): i for i, (s, p) in enumerate(zip(spans.shard_of, spans.starts))}
    want = np.concatenate(
        [
            [start[index[(s, a)]] + end[index[(s, b)]] for a, b in zip(f, last)]
            for s, f, last in zip(spans.shard_nos, spans.first, spans.last)
        ]
    )
    want = np.exp(want - want.max())
    np.testing.assert_allclose(pool.score, want / want.sum(), rtol=1e-9)


def test_rerank_weight_moves_the_ranking_from_the_reader_to_the_retrieval(engine):
    ranked, spans, start, end = random_reading(engine, phrases=8, seed=1, spread=3.0)
    pool = joint_pool(reader_parts(spans, start, end))
    options = FillOptions(top_k=3)
    reader_only = rerank(pool, ranked, 0.0, options)
    assert 0.0 < sum(p.value for p in reader_only.shown) <= 1.0 + 1e-9  # values are shares of all phrases
    values = [p.value for p in reader_only.shown]
    assert values == sorted(values, reverse=True)
    follow = rerank(pool, ranked, 50.0, options)
    retrieval_order = [p.text for p in ranked.shown]
    got = [p.text for p in follow.shown]
    assert got == sorted(got, key=retrieval_order.index)  # the retrieval's order among the window phrases


@pytest.fixture(scope="module")
def trained_reader(tmp_path_factory, engine, tiny_bert_dir):
    """A reader trained on the tiny index to read Warsaw where Curie was born (the data path of
    recipes/train_reader.sh: fill-reader-data's examples, then encoder train-reader)."""
    root = tmp_path_factory.mktemp("reader")
    card = ReaderCard(vocab=vocab_fingerprint(engine.encoder.tokenizer), window=4, phrases=8, max_tokens=64)
    spec = ReadingSpec(card, 1, 128)
    probes = [{"query": QUERY, "answers": ["Warsaw"]}]
    rows = examples(engine, probes, spec, FillOptions())
    assert rows and rows[0]["gold"], "the tiny index's windows hold Warsaw"
    (root / "ex.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return train_reader(
        ReaderTrainConfig(
            examples=[root / "ex.jsonl"],
            out=root / "run",
            init=tiny_bert_dir,
            epochs=30,
            batch_size=1,
            lr=3e-3,
            warmup=0.0,
            device="cpu",
            window=4,
            phrases=8,
            max_tokens=64,
        )
    )


def test_a_trained_reader_puts_the_supported_span_first(engine, trained_reader):
    plain = engine.fill(FillRequest(text=QUERY)).masks[0].candidates
    assert plain[0].phrase != "Warsaw" and "Warsaw" in [c.phrase for c in plain]  # retrieval alone ranks it lower
    with_reader = FillEngine(engine.encoder, engine.index, engine.scoring, Reader(trained_reader, device="cpu"))
    result = with_reader.fill(FillRequest(text=QUERY))
    assert result.masks[0].candidates[0].phrase == "Warsaw"
    assert result.filled == "Marie Curie was born in Warsaw ."
    assert result.timings_ms["read"] > 0
    evidence = result.masks[0].candidates[0].evidence[0]
    assert evidence.context and "Warsaw" in evidence.context


def test_reader_switched_off_per_request_fills_as_without_reader(engine, trained_reader):
    with_reader = FillEngine(engine.encoder, engine.index, engine.scoring, Reader(trained_reader, device="cpu"))
    off = with_reader.fill(FillRequest(text=QUERY, reader=False))
    plain = engine.fill(FillRequest(text=QUERY))
    assert off.masks == plain.masks
    assert off.timings_ms["read"] == 0.0


@pytest.mark.parametrize("engine_name", ["openvino", "onnx", "onnx-int8"])
def test_the_onnx_engines_fill_as_the_torch_path(tiny_index, trained_reader, engine_name):
    opened = {
        name: FillEngine.open(EngineConfig(index=tiny_index, reader_dir=trained_reader, dtype="fp32", engine=name))
        for name in ("torch", engine_name)
    }
    try:
        want, got = (opened[name].fill(FillRequest(text=QUERY)) for name in ("torch", engine_name))
        assert opened[engine_name].encoder.engine == engine_name and opened[engine_name].reader.engine == engine_name
        assert got.filled == want.filled == "Marie Curie was born in Warsaw ."
        assert [c.phrase for c in got.masks[0].candidates[:3]] == [c.phrase for c in want.masks[0].candidates[:3]]
    finally:
        for e in opened.values():
            e.close()


def test_reader_asked_of_an_engine_without_one_is_a_validation_error(engine):
    with pytest.raises(AppError, match="no reader") as err:
        engine.plan(FillRequest(text=QUERY, reader=True))
    assert err.value.kind == "validation"


def test_a_reader_of_another_vocabulary_is_refused(tmp_path, tiny_index, tiny_roberta_dir):
    model, tokenizer = load_model(tiny_roberta_dir)
    save_reader(model, tokenizer, ReaderCard(vocab=vocab_fingerprint(tokenizer)), tmp_path)
    with pytest.raises(AppError, match="another vocabulary"):
        FillEngine.open(EngineConfig(index=tiny_index, reader_dir=tmp_path))
    with pytest.raises(AppError, match="does not exist"):
        FillEngine.open(EngineConfig(index=tiny_index, reader_dir=tmp_path / "missing"))


def test_no_room_beside_a_long_query_reads_nothing(engine):
    ranked, ids, mask_at = retrieved(engine)
    card = ReaderCard(vocab="x", max_tokens=64)
    assert plan_reading(ReadingSpec(card, 1, len(ids) + 8), engine.shards, ids, mask_at, ranked, 10) is None
    assert plan_reading(ReadingSpec(card, 1, 512), engine.shards, ids, mask_at, ranked, 10) is not None


def test_a_reader_of_titles_gets_each_windows_title_ids(engine):
    ranked, ids, mask_at = retrieved(engine, "The Seine flows through <mask> .", mode="restricted")
    tok = engine.encoder.tokenizer
    card = ReaderCard(vocab="x", max_tokens=128, title_tokens=3)
    plain = plan_reading(ReadingSpec(card, 1, 512), engine.shards, ids, mask_at, ranked, 10)
    assert plain.item.titles is None  # no tokenizer for titles: none read
    reading = plan_reading(ReadingSpec(card, 1, 512, TitleIds(tok, 3)), engine.shards, ids, mask_at, ranked, 10)
    assert len(reading.item.titles) == len(reading.windows)
    assert [t.tolist() for t in reading.item.titles] == [
        tok(t, add_special_tokens=False)["input_ids"][:3] for t in reading.spans.titles
    ]
    assert any(len(t) for t in reading.item.titles)


def test_the_bundled_reader_is_the_default_and_can_be_switched_off(tiny_index, monkeypatch):
    from encoder.reader import BUNDLED_READER
    from fill.loading import open_reader

    if not (BUNDLED_READER / "reader.json").is_file():
        pytest.skip("no bundled reader in this checkout")
    monkeypatch.setattr("fill.loading.BUNDLED_READER", BUNDLED_READER)  # undo the suite's no_bundled_reader
    engine = FillEngine.open(EngineConfig(index=tiny_index))
    try:
        assert engine.reader is not None and engine.reader.dir == BUNDLED_READER
        info = engine.describe()["reader"]
        assert info["on"] and info["name"] == BUNDLED_READER.name and info["card"]["phrases"] >= 1
        assert open_reader(EngineConfig(index=tiny_index, use_reader=False), engine.encoder) is None
    finally:
        engine.close()


def test_the_reader_is_built_on_the_encoders_inference_thread(tiny_index, trained_reader, monkeypatch):
    """A torch op run from another thread starts a second OpenMP team beside the encoder's (see open_reader)."""
    import threading

    from fill import loading

    built_on = []

    def recording(*args, **kwargs):
        built_on.append(threading.current_thread())
        return Reader(*args, **kwargs)

    monkeypatch.setattr(loading, "Reader", recording)
    engine = FillEngine.open(EngineConfig(index=tiny_index, reader_dir=trained_reader))
    try:
        assert engine.reader is not None and len(built_on) == 1
        assert built_on[0] is not threading.current_thread()
        assert engine.encoder.on_thread(threading.current_thread) is built_on[0]
    finally:
        engine.close()


def test_the_deadline_is_kept_between_the_readers_passes(engine, trained_reader, monkeypatch):
    """A request whose deadline passes during the reader's first pass stops before the next (READ_BATCH masks a
    pass): a 504 within one pass of the setting, not after reading all 16 masks."""
    from common.errors import AppError
    from fill.deadline import Deadline
    from fill.reading import READ_BATCH

    reader = Reader(trained_reader, device="cpu")
    with_reader = FillEngine(engine.encoder, engine.index, engine.scoring, reader)
    text = " ".join(["born in <mask> ."] * 16)
    passes = []
    deadline = Deadline(3600.0)
    real = reader.logits

    def slow_pass(items):
        passes.append(len(items))
        deadline.at = 0.0  # this pass took the rest of the request's time
        return real(items)

    monkeypatch.setattr(reader, "logits", slow_pass)
    with pytest.raises(AppError) as info:
        with_reader.handle(FillRequest(text=text), deadline=deadline)
    assert info.value.kind == "timeout" and "read stage" in info.value.message, info.value.message
    assert passes == [READ_BATCH] and 16 > READ_BATCH
    monkeypatch.setattr(reader, "logits", real)
    assert len(with_reader.fill(FillRequest(text=text)).masks) == 16  # without a deadline: every mask read

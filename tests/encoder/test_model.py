"""Tests for encoder.model and encoder.device on the tiny BERT and RoBERTa fixtures (CPU, fp32)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from common.errors import AppError
from encoder.device import choose_device, choose_dtype
from encoder.model import WIDTH_STEP, BlockInput, Encoder, padded_width

MODELS = ["bert", "roberta"]


@pytest.fixture(scope="module")
def encoders(tiny_bert_dir, tiny_roberta_dir) -> dict[str, Encoder]:
    return {
        "bert": Encoder(tiny_bert_dir, device="cpu", dtype="fp32"),
        "roberta": Encoder(tiny_roberta_dir, device="cpu", dtype="fp32"),
    }


def _ids(enc: Encoder, text: str) -> np.ndarray:
    return np.asarray(enc.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int32)


def _by_hand(enc: Encoder, ids: list[int], types: list[int] | None = None) -> np.ndarray:
    """The model's last hidden state for one unpadded sequence, straight from transformers."""
    kwargs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if types is not None:
        kwargs["token_type_ids"] = torch.tensor([types])
    with torch.inference_mode():
        return enc.model(**kwargs).last_hidden_state[0].float().numpy()


# ---------------------------------------------------------------- loading


@pytest.mark.parametrize("which", MODELS)
def test_loads_on_cpu(which, encoders):
    enc = encoders[which]
    assert enc.device.type == "cpu"
    assert enc.dtype == torch.float32
    assert enc.dim == 32
    assert enc.max_length == 128
    assert not enc.model.training
    assert next(enc.model.parameters()).dtype == torch.float32
    assert enc.tokenizer.mask_token_id is not None
    expected_type = 1 if which == "bert" else 0
    assert enc.template.second_type_id == expected_type
    assert enc.block_overhead == 2
    assert enc.pair_overhead == (3 if which == "bert" else 4)


def test_dir_without_config_raises(tmp_path):
    with pytest.raises(AppError, match="config.json"):
        Encoder(tmp_path, device="cpu")


def test_dir_with_corrupt_config_raises(tmp_path, tiny_bert_dir):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_bert_dir, bad)
    (bad / "config.json").write_text("{this is not json", encoding="utf-8")
    with pytest.raises(AppError, match=re.escape(str(bad))):
        Encoder(bad, device="cpu")


def test_dir_with_config_but_no_weights_raises(tmp_path, tiny_bert_dir):
    import shutil

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(tiny_bert_dir / "config.json", bare / "config.json")
    with pytest.raises(AppError):
        Encoder(bare, device="cpu")


# ---------------------------------------------------------------- blocks


@pytest.mark.parametrize("which", MODELS)
def test_encode_blocks_shapes_and_dtype(which, encoders):
    enc = encoders[which]
    ids_a = _ids(enc, "Paris is the capital of France.")
    ids_b = _ids(enc, "Marie Curie was born in Warsaw in 1867.")
    out = enc.encode_blocks([BlockInput(ids_a), BlockInput(ids_b)])
    assert len(out) == 2
    for vecs, ids in zip(out, (ids_a, ids_b)):
        assert vecs.dtype == np.float32
        assert vecs.shape == (len(ids), enc.dim)
        assert np.isfinite(vecs).all()


def test_encode_blocks_here_runs_on_the_calling_thread_with_the_same_vectors(encoders, monkeypatch):
    enc = encoders[MODELS[0]]
    blocks = [BlockInput(_ids(enc, "Paris is the capital of France.")), BlockInput(_ids(enc, "Ada was born."))]
    want = enc.encode_blocks(blocks)
    monkeypatch.setattr(enc, "on_thread", lambda *a: pytest.fail("the inference thread was used"))
    got = enc.encode_blocks(blocks, here=True)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("which", MODELS)
def test_encode_blocks_equals_model_by_hand(which, encoders):
    """No prefix: [CLS] ids [SEP]; with prefix: [CLS] title [SEP] ids [SEP] (with segment ids for BERT)."""
    enc = encoders[which]
    t = enc.template
    ids = _ids(enc, "The Seine flows through Paris.")
    title = _ids(enc, "Paris")
    plain, titled = enc.encode_blocks([BlockInput(ids), BlockInput(ids, prefix_ids=title)])

    seq = t.single_prefix + ids.tolist() + t.single_suffix
    ref = _by_hand(enc, seq, [0] * len(seq))
    first = len(t.single_prefix)
    np.testing.assert_allclose(plain, ref[first : first + len(ids)], atol=1e-5, rtol=1e-4)

    head = t.pair_prefix + title.tolist() + t.pair_mid
    tail = ids.tolist() + t.pair_suffix
    ref = _by_hand(enc, head + tail, [0] * len(head) + [t.second_type_id] * len(tail))
    np.testing.assert_allclose(titled, ref[len(head) : len(head) + len(ids)], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("which", MODELS)
def test_prefix_changes_vectors_not_shape(which, encoders):
    enc = encoders[which]
    ids = _ids(enc, "He was born in Alexandra, Victoria.")
    plain, titled, other = enc.encode_blocks(
        [
            BlockInput(ids),
            BlockInput(ids, prefix_ids=_ids(enc, "Allan Peiper")),
            BlockInput(ids, prefix_ids=_ids(enc, "Paris")),
        ]
    )
    assert plain.shape == titled.shape == other.shape == (len(ids), enc.dim)
    assert not np.allclose(plain, titled, atol=1e-3)
    assert not np.allclose(titled, other, atol=1e-3)
    # an empty prefix is the same as no prefix
    (empty,) = enc.encode_blocks([BlockInput(ids, prefix_ids=np.zeros(0, dtype=np.int32))])
    np.testing.assert_allclose(empty, plain, atol=1e-5)


@pytest.mark.parametrize("which", MODELS)
def test_padding_in_a_batch_does_not_change_vectors(which, encoders):
    enc = encoders[which]
    short = BlockInput(_ids(enc, "Paris."), prefix_ids=_ids(enc, "Paris"))
    long = BlockInput(_ids(enc, "Marie Curie was born in Warsaw in 1867. She died in Passy, France, in 1934."))
    together = enc.encode_blocks([short, long])
    alone = enc.encode_blocks([short]) + enc.encode_blocks([long])
    for a, b in zip(together, alone):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("which", MODELS)
def test_encode_blocks_rejects_too_long_block(which, encoders):
    enc = encoders[which]
    ids = np.full(
        enc.max_length - enc.block_overhead + 1,
        enc.tokenizer.convert_tokens_to_ids(enc.tokenizer.unk_token),
        dtype=np.int32,
    )
    with pytest.raises(AppError, match=str(enc.max_length)):
        enc.encode_blocks([BlockInput(ids)])
    (ok,) = enc.encode_blocks([BlockInput(ids[:-1])])  # exactly at the limit
    assert ok.shape == (len(ids) - 1, enc.dim)


# ---------------------------------------------------------------- queries


@pytest.mark.parametrize("which", MODELS)
def test_query_layout_one_mask(which, encoders):
    enc = encoders[which]
    mask = enc.tokenizer.mask_token_id
    t = enc.template
    ids, positions = enc.query_layout("Paris is the <mask> of France.")
    before = enc.tokenizer("Paris is the", add_special_tokens=False)["input_ids"]
    assert positions == [len(t.single_prefix) + len(before)]
    assert ids[: len(t.single_prefix)] == t.single_prefix
    assert ids[len(ids) - len(t.single_suffix) :] == t.single_suffix
    assert ids[len(t.single_prefix) : positions[0]] == before
    assert ids[positions[0]] == ids[positions[0] + 1] == mask
    assert ids.count(mask) == 2


@pytest.mark.parametrize("which", MODELS)
def test_query_layout_three_masks(which, encoders):
    enc = encoders[which]
    mask = enc.tokenizer.mask_token_id
    ids, positions = enc.query_layout("<mask> was born in [MASK] in <MASK>")
    assert len(positions) == 3
    assert ids.count(mask) == 6
    assert positions[0] == len(enc.template.single_prefix)  # a mask at the very start
    assert positions == sorted(positions)
    for p in positions:
        assert ids[p] == ids[p + 1] == mask
    assert [i for i, x in enumerate(ids) if x == mask] == [q for p in positions for q in (p, p + 1)]
    # the last mask sits right before the suffix
    assert positions[-1] + 2 == len(ids) - len(enc.template.single_suffix)
    # the words between masks are there
    between = ids[positions[0] + 2 : positions[1]]
    assert enc.tokenizer.decode(between).strip() == "was born in"


@pytest.mark.parametrize("which", MODELS)
def test_encode_queries_equals_model_by_hand(which, encoders):
    enc = encoders[which]
    texts = ["Paris is the <mask> of France.", "<mask> was born in <mask> in <mask>.", "<mask>"]
    out = enc.encode_queries(texts)
    assert len(out) == 3
    for text, qv, masks in zip(texts, out, (1, 3, 1)):
        assert qv.q_start.shape == qv.q_end.shape == (masks, enc.dim)
        assert qv.q_start.dtype == qv.q_end.dtype == np.float32
        ids, positions = enc.query_layout(text)
        hidden = _by_hand(enc, ids, [0] * len(ids))
        pos = np.asarray(positions)
        np.testing.assert_allclose(qv.q_start, hidden[pos], atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(qv.q_end, hidden[pos + 1], atol=1e-5, rtol=1e-4)
        assert not np.allclose(qv.q_start, qv.q_end, atol=1e-4)  # different positions, different vectors


@pytest.mark.parametrize(
    "width, limit, want",
    [(1, 512, 16), (16, 512, 16), (17, 512, 32), (75, 512, 80), (500, 512, 512), (510, 510, 510), (20, 18, 20)],
)
def test_padded_width_rounds_up_to_the_step_within_the_limit(width, limit, want):
    assert WIDTH_STEP == 16
    assert padded_width(width, limit) == want


def test_a_query_pass_is_padded_to_the_step(encoders, monkeypatch):
    enc = encoders[MODELS[0]]
    seen = []
    forward = enc._forward_here
    monkeypatch.setattr(
        enc, "_forward_here", lambda seqs, types, width, rows: seen.append(width) or forward(seqs, types, width, rows)
    )
    layout = enc.query_layout("Paris is the <mask> of France.")
    assert len(layout[0]) % WIDTH_STEP != 0
    enc.encode_layouts([layout])
    assert seen == [-(-len(layout[0]) // WIDTH_STEP) * WIDTH_STEP]


@pytest.mark.parametrize("which", MODELS)
def test_encode_layouts_padded_to_a_larger_shape_gives_the_same_vectors(which, encoders):
    """Extra padding columns and all-padding filler rows (a bucketed batch shape) change nothing."""
    enc = encoders[which]
    layouts = [enc.query_layout(t) for t in ("Paris is the <mask> of France.", "<mask> was born in <mask>.")]
    seen = []

    def shape(rows, width):
        seen.append((rows, width))
        return rows + 3, width + 9

    padded = enc.encode_layouts(layouts, shape)
    plain = enc.encode_layouts(layouts)
    assert seen == [(2, max(len(ids) for ids, _ in layouts))]
    for a, b in zip(padded, plain):
        np.testing.assert_allclose(a.q_start, b.q_start, atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(a.q_end, b.q_end, atol=1e-5, rtol=1e-4)
    assert enc.encode_layouts(layouts, lambda rows, width: (rows, 10_000))  # capped at the model's length


@pytest.mark.parametrize("which", MODELS)
@pytest.mark.parametrize("text", ["no mask at all", "", "mask> <mas k>"])
def test_query_without_mask_raises(which, text, encoders):
    with pytest.raises(AppError):
        encoders[which].encode_queries([text])


@pytest.mark.parametrize("which", MODELS)
def test_query_too_long_raises(which, encoders):
    enc = encoders[which]
    with pytest.raises(AppError, match=str(enc.max_length)):
        enc.encode_queries(["Paris " * 200 + "<mask>"])
    with pytest.raises(AppError):
        enc.query_layout("<mask> " + "France " * 200)


# ---------------------------------------------------------------- device / dtype


def test_choose_dtype():
    cpu = torch.device("cpu")
    assert choose_dtype(cpu, "auto") in (torch.float32, torch.bfloat16)
    assert choose_dtype(cpu, "fp16") == torch.float16
    assert choose_dtype(cpu, "bf16") == torch.bfloat16
    assert choose_dtype(cpu, "fp32") == torch.float32
    assert choose_dtype(torch.device("cuda"), "auto") == torch.float16
    with pytest.raises(AppError):
        choose_dtype(cpu, "float64")


def test_choose_device_cpu():
    assert choose_device("cpu").type == "cpu"
    assert choose_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_choose_device_cuda_without_cuda_raises(name):
    with pytest.raises(AppError, match="CUDA"):
        choose_device(name)


def test_encoder_on_missing_cuda_raises(tiny_bert_dir):
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    with pytest.raises(AppError, match="CUDA"):
        Encoder(tiny_bert_dir, device="cuda")


def test_mpnet_encoder_without_token_types(tiny_roberta_dir, tmp_path):
    """MPNet (all-mpnet-base-v2's architecture): no token_type_ids, positions offset like RoBERTa."""
    from transformers import AutoTokenizer, MPNetConfig, MPNetModel

    tok = AutoTokenizer.from_pretrained(str(tiny_roberta_dir))
    torch.manual_seed(0)
    cfg = MPNetConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=tok.pad_token_id,
    )
    MPNetModel(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    enc = Encoder(tmp_path, device="cpu", dtype="fp32")
    assert enc.model.config.model_type == "mpnet" and not enc.uses_token_types
    assert enc.max_length == 128
    title = np.asarray(tok("Paris", add_special_tokens=False)["input_ids"])
    ids = np.asarray(tok("Paris is the capital of France.", add_special_tokens=False)["input_ids"])
    assert enc.encode_blocks([BlockInput(ids=ids, prefix_ids=title)])[0].shape == (len(ids), 32)
    q = enc.encode_queries(["Paris is the capital of <mask> ."])[0]
    assert q.q_start.shape == (1, 32) and not np.allclose(q.q_start, q.q_end)


@pytest.mark.parametrize("which", ["bert", "roberta"])
def test_phrase_ids_are_the_ids_a_phrase_has_inside_running_text(which, encoders):
    enc = encoders[which]
    tok = enc.tokenizer
    for phrase in ("Paris", "capital of France", "  Seine  "):
        text = "Marie moved to " + phrase.strip()
        encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        start = len("Marie moved to ")
        inside = [i for i, (a, b) in zip(encoded["input_ids"], encoded["offset_mapping"]) if b > start]
        assert enc.phrase_ids([phrase])[0] == inside, phrase
    if which == "roberta":  # a byte-level BPE: a word after a space has other ids than at a text's start
        assert enc.phrase_ids(["Paris"])[0] != tok("Paris", add_special_tokens=False)["input_ids"]
    else:  # WordPiece drops a zero-width space (a byte-level BPE keeps its bytes)
        assert enc.phrase_ids(["\u200b", "Paris"])[0] == []

"""The reader model: its sequence layout, identity heads, save / load, and what it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from common.errors import AppError
from encoder.model import WIDTH_STEP, Encoder
from encoder.reader import Reader, ReaderInput, TitleIds, batch_tensors, layout
from encoder.reader_files import CARD_NAME, HEAD_NAME, ReaderCard, read_card, vocab_fingerprint
from encoder.reader_model import load_model, save_reader
from encoder.template import derive_template


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory, tiny_bert_dir):
    model, tokenizer = load_model(tiny_bert_dir)
    out = tmp_path_factory.mktemp("reader")
    save_reader(model, tokenizer, ReaderCard(vocab=vocab_fingerprint(tokenizer), phrases=4), out)
    return out


def item(encoder: Encoder, text: str, windows: list[str]) -> ReaderInput:
    ids, mask_at = encoder.query_layout(text)
    tok = encoder.tokenizer
    return ReaderInput(ids, mask_at[0], [np.array(tok(w, add_special_tokens=False)["input_ids"]) for w in windows])


def test_layout_puts_windows_after_the_query_each_followed_by_a_separator(tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    x = item(encoder, "Curie was born in <mask> .", ["born in Warsaw", "in Paris"])
    template = derive_template(encoder.tokenizer)
    ids, types, first = layout(x, template)
    sep = template.single_suffix
    assert ids[:first] == x.query_ids
    w0, w1 = (w.tolist() for w in x.windows)
    assert ids[first:] == w0 + sep + w1 + sep
    assert types == [0] * first + [template.second_type_id] * (len(ids) - first)
    (_, _, _, mask_at), positions = batch_tensors([x], template, 0)
    assert int(mask_at[0]) == x.mask_at
    assert [ids[p] for p in positions[0]] == w0 + w1  # the window tokens, separators left out


def test_titles_are_read_before_their_windows_and_are_no_window_token(tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    x = item(encoder, "Curie was born in <mask> .", ["born in Warsaw", "in Paris"])
    titles = TitleIds(encoder.tokenizer, 2)
    t0, t1 = titles("Marie Curie Skłodowska"), titles("Paris")
    assert len(t0) == 2 and titles("Marie Curie Skłodowska") is t0  # the first 2 tokens, cached
    titled = ReaderInput(x.query_ids, x.mask_at, x.windows, [t0, t1])
    template = derive_template(encoder.tokenizer)
    ids, _, first = layout(titled, template)
    sep = template.single_suffix
    w0, w1 = (w.tolist() for w in x.windows)
    assert ids[first:] == t0.tolist() + sep + w0 + sep + t1.tolist() + sep + w1 + sep
    _, positions = batch_tensors([titled], template, 0)
    assert [ids[p] for p in positions[0]] == w0 + w1  # the spans are the windows' only


def test_identity_heads_score_a_token_as_the_query_vector_does(reader_dir, tiny_bert_dir):
    """Untrained, start(i) is h[MASK_s] . h[i] / sqrt(d) over the joint sequence."""
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    reader = Reader(reader_dir, device="cpu", dtype="fp32")
    x = item(encoder, "Curie was born in <mask> .", ["born in Warsaw in 1867"])
    start, end = reader.logits([x])[0]
    arrays, positions = batch_tensors([x], reader.template, reader.pad_id)
    tensors = [torch.from_numpy(a) for a in arrays]
    with torch.inference_mode():
        h = (
            reader.model.transformer(input_ids=tensors[0], attention_mask=tensors[1], token_type_ids=tensors[2])
            .last_hidden_state[0]
            .float()
        )
    scale = h.shape[1] ** -0.5
    want_start = (h[positions[0]] @ h[x.mask_at]).numpy() * scale
    want_end = (h[positions[0]] @ h[x.mask_at + 1]).numpy() * scale
    # fp16 weights on disk: close, not equal, to the fp32 model's
    np.testing.assert_allclose(start, want_start, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(end, want_end, rtol=1e-4, atol=1e-4)
    assert start.shape == (len(x.windows[0]),)


def test_batched_logits_equal_one_at_a_time(reader_dir, tiny_bert_dir):
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    reader = Reader(reader_dir, device="cpu", dtype="fp32")
    items = [
        item(encoder, "Curie was born in <mask> .", ["born in Warsaw", "Paris"]),
        item(encoder, "<mask> is the capital of France and of its many cities .", ["Paris is the capital"]),
    ]
    together = reader.logits(items)
    for x, (start, end) in zip(items, together):
        alone_start, alone_end = reader.logits([x])[0]
        np.testing.assert_allclose(start, alone_start, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(end, alone_end, rtol=1e-4, atol=1e-4)


def test_serving_pads_the_batch_to_a_few_lengths_and_reads_the_same(reader_dir, tiny_bert_dir, monkeypatch):
    """Reader.logits pads its batch to a multiple of WIDTH_STEP (fewer input shapes: less memory kept by
    kernel caches); the window logits are those of the unpadded batch."""
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    reader = Reader(reader_dir, device="cpu", dtype="fp32")
    x = item(encoder, "Curie was born in <mask> .", ["born in Warsaw in 1867", "Paris"])
    plain, positions = batch_tensors([x], reader.template, reader.pad_id)
    padded, same_positions = batch_tensors([x], reader.template, reader.pad_id, reader.max_length)
    assert plain[0].shape[1] % WIDTH_STEP != 0  # the item's own length: the padding below is real
    assert padded[0].shape[1] == -(-plain[0].shape[1] // WIDTH_STEP) * WIDTH_STEP
    assert [p.tolist() for p in same_positions] == [p.tolist() for p in positions]
    widths = []
    forward = reader.model.forward
    monkeypatch.setattr(reader.model, "forward", lambda *t: widths.append(t[0].shape[1]) or forward(*t))
    start, end = reader.logits([x])[0]
    assert widths == [padded[0].shape[1]]
    with torch.inference_mode():
        want_start, want_end = reader.model(*map(torch.from_numpy, plain))
    np.testing.assert_allclose(start, want_start[0, positions[0]].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(end, want_end[0, positions[0]].numpy(), rtol=1e-5, atol=1e-5)


def test_trained_heads_survive_save_and_load(tmp_path, tiny_bert_dir):
    model, tokenizer = load_model(tiny_bert_dir)
    with torch.no_grad():
        model.start.weight.mul_(-2.0)
        model.end.bias.fill_(0.5)
    save_reader(model, tokenizer, ReaderCard(vocab=vocab_fingerprint(tokenizer)), tmp_path)
    again, _ = load_model(tmp_path)
    torch.testing.assert_close(again.start.weight, model.start.weight.half().float())
    torch.testing.assert_close(again.end.bias, torch.full_like(again.end.bias, 0.5))


def test_reader_refuses_a_card_naming_another_vocabulary(tmp_path, reader_dir):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(reader_dir, bad)
    card = json.loads((bad / CARD_NAME).read_text())
    (bad / CARD_NAME).write_text(json.dumps({**card, "vocab": "0" * 64}))
    with pytest.raises(AppError, match="tokenizer is not the one"):
        Reader(bad, device="cpu")


def test_reader_refuses_heads_of_another_size(tmp_path, reader_dir):
    import shutil

    from safetensors.torch import save_file

    bad = tmp_path / "bad"
    shutil.copytree(reader_dir, bad)
    save_file(
        {
            "start.weight": torch.zeros(8, 8),
            "start.bias": torch.zeros(8),
            "end.weight": torch.zeros(8, 8),
            "end.bias": torch.zeros(8),
        },
        str(bad / HEAD_NAME),
    )
    with pytest.raises(AppError, match="does not hold heads"):
        Reader(bad, device="cpu")


def test_missing_or_invalid_card_is_a_clear_error(tmp_path):
    with pytest.raises(AppError, match="reader.json"):
        read_card(tmp_path)
    (tmp_path / CARD_NAME).write_text('{"vocab": "x", "window": -1}')
    with pytest.raises(AppError, match="invalid"):
        read_card(tmp_path)


def test_a_lowered_reader_reads_as_autocast_does(reader_dir, tiny_bert_dir):
    """Reader keeps its Linear weights in the autocast dtype (encoder.device.lower_weights): the logits
    are those of the fp32 weights cast by autocast at every pass, bit for bit."""
    encoder = Encoder(tiny_bert_dir, device="cpu", dtype="fp32")
    reader = Reader(reader_dir, device="cpu", dtype="bf16")
    assert reader.model.start.weight.dtype == torch.bfloat16
    assert reader.model.transformer.embeddings.LayerNorm.weight.dtype == torch.float32
    x = item(encoder, "Curie was born in <mask> .", ["born in Warsaw in 1867", "Paris"])
    got = reader.logits([x])[0]
    model, _ = load_model(reader_dir)  # fp32, as autocast used to see it
    tensors, positions = batch_tensors([x], reader.template, reader.pad_id)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        start, end = model.eval()(*map(torch.from_numpy, tensors))
    assert np.array_equal(got[0], start.float().numpy()[0, positions[0]].astype(np.float64))
    assert np.array_equal(got[1], end.float().numpy()[0, positions[0]].astype(np.float64))

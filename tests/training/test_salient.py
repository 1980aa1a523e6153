"""Tests for training.salient and salient span masking in training.masking."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.tokens import tokenize_documents
from tests.training.test_masking import MASK, _check_invariants, _group, _single_words
from training.masking import MaskingConfig, mask_group
from training.salient import salient_spans


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from encoder.model_files import base_model_dir

    return AutoTokenizer.from_pretrained(base_model_dir())


def _phrases(tokenizer, text: str, max_tokens: int = 10) -> list[str]:
    doc = tokenize_documents(tokenizer, [text])[0]
    spans = salient_spans(text, doc.offsets, doc.flags, max_tokens)
    return [text[doc.offsets[a, 0] : doc.offsets[b, 1]] for a, b in spans.tolist()]


def test_names_numbers_and_linked_names(tokenizer):
    text = "John Smith (born December 29, 1956) died in Liteshoa, Kingdom of Hungary, aged 85."
    assert _phrases(tokenizer, text) == ["John Smith", "December 29", "1956", "Liteshoa", "Kingdom of Hungary", "85"]


def test_function_words_links_and_punctuation(tokenizer):
    # "He"/"The" are function words even when capitalised; a run never ends on a link ("of");
    # hyphens and apostrophes join, commas and full stops split.
    text = "He met The Duke of in Saint-Denis. Paris, London and O'Brien."
    assert _phrases(tokenizer, text) == ["Duke", "Saint-Denis", "Paris", "London", "O'Brien"]


def test_runs_longer_than_the_cap_are_dropped(tokenizer):
    text = "She visited New York City today."
    assert _phrases(tokenizer, text, max_tokens=3) == ["New York City"]
    assert _phrases(tokenizer, text, max_tokens=2) == []


def test_line_breaks_split_runs(tokenizer):
    assert _phrases(tokenizer, "Paris\n\nLondon") == ["Paris", "London"]


def test_spans_are_word_aligned_token_ranges(tokenizer):
    from corpus.tokens import WORD_END, WORD_START

    text = "Anna Karenina moved to Novosibirsk in 1999 with Pyotr Ilyich."
    doc = tokenize_documents(tokenizer, [text])[0]
    spans = salient_spans(text, doc.offsets, doc.flags, 10)
    assert spans.dtype == np.int32 and spans.shape[1] == 2 and len(spans) == 4
    for a, b in spans.tolist():
        assert doc.flags[a] & WORD_START and doc.flags[b] & WORD_END


# ---------------------------------------------------------------- masking with salient spans


def _twin_blocks():
    words = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    return _group(_single_words(words), _single_words(words))


SALIENT = [np.array([[2, 3], [8, 8], [14, 16]], dtype=np.int32), np.array([[5, 6]], dtype=np.int32)]


def test_rate_one_masks_salient_spans_first():
    blocks, flags = _twin_blocks()
    cfg = MaskingConfig(budget=0.3, salient_rate=1.0)
    for seed in range(20):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, salient=SALIENT)
        _check_invariants(blocks, flags, out, cfg)
        # block 0: all three salient spans fit the budget (6 <= 6 + 2) and do not touch: all are masked
        assert {(s.start, s.end) for s in out[0].spans} >= {(2, 3), (8, 8), (14, 16)}
        assert (5, 6) in {(s.start, s.end) for s in out[1].spans}


def test_rate_zero_is_plain_npm_masking():
    blocks, flags = _twin_blocks()
    for seed in range(5):
        a = mask_group(blocks, flags, MASK, np.random.default_rng(seed), MaskingConfig(), salient=SALIENT)
        b = mask_group(blocks, flags, MASK, np.random.default_rng(seed), MaskingConfig())
        assert [mb.ids for mb in a] == [mb.ids for mb in b]


def test_salient_spans_obey_regions_and_positives():
    blocks, flags = _twin_blocks()
    cfg = MaskingConfig(budget=0.5, salient_rate=1.0)
    # (14, 16) lies outside block 0's region; block 1's (5, 6) is not shared with block 0 once block 0 differs
    blocks[1] = blocks[1].copy()
    blocks[1][5:7] = [40, 41]
    regions = [(0, 12), (0, 20)]
    for seed in range(20):
        out = mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, salient=SALIENT, regions=regions)
        _check_invariants(blocks, flags, out, cfg, regions=regions)
        assert all(s.end < 12 for s in out[0].spans)
        assert (5, 6) not in {(s.start, s.end) for s in out[1].spans}


def test_half_rate_mixes_salient_and_random_spans():
    blocks, flags = _twin_blocks()
    many = [np.array([[i, i] for i in range(0, 20, 2)], dtype=np.int32)] * 2
    counts = {0.0: 0, 0.5: 0, 1.0: 0}
    for rate in counts:
        cfg = MaskingConfig(budget=0.5, salient_rate=rate)
        for seed in range(30):
            for mb in mask_group(blocks, flags, MASK, np.random.default_rng(seed), cfg, salient=many):
                spans = [(s.start, s.end) for s in mb.spans]
                counts[rate] += sum(1 for a, b in spans if a == b and a % 2 == 0) / max(1, len(spans))
    assert counts[0.0] < counts[0.5] < counts[1.0]
    assert counts[1.0] == pytest.approx(60.0)  # every span of every block is salient


# ---------------------------------------------------------------- listed words (--salient-words)


def test_listed_words_are_salient_spans_of_their_own(tokenizer):
    text = "Marie was a Polish and naturalised French physicist, a great and humble scientist."
    doc = tokenize_documents(tokenizer, [text])[0]
    listed = frozenset({"polish", "french", "great", "humble", "scientist"})
    spans = salient_spans(text, doc.offsets, doc.flags, 10, listed)
    phrases = [text[doc.offsets[a, 0] : doc.offsets[b, 1]] for a, b in spans.tolist()]
    # capitalised listed words stay in their runs (not twice); lower-case listed words join, in text order
    assert phrases == ["Marie", "Polish", "French", "great", "humble", "scientist"]
    assert spans[:, 0].tolist() == sorted(spans[:, 0].tolist())
    assert _phrases(tokenizer, text) == ["Marie", "Polish", "French"]  # without the list: names only


def test_listed_words_longer_than_the_cap_are_dropped(tokenizer):
    text = "a zygomorphic idea"
    doc = tokenize_documents(tokenizer, [text])[0]
    spans = salient_spans(text, doc.offsets, doc.flags, 1, frozenset({"zygomorphic", "idea"}))
    assert [text[doc.offsets[a, 0] : doc.offsets[b, 1]] for a, b in spans.tolist()] == ["idea"]

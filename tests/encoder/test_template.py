"""Tests for encoder.template: the special-token template derived from a tokenizer."""

from __future__ import annotations

import pytest

from encoder.template import Template, derive_template


@pytest.fixture(scope="module")
def bert_tok(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


@pytest.fixture(scope="module")
def roberta_tok(tiny_roberta_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_roberta_dir))


# ---------------------------------------------------------------- derive_template


def test_derive_template_bert(bert_tok):
    t = derive_template(bert_tok)
    cls, sep = bert_tok.cls_token_id, bert_tok.sep_token_id
    assert (cls, sep) == (101, 102)
    assert t == Template(
        single_prefix=[cls], single_suffix=[sep], pair_prefix=[cls], pair_mid=[sep], pair_suffix=[sep], second_type_id=1
    )


def test_derive_template_roberta(roberta_tok):
    t = derive_template(roberta_tok)
    bos, eos = roberta_tok.convert_tokens_to_ids(["<s>", "</s>"])
    assert t == Template(
        single_prefix=[bos],
        single_suffix=[eos],
        pair_prefix=[bos],
        pair_mid=[eos, eos],
        pair_suffix=[eos],
        second_type_id=0,
    )


@pytest.mark.parametrize("which", ["bert", "roberta"])
def test_template_reproduces_the_tokenizer(which, bert_tok, roberta_tok):
    """single_prefix + x + single_suffix and the pair layout are exactly what the tokenizer produces."""
    tok = bert_tok if which == "bert" else roberta_tok
    t = derive_template(tok)
    x = tok("Paris is the capital", add_special_tokens=False)["input_ids"]
    y = tok("of France", add_special_tokens=False)["input_ids"]
    assert tok("Paris is the capital")["input_ids"] == t.single_prefix + x + t.single_suffix
    assert tok("Paris is the capital", "of France")["input_ids"] == t.pair_prefix + x + t.pair_mid + y + t.pair_suffix

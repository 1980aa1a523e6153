"""encoder.lean_tokenizer: serving's BERT tokenizer without transformers gives what AutoTokenizer gives, on
every call the serving path makes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from corpus.tokens import tokenize_documents
from encoder.lean_tokenizer import LeanTokenizer
from encoder.model_files import load_tokenizer
from encoder.template import derive_template

TEXTS = [
    "Marie Curie was born in Warsaw.",
    "Skłodowska  naïve café, 1,867; [MASK] x",
    "ÅNGSTRÖM 東京 tab\there",
    "",
    "a " * 700,  # longer than model_max_length and tokenizer.json's max_length: neither truncates
]


def test_every_call_of_serving_gives_what_autotokenizer_gives(tiny_bert_dir):
    auto, lean = AutoTokenizer.from_pretrained(str(tiny_bert_dir)), load_tokenizer(tiny_bert_dir, lean=True)
    assert type(lean) is LeanTokenizer
    for text in TEXTS:
        for special in (True, False):
            got = lean(text, add_special_tokens=special, return_offsets_mapping=True)
            assert dict(got) == auto(text, add_special_tokens=special, return_offsets_mapping=True).data
            assert got.word_ids() == auto(text, add_special_tokens=special).word_ids()
        assert dict(lean(text, text[::-1])) == auto(text, text[::-1]).data
    batch = dict(lean(TEXTS, add_special_tokens=False, return_offsets_mapping=True))
    assert batch == auto(TEXTS, add_special_tokens=False, return_offsets_mapping=True).data
    for a, b in zip(tokenize_documents(lean, TEXTS), tokenize_documents(auto, TEXTS)):  # ids, offsets, word flags
        assert (a.ids == b.ids).all() and (a.offsets == b.offsets).all() and (a.flags == b.flags).all()
    assert derive_template(lean) == derive_template(auto) and derive_template(lean).second_type_id == 1
    assert set(lean.all_special_ids) == set(auto.all_special_ids) and lean.get_vocab() == auto.get_vocab()
    for name in ("mask_token", "pad_token_id", "mask_token_id", "model_max_length"):
        assert getattr(lean, name) == getattr(auto, name), name


def test_the_bundled_models_special_tokens_are_autotokenizers(tmp_path):
    """The bundled encoder's and reader's directories, and one whose config lists additional special tokens."""
    import json
    import shutil

    from encoder.model_files import default_model_dir
    from encoder.reader import BUNDLED_READER

    extra = tmp_path / "extra"
    extra.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(default_model_dir() / name, extra / name)
    config = json.loads((extra / "tokenizer_config.json").read_text())
    config["additional_special_tokens"] = ["[unused1]", "[unused2]"]
    (extra / "tokenizer_config.json").write_text(json.dumps(config))
    for directory in (default_model_dir(), BUNDLED_READER, extra):
        auto, lean = AutoTokenizer.from_pretrained(str(directory)), LeanTokenizer(directory)
        assert sorted(lean.all_special_ids) == sorted(auto.all_special_ids), directory.name
        assert (lean.mask_token_id, lean.pad_token_id, lean.model_max_length) == (
            auto.mask_token_id,
            auto.pad_token_id,
            auto.model_max_length,
        )
    assert len(LeanTokenizer(extra).all_special_ids) == 7


def test_padding_is_refused_not_ignored(tiny_bert_dir):
    with pytest.raises(TypeError):
        LeanTokenizer(tiny_bert_dir)(TEXTS, padding=True)


def test_other_tokenizers_and_training_load_transformers_classes(tiny_bert_dir, tiny_roberta_dir):
    assert type(load_tokenizer(tiny_bert_dir)) is type(AutoTokenizer.from_pretrained(str(tiny_bert_dir)))
    roberta = AutoTokenizer.from_pretrained(str(tiny_roberta_dir))
    assert type(load_tokenizer(tiny_roberta_dir, lean=True)) is type(roberta)  # a byte-level BPE: not lean


def test_a_served_encoder_and_reader_load_without_importing_transformers():
    """The bundled model and reader, loaded as a server loads them, leave transformers unimported."""
    code = (
        "import sys; from fill.config import EngineConfig; from fill.loading import open_reader; "
        "from encoder.model import Encoder; "
        "e = Encoder(lean=True).for_inference(); open_reader(EngineConfig(), e); "
        "print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"

"""A BERT WordPiece tokenizer for serving, straight from its tokenizer.json through `tokenizers`, without
importing transformers (its package import is ~0.65 s of a server's start on 2 cores: time to ready).

`LeanTokenizer` answers what serving asks of transformers' fast tokenizer, with the same ids, offsets, pairs,
type ids, word ids and special tokens (tests/encoder/test_lean_tokenizer.py compares them on every call the
serving path makes): called on a text, a text pair or a list of texts (`add_special_tokens`,
`return_offsets_mapping`), `word_ids(i)` of a batch, `get_vocab`, the special tokens' ids and `model_max_length`.
Like transformers' call without `truncation` / `padding`, it neither truncates nor pads whatever tokenizer.json
says. Only for a directory whose tokenizer_config.json names a BERT tokenizer (encoder.model_files.load_tokenizer
decides); training, and saving a tokenizer, use transformers' classes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Encoding, Tokenizer

SPECIAL_KEYS = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
_UNBOUNDED = int(1e30)  # transformers' model_max_length when a directory names none (VERY_LARGE_INTEGER)


class LeanBatch(dict):
    """The encodings of one call, as transformers' BatchEncoding holds them: fields by name, `word_ids(i)`."""

    def __init__(self, fields: dict[str, Any], encodings: list[Encoding]) -> None:
        super().__init__(fields)
        self.encodings = encodings

    def word_ids(self, i: int = 0) -> list[int | None]:
        return list(self.encodings[i].word_ids)


class LeanTokenizer:
    """The tokenizer of `model_dir` (tokenizer.json and tokenizer_config.json) as serving calls it."""

    is_fast = True

    def __init__(self, model_dir: Path) -> None:
        self.backend = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.backend.no_truncation()
        self.backend.no_padding()
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        for key in SPECIAL_KEYS:
            token = config.get(key)
            setattr(self, key, token if isinstance(token, str) else None)
            setattr(self, f"{key}_id", self.backend.token_to_id(token) if isinstance(token, str) else None)
        extra = [t if isinstance(t, str) else t.get("content") for t in _listed(config)]
        ids = [getattr(self, f"{key}_id") for key in SPECIAL_KEYS] + [self.backend.token_to_id(t) for t in extra if t]
        self.all_special_ids = [i for i in dict.fromkeys(ids) if i is not None]
        self.model_max_length = int(config.get("model_max_length") or _UNBOUNDED)

    def get_vocab(self) -> dict[str, int]:
        return self.backend.get_vocab(with_added_tokens=True)

    def __call__(
        self,
        text: str | list[str],
        pair: str | None = None,
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
        return_attention_mask: bool = True,
        return_token_type_ids: bool = True,
        verbose: bool = True,
    ) -> LeanBatch:
        """One text (or a text and its pair): fields of lists of ints; a list of texts: fields of such lists.
        Every field is given whatever the return_* flags say; no padding or truncation is asked here (a
        TypeError, not a silent difference from transformers)."""
        if isinstance(text, list):
            encodings = self.backend.encode_batch(text, add_special_tokens=add_special_tokens)
            return LeanBatch(_fields(encodings, return_offsets_mapping), encodings)
        # an empty pair is no pair, as transformers' `[(text, pair)] if pair else [text]` has it
        encoding = self.backend.encode(text, pair or None, add_special_tokens=add_special_tokens)
        one = {name: values[0] for name, values in _fields([encoding], return_offsets_mapping).items()}
        return LeanBatch(one, [encoding])


def _listed(config: dict[str, Any]) -> list[Any]:
    """A tokenizer_config's additional special tokens (strings, or added-token objects with a `content`)."""
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    return list(extra.values()) if isinstance(extra, dict) else list(extra)


def _fields(encodings: list[Encoding], offsets: bool) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {
        "input_ids": [e.ids for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
        "attention_mask": [e.attention_mask for e in encodings],
    }
    if offsets:
        out["offset_mapping"] = [e.offsets for e in encodings]
    return out

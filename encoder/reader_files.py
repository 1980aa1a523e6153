"""A reader directory's own files, read without its model: the card (`reader.json`, `ReaderCard`), the heads'
file name, the vocabulary fingerprint that ties a reader to the encoders whose index it reads, its tokenizer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from common.errors import AppError
from encoder.model_files import load_tokenizer

CARD_NAME = "reader.json"
HEAD_NAME = "head.safetensors"


class ReaderCard(BaseModel):
    """What `reader.json` holds: how the reader reads (the windows it was trained on) and its vocabulary."""

    vocab: str = Field(description="sha256 of the tokenizer's vocabulary (vocab_fingerprint)")
    window: int = Field(10, ge=0, le=64, description="tokens read on either side of a candidate span")
    phrases: int = Field(8, ge=1, le=64, description="candidate phrases whose best occurrence is read")
    max_tokens: int = Field(160, ge=16, le=480, description="window tokens read per mask, at most")
    null: bool = Field(False, description="trained with a no-answer option: logits are relative to [CLS]'s")
    title_tokens: int = Field(
        0, ge=0, le=64, description="tokens of a window's document title read before it (0: none)"
    )
    trained: dict = Field(default_factory=dict, description="provenance: data, recipe, steps")


def vocab_fingerprint(tokenizer) -> str:
    """sha256 over the tokenizer's (token, id) pairs: equal for tokenizers that give the same ids."""
    h = hashlib.sha256()
    for token, i in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        h.update(f"{i}\t{token}\n".encode("utf-8"))
    return h.hexdigest()


def reader_tokenizer(reader_dir: Path, lean: bool = False):
    """The tokenizer of a reader (or encoder) directory (`lean`: encoder.model_files.load_tokenizer's, serving only)."""
    try:
        return load_tokenizer(reader_dir, lean)
    except Exception as exc:  # transformers raises many types; all mean "cannot load"
        raise AppError(f"cannot load the tokenizer of reader {reader_dir}: {exc}") from exc


def read_card(reader_dir: Path) -> ReaderCard:
    path = reader_dir / CARD_NAME
    try:
        return ReaderCard.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, ValidationError) as exc:
        raise AppError(
            f"reader card {path} is missing or invalid ({exc}); pass a directory written by `encoder train-reader`"
        ) from exc

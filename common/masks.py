"""How a query writes a mask: `<mask>` or `[MASK]`, any case."""

from __future__ import annotations

import re

MASK_PATTERN = re.compile(r"<mask>|\[MASK\]", re.IGNORECASE)


def count_masks(text: str) -> int:
    return len(MASK_PATTERN.findall(text))


def split_on_masks(text: str) -> list[str]:
    """The text segments around each mask (len = masks + 1)."""
    return MASK_PATTERN.split(text)


def blank_masks(text: str) -> str:
    """The query with every mask replaced by a space (the text BM25 searches for)."""
    return MASK_PATTERN.sub(" ", text)

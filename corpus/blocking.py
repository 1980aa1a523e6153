"""Cut tokenized documents into blocks that never cross a document and end at word ends."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from corpus.readers import Document
from corpus.tokens import WORD_START, DocTokens, tokenize_documents

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Block:
    doc: Document
    tokens: DocTokens  # the block's own tokens (a slice of the document's)
    title_ids: np.ndarray | None  # context prefix fed to the encoder, not indexed

    def __len__(self) -> int:
        return len(self.tokens)


def cut_points(flags: np.ndarray, block_tokens: int) -> list[tuple[int, int]]:
    """Token ranges of at most `block_tokens`, cut before a word start whenever possible."""
    n = int(flags.shape[0])
    ranges = []
    a = 0
    while a < n:
        b = min(a + block_tokens, n)
        if b < n:
            starts = np.flatnonzero(flags[a + 1 : b + 1] & WORD_START)
            if starts.size:  # cut just before the last word start that keeps the block within budget
                b = a + 1 + int(starts[-1])
        ranges.append((a, b))
        a = b
    return ranges


def _slice(doc: DocTokens, a: int, b: int) -> DocTokens:
    return DocTokens(ids=doc.ids[a:b], offsets=doc.offsets[a:b], flags=doc.flags[a:b])


def iter_blocks(
    documents: Iterable[Document],
    tokenizer,
    block_tokens: int,
    title_tokens: int = 0,
    batch_docs: int = 256,
    stats: dict[str, int] | None = None,
) -> Iterator[Block]:
    """Blocks in corpus order. `title_tokens` > 0 prefixes each block with its (truncated) title.

    `stats` (optional) is updated with counts of documents and empty documents read so far.
    """
    if stats is not None:
        stats.setdefault("documents", 0)
        stats.setdefault("empty_documents", 0)
    docs_iter = iter(documents)
    while batch := list(itertools.islice(docs_iter, batch_docs)):
        toks = tokenize_documents(tokenizer, [d.text or "" for d in batch])
        titles: list[np.ndarray | None] = [None] * len(batch)
        if title_tokens > 0:
            with_title = [i for i, d in enumerate(batch) if d.title]
            if with_title:
                enc = tokenizer([batch[i].title for i in with_title], add_special_tokens=False)["input_ids"]
                for i, ids in zip(with_title, enc):
                    titles[i] = np.asarray(ids[:title_tokens], dtype=np.int32)
        for doc, dt, title in zip(batch, toks, titles):
            if stats is not None:
                stats["documents"] += 1
                if len(dt) == 0:
                    stats["empty_documents"] += 1
            for a, b in cut_points(dt.flags, block_tokens):
                yield Block(doc=doc, tokens=_slice(dt, a, b), title_ids=title)

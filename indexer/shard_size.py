"""How a build cuts its blocks into shards (`chunk_blocks`), and how many tokens each holds when `--shard-tokens` is
not given: from the corpus's size.

A query pays for every shard (one FAISS search, one candidate stage, their tables: docs/OPERATIONS.md "Large
corpora"), so a large corpus wants fewer, larger shards; the build holds one shard's fp16 vectors in memory (768 B a
token at d = 384: 6 GB at 8M tokens), which caps them. The rule: the corpus's tokens, estimated from its document
count and the tokens of its first SAMPLE_DOCUMENTS documents, / TARGET_SHARDS, in whole millions between
MIN_SHARD_TOKENS and MAX_SHARD_TOKENS: 1M up to ~18M tokens (every index measured before the rule), 8M at 100M
tokens (13 shards). The estimate depends on the corpus alone, so a resumed build cuts the same shards; the manifest
records the number chosen, which `indexer add` and `indexer compact` cut by."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sized
from pathlib import Path
from typing import TypeVar

from corpus.readers import read_corpus
from corpus.tokens import tokenize_documents

MIN_SHARD_TOKENS = 1_000_000
MAX_SHARD_TOKENS = 8_000_000
TARGET_SHARDS = 12
SAMPLE_DOCUMENTS = 1000
B = TypeVar("B", bound=Sized)  # a block cut into shards (Block, indexer.compact's StoredBlock): len() is its tokens


def auto_shard_tokens(corpus: Path, documents: int | None, tokenizer) -> int:
    """Tokens per shard for `corpus` of `documents` documents (corpus.readers.count_documents; MIN_SHARD_TOKENS when
    they cannot be counted: a directory of text)."""
    if not documents:
        return MIN_SHARD_TOKENS
    sample = [d.text or "" for d in itertools.islice(read_corpus(corpus), SAMPLE_DOCUMENTS)]
    if not sample:
        return MIN_SHARD_TOKENS
    mean = sum(t.ids.size for t in tokenize_documents(tokenizer, sample)) / len(sample)
    return shard_tokens_for(int(mean * documents))


def shard_tokens_for(tokens: int) -> int:
    """Tokens per shard for a corpus of about `tokens` tokens."""
    millions = round(tokens / TARGET_SHARDS / MIN_SHARD_TOKENS)
    return int(min(MAX_SHARD_TOKENS, max(MIN_SHARD_TOKENS, millions * MIN_SHARD_TOKENS)))


def chunk_blocks(blocks: Iterable[B], shard_tokens: int) -> Iterator[list[B]]:
    """Consecutive runs of blocks of at most `shard_tokens` tokens (a bigger block is a shard alone)."""
    pending: list[B] = []
    size = 0
    for block in blocks:
        if pending and size + len(block) > shard_tokens:
            yield pending
            pending, size = [], 0
        pending.append(block)
        size += len(block)
    if pending:
        yield pending

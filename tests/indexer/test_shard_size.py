"""A build's shard size from its corpus's size (indexer.shard_size)."""

from __future__ import annotations

from indexer.shard_size import MAX_SHARD_TOKENS, MIN_SHARD_TOKENS, auto_shard_tokens, chunk_blocks, shard_tokens_for
from tests.conftest import write_jsonl


def test_small_corpora_keep_one_million_tokens_a_shard_and_large_ones_get_fewer_larger_shards():
    assert shard_tokens_for(0) == shard_tokens_for(3_360_000) == shard_tokens_for(17_000_000) == MIN_SHARD_TOKENS
    assert shard_tokens_for(30_000_000) == 2_000_000
    assert shard_tokens_for(100_000_000) == 8_000_000
    assert shard_tokens_for(4_500_000_000) == MAX_SHARD_TOKENS == 8_000_000  # the build's memory caps them


def test_the_estimate_counts_the_documents_and_samples_their_tokens(tmp_path, tiny_bert_dir, monkeypatch):
    from transformers import AutoTokenizer

    from indexer import shard_size

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": f"d{i}", "text": "the river flows " * 10} for i in range(50)])
    per_doc = len(tokenizer("the river flows " * 10, add_special_tokens=False)["input_ids"])
    seen: list[int] = []
    monkeypatch.setattr(shard_size, "shard_tokens_for", lambda tokens: seen.append(tokens) or 7)
    assert auto_shard_tokens(corpus, 50, tokenizer) == 7
    assert seen == [50 * per_doc]


def test_blocks_are_cut_greedily_at_the_shard_size():
    blocks = ["a" * n for n in (3, 4, 2, 9, 1)]
    assert [[len(b) for b in c] for c in chunk_blocks(blocks, 7)] == [[3, 4], [2], [9], [1]]

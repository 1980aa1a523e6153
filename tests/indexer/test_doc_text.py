"""indexer.doc_text: per block, the bytes of ASCII blocks and the decoded text of the others are the block's text."""

from __future__ import annotations

import numpy as np

from indexer.phrase_index import PhraseIndex
from indexer.shard import Shard
from tests.conftest import write_jsonl


def _check(shard: Shard) -> tuple[int, int]:
    ascii_blocks = other = 0
    text = shard.text
    for b in range(shard.blocks.shape[0]):
        row, first, end = (int(x) for x in shard.blocks[b])
        if end <= first:
            continue
        doc = shard.doc_text(row)
        a, z = int(shard.offsets[first, 0]), int(shard.offsets[end - 1, 1])
        is_ascii, byte = text.ascii_bytes(np.array([b]), np.array([a]))
        if is_ascii[0]:
            ascii_blocks += 1
            assert bytes(text.data[byte[0] : byte[0] + (z - a)]).decode("ascii") == doc[a:z]
        else:
            other += 1
            codes = text.blocks_codes(np.array([b]))[0]
            block = codes.astype("<u4").tobytes().decode("utf-32-le")
            base = int(text.block_chars[b])
            assert block[a - base : z - base] == doc[a:z]
    return ascii_blocks, other


def test_block_text_of_ascii_and_other_documents(tmp_path, tiny_bert_dir):
    from indexer.build import BuildConfig, build_index

    docs = [
        {"id": "a", "title": "Plain", "text": "Plain ASCII text about rivers and cities. " * 6},
        {"id": "u", "title": "Ünïcode", "text": "Start plain, then naïve café — «quoted» 東京 words; " * 6},
        {"id": "late", "title": "Late", "text": "Plain words for a while here. " * 8 + "then Straße at the end."},
    ]
    out = tmp_path / "idx"
    build_index(
        BuildConfig(corpus=write_jsonl(tmp_path / "c.jsonl", docs), out=out, model=tiny_bert_dir, block_tokens=16)
    )
    index = PhraseIndex(out)
    counts = np.array([_check(s) for s in index.shards]).sum(axis=0)
    assert counts[0] > 0 and counts[1] > 0  # both kinds of block were checked
    joined = 0
    for shard in index.shards:  # several blocks decoded in one call: each one's codes where it says, as alone
        text = shard.text
        text.load()
        other = np.flatnonzero(~text.block_ascii)[::-1]  # in any order, not only ascending
        if other.size < 2:
            continue
        codes, starts = text.blocks_codes(other)
        alone = [text.blocks_codes(np.array([b]))[0] for b in other]
        assert starts.tolist() == np.cumsum([0] + [a.size for a in alone[:-1]]).tolist()
        assert all((codes[a : a + c.size] == c).all() for a, c in zip(starts.tolist(), alone))
        assert codes.size == sum(c.size for c in alone)
        joined += other.size
    assert joined >= 2


def test_a_shard_keeps_37_bytes_a_block_in_memory_and_maps_the_rest(tiny_index, monkeypatch):
    """What an opened, warmed shard holds in memory is per block (int32 where the values fit: blocks, first chars,
    byte sizes; int64 block starts and first bytes; a bool): 37 B a block. docs.arrow's row offsets and the
    block checksums are views of the mapped files, not copies."""
    import common.files

    monkeypatch.setattr(common.files, "IN_MEMORY_BELOW", 0)  # every file mapped, as at millions of tokens
    monkeypatch.setattr("indexer.checksums.IN_MEMORY_BELOW", 0)
    index = PhraseIndex(tiny_index)
    for shard in index.shards:
        shard.warm()
        text = shard.text
        held = [shard.blocks, shard.block_starts, shard.offsets.block_chars]
        held += [text.block_bytes, text.block_sizes, text.block_ascii]
        assert all(a.flags.owndata for a in held)
        assert sum(a.nbytes for a in held) == 37 * shard.blocks.shape[0]
        for column in shard.columns.values():
            assert not column.offsets.flags.owndata  # a view of docs.arrow's mapped buffer
        assert not shard.token_ids.check.sums.flags.owndata  # checksums.npy's sums of token_ids.npy, mapped
    index.close()

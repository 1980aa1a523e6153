"""Add each window's document title to reader examples written before fill-reader-data recorded them (the
title lever), without running the fill engine again: a window's tokens are found in the index the examples
were made over (its shards' token ids), and the title is that block's document's.

    python -m recipes.add_window_titles --examples data-local/reader_v2/examples0.jsonl \
        --index data-local/reader_v2/idx_r15_round0 --out data-local/reader_v2/titled/examples0.jsonl

A window found nowhere (an index other than the examples') gets the title "" and is counted; so is a window
whose tokens occur in documents of different titles (the first is taken). The titles are token ids of the
index's tokenizer, at most --title-tokens, as fill-reader-data writes them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from common.files import write_bytes_atomic
from encoder.reader import TitleIds
from indexer.integrity import open_docs

K = 4  # tokens hashed per position


def ngram_keys(ids: np.ndarray) -> np.ndarray:
    """A 64-bit key of the K tokens starting at each position (wrapping arithmetic; ties are checked)."""
    ids = ids.astype(np.uint64)
    key = np.zeros(max(ids.size - K + 1, 0), dtype=np.uint64)
    for k in range(K):
        key = key * np.uint64(1_000_003) + ids[k : ids.size - K + 1 + k]
    return key


class ShardTokens:
    """One shard's token ids, sorted K-gram keys, blocks and titles."""

    def __init__(self, shard: Path) -> None:
        self.ids = np.load(shard / "token_ids.npy", mmap_mode="r")
        keys = ngram_keys(np.asarray(self.ids))
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]
        self.blocks = np.load(shard / "blocks.npy")
        info = json.loads((shard / "shard.json").read_text(encoding="utf-8"))
        self.titles = open_docs(shard / "docs.arrow", int(info["documents"])).column("title")

    def find(self, window: list[int]) -> list[str]:
        """The titles of the documents holding `window` (empty when none does, or it is under K tokens)."""
        if len(window) < K:
            return []
        key = ngram_keys(np.asarray(window[:K], dtype=np.int64))[0]
        lo, hi = np.searchsorted(self.keys, key, "left"), np.searchsorted(self.keys, key, "right")
        out = []
        for at in self.order[lo:hi]:
            if np.array_equal(self.ids[at : at + len(window)], window):
                block = int(np.searchsorted(self.blocks[:, 1], at, side="right") - 1)
                out.append(self.titles[int(self.blocks[block, 0])].as_py() or "")
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=Path, required=True)
    ap.add_argument("--index", type=Path, required=True, help="the index the examples were made over")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--title-tokens", type=int, default=10)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    manifest = json.loads((args.index / "manifest.json").read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(manifest["model"]["path"], local_files_only=True)
    title_ids = TitleIds(tokenizer, args.title_tokens)
    shards = [ShardTokens(d) for d in sorted(args.index.glob("shard_*")) if (d / "token_ids.npy").is_file()]
    rows, missing, mixed, windows = [], 0, 0, 0
    for line in args.examples.read_text(encoding="utf-8").splitlines():
        ex = json.loads(line)
        titles = []
        for window in ex["windows"]:
            found = [t for s in shards for t in s.find(window)]
            missing += not found
            mixed += len(set(found)) > 1
            titles.append(title_ids(found[0]).tolist() if found else [])
        windows += len(titles)
        rows.append(json.dumps({**ex, "titles": titles}) + "\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(args.out, "".join(rows).encode("utf-8"))
    print(
        f"{len(rows)} examples, {windows} windows: {missing} found nowhere, {mixed} in documents of different "
        f"titles -> {args.out}"
    )


if __name__ == "__main__":
    main()

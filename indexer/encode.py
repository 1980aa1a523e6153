"""The build's encoder loop: every token of a list of blocks to one vector, batched by a token budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from corpus.blocking import Block
from encoder.model import BlockInput, Encoder

if TYPE_CHECKING:
    import torch

CPU_BATCH_TOKENS, GPU_BATCH_TOKENS = 2048, 16384


def default_batch_tokens(device: torch.device | str) -> int:
    """Measured on 2 CPU cores (MiniLM, Debian text, bench/bench_encode.py): 2048-token batches encode ~24%
    faster than 16384-token ones (activations stay in cache); GPUs want large batches. `device`: a torch device
    or an ONNX engine's "cpu" (Encoder.device)."""
    return CPU_BATCH_TOKENS if str(device).split(":")[0] == "cpu" else GPU_BATCH_TOKENS


def prefix_len(block: Block) -> int:
    return 0 if block.title_ids is None else len(block.title_ids)


def encode_shard(
    encoder: Encoder,
    blocks: list[Block],
    batch_tokens: int,
    bar: tqdm | None = None,
    here: bool = False,
    check: Callable[[], None] | None = None,
) -> np.ndarray:
    """fp16 vectors of every block token, in block order; batches of similar length, at most
    `batch_tokens` padded tokens each (special and title tokens included); `here`: on the calling thread
    (Encoder.encode_blocks); `check` is called before each batch (it raises to stop the encoding)."""
    sizes = np.array([len(b) for b in blocks])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    out = np.empty((int(starts[-1]), encoder.dim), dtype=np.float16)
    order = np.argsort(-sizes, kind="stable")
    i = 0
    while i < len(order):
        if check is not None:
            check()
        width = sizes[order[i]] + encoder.pair_overhead + prefix_len(blocks[order[i]])
        n = max(1, batch_tokens // max(1, width))
        batch = order[i : i + n]
        inputs = [BlockInput(ids=blocks[j].tokens.ids, prefix_ids=blocks[j].title_ids) for j in batch]
        for j, vecs in zip(batch, encoder.encode_blocks(inputs, here=here)):
            out[starts[j] : starts[j + 1]] = vecs
        if bar is not None:
            bar.update(int(sizes[batch].sum()))
        i += n
    return out

"""The build job: corpus -> blocks -> token vectors -> shards -> manifest.

Shards are deterministic functions of (corpus, model, config), so an interrupted build resumes:
finished shards (those with a shard.json) are kept and their blocks are skipped without encoding.

Under `torchrun --nproc_per_node N -m indexer build ...` every process reads the same block stream,
encodes the shards whose number is its rank modulo N, and rank 0 writes BM25 and the manifest once
all processes are done.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from typing import Literal

from pydantic import BaseModel, Field
from tqdm import tqdm

from encoder.device import choose_device
from encoder.model import BlockInput, Encoder, EncoderError, model_fingerprint
from indexer.ann import check_index_type, resolve_factory
from indexer.blocking import Block, iter_blocks
from indexer.errors import IndexerError
from indexer.bm25 import build_bm25
from indexer.files import file_record, write_json_atomic
from indexer.manifest import MANIFEST_NAME, Counts, FileInfo, Manifest, ModelInfo, ShardInfo
from indexer.readers import count_documents, detect_format, read_corpus
from indexer.templates import TEMPLATE_DIR, Templates, needs_training
from indexer.store import Shard, ShardContent, read_shard_info, write_shard

logger = logging.getLogger(__name__)

BUILD_STATE = "build.json"


class BuildConfig(BaseModel):
    """Everything `indexer build` needs; one object per job."""

    corpus: Path
    out: Path
    model: Path | None = None  # None: the bundled default model
    block_tokens: int = Field(256, ge=8, description="corpus tokens per block")
    shard_tokens: int = Field(1_000_000, ge=1, description="tokens per shard")
    title_tokens: int = Field(32, ge=0, description="title tokens prefixed to each block as context (0: none)")
    index_type: str = Field("auto", description="auto, flat, ivfpq, ivfsq, hnsw or a FAISS factory string")
    memory_budget: int | None = Field(None, ge=1, description="bytes of RAM for the ANN indexes (auto type)")
    vector_dtype: Literal["float16", "int8"] = "int8"
    batch_tokens: int | None = Field(
        None, ge=64, description="padded tokens per encoder batch; None: 2048 on CPU (cache-sized), 16384 on GPU"
    )
    device: str = "auto"
    dtype: str = "auto"
    overwrite: bool = False


@dataclass
class BuildSummary:
    out: Path
    documents: int
    empty_documents: int
    blocks: int
    tokens: int
    shards: int
    seconds: float
    encoded_tokens: int  # tokens encoded in this run (less than `tokens` when resuming)

    def line(self) -> str:
        rate = self.encoded_tokens / self.seconds if self.seconds > 0 else 0.0
        return (
            f"built {self.out}: {self.documents} documents ({self.empty_documents} empty), {self.blocks} blocks, "
            f"{self.tokens} tokens, {self.shards} shards in {self.seconds:.1f} s ({rate:.0f} tokens/s encoded)"
        )


def _identity(cfg: BuildConfig, encoder: Encoder, fingerprint: str) -> dict:
    """What must match for an existing output directory to be resumed rather than refused."""
    corpus = cfg.corpus.resolve()
    stat = corpus.stat()
    return {
        "corpus": str(corpus),
        "corpus_bytes": stat.st_size if corpus.is_file() else None,
        "corpus_mtime": stat.st_mtime,
        "model_fingerprint": fingerprint,
        "block_tokens": cfg.block_tokens,
        "shard_tokens": cfg.shard_tokens,
        "title_tokens": cfg.title_tokens,
        "index_type": cfg.index_type,
        "memory_budget": cfg.memory_budget,
        "vector_dtype": cfg.vector_dtype,
        "dtype": str(encoder.dtype).replace("torch.", ""),
    }


def _prepare_out(out: Path, identity: dict, overwrite: bool) -> None:
    """Create, resume or (with overwrite) clear the output directory; refuse anything else."""
    import json

    if out.exists() and not out.is_dir():
        raise IndexerError(f"output path {out} exists and is not a directory; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / BUILD_STATE
    ours = [
        p for p in out.iterdir()
        if p.name.removesuffix(".tmp") in (MANIFEST_NAME, BUILD_STATE) or p.name.startswith(("shard_", "bm25.sqlite", TEMPLATE_DIR))
    ]
    others = [p for p in out.iterdir() if p not in ours]
    if {p.name.removesuffix(".tmp") for p in ours} <= {BUILD_STATE}:  # nothing written yet: start afresh
        for p in ours:
            p.unlink()
        ours = []
    if overwrite:
        for p in ours:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    elif ours:
        previous = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else None
        if previous != identity:
            raise IndexerError(
                f"output directory {out} already holds a different index (other corpus, model or settings); "
                "pass --overwrite to replace it or choose another --out"
            )
        logger.info("resuming the build in %s", out)
    if others and not ours and not overwrite:
        raise IndexerError(f"output directory {out} is not empty and holds no index; choose an empty --out")
    write_json_atomic(state_path, identity)


CPU_BATCH_TOKENS, GPU_BATCH_TOKENS = 2048, 16384


def default_batch_tokens(device) -> int:
    """Measured on 2 CPU cores (MiniLM, Debian text, bench/bench_encode.py): 2048-token batches encode ~24%
    faster than 16384-token ones (activations stay in cache); GPUs want large batches."""
    return CPU_BATCH_TOKENS if device.type == "cpu" else GPU_BATCH_TOKENS


def _encode_shard(encoder: Encoder, blocks: list[Block], batch_tokens: int, bar: tqdm) -> np.ndarray:
    """fp16 vectors of every block token, in block order; batches grouped by length."""
    sizes = np.array([len(b) for b in blocks])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    out = np.empty((int(starts[-1]), encoder.dim), dtype=np.float16)
    order = np.argsort(-sizes, kind="stable")
    i = 0
    while i < len(order):
        width = sizes[order[i]] + encoder.pair_overhead + _prefix_len(blocks[order[i]])
        n = max(1, batch_tokens // max(1, width))
        batch = order[i : i + n]
        inputs = [BlockInput(ids=blocks[j].tokens.ids, prefix_ids=blocks[j].title_ids) for j in batch]
        for j, vecs in zip(batch, encoder.encode_blocks(inputs)):
            out[starts[j] : starts[j + 1]] = vecs
        bar.update(int(sizes[batch].sum()))
        i += n
    return out


def _finished(out: Path, number: int, shard: ShardInfo | tuple[int, int, int, int]) -> ShardInfo:
    """The info of a shard another process wrote, checked against what this process expects of it."""
    if isinstance(shard, ShardInfo):
        return shard
    info = read_shard_info(out, number)
    if info is None or (info.tokens, info.blocks, info.token_base, info.block_base) != shard:
        raise IndexerError(f"shard {number} in {out} is missing or does not match the corpus; re-run the same command")
    return info


def _prefix_len(block: Block) -> int:
    return 0 if block.title_ids is None else len(block.title_ids)


def _content(blocks: list[Block], vectors: np.ndarray) -> ShardContent:
    doc_rows: dict[int, int] = {}
    ids, titles, texts, block_rows = [], [], [], []
    pos = 0
    for b in blocks:
        if b.doc.row not in doc_rows:
            doc_rows[b.doc.row] = len(ids)
            ids.append(b.doc.id)
            titles.append(b.doc.title)
            texts.append(b.doc.text)
        block_rows.append((doc_rows[b.doc.row], pos, pos + len(b)))
        pos += len(b)
    return ShardContent(
        vectors=vectors,
        token_ids=np.concatenate([b.tokens.ids for b in blocks]),
        offsets=np.concatenate([b.tokens.offsets for b in blocks]),
        flags=np.concatenate([b.tokens.flags for b in blocks]),
        blocks=np.asarray(block_rows, dtype=np.int64).reshape(-1, 3),
        doc_ids=ids,
        doc_titles=titles,
        doc_texts=texts,
    )


def _distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; one process without it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, 0
    import torch.distributed as dist

    if not dist.is_initialized():  # gloo: only barriers are needed, and it works with or without GPUs
        dist.init_process_group("gloo", timeout=dt.timedelta(hours=24))
    return dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0"))


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def build_index(cfg: BuildConfig) -> BuildSummary:
    t0 = time.perf_counter()
    fmt = detect_format(cfg.corpus)
    rank, world, local_rank = _distributed()
    try:
        encoder = Encoder(cfg.model, device=choose_device(cfg.device, local_rank), dtype=cfg.dtype)
    except (EncoderError, ValueError) as exc:
        raise IndexerError(str(exc)) from exc
    overhead = encoder.pair_overhead + cfg.title_tokens if cfg.title_tokens else encoder.block_overhead
    if cfg.block_tokens + overhead > encoder.max_length:
        raise IndexerError(
            f"--block-tokens {cfg.block_tokens} plus {cfg.title_tokens} title tokens and special tokens exceeds "
            f"the model limit of {encoder.max_length}; lower --block-tokens"
        )
    try:
        index_type = check_index_type(cfg.index_type, encoder.dim)
    except ValueError as exc:
        raise IndexerError(str(exc)) from None
    cfg = cfg.model_copy(update={"index_type": index_type})
    fingerprint = model_fingerprint(encoder.model_dir)
    batch_tokens = cfg.batch_tokens or default_batch_tokens(encoder.device)
    if rank == 0:
        _prepare_out(cfg.out, _identity(cfg, encoder, fingerprint), cfg.overwrite)
    _barrier(world)
    if world > 1:
        logger.info("rank %d of %d: encoding shards %d, %d + %d, ... on %s", rank, world, rank, rank, world, encoder.device)

    total_docs = count_documents(cfg.corpus)
    stats: dict[str, int] = {}
    bar = tqdm(total=None, unit="tok", unit_scale=True, desc="indexing", dynamic_ncols=True, disable=rank > 0)
    shards: list[ShardInfo | tuple[int, int, int, int]] = []  # info, or (tokens, blocks, token base, block base)
    pending: list[Block] = []
    pending_tokens = 0
    totals = {"tokens": 0, "blocks": 0, "encoded": 0}
    factories: list[str] = []  # the FAISS factory of every shard so far (all processes compute all of them)
    templates = Templates(cfg.out)

    def flush() -> None:
        nonlocal pending, pending_tokens
        number = len(shards)
        if total_docs:  # estimate the total from the tokens per document read so far, for the ETA
            seen = totals["tokens"] + pending_tokens
            bar.total = max(seen, int(seen / max(1, stats["documents"]) * total_docs))
            bar.refresh()
        info = read_shard_info(cfg.out, number)
        base_t, base_b = totals["tokens"], totals["blocks"]
        budget = None
        if cfg.memory_budget is not None:  # this shard's share of the budget, by its share of the tokens
            budget = int(cfg.memory_budget * pending_tokens / max(pending_tokens, bar.total or 0, totals["tokens"] + pending_tokens))
        factories.append(resolve_factory(cfg.index_type, pending_tokens, encoder.dim, budget))
        if number % world != rank:  # another process's shard
            shards.append((pending_tokens, len(pending), base_t, base_b))
            totals["tokens"] += pending_tokens
            totals["blocks"] += len(pending)
            bar.update(pending_tokens)
            pending, pending_tokens = [], 0
            return
        if info is not None and info.tokens == pending_tokens and info.blocks == len(pending) and info.token_base == base_t:
            logger.info("%s already built, skipping its %d tokens", info.name, info.tokens)
            bar.update(info.tokens)
        else:
            t_enc = time.perf_counter()
            vectors = _encode_shard(encoder, pending, batch_tokens, bar)
            t_ann = time.perf_counter()
            factory = factories[number]
            trained = None
            if needs_training(factory, encoder.dim):
                first = factories.index(factory)  # the shard whose vectors train this factory's template
                if first == number:
                    trained = templates.train(vectors, factory, seed=number)
                else:  # wait unless the first shard is already on disk without a template (then train here)
                    trained = templates.load(factory, wait=read_shard_info(cfg.out, first) is None)
                    trained = trained if trained is not None else templates.train(vectors, factory, seed=number)
            info = write_shard(
                cfg.out, number, _content(pending, vectors), factory, base_t, base_b, cfg.vector_dtype, trained=trained
            )
            logger.info("shard %d: %d tokens, encode %.1f s, index and write %.1f s", number, info.tokens,
                        t_ann - t_enc, time.perf_counter() - t_ann)
            totals["encoded"] += info.tokens
        shards.append(info)
        totals["tokens"] += info.tokens
        totals["blocks"] += info.blocks
        pending, pending_tokens = [], 0

    blocks = iter_blocks(
        read_corpus(cfg.corpus), encoder.tokenizer, cfg.block_tokens, cfg.title_tokens, stats=stats
    )
    for block in blocks:
        if pending and pending_tokens + len(block) > cfg.shard_tokens:
            flush()
        pending.append(block)
        pending_tokens += len(block)
    if pending:
        flush()
    bar.close()
    if totals["tokens"] == 0:
        raise IndexerError(f"corpus {cfg.corpus} holds no text to index (all documents are empty)")
    _barrier(world)
    if rank > 0:  # rank 0 checks every shard and writes the manifest
        return BuildSummary(cfg.out, stats["documents"], stats["empty_documents"], totals["blocks"], totals["tokens"],
                            len(shards), time.perf_counter() - t0, totals["encoded"])
    shards = [_finished(cfg.out, number, s) for number, s in enumerate(shards)]

    # Remove shards left over from an earlier, larger build of the same identity (cannot normally happen).
    for stale in sorted(cfg.out.glob("shard_*")):
        if stale.name not in {s.name for s in shards}:
            shutil.rmtree(stale)
    opened = [Shard(cfg.out, info, encoder.dim) for info in shards]
    t_bm25 = time.perf_counter()
    bm25 = build_bm25(cfg.out, opened)
    logger.info("bm25 over %d blocks in %.1f s", totals["blocks"], time.perf_counter() - t_bm25)
    manifest = Manifest(
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        model=ModelInfo(
            path=str(encoder.model_dir),
            fingerprint=fingerprint,
            model_type=encoder.model.config.model_type,
            tokenizer=type(encoder.tokenizer).__name__,
            vocab_size=len(encoder.tokenizer),
            mask_token=encoder.tokenizer.mask_token,
        ),
        dim=encoder.dim,
        index_type=cfg.index_type,
        vector_dtype=cfg.vector_dtype,
        similarity_scale=1.0 / math.sqrt(encoder.dim),
        build=cfg.model_dump(mode="json", exclude={"overwrite"}),
        corpus={"path": str(cfg.corpus.resolve()), "format": fmt},
        counts=Counts(
            documents=stats["documents"],
            empty_documents=stats["empty_documents"],
            blocks=totals["blocks"],
            tokens=totals["tokens"],
            shards=len(shards),
        ),
        shards=shards,
        bm25=FileInfo(**file_record(bm25)),
    )
    manifest.save(cfg.out)
    return BuildSummary(
        out=cfg.out,
        documents=stats["documents"],
        empty_documents=stats["empty_documents"],
        blocks=totals["blocks"],
        tokens=totals["tokens"],
        shards=len(shards),
        seconds=time.perf_counter() - t0,
        encoded_tokens=totals["encoded"],
    )


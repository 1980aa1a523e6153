"""`indexer compact`: fold delta shards and tombstones back into regular shards, without encoding anything.

The live blocks from the first shard that changed (a delta, or a shard with tombstones; from the shard before it
when the block that follows that one is no longer the one the build saw, so that its greedy cut is a build's)
are streamed in index order and cut into shards of `shard_tokens` as a build cuts them, then written with
their stored arrays copied (token ids, offsets, flags, the stored vectors' very bytes); the FAISS index of each
new shard is built from its tokens' vectors (read back exactly from Flat and HNSW-Flat indexes, else from the
stored vectors) with the build's trained template. The shards before are kept as they are; BM25 is rebuilt over
every block under a new name; then the manifest is replaced (the commit), with no delta and no tombstone left.

What a fresh build of the same documents (in index order: the build's documents, then the added ones) would do
otherwise: the same shard boundaries, blocks, token rows, stored vectors and BM25, so the same fills with exact
(Flat) shards. With IVF shards the lists are the build's template (a fresh build trains them on its own first
shard) and, with int8 storage, the codes are computed from the dequantized vectors: ANN candidates can differ
at the far end, and exact re-scoring makes the scores the same.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from common.errors import AppError
from common.files import file_record
from indexer.ann import resolve_factory
from indexer.bm25 import build_bm25
from indexer.gc import collect_garbage
from indexer.lock import require_index, writer_lock
from indexer.manifest import FileInfo, Manifest, ShardInfo
from indexer.phrase_index import is_exact
from indexer.shard import Shard
from indexer.shard_size import MIN_SHARD_TOKENS, chunk_blocks
from indexer.shard_writer import ShardContent, ShardPlan, write_shard
from indexer.templates import Templates, needs_training
from indexer.tombstones import Tombstones

logger = logging.getLogger(__name__)


class CompactConfig(BaseModel):
    """Fold an index's delta shards and deleted documents into regular shards (no encoding)."""

    index: Path = Field(description="index directory built by `indexer build` and changed by add / delete")


def run_compact(cfg: CompactConfig) -> "CompactSummary":
    require_index(cfg.index)
    with writer_lock(cfg.index, "indexer compact"):
        return compact_index(cfg.index)


@dataclass
class CompactSummary:
    index: str
    generation: int
    shards_before: int
    shards_after: int
    rewritten_tokens: int  # live tokens copied into new shards
    dropped_documents: int  # deleted documents whose tokens are gone for good
    seconds: float

    def line(self) -> str:
        if self.rewritten_tokens == 0 and self.shards_before == self.shards_after:
            return f"{self.index}: nothing to compact (no delta shard, no deleted document)"
        return (
            f"{self.index}: generation {self.generation}: {self.shards_before} shards -> {self.shards_after}, "
            f"{self.rewritten_tokens} live tokens rewritten, {self.dropped_documents} deleted documents dropped "
            f"in {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class StoredBlock:
    """A live block of an opened shard, as `chunk_blocks` cuts them (its length: its tokens)."""

    shard: Shard
    block: int  # local block number
    doc_key: tuple[str, int]  # (shard name, document row): the document's identity in the stream

    def __len__(self) -> int:
        return int(self.shard.blocks[self.block, 2] - self.shard.blocks[self.block, 1])


def first_changed(manifest: Manifest, tombstones: Tombstones, shards: list[Shard]) -> int | None:
    """The number (in manifest order) of the first shard compaction rewrites, or None when nothing changed."""
    changed = [i for i, s in enumerate(manifest.shards) if s.bm25 is not None or tombstones.of(s.name).size]
    if not changed:
        return None
    first = changed[0]
    info, blocks = manifest.shards[first], shards[first].blocks
    if first > 0 and (info.bm25 is not None or int(blocks[0, 0]) in tombstones.of(info.name)):
        # the block after the shard before is not the one the build saw there (a delta's, or a deleted one):
        # a build of the live blocks might cut that shard later, so it is rewritten too
        first -= 1
    return first


def content_of(blocks: list[StoredBlock]) -> ShardContent:
    """A new shard's content: the blocks' stored arrays copied, their documents renumbered in order."""
    rows: dict[tuple[str, int], int] = {}
    ids: list[str]
    titles: list[str | None]
    texts: list[str]
    block_rows: list[tuple[int, int, int]]
    parts: list[tuple[Shard, int, int]]
    ids, titles, texts, block_rows, parts = [], [], [], [], []
    pos = 0
    for b in blocks:
        shard, (row, first, end) = b.shard, (int(x) for x in b.shard.blocks[b.block])
        if b.doc_key not in rows:
            rows[b.doc_key] = len(ids)
            ids.append(shard.doc_id(row))
            titles.append(shard.doc_title(row))
            texts.append(shard.doc_text(row))
        block_rows.append((rows[b.doc_key], pos, pos + end - first))
        parts.append((shard, first, end))
        pos += end - first
    scales = [p[0].vectors.scales[p[1] : p[2]] for p in parts if p[0].vectors.scales is not None]
    kept = all(p[0].info.vector_dtype != "none" for p in parts)  # else the new index codes them anew
    return ShardContent(
        vectors=np.concatenate([_faiss_vectors(s, a, b) for s, a, b in parts]),
        token_ids=np.concatenate([np.asarray(s.token_ids[a:b]) for s, a, b in parts]),
        offsets=np.concatenate([s.offsets[a:b] for s, a, b in parts]),
        flags=np.concatenate([np.asarray(s.flags[a:b]) for s, a, b in parts]),
        blocks=np.asarray(block_rows, dtype=np.int64).reshape(-1, 3),
        doc_ids=ids,
        doc_titles=titles,
        doc_texts=texts,
        stored=(
            np.concatenate([np.asarray(s.vectors.data[a:b]) for s, a, b in parts]),
            np.concatenate(scales) if scales else None,
        )
        if kept
        else None,
    )


def _faiss_vectors(shard: Shard, a: int, b: int) -> np.ndarray:
    """float16 vectors of tokens a..b as the build gave FAISS: read back from a Flat or HNSW-Flat index (which
    keeps them in float32, exactly), else the stored vectors (exact for float16 storage)."""
    if is_exact(shard.info.factory) or shard.info.factory.startswith("HNSW") and shard.info.factory.endswith(",Flat"):
        return shard.index.reconstruct_n(a, b - a).astype(np.float16)
    return shard.vectors[a:b].astype(np.float16)


def compact_index(root: Path) -> CompactSummary:
    """Compact the index at `root` (the caller holds the writer lock, indexer.lock)."""
    t0 = time.perf_counter()
    m = Manifest.load(root)
    collect_garbage(root, m)
    tombstones = Tombstones.load(root, m)
    shards = [Shard(root, info, m.dim) for info in m.shards]
    first = first_changed(m, tombstones, shards)
    if first is None:
        return CompactSummary(root.name, m.generation, len(m.shards), len(m.shards), 0, 0, time.perf_counter() - t0)
    live = [
        StoredBlock(s, b, (s.info.name, int(s.blocks[b, 0])))
        for s in shards[first:]
        for b in np.flatnonzero(~np.isin(s.blocks[:, 0], tombstones.of(s.info.name))).tolist()
    ]
    kept = list(m.shards[:first])
    if not kept and not live:
        raise AppError(
            f"every document of index {root.name} is deleted; compaction would leave no shard (add "
            "documents first, or build a new index)"
        )
    number = 1 + max(int(s.name.split("_")[1]) for s in m.shards)
    total = sum(s.tokens for s in kept) + sum(len(b) for b in live)
    written: list[ShardInfo] = []
    for chunk in chunk_blocks(live, m.build.shard_tokens or MIN_SHARD_TOKENS):
        written.append(
            _write(root, m, chunk, number + len(written), (kept + written)[-1] if kept + written else None, total)
        )
    new_shards = kept + written
    opened = [Shard(root, info, m.dim) for info in new_shards]
    generation = m.generation + 1
    bm25 = build_bm25(root, opened, name=f"bm25_{generation:06d}.sqlite") if m.bm25 is not None else None
    compacted = _compacted_manifest(m, new_shards, bm25)
    compacted.save(root)
    collect_garbage(root, compacted, keep=m)
    return CompactSummary(
        root.name,
        generation,
        len(m.shards),
        len(new_shards),
        sum(s.tokens for s in written),
        m.counts.deleted_documents,
        time.perf_counter() - t0,
    )


def _compacted_manifest(m: Manifest, new_shards: list[ShardInfo], bm25: Path | None) -> Manifest:
    """`m`'s next generation: `new_shards` (and `bm25`, rebuilt over them) with no delta and no tombstone left."""
    counts = m.counts.model_copy(
        update={
            "blocks": sum(s.blocks for s in new_shards),
            "tokens": sum(s.tokens for s in new_shards),
            "shards": len(new_shards),
            "deleted_documents": 0,
            "deleted_tokens": 0,
        }
    )
    return m.model_copy(
        update={
            "shards": new_shards,
            "counts": counts,
            "generation": m.generation + 1,
            "tombstones": None,
            "bm25": FileInfo(**file_record(bm25)) if bm25 is not None else None,
            "bm25_name": bm25.name if bm25 is not None else m.bm25_name,
            "updated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
    )


def _write(
    root: Path, m: Manifest, blocks: list[StoredBlock], number: int, previous: ShardInfo | None, total: int
) -> ShardInfo:
    """One compacted shard after `previous`, with the factory a build would give it and the build's template."""
    tokens = sum(len(b) for b in blocks)
    budget = None if m.build.memory_budget is None else int(m.build.memory_budget * tokens / max(tokens, total))
    factory = resolve_factory(m.build.index_type, tokens, m.dim, budget, m.vector_dtype)
    content = content_of(blocks)
    trained = None
    if needs_training(factory, m.dim):
        templates = Templates(root)
        trained = templates.load(factory, wait=False)
        if trained is None:
            trained = templates.train(content.vectors, factory, seed=number)
    plan = ShardPlan(
        number,
        tokens,
        len(blocks),
        previous.token_base + previous.tokens if previous else 0,
        previous.block_base + previous.blocks if previous else 0,
        factory,
    )
    info = write_shard(root, plan, content, m.vector_dtype, trained=trained)
    logger.info("compacted %s: %d tokens in %d blocks (%s)", info.name, tokens, len(blocks), factory)
    return info

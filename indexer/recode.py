"""`indexer recode --index IDX --out OUT`: an index's vectors coded anew from its stored vectors, no text encoded.

Each shard's stored arrays are copied (token ids, offsets, flags, blocks, documents: the bytes a build writes
for them) and its vectors read back (decoded from int8 / float16 storage, or from a Flat index's own floats);
a FAISS index of the chosen index type and vector storage is built from them (default: the compact codes of
vector_dtype "none", indexer.ann_codes), its training done once on the first shard that needs it (a build's
template, indexer.templates). BM25 is copied; the manifest is written last (the commit). Shards are written
atomically one at a time: an interrupted recode run again keeps the finished ones. The input is only read.
The codes come from the stored (int8) vectors, not from the encoder's own: the difference is int8's rounding.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from common.errors import AppError
from common.files import atomic_path, file_record
from indexer.ann import check_index_type, resolve_factory
from indexer.compact import StoredBlock, content_of
from indexer.lock import require_index, writer_lock
from indexer.manifest import MANIFEST_NAME, FileInfo, Manifest, ShardInfo
from indexer.shard import Shard, read_shard_info
from indexer.shard_writer import ShardPlan, write_shard
from indexer.templates import Templates, needs_training

logger = logging.getLogger(__name__)


class RecodeConfig(BaseModel):
    """Code an index's vectors anew (another vector storage or ANN index) from its stored vectors."""

    index: Path = Field(description="index directory to re-code (read, not changed)")
    out: Path = Field(description="the re-coded index directory (a recode interrupted there resumes)")
    vector_dtype: Literal["none", "int8", "float16"] = Field(
        "none", description="the new index's stored vectors: none (its ANN codes score), int8 or float16"
    )
    index_type: str = Field("auto", description="the new ANN index per shard, as `indexer build --index-type`")


@dataclass
class RecodeSummary:
    out: str
    shards: int
    recoded: int  # shards written by this run (the others were finished by an earlier one)
    tokens: int
    factories: list[str]
    seconds: float

    def line(self) -> str:
        return (
            f"recoded {self.out}: {self.tokens} tokens in {self.shards} shards ({self.recoded} written now; "
            f"{', '.join(sorted(set(self.factories)))}) in {self.seconds:.1f} s"
        )


def run_recode(cfg: RecodeConfig) -> RecodeSummary:
    require_index(cfg.index)
    if cfg.out.resolve() == cfg.index.resolve():
        raise AppError(f"--out {cfg.out} is the index itself; recode writes a new index beside it", kind="validation")
    if (cfg.out / MANIFEST_NAME).is_file():
        raise AppError(f"--out {cfg.out} already holds a finished index; remove it or choose another directory")
    m = Manifest.load(cfg.index)
    if m.delta_shards or m.tombstones is not None:
        raise AppError(
            f"index {cfg.index} has live changes (delta shards or deleted documents); fold them in first: "
            f"indexer compact --index {cfg.index}"
        )
    index_type = check_index_type(cfg.index_type, m.dim, cfg.vector_dtype)
    cfg.out.mkdir(parents=True, exist_ok=True)
    with writer_lock(cfg.out, "indexer recode"):
        return recode_index(cfg.index, cfg.out, m, index_type, cfg.vector_dtype)


def recode_index(src: Path, out: Path, m: Manifest, index_type: str, vector_dtype: str) -> RecodeSummary:
    """Write every shard of `m` (the index at `src`) re-coded under `out`, then its BM25 and manifest."""
    t0 = time.perf_counter()
    templates, infos, recoded = Templates(out), [], 0
    for number, info in enumerate(m.shards):
        budget = None if m.build.memory_budget is None else m.build.memory_budget * info.tokens // m.counts.tokens
        factory = resolve_factory(index_type, info.tokens, m.dim, budget, vector_dtype)
        plan = ShardPlan(number, info.tokens, info.blocks, info.token_base, info.block_base, factory)
        done = read_shard_info(out, number)
        if plan.matches(done) and (done.factory, done.vector_dtype) == (factory, vector_dtype):
            logger.info("%s already recoded, kept", done.name)
            infos.append(done)
            continue
        infos.append(_recode_shard(Shard(src, info, m.dim), plan, out, templates, vector_dtype))
        recoded += 1
    if m.bm25 is not None:
        with atomic_path(out / m.bm25_name) as tmp:
            shutil.copyfile(src / m.bm25_name, tmp)
    build = m.build.model_copy(update={"out": out, "index_type": index_type, "vector_dtype": vector_dtype})
    new = m.model_copy(
        update={
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "index_type": index_type,
            "vector_dtype": vector_dtype,
            "build": build,
            "shards": infos,
            "bm25": FileInfo(**file_record(out / m.bm25_name)) if m.bm25 is not None else None,
        }
    )
    new.save(out)
    seconds = time.perf_counter() - t0
    return RecodeSummary(str(out), len(infos), recoded, m.counts.tokens, [i.factory for i in infos], seconds)


def _recode_shard(shard: Shard, plan: ShardPlan, out: Path, templates: Templates, vector_dtype: str) -> ShardInfo:
    """One shard's arrays copied and its vectors (decoded) indexed anew by `plan.factory`."""
    blocks = [StoredBlock(shard, b, (shard.info.name, int(shard.blocks[b, 0]))) for b in range(len(shard.blocks))]
    content = dataclasses.replace(content_of(blocks), stored=None)  # vectors stored (or not) as `vector_dtype` says
    trained = None
    if needs_training(plan.factory, content.vectors.shape[1]):
        trained = templates.load(plan.factory, wait=False)
        if trained is None:
            trained = templates.train(content.vectors, plan.factory, seed=plan.number)
    info = write_shard(out, plan, content, vector_dtype, trained=trained)
    logger.info("recoded %s: %d tokens (%s, vectors %s)", info.name, info.tokens, plan.factory, vector_dtype)
    return info

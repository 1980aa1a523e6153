"""The build job: config resolved once (ResolvedBuild) -> corpus -> blocks -> shards (plan, encode, write) ->
BM25 and manifest (finish).

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field
from tqdm import tqdm

from common.distributed import Rank, join
from common.errors import AppError
from common.files import file_record
from corpus.blocking import Block, iter_blocks
from corpus.readers import count_documents, detect_format, read_corpus
from encoder.device import choose_device
from encoder.model import Encoder
from indexer.ann import check_index_type, resolve_factory
from indexer.bm25 import build_bm25
from indexer.encode import default_batch_tokens, encode_shard
from indexer.lock import writer_lock
from indexer.manifest import MANIFEST_NAME, BuildSettings, Counts, FileInfo, Manifest, ModelInfo, ShardInfo
from indexer.outdir import BUILD_STATE, identity, prepare_out, remove_stale_shards, remove_unstarted
from indexer.shard import Shard, read_shard_info
from indexer.shard_size import auto_shard_tokens, chunk_blocks
from indexer.shard_writer import ShardContent, ShardPlan, write_shard
from indexer.templates import Templates, needs_training

logger = logging.getLogger(__name__)


class BuildConfig(BuildSettings):
    """Embed every token of a corpus into sharded FAISS indexes plus stored vectors."""

    model_config = ConfigDict(extra="ignore")  # the recorded settings keep unknown keys; a job's config does not

    overwrite: bool = Field(False, description="replace an existing different index in --out")


@dataclass(frozen=True)
class ResolvedBuild:
    """A build's config resolved once against its corpus and loaded encoder: what the job, the output directory's
    identity and the manifest read, so that none of them derives it again."""

    config: BuildConfig  # validated: the block size fits the model; index_type checked against its dimension
    corpus_format: str
    dim: int
    dtype: str  # the encoder's torch dtype, e.g. "float32"
    engine: str  # the encoder's resolved engine
    fingerprint: str  # model_fingerprint of the model directory (computed once, by the encoder)
    batch_tokens: int  # padded tokens per encoder batch: the config's, or the device's default
    documents: int | None  # the corpus's documents (count_documents: None for a directory of text)
    model: ModelInfo  # the manifest's record of the model
    settings: BuildSettings  # the manifest's record of the build: the config less the job's own flags
    identity_settings: dict[str, Any]  # the settings an existing --out must match to be resumed (indexer.outdir)

    @classmethod
    def resolve(cls, cfg: BuildConfig, encoder: Encoder, corpus_format: str) -> ResolvedBuild:
        """Check `cfg` against the loaded encoder (AppError when the blocks do not fit the model or the index type
        is unknown) and derive everything the build needs of the pair."""
        overhead = encoder.pair_overhead + cfg.title_tokens if cfg.title_tokens else encoder.block_overhead
        if cfg.block_tokens + overhead > encoder.max_length:
            raise AppError(
                f"--block-tokens {cfg.block_tokens} plus {cfg.title_tokens} title tokens and special tokens exceeds "
                f"the model limit of {encoder.max_length}; lower --block-tokens"
            )
        documents = count_documents(cfg.corpus)
        cfg = cfg.model_copy(
            update={
                "index_type": check_index_type(cfg.index_type, encoder.dim, cfg.vector_dtype),
                "shard_tokens": cfg.shard_tokens or auto_shard_tokens(cfg.corpus, documents, encoder.tokenizer),
            }
        )
        dtype = str(encoder.dtype).replace("torch.", "")
        tokenizer = encoder.tokenizer
        config: Any = encoder.model.config  # transformers' config or LeanBert's namespace: fields read by name
        model = ModelInfo(
            path=str(encoder.model_dir),
            fingerprint=encoder.fingerprint,
            model_type=config.model_type,
            tokenizer=type(tokenizer).__name__,
            vocab_size=len(tokenizer),
            mask_token=tokenizer.mask_token,
        )
        identity_settings = cfg.model_dump(
            include={"block_tokens", "shard_tokens", "title_tokens", "index_type", "memory_budget", "vector_dtype"}
        )
        identity_settings.update(dtype=dtype, engine=encoder.engine)
        return cls(
            config=cfg,
            corpus_format=corpus_format,
            dim=encoder.dim,
            dtype=dtype,
            engine=encoder.engine,
            fingerprint=model.fingerprint,
            batch_tokens=cfg.batch_tokens or default_batch_tokens(encoder.device),
            documents=documents,
            model=model,
            settings=BuildSettings.model_validate(cfg.model_dump(exclude={"overwrite"})),
            identity_settings=identity_settings,
        )

    def manifest(self, counts: Counts, shards: list[ShardInfo], bm25: FileInfo) -> Manifest:
        """The manifest of a finished build of these settings (created now)."""
        cfg = self.config
        return Manifest(
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            model=self.model,
            dim=self.dim,
            index_type=cfg.index_type,
            vector_dtype=cfg.vector_dtype,
            similarity_scale=1.0 / math.sqrt(self.dim),
            build=self.settings,
            corpus={"path": str(cfg.corpus.resolve()), "format": self.corpus_format},
            counts=counts,
            shards=shards,
            bm25=bm25,
        )


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


class BuildJob:
    """One `indexer build`: `run()` plans shards, encodes and writes this process's, then finishes."""

    def __init__(self, cfg: BuildConfig) -> None:
        corpus_format = detect_format(cfg.corpus)  # first: a bad corpus is refused before any model is loaded
        self.place: Rank = join("gloo", timeout=dt.timedelta(hours=24))  # gloo: barriers only, GPU or not
        device = choose_device(cfg.device, self.place.local_rank)
        self.encoder = Encoder(cfg.model, device=device, dtype=cfg.dtype, engine=cfg.engine).for_inference()
        self.resolved = ResolvedBuild.resolve(cfg, self.encoder, corpus_format)
        self.templates = Templates(cfg.out)
        self.factories: list[str] = []  # every shard's factory so far (all processes compute all of them)
        self.stats: dict[str, int] = {}
        self.encoded = 0

    @property
    def cfg(self) -> BuildConfig:
        """The resolved (validated) config."""
        return self.resolved.config

    # ---- the steps ------------------------------------------------------------------------------
    def run(self) -> BuildSummary:
        """The build; the leading process holds the index's writer lock (indexer.lock) from before it prepares
        an existing index directory (or, for a new one, from just after) to the end."""
        if not self.place.leader:
            return self._run()
        cfg = self.cfg
        ident = identity(cfg.corpus, self.resolved.fingerprint, self.resolved.identity_settings)
        created = not cfg.out.exists()
        try:
            if (cfg.out / MANIFEST_NAME).is_file() or (cfg.out / BUILD_STATE).is_file():
                with writer_lock(cfg.out, "indexer build"):
                    prepare_out(cfg.out, ident, cfg.overwrite)
                    return self._run()
            prepare_out(cfg.out, ident, cfg.overwrite)
            with writer_lock(cfg.out, "indexer build"):
                return self._run()
        except BaseException:
            if created:
                remove_unstarted(cfg.out)
            raise

    def _run(self) -> BuildSummary:
        t0 = time.perf_counter()
        cfg = self.cfg
        self.place.barrier()
        if self.place.world > 1:
            p = self.place
            logger.info(
                "rank %d of %d: encoding shards %d, %d + %d, ... on %s",
                p.rank,
                p.world,
                p.rank,
                p.rank,
                p.world,
                self.encoder.device,
            )
        total_docs = self.resolved.documents
        bar = tqdm(
            total=None, unit="tok", unit_scale=True, desc="indexing", dynamic_ncols=True, disable=not self.place.leader
        )
        plans: list[ShardPlan] = []
        blocks = iter_blocks(
            read_corpus(cfg.corpus), self.encoder.tokenizer, cfg.block_tokens, cfg.title_tokens, stats=self.stats
        )
        assert cfg.shard_tokens is not None  # resolved (ResolvedBuild)
        for chunk in chunk_blocks(blocks, cfg.shard_tokens):
            plan = self.plan_shard(chunk, plans[-1] if plans else None, total_docs, bar)
            plans.append(plan)
            if plan.number % self.place.world == self.place.rank:
                self.build_shard(plan, chunk, bar)
            else:
                bar.update(plan.tokens)
        bar.close()
        if not plans or plans[-1].token_base + plans[-1].tokens == 0:
            raise AppError(f"corpus {cfg.corpus} holds no text to index (all documents are empty)")
        self.place.barrier()
        if self.place.leader:  # rank 0 checks every shard and writes BM25 and the manifest
            self.finish(plans)
        return self.summary(plans, time.perf_counter() - t0)

    def plan_shard(
        self, blocks: list[Block], previous: ShardPlan | None, total_docs: int | None, bar: tqdm
    ) -> ShardPlan:
        """The next shard: its bases follow the previous shard; its factory fits its share of the memory budget."""
        token_base = previous.token_base + previous.tokens if previous else 0
        block_base = previous.block_base + previous.blocks if previous else 0
        tokens = sum(len(b) for b in blocks)
        seen = token_base + tokens
        if total_docs:  # estimate the total from the tokens per document read so far, for the ETA
            bar.total = max(seen, int(seen / max(1, self.stats["documents"]) * total_docs))
            bar.refresh()
        budget = None
        if self.cfg.memory_budget is not None:  # this shard's share of the budget, by its share of the tokens
            budget = int(self.cfg.memory_budget * tokens / max(tokens, bar.total or 0, seen))
        factory = resolve_factory(self.cfg.index_type, tokens, self.encoder.dim, budget, self.cfg.vector_dtype)
        self.factories.append(factory)
        return ShardPlan(len(self.factories) - 1, tokens, len(blocks), token_base, block_base, factory)

    def build_shard(self, plan: ShardPlan, blocks: list[Block], bar: tqdm) -> ShardInfo:
        """Encode and write a shard, or keep it when a finished one with the same place is on disk."""
        info = read_shard_info(self.cfg.out, plan.number)
        if plan.matches(info):
            logger.info("%s already built, skipping its %d tokens", info.name, info.tokens)
            bar.update(info.tokens)
            return info
        t_enc = time.perf_counter()
        vectors = encode_shard(self.encoder, blocks, self.resolved.batch_tokens, bar)
        t_ann = time.perf_counter()
        info = write_shard(
            self.cfg.out,
            plan,
            ShardContent.from_blocks(blocks, vectors),
            self.cfg.vector_dtype,
            trained=self.trained(plan, vectors),
        )
        logger.info(
            "shard %d: %d tokens, encode %.1f s, index and write %.1f s",
            plan.number,
            info.tokens,
            t_ann - t_enc,
            time.perf_counter() - t_ann,
        )
        self.encoded += info.tokens
        return info

    def trained(self, plan: ShardPlan, vectors: np.ndarray):
        """The shared trained (empty) FAISS index of the shard's factory, trained here by its first shard unless
        the output directory already holds it (a resumed build, or another build's trained/ put there so that
        the two can be merged: indexer.merge)."""
        if not needs_training(plan.factory, self.encoder.dim):
            return None
        first = self.factories.index(plan.factory)  # the shard whose vectors train this factory's template
        if first == plan.number:
            existing = self.templates.load(plan.factory, wait=False)
            if existing is not None and existing.d != self.encoder.dim:
                raise AppError(
                    f"{self.templates.path(plan.factory)} is a template of {existing.d}-dimensional "
                    f"vectors, not {self.encoder.dim} (another model's): remove it, or put this model's there"
                )
            return existing if existing is not None else self.templates.train(vectors, plan.factory, seed=plan.number)
        # wait for the first shard's process unless that shard is already on disk without a template
        trained = self.templates.load(plan.factory, wait=read_shard_info(self.cfg.out, first) is None)
        return trained if trained is not None else self.templates.train(vectors, plan.factory, seed=plan.number)

    def finish(self, plans: list[ShardPlan]) -> Manifest:
        """Check every shard (written by any process), write BM25 over all blocks, then the manifest."""
        cfg = self.cfg
        shards = []
        for plan in plans:
            info = read_shard_info(cfg.out, plan.number)
            if not plan.matches(info):
                raise AppError(
                    f"shard {plan.number} in {cfg.out} is missing or does not match the corpus; re-run the same command"
                )
            shards.append(info)
        remove_stale_shards(cfg.out, {s.name for s in shards})
        t_bm25 = time.perf_counter()
        bm25 = build_bm25(cfg.out, [Shard(cfg.out, info, self.resolved.dim) for info in shards])
        logger.info("bm25 over %d blocks in %.1f s", sum(s.blocks for s in shards), time.perf_counter() - t_bm25)
        counts = Counts(
            documents=self.stats["documents"],
            empty_documents=self.stats["empty_documents"],
            blocks=sum(s.blocks for s in shards),
            tokens=sum(s.tokens for s in shards),
            shards=len(shards),
        )
        manifest = self.resolved.manifest(counts, shards, FileInfo(**file_record(bm25)))
        manifest.save(cfg.out)
        return manifest

    def summary(self, plans: list[ShardPlan], seconds: float) -> BuildSummary:
        last = plans[-1]
        return BuildSummary(
            out=self.cfg.out,
            documents=self.stats["documents"],
            empty_documents=self.stats["empty_documents"],
            blocks=last.block_base + last.blocks,
            tokens=last.token_base + last.tokens,
            shards=len(plans),
            seconds=seconds,
            encoded_tokens=self.encoded,
        )


def build_index(cfg: BuildConfig) -> BuildSummary:
    return BuildJob(cfg).run()

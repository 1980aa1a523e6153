"""Live corpus updates: add, replace and delete documents of a finished index without a rebuild.

`indexer add` / `indexer delete` and the server's /admin/documents run an `IndexUpdate`, one at a time (the
writer lock, indexer.lock). A change never rewrites a file a reader may have open; it only adds files:
  add      the documents are blocked and encoded with the index's own model and settings and written as
           new delta shard(s) after the last one (each with the FAISS template the build trained, so no IVF is
           retrained, and its own BM25 file whose weights use the build's statistics, indexer.bm25.BaseStats);
           a document whose id is in the index replaces it: its old rows are tombstoned
  delete   the documents' rows are tombstoned (indexer.tombstones)
and then commits by replacing the manifest (generation + 1): killed at any point before, the index is as it
was; after, as it is meant to be. Files left by a killed writer, and those of generations older than the
previous one, are removed by the next writer (`collect_garbage`). `indexer compact` (indexer.compact) folds
the deltas and tombstones back into regular shards.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from common.errors import AppError
from common.files import file_record
from common.priority import at_priority
from corpus.blocking import iter_blocks
from corpus.readers import Document, read_corpus
from encoder.model import Encoder
from encoder.runtime_options import RuntimeOptions
from indexer.ann import resolve_factory
from indexer.bm25 import BM25, build_bm25
from indexer.bm25_postings import BaseStats
from indexer.documents import check_documents, document_rows, each_with_tokens, id_problem
from indexer.encode import default_batch_tokens, encode_shard
from indexer.gc import collect_garbage
from indexer.lock import require_index, writer_lock
from indexer.manifest import FileInfo, Manifest, ShardInfo
from indexer.shard import Shard, delta_bm25_name
from indexer.shard_size import MIN_SHARD_TOKENS, chunk_blocks
from indexer.shard_writer import ShardContent, ShardPlan, write_shard
from indexer.templates import Templates, needs_training
from indexer.tombstones import Tombstones

logger = logging.getLogger(__name__)


class AddConfig(RuntimeOptions):
    """Add documents to a finished index (a document whose id is in the index replaces it), without a rebuild."""

    index: Path = Field(description="index directory built by `indexer build`")
    corpus: Path = Field(
        description="documents to add: .jsonl, .arrow, .parquet, HF save_to_disk dir or dir of .txt; "
        "every document needs an `id`"
    )
    model: Path | None = Field(
        None,
        description="the index's model directory, where it has moved (default: the one "
        "the manifest names; another model is refused)",
    )


class DeleteConfig(BaseModel):
    """Delete documents from a finished index by id, without a rebuild."""

    index: Path = Field(description="index directory built by `indexer build`")
    ids: list[str] = Field(default_factory=list, description="document ids to delete (repeat the flag)")
    ids_file: Path | None = Field(None, description="file of document ids to delete, one per line")

    def all_ids(self) -> list[str]:
        """The ids of --ids and --ids-file, or an AppError naming the unreadable file / the missing ids."""
        ids = list(self.ids)
        if self.ids_file is not None:
            try:
                ids += [line.strip() for line in self.ids_file.read_text(encoding="utf-8").splitlines() if line.strip()]
            except (OSError, UnicodeDecodeError) as exc:
                raise AppError(
                    f"cannot read the ids file {self.ids_file} (--ids-file): "
                    f"{exc.strerror if isinstance(exc, OSError) else exc}"
                ) from None
        if not ids:
            raise AppError("no document id given: pass --ids ID (repeatable) or --ids-file FILE", kind="validation")
        return ids


def run_add(cfg: AddConfig) -> UpdateSummary:
    require_index(cfg.index)
    with writer_lock(cfg.index, "indexer add"):
        update = IndexUpdate(cfg.index, model=cfg.model, device=cfg.device, dtype=cfg.dtype, engine=cfg.engine)
        return update.add(read_corpus(cfg.corpus, records=True))


def run_delete(cfg: DeleteConfig) -> UpdateSummary:
    ids = cfg.all_ids()
    require_index(cfg.index)
    with writer_lock(cfg.index, "indexer delete"):
        return IndexUpdate(cfg.index).delete(ids)


@dataclass
class UpdateSummary:
    index: str
    generation: int
    added: int  # documents written (new or replacing)
    replaced: int  # of them, documents whose id was in the index
    deleted: int  # documents deleted by id
    tokens: int  # tokens encoded
    seconds: float

    def line(self) -> str:
        return (
            f"{self.index}: generation {self.generation}: {self.added} documents added ({self.replaced} "
            f"replacing), {self.deleted} deleted, {self.tokens} tokens encoded in {self.seconds:.2f} s"
        )


class IndexUpdate:
    """One change to the index at `root`, made with `encoder` (default: the manifest's model, loaded here);
    the caller holds the writer lock (indexer.lock). A server passes the shards it has `opened`, the CPU
    priority (`encode_nice`) at which the documents are encoded, and a `check` called between encoding batches
    that raises to stop the change (a time limit, a shutdown): nothing is committed and its files are removed."""

    def __init__(
        self,
        root: Path,
        encoder: Encoder | None = None,
        model: Path | None = None,
        device: str = "auto",
        dtype: str = "auto",
        engine: str = "auto",
        opened: dict[str, Shard] | None = None,
        encode_nice: int | None = None,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.t0 = time.perf_counter()
        self.manifest = Manifest.load(self.root)
        collect_garbage(self.root, self.manifest)  # what a killed writer left
        self.tombstones = Tombstones.load(self.root, self.manifest)
        if self.manifest.bm25 is not None and not self._has_postings():
            raise AppError(
                f"index {self.root.name} was built before BM25 postings; rebuild it (`indexer build "
                "--overwrite`) to update it"
            )
        self._encoder, self._model, self._device, self._dtype, self._engine = encoder, model, device, dtype, engine
        self.opened = opened or {}  # shards a server has open (document_rows)
        self.encode_nice = encode_nice  # a server's: encode at this CPU priority (common.priority)
        self.check = check

    @property
    def encoder(self) -> Encoder:
        """The index's own model (refused when it is another)."""
        if self._encoder is None:
            model_dir = self._model or Path(self.manifest.model.path)
            if not model_dir.is_dir():
                raise AppError(
                    f"the index was built with the model at {model_dir}, which does not exist here; "
                    "pass --model with that model's directory"
                )
            self._encoder = Encoder(
                model_dir, device=self._device, dtype=self._dtype, engine=self._engine
            ).for_inference()
        if self._encoder.fingerprint != self.manifest.model.fingerprint:
            raise AppError(
                f"model {self._encoder.model_dir.name} is not the model the index {self.root.name} was "
                "built with; an update must encode with the index's own model"
            )
        return self._encoder

    def add(self, documents: Iterable[Document]) -> UpdateSummary:
        """Write `documents` as delta shards; those whose id is in the index replace it."""
        docs = check_documents(documents)
        old = document_rows(self.root, self.manifest, self.tombstones, [d.id for d in docs], self.opened)
        encoder = self.encoder
        build = self.manifest.build
        blocks = each_with_tokens(iter_blocks(docs, encoder.tokenizer, build.block_tokens, build.title_tokens), docs)
        shards: list[ShardInfo]
        shards, tokens = [], 0
        try:
            for chunk in chunk_blocks(blocks, build.shard_tokens or MIN_SHARD_TOKENS):
                shards.append(self._write_delta(chunk, shards))
                tokens += shards[-1].tokens
        except BaseException:
            collect_garbage(self.root, self.manifest)  # the delta shards written before the stop
            raise
        self._commit(shards, old, len(docs))
        return UpdateSummary(
            self.root.name, self.manifest.generation, len(docs), len(old), 0, tokens, time.perf_counter() - self.t0
        )

    def delete(self, ids: list[str]) -> UpdateSummary:
        """Tombstone every live row of the documents `ids`; an id the index does not hold is a not_found
        AppError listing them (nothing is deleted)."""
        if not ids:
            raise AppError("no document id to delete", kind="validation")
        for i, doc_id in enumerate(ids):
            if problem := id_problem(doc_id):
                raise AppError(f"document id {i} ({doc_id!r}): {problem}", kind="validation")
        found = document_rows(self.root, self.manifest, self.tombstones, ids, self.opened)
        unknown = sorted(set(ids) - set(found))
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:20]) + (" ..." if len(unknown) > 20 else "")
            raise AppError(
                f"{len(unknown)} document id(s) are not in index {self.root.name}: {shown}; nothing was deleted",
                kind="not_found",
            )
        self._commit([], found, 0)
        return UpdateSummary(
            self.root.name, self.manifest.generation, 0, 0, len(found), 0, time.perf_counter() - self.t0
        )

    def _has_postings(self) -> bool:
        bm25 = BM25(self.root / self.manifest.bm25_name)  # rows: None for an index built before the postings
        try:
            return bm25.rows is not None
        finally:
            bm25.close()

    def _write_delta(self, blocks, written: list[ShardInfo]) -> ShardInfo:
        """One delta shard of `blocks` after the index's last shard (and those `written` by this update)."""
        m = self.manifest
        last = (written or m.shards)[-1]
        number = 1 + max(int(s.name.split("_")[1]) for s in [*m.shards, *written])
        tokens = sum(len(b) for b in blocks)
        factory, trained = self._factory(tokens)
        plan = ShardPlan(
            number, tokens, len(blocks), last.token_base + last.tokens, last.block_base + last.blocks, factory
        )
        encoder = self.encoder

        # not on the encoder's inference thread, which a server's queries use (Encoder.encode_blocks); beside a
        # server, on a thread at low priority (the forward pass releases the GIL)
        def encode():
            return encode_shard(encoder, blocks, default_batch_tokens(encoder.device), here=True, check=self.check)

        vectors = encode() if self.encode_nice is None else at_priority(self.encode_nice, encode)
        info = write_shard(self.root, plan, ShardContent.from_blocks(blocks, vectors), m.vector_dtype, trained=trained)
        if m.bm25 is not None:
            name = delta_bm25_name(info.name)
            build_bm25(
                self.root,
                [Shard(self.root, info, m.dim)],
                base=BaseStats.of(self.root / self.manifest.bm25_name),
                name=name,
            )
            info = info.model_copy(update={"bm25": FileInfo(**file_record(self.root / name))})
        logger.info("delta %s: %d tokens in %d blocks (%s)", info.name, tokens, len(blocks), factory)
        return info

    def _factory(self, tokens: int):
        """The FAISS factory of a delta shard and its trained template: exact Flat when small, else the
        build's trained factory (no IVF is retrained); a new trained factory only when the build has none."""
        m = self.manifest
        factory = resolve_factory(m.build.index_type, tokens, m.dim, vector_dtype=m.vector_dtype)
        if not needs_training(factory, self.manifest.dim):
            return factory, None
        templates = Templates(self.root)
        for shard in self.manifest.shards:
            if templates.path(shard.factory).is_file():
                return shard.factory, templates.load(shard.factory, wait=False)
        return factory, None

    def _commit(self, shards: list[ShardInfo], dead: dict[str, list[tuple[str, int]]], added: int) -> None:
        """Tombstone the `dead` rows, add `shards`, and replace the manifest (the commit point)."""
        old, m = self.manifest, self.manifest
        tombstones = self.tombstones
        by_shard: dict[str, list[int]] = {}
        for places in dead.values():
            for name, row in places:
                by_shard.setdefault(name, []).append(row)
        dead_tokens = 0
        for name, rows in by_shard.items():
            tombstones = tombstones.plus(name, np.asarray(rows))
            blocks = np.load(self.root / name / "blocks.npy")
            mask = np.isin(blocks[:, 0], rows)
            dead_tokens += int((blocks[mask, 2] - blocks[mask, 1]).sum())
        generation = m.generation + 1
        counts = m.counts.model_copy(
            update={
                "documents": m.counts.documents + added - len(dead),  # a document may have rows in several shards
                "blocks": m.counts.blocks + sum(s.blocks for s in shards),
                "tokens": m.counts.tokens + sum(s.tokens for s in shards),
                "shards": m.counts.shards + len(shards),
                "deleted_documents": m.counts.deleted_documents + len(dead),
                "deleted_tokens": m.counts.deleted_tokens + dead_tokens,
            }
        )
        self.manifest = m.model_copy(
            update={
                "shards": [*m.shards, *shards],
                "counts": counts,
                "generation": generation,
                "tombstones": tombstones.save(self.root, generation),
                "updated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            }
        )
        self.manifest.save(self.root)
        collect_garbage(self.root, self.manifest, keep=old)

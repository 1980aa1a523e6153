"""`indexer merge --out DIR IN1 IN2 ...`: indexes built on different machines (or by separate jobs) from one
model joined into one index, as if one build had indexed their corpora one after the other.

  check    every input is a finished, unchanged build (no delta shard, no tombstone: `indexer compact` first)
           of the same model (fingerprint), dimension, vector storage, block and title tokens, and with the
           same trained FAISS templates (the files of `trained/`, byte for byte: copy one build's `trained/`
           into the other build's output directory before it starts, and both use it)
  ids      no document id held by more than one input (refused, naming them), unless `--on-duplicate keep-first`
           or `keep-last` names the copy to keep: the others are tombstoned in DIR (indexer.merge_ids; their
           blocks stay in BM25's statistics until `indexer compact`, as after any delete)
  link     each input's shards, in the order given, become shards of DIR numbered on: a new directory whose
           files are hard links to the input's (a symbolic link where the input is on another file system;
           `--copy` copies), and a shard.json with its new name and token / block bases; the templates too
  bm25     one BM25 over every block, built as a build builds it (its statistics are the merged corpus's)
  commit   manifest.json, written last: an interrupted merge leaves no index (DIR is built as DIR.partial and
           renamed), and a new run starts over

No vector is encoded or copied (unless `--copy-files`); the merged index serves the fills of one build of the same
documents (same phrases, order and evidence; scores to the last bits that another encoding batch moves)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from common.errors import AppError
from common.files import file_record, fsync_dir, sha256_file
from indexer.bm25 import build_bm25
from indexer.manifest import Counts, FileInfo, Manifest, ShardInfo
from indexer.merge_ids import Dropped, OnDuplicate, document_places, drop_copies, duplicates, duplicates_error
from indexer.shard import Shard, shard_name
from indexer.templates import TEMPLATE_DIR
from indexer.tombstones import Tombstones

logger = logging.getLogger(__name__)

SAME = (
    "model.fingerprint",
    "dim",
    "vector_dtype",
    "similarity_scale",
    "metric",
    "build.block_tokens",
    "build.title_tokens",
)


class MergeConfig(BaseModel):
    """Join indexes built from one model into one (no vector encoded or copied)."""

    out: Path = Field(description="the merged index directory (must not exist)")
    inputs: list[Path] = Field(default_factory=list, description="the indexes to merge, in order")
    copy_files: bool = Field(False, description="copy the shards' files instead of linking them")
    on_duplicate: OnDuplicate = Field(
        "refuse",
        description="a document id held by more than one input: refuse the merge naming the ids (refuse), or keep "
        "its copy in the first (keep-first) or the last (keep-last) input that holds it, the others deleted",
    )


@dataclass
class MergeSummary:
    out: Path
    inputs: int
    shards: int
    documents: int
    tokens: int
    seconds: float
    dropped: int = 0  # copies of duplicate ids deleted (--on-duplicate keep-first / keep-last)

    def line(self) -> str:
        dropped = f" ({self.dropped} duplicate copies deleted: `indexer compact` drops them)" if self.dropped else ""
        return (
            f"merged {self.inputs} indexes into {self.out}: {self.shards} shards, {self.documents} documents, "
            f"{self.tokens} tokens in {self.seconds:.1f} s{dropped}"
        )


def _value(manifest: Manifest, dotted: str):
    value = manifest
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def check_inputs(inputs: list[Path]) -> list[Manifest]:
    """The inputs' manifests, or an AppError naming the input and what differs (and the fix)."""
    if len(inputs) < 2:
        raise AppError("indexer merge needs at least two indexes: indexer merge --out DIR IN1 IN2 ...")
    if len({p.resolve() for p in inputs}) < len(inputs):
        raise AppError("an index is given twice to indexer merge; give each once")
    manifests = [Manifest.load(p) for p in inputs]
    first = manifests[0]
    for path, m in zip(inputs, manifests):
        if m.tombstones is not None or m.delta_shards:  # a compacted index (generation > 0) has neither
            raise AppError(
                f"{path} has been updated since its build (delta shards or deleted documents); run "
                f"`indexer compact --index {path}` first"
            )
        if m.bm25 is None:
            raise AppError(f"{path} was built without BM25; the merged index needs every input's blocks in BM25")
        for field in SAME:
            if _value(m, field) != _value(first, field):
                raise AppError(
                    f"{path} differs from {inputs[0]} in {field} ({_value(m, field)!r} against "
                    f"{_value(first, field)!r}): merge only indexes built by one model with the same "
                    "settings"
                )
    _check_templates(inputs)
    return manifests


def _check_templates(inputs: list[Path]) -> None:
    """Each trained FAISS template (trained/*.faiss) present in several inputs is the same file in all."""
    seen: dict[str, tuple[Path, str]] = {}
    for root in inputs:
        for path in sorted((root / TEMPLATE_DIR).glob("*.faiss")):
            digest = sha256_file(path)
            if path.name in seen and seen[path.name][1] != digest:
                raise AppError(
                    f"{root} was trained with another FAISS template than {seen[path.name][0]} "
                    f"({TEMPLATE_DIR}/{path.name} differs): merged shards must share their IVF lists; "
                    f"copy {seen[path.name][0] / TEMPLATE_DIR} into the second build's output directory "
                    "before it starts, so that it uses the same template"
                )
            seen.setdefault(path.name, (root, digest))


def _link(src: Path, dst: Path, copy: bool) -> None:
    if copy:
        shutil.copyfile(src, dst)
        return
    try:
        os.link(src, dst)
    except OSError:  # another file system (or no hard links): refer to the path
        dst.symlink_to(src.resolve())


def _place_shard(
    src_root: Path, info: ShardInfo, dst_root: Path, number: int, token_base: int, block_base: int, copy: bool
) -> ShardInfo:
    """Input shard `info` of `src_root` as shard `number` of `dst_root` (files linked, its own shard.json)."""
    new = info.model_copy(update={"name": shard_name(number), "token_base": token_base, "block_base": block_base})
    target = dst_root / new.name
    target.mkdir()
    for fname in info.files:
        _link(src_root / info.name / fname, target / fname, copy)
    scales = src_root / info.name / "scales.npy"
    if scales.is_file() and "scales.npy" not in info.files:
        _link(scales, target / "scales.npy", copy)
    (target / "shard.json").write_text(json.dumps(new.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    return new


def merge_indexes(cfg: MergeConfig) -> MergeSummary:
    t0 = time.perf_counter()
    manifests = check_inputs(cfg.inputs)
    if cfg.out.exists():
        raise AppError(f"{cfg.out} exists; indexer merge writes a new directory (remove it, or give another --out)")
    places = document_places(cfg.inputs, manifests)
    dups = duplicates(places)
    if dups.num_rows and cfg.on_duplicate == "refuse":
        raise duplicates_error(places, dups, cfg.inputs)
    partial = cfg.out.with_name(cfg.out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an interrupted merge's leftovers
    partial.mkdir(parents=True)
    shards: list[ShardInfo] = []
    tokens = blocks = 0
    for root, m in zip(cfg.inputs, manifests):
        for info in m.shards:
            shards.append(_place_shard(root, info, partial, len(shards), tokens, blocks, cfg.copy_files))
            tokens, blocks = tokens + info.tokens, blocks + info.blocks
        for template in sorted((root / TEMPLATE_DIR).glob("*.faiss")):
            (partial / TEMPLATE_DIR).mkdir(exist_ok=True)
            if not (partial / TEMPLATE_DIR / template.name).exists():
                _link(template, partial / TEMPLATE_DIR / template.name, cfg.copy_files)
    dropped = drop_copies(partial, places, dups, cfg.on_duplicate) if dups.num_rows else None
    bm25 = build_bm25(partial, [Shard(partial, info, manifests[0].dim) for info in shards])
    merged = _merged_manifest(cfg, manifests, shards, bm25, partial, dropped)
    merged.save(partial)
    fsync_dir(partial)
    partial.rename(cfg.out)
    fsync_dir(cfg.out.parent)
    counts = merged.counts
    return MergeSummary(
        cfg.out,
        len(cfg.inputs),
        len(shards),
        counts.documents,
        tokens,
        time.perf_counter() - t0,
        counts.deleted_documents,
    )


def _merged_manifest(
    cfg: MergeConfig,
    manifests: list[Manifest],
    shards: list[ShardInfo],
    bm25: Path,
    root: Path,
    dropped: Dropped | None,
) -> Manifest:
    """The merged index's manifest: the first input's settings, every shard, the new BM25; with `dropped` copies
    (a de-duplicating merge) their tombstones as generation 1, as a delete would have written them."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    gone = dropped or Dropped(Tombstones(), 0, 0)
    generation = 1 if gone.documents else 0
    counts = Counts(
        documents=sum(m.counts.documents for m in manifests) - gone.documents,
        blocks=sum(s.blocks for s in shards),
        tokens=sum(s.tokens for s in shards),
        empty_documents=sum(m.counts.empty_documents for m in manifests),
        shards=len(shards),
        deleted_documents=gone.documents,
        deleted_tokens=gone.tokens,
    )
    first = manifests[0]
    return first.model_copy(
        update={
            "created_at": now,
            "counts": counts,
            "shards": shards,
            "bm25": FileInfo(**file_record(bm25)),
            "bm25_name": bm25.name,  # a compacted first input names its own
            "build": first.build.model_copy(update={"out": cfg.out}),
            "corpus": {"merged": [{"index": str(p.resolve()), **m.corpus} for p, m in zip(cfg.inputs, manifests)]},
            "generation": generation,
            "updated_at": now if generation else None,
            "tombstones": gone.tombstones.save(root, generation) if generation else None,
        }
    )

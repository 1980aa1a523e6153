"""`indexer verify --index DIR`: every file of an index read in full and checked against the sha256 its manifest
records, as the server checks a new generation before serving it (`IndexFiles.verify`, indexer.index_files), for
an operator after a crash, a copy or a disk error.

  manifest   read and checked against its own checksum (`Manifest.load`)
  listed     each file the manifest lists (every shard's, BM25's, a delta shard's BM25, the tombstones): present,
             the recorded byte size (`check_size`), the recorded sha256
  format     each file a shard of its kind holds (indexer.integrity.npy_specs, docs.arrow, index.faiss) is listed
  leftovers  entries of DIR no manifest names (a killed writer's, a superseded generation's): reported, not damage;
             the next writer removes them (indexer.gc)

Every damaged or missing file is named (not only the first), in one IndexDamaged (exit 2) with the fix. The
trained FAISS templates (trained/) have no recorded hash: a build or an update reads them, a fill never does. Read
only: no lock is taken, nothing is written."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field
from tqdm import tqdm

from common.errors import IndexDamaged
from common.files import TMP_SUFFIX
from indexer.gc import referenced
from indexer.index_files import IndexFiles
from indexer.integrity import FIX, check_size, damaged, npy_specs
from indexer.lock import LOCK_NAME
from indexer.manifest import MANIFEST_NAME, Manifest
from indexer.outdir import BUILD_STATE
from indexer.templates import TEMPLATE_DIR

_OWN = (MANIFEST_NAME, BUILD_STATE, TEMPLATE_DIR, LOCK_NAME)  # the entries of DIR besides those `referenced` names


class VerifyConfig(BaseModel):
    """Check every file of an index against the sha256 its manifest records (after a crash, a copy, a disk error)."""

    index: Path = Field(description="the index directory to check")


@dataclass
class VerifySummary:
    index: Path
    files: int
    bytes: int
    seconds: float
    leftovers: list[str]  # entries no manifest names

    def line(self) -> str:
        extra = (
            f"; {len(self.leftovers)} entries no manifest names ({', '.join(self.leftovers[:5])}"
            f"{' ...' if len(self.leftovers) > 5 else ''}; a killed writer's and a superseded generation's are "
            "removed by the next writer)"
            if self.leftovers
            else ""
        )
        return (
            f"{self.index}: sound: {self.files} files, {self.bytes / 2**20:.1f} MiB checked against their sha256 "
            f"in {self.seconds:.1f} s{extra}"
        )


def verify_index(cfg: VerifyConfig, progress: bool | None = None) -> VerifySummary:
    """Check every file of the index (see the module doc); IndexDamaged naming every damaged or missing file.
    `progress`: a progress bar on stderr (None: when it is a terminal)."""
    t0 = time.perf_counter()
    root = cfg.index
    manifest = Manifest.load(root)
    files = IndexFiles(root, manifest, list(range(len(manifest.shards))), with_bm25=True)
    problems = unlisted(root, manifest)
    listed = files.all()
    total = sum(record.bytes for _, record in listed)
    disable = None if progress is None else not progress
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="verifying", disable=disable) as bar:
        for path, record in listed:
            try:
                check_size(path, record)
                files.verify([(path, record)])  # the server's own check of a file (sha256)
            except IndexDamaged as exc:
                problems.append(exc)
            bar.update(record.bytes)
    seconds = time.perf_counter() - t0
    if problems:
        named = "\n  ".join(p.message.removesuffix(f"; {FIX}") for p in problems)
        raise IndexDamaged(
            f"index {root} is damaged: {len(problems)} damaged or missing file(s) ({len(listed)} files, "
            f"{total / 2**20:.1f} MiB checked in {seconds:.1f} s):\n  {named}\n{FIX}",
            problems[0].path,
        )
    return VerifySummary(root, len(listed), total, seconds, leftovers(root, manifest))


def unlisted(root: Path, manifest: Manifest) -> list[IndexDamaged]:
    """A problem for each file a shard of its kind holds that the manifest does not list (its bytes could not be
    checked, and the server refuses to open the shard)."""
    out = []
    for info in manifest.shards:
        for name in [*npy_specs(info, manifest.dim), "docs.arrow", "index.faiss"]:
            if name not in info.files:
                out.append(
                    damaged(
                        root / info.name / name, f"is not listed in the manifest (a {info.vector_dtype} shard holds it)"
                    )
                )
    return out


def leftovers(root: Path, manifest: Manifest) -> list[str]:
    """The entries of `root` that the manifest does not name: temporary ones, a killed writer's, a superseded
    generation's."""
    wanted = referenced(manifest) | set(_OWN)
    return sorted(p.name for p in root.iterdir() if p.name not in wanted or p.name.endswith((TMP_SUFFIX, ".old")))

"""Removing what no manifest names: the leftovers of a killed writer (temporary names, shards and files written
before it could commit) and the files of superseded generations. Run by writers only, under the writer lock
(indexer.lock). The files of the generation before the current one are kept (`keep`), so a server that read the
previous manifest an instant before the commit can still open what it names; a server that has them open
keeps them anyway (an open or mapped file outlives its name)."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from common.files import TMP_SUFFIX
from indexer.manifest import Manifest
from indexer.shard import delta_bm25_name

logger = logging.getLogger(__name__)

_OURS = ("shard_", "bm25", "tombstones_")  # the names a writer creates at the index's top level


def referenced(manifest: Manifest) -> set[str]:
    """The top-level names the manifest's index is made of (besides manifest.json, build.json, trained/)."""
    names = {s.name for s in manifest.shards} | {delta_bm25_name(s.name) for s in manifest.shards if s.bm25}
    if manifest.bm25 is not None:
        names.add(manifest.bm25_name)
    if manifest.tombstones is not None:
        names.add(manifest.tombstones.name)
    return names


def collect_garbage(root: Path, manifest: Manifest, keep: Manifest | None = None) -> list[str]:
    """Remove every temporary entry of `root` (`*.tmp`, `*.old`) and the writer-made entries that neither
    `manifest` nor `keep` (the generation it replaced) names; without `keep` (a writer starting), only those a
    killed writer left: numbered after everything the manifest names. The names removed."""
    wanted = referenced(manifest) | (referenced(keep) if keep is not None else set())
    removed = []
    for path in sorted(root.iterdir()):
        name = path.name
        temporary = name.endswith((TMP_SUFFIX, ".old"))
        unused = name.startswith(_OURS) and name not in wanted and (keep is not None or _newer(name, manifest))
        if temporary or unused:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(name)
    if removed:
        logger.info("removed %d unused entries of %s: %s", len(removed), root.name, ", ".join(removed[:10]))
    return removed


def _newer(name: str, manifest: Manifest) -> bool:
    """Whether a writer-made entry is numbered after the manifest's shards (shard_N, bm25_shard_N) or generation
    (tombstones_G, bm25_G): written by a writer that did not commit."""
    number = re.search(r"_(\d+)(?:\.\w+)?$", name)
    if number is None:
        return False
    if "shard_" in name:
        return int(number.group(1)) > max(int(s.name.split("_")[1]) for s in manifest.shards)
    return int(number.group(1)) > manifest.generation

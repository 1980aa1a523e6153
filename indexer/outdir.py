"""The build's output directory: created, resumed (same identity), replaced (--overwrite) or refused."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from common.errors import AppError
from common.files import TMP_SUFFIX, write_json_atomic
from indexer.lock import LOCK_NAME
from indexer.manifest import MANIFEST_NAME
from indexer.templates import TEMPLATE_DIR

logger = logging.getLogger(__name__)

BUILD_STATE = "build.json"


def identity(corpus: Path, fingerprint: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What must match for an existing output directory to be resumed rather than refused."""
    corpus = corpus.resolve()
    stat = corpus.stat()
    return {
        "corpus": str(corpus),
        "corpus_bytes": stat.st_size if corpus.is_file() else None,
        "corpus_mtime": stat.st_mtime,
        "model_fingerprint": fingerprint,
        **settings,
    }


def _ours(out: Path) -> list[Path]:
    names = (MANIFEST_NAME, BUILD_STATE)
    return [
        p
        for p in out.iterdir()
        if p.name.removesuffix(TMP_SUFFIX) in names
        or p.name.startswith(("shard_", "bm25", "tombstones_", TEMPLATE_DIR))
    ]


def prepare_out(out: Path, ident: dict[str, Any], overwrite: bool) -> None:
    """Create, resume or (with overwrite) clear the output directory; refuse anything else."""
    if out.exists() and not out.is_dir():
        raise AppError(f"output path {out} exists and is not a directory; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / BUILD_STATE
    ours = _ours(out)
    others = [p for p in out.iterdir() if p not in ours and p.name != LOCK_NAME]  # the lock: a writer's, kept
    if {p.name.removesuffix(TMP_SUFFIX) for p in ours} <= {BUILD_STATE, TEMPLATE_DIR}:  # nothing written yet
        for p in ours:  # start afresh, with a trained/ put there (another build's templates: indexer merge) kept
            if p.name != TEMPLATE_DIR:
                p.unlink()
        ours = []
    if overwrite:
        for p in ours:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    elif ours:
        generation = _generation(out)
        if generation:
            raise AppError(
                f"output directory {out} holds an index changed since its build (generation {generation}: "
                "added or deleted documents); `indexer compact` folds the changes in, --overwrite "
                "rebuilds it from the corpus"
            )
        previous = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else None
        if previous != ident:
            raise AppError(
                f"output directory {out} already holds a different index (other corpus, model or settings); "
                "pass --overwrite to replace it or choose another --out"
            )
        logger.info("resuming the build in %s", out)
    if others and not ours and not overwrite:
        raise AppError(f"output directory {out} is not empty and holds no index; choose an empty --out")
    write_json_atomic(state_path, ident)


def _generation(out: Path) -> int:
    path = out / MANIFEST_NAME
    try:
        return int(json.loads(path.read_text(encoding="utf-8")).get("generation", 0)) if path.is_file() else 0
    except (ValueError, AttributeError):
        return 0


def remove_unstarted(out: Path) -> None:
    """Remove an output directory that a failed build created, unless a shard was finished in it (a build
    resumes from its finished shards): a corpus refused on its first lines leaves nothing behind."""
    if out.is_dir() and not any((p / "shard.json").is_file() for p in out.glob("shard_*")):
        shutil.rmtree(out, ignore_errors=True)
        logger.info("removed %s: the build that created it failed before its first shard", out)


def remove_stale_shards(out: Path, keep: set[str]) -> None:
    """Shards left over from an earlier, larger build of the same identity (cannot normally happen)."""
    for stale in sorted(out.glob("shard_*")):
        if stale.name not in keep:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()

"""Tombstones: the documents deleted from an index since its build, as rows of its shards' docs.arrow.

A delete (or the replacement of a document by `indexer add`) does not touch a shard's files: it lists the
document's rows here, and every reader leaves their blocks and tokens out (`Liveness`): FAISS searches skip
their tokens (an IDSelector, so a search still returns k live hits), BM25 never returns their blocks, so they
are never candidates, voters or evidence. `indexer compact` drops them from the files for good.

The file is `tombstones_<generation>.json` ({"shards": {shard name: [rows, ascending]}}), written atomically
before the manifest that names it (with its size and sha256) and read back typed and checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np

from common.files import file_record, write_bytes_atomic
from indexer.integrity import check_size, damaged
from indexer.manifest import Manifest, TombstoneInfo


def tombstones_name(generation: int) -> str:
    return f"tombstones_{generation:06d}.json"


@dataclass(frozen=True)
class Tombstones:
    """Per shard name, the sorted rows of its docs.arrow that are deleted."""

    rows: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path, manifest: Manifest) -> "Tombstones":
        """The manifest's tombstones (none when it names no file), checked against its shards."""
        info = manifest.tombstones
        if info is None:
            return cls()
        path = root / info.name
        check_size(path, info)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = {str(name): np.asarray(values, dtype=np.int64) for name, values in data["shards"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise damaged(path, f"is not a valid tombstones file ({exc})") from exc
        documents = {s.name: s.documents for s in manifest.shards}
        for name, dead in rows.items():
            if (
                name not in documents
                or dead.ndim != 1
                or (
                    dead.size
                    and (int(dead.min()) < 0 or int(dead.max()) >= documents[name] or np.any(np.diff(dead) <= 0))
                )
            ):
                raise damaged(
                    path, f"lists rows {dead.tolist()[:5]} of {name!r}, which the manifest's shards do not hold"
                )
        if sum(int(r.size) for r in rows.values()) != info.rows:
            raise damaged(path, f"does not list the manifest's {info.rows} deleted rows")
        return cls(rows)

    def save(self, root: Path, generation: int) -> TombstoneInfo | None:
        """Write the file of `generation` atomically; None (no file) when nothing is deleted."""
        kept = {name: rows for name, rows in self.rows.items() if rows.size}
        if not kept:
            return None
        name = tombstones_name(generation)
        body = {"shards": {n: [int(r) for r in rows] for n, rows in sorted(kept.items())}}
        write_bytes_atomic(root / name, (json.dumps(body) + "\n").encode("utf-8"))
        return TombstoneInfo(name=name, rows=sum(int(r.size) for r in kept.values()), **file_record(root / name))

    def of(self, shard_name: str) -> np.ndarray:
        return self.rows.get(shard_name, np.empty(0, dtype=np.int64))

    def plus(self, shard_name: str, rows: np.ndarray) -> "Tombstones":
        """These tombstones and `rows` of `shard_name` deleted too."""
        merged = np.union1d(self.of(shard_name), np.asarray(rows, dtype=np.int64))
        return Tombstones({**self.rows, shard_name: merged})

    def only(self, shard_names: set[str]) -> "Tombstones":
        """The tombstones of the named shards (compaction drops the others)."""
        return Tombstones({n: r for n, r in self.rows.items() if n in shard_names})


class Liveness:
    """What one shard's tombstones hide: its dead blocks and tokens, and a FAISS selector of its live tokens."""

    def __init__(self, blocks: np.ndarray, tokens: int, dead_rows: np.ndarray) -> None:
        dead_block = np.isin(blocks[:, 0], dead_rows)
        self.dead_blocks = np.flatnonzero(dead_block)  # local block numbers
        live = np.ones(tokens, dtype=bool)
        for b in self.dead_blocks.tolist():
            live[blocks[b, 1] : blocks[b, 2]] = False
        self.dead_tokens = int(tokens - int(live.sum()))
        self._bitmap = np.packbits(live, bitorder="little")  # kept alive: the selector points into it
        self.selector = faiss.IDSelectorBitmap(tokens, faiss.swig_ptr(self._bitmap))

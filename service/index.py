"""A phrase index opened for search: every shard memory-mapped, searched in parallel, merged."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from indexer.errors import IndexerError
from indexer.files import sha256_file
from indexer.manifest import Manifest
from indexer.store import Shard

logger = logging.getLogger(__name__)


class PhraseIndex:
    def __init__(self, root: str | Path, verify: bool = False) -> None:
        self.root = Path(root)
        self.manifest = Manifest.load(self.root)
        if verify:
            self.verify()
        self.shards = [Shard(self.root, info, self.manifest.dim) for info in self.manifest.shards]
        self.scale = self.manifest.similarity_scale
        self.vectors = [s.vectors for s in self.shards]
        self._pool = ThreadPoolExecutor(max_workers=min(8, len(self.shards))) if len(self.shards) > 1 else None
        logger.info("opened index %s: %d shards, %d tokens", self.root, len(self.shards), self.manifest.counts.tokens)

    def verify(self) -> None:
        """Check every file against the manifest's sha256 (slow: reads everything)."""
        for info in self.manifest.shards:
            for fname, rec in info.files.items():
                path = self.root / info.name / fname
                if not path.is_file() or sha256_file(path) != rec.sha256:
                    raise IndexerError(f"index file {path} is missing or corrupted (checksum mismatch); rebuild the index")

    @property
    def total_tokens(self) -> int:
        return self.manifest.counts.tokens

    def search(self, queries: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k tokens by inner product over all shards, per query: (shard numbers, positions)."""
        q = np.ascontiguousarray(queries, dtype=np.float32)

        def one(s: int):
            shard = self.shards[s]
            scores, ids = shard.index.search(q, min(k, len(shard)))
            return scores, ids

        results = list(self._pool.map(one, range(len(self.shards)))) if self._pool else [one(0)]
        scores = np.concatenate([r[0] for r in results], axis=1)
        ids = np.concatenate([r[1] for r in results], axis=1)
        shard_no = np.concatenate([np.full(r[1].shape, s, dtype=np.int64) for s, r in enumerate(results)], axis=1)
        out = []
        for row in range(q.shape[0]):
            valid = ids[row] >= 0
            sc, sh, pos = scores[row][valid], shard_no[row][valid], ids[row][valid].astype(np.int64)
            if sc.size > k:
                top = np.argpartition(-sc, k - 1)[:k]
                sh, pos = sh[top], pos[top]
            out.append((sh, pos))
        return out

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(wait=False)

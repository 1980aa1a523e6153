"""The read side of an index directory: every shard memory-mapped, searched in parallel, merged (the
write side is `indexer.build` / `indexer.shard_writer`)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import faiss
import numpy as np

from common.arrays import unique_inverse
from common.errors import AppError
from indexer.ann import is_exact, search_params, set_search_params
from indexer.ann_codes import share_codecs
from indexer.bm25 import BM25, BlockSearch
from indexer.index_files import IndexFiles
from indexer.integrity import check_bm25
from indexer.manifest import Manifest
from indexer.shard import Shard, delta_bm25_name
from indexer.shard_hits import ScoredHits, Task, best_of_shards, top_hits
from indexer.shared_lists import Assigned, shared_lists
from indexer.tombstones import Liveness, Tombstones

logger = logging.getLogger(__name__)


DEFAULT_REFINE = 4


class PhraseIndex:
    """`search` asks each approximate (ANN) shard for `refine` * k hits, re-scores the best `refine` * k of them
    all by their ANN scores exactly from the stored vectors and keeps the top k over all shards, so ANN error
    costs recall only at the far end and the re-scoring does not grow with the shard count. Shards of one
    template probe `scaled_nprobe` of their lists (indexer.ann): a query scans about as many tokens at 100M as at 3M.

    Opening refuses a damaged index (an AppError naming the file): every file's structure is checked against
    the manifest (indexer.integrity, ~30 ms at 10.5M tokens); `files.verify` adds the sha256 of every byte.

    An updated index (indexer.update) is served as it is: delta shards are shards, their BM25 files join the
    build's (BlockSearch), and the tombstoned documents' tokens and blocks are left out of every search.
    `reuse` (the index being replaced by a newer generation of the same directory) lends its opened shards
    whose files are unchanged, so opening a new generation costs only its new files.

    `shard_nos` opens only those shards (a shard group of a distributed deployment, service.ray_backend):
    `shards[i]` is shard `numbers[i]`, and hits name the shards by their numbers in the whole index. `bm25`
    false leaves BM25 closed (a group's work needs none; the ingress holds it)."""

    def __init__(
        self,
        root: str | Path,
        verify: bool = False,
        nprobe: int | None = None,
        ef_search: int | None = None,
        refine: int | None = None,
        reuse: "PhraseIndex | None" = None,
        shard_nos: list[int] | None = None,
        bm25: bool = True,
        dense: bool = True,
    ) -> None:
        self.root = Path(root)
        self.dense = dense  # False: the shards' text side only, no search (a Ray ingress: service.ray_backend)
        self.refine = DEFAULT_REFINE if refine is None else int(refine)
        if self.refine < 1:
            raise AppError(f"refine must be >= 1, got {refine}", kind="validation")
        self.manifest = Manifest.load(self.root)
        same = reuse is not None and reuse.root.resolve() == self.root.resolve()
        everything = list(range(len(self.manifest.shards)))
        self.numbers = everything if shard_nos is None else sorted(set(shard_nos))
        if not set(self.numbers) <= set(everything):
            raise AppError(
                f"index {self.root} has shards 0-{len(everything) - 1}; shard numbers {self.numbers} name others",
                kind="validation",
            )
        # the files of what is open, hashed (`files.verify`) and watched (`files.changed`)
        reused = reuse.files if same and reuse is not None else None  # (same: reuse is not None)
        self.files: IndexFiles = IndexFiles(self.root, self.manifest, self.numbers, bm25, reused, dense)
        if verify:
            self.files.verify()
        self.tombstones = Tombstones.load(self.root, self.manifest)
        self._open_shards(reuse if same else None, nprobe, ef_search)
        self.scale = self.manifest.similarity_scale
        self._block_bases = np.array([info.block_base for info in self.manifest.shards], dtype=np.int64)
        self.bm25 = self._open_bm25(reuse if same else None) if bm25 else None
        if not bm25:
            self._delta_bm25: dict[str, BM25] = {}
        dense_shards = self.shards if dense else []
        self._lists = shared_lists([s.index for s in dense_shards], [s.info.factory for s in dense_shards])
        share_codecs([s.vectors for s in dense_shards])
        self._pool = self._shard_pool()
        logger.info("opened index %s: %d shards, %d tokens", self.root, len(self.shards), self.manifest.counts.tokens)

    def _open_shards(self, reuse: "PhraseIndex | None", nprobe: int | None, ef_search: int | None) -> None:
        """`shards` (those of `numbers`; lent by `reuse` when their files are the same), with the search
        parameters set, and `live`: each shard's Liveness, None when it has no tombstone."""
        lent = reuse.shards_by_name() if reuse is not None else {}
        infos = [self.manifest.shards[n] for n in self.numbers]
        unchanged = {info.name for info in infos if info.name in lent and lent[info.name].info == info}
        own = {i.name: Shard(self.root, i, self.manifest.dim, self.dense) for i in infos if i.name not in unchanged}
        self.shards = [lent[i.name] if i.name in unchanged else own[i.name] for i in infos]
        self._search_params = (nprobe, ef_search)
        tokens: dict[str, int] = {}  # per factory, over the whole index (a shard group probes as the index would)
        for info in self.manifest.shards:
            tokens[info.factory] = tokens.get(info.factory, 0) + info.tokens
        for shard in self.shards if self.dense else []:
            set_search_params(shard.index, nprobe, ef_search, tokens[shard.info.factory])
        dead = [self.tombstones.of(s.info.name) for s in self.shards]
        self.live = [Liveness(s.blocks, len(s), rows) if rows.size else None for s, rows in zip(self.shards, dead)]

    def _shard_pool(self) -> ThreadPoolExecutor | None:
        """The pool searching shards in parallel, so each FAISS call runs on one thread: FAISS's OpenMP keeps a team
        of spinning threads per calling thread, and teams of 8 pool threads would fight over the cores."""
        n = len(self.shards)
        if n <= 1:
            return None
        return ThreadPoolExecutor(max_workers=min(8, n), initializer=faiss.omp_set_num_threads, initargs=(1,))

    def next_generation(self) -> "PhraseIndex":
        """This directory opened again, as its manifest now says (after a live update), with the same search
        parameters: the shards both generations hold are lent, not reopened; the files this one did not have
        are checked (sha256) first. The caller serves it and closes this one when done with it."""
        nprobe, ef_search = self._search_params
        index = PhraseIndex(
            self.root, nprobe=nprobe, ef_search=ef_search, refine=self.refine, reuse=self, dense=self.dense
        )
        try:
            old = {p for p, _ in self.files.all()}
            index.files.verify([f for f in index.files.all() if f[0] not in old])  # the update's own files
        except BaseException:
            index.close()
            raise
        return index

    def _open_bm25(self, reuse: "PhraseIndex | None") -> BlockSearch | None:
        """The BM25 of every live block of the whole index, opened or not (None for an index built without
        BM25). The delta shards' BM25 files that `reuse` has open (checked) are taken over from it: it no
        longer closes them."""
        self._delta_bm25 = {}
        if self.manifest.bm25 is None:
            return None
        infos = self.manifest.shards
        check_bm25(
            self.root / self.manifest.bm25_name,
            self.manifest.bm25,
            self.manifest.counts.blocks - sum(info.blocks for info in infos if info.bm25 is not None),
        )
        lent = reuse._delta_bm25 if reuse is not None else {}
        lent_shards = reuse.shards_by_name() if reuse is not None else {}
        deltas = []
        for info in infos:
            if info.bm25 is not None:
                name = info.name
                if name in lent and name in lent_shards and lent_shards[name].info == info:  # the same files, checked
                    self._delta_bm25[name] = lent.pop(name)
                else:
                    check_bm25(self.root / delta_bm25_name(name), info.bm25, info.blocks)
                    self._delta_bm25[name] = BM25(self.root / delta_bm25_name(name))
                deltas.append((info.block_base, self._delta_bm25[name]))
        return BlockSearch(
            BM25(self.root / self.manifest.bm25_name), deltas, self._dead_blocks(), self.manifest.counts.blocks
        )

    def _dead_blocks(self) -> np.ndarray:
        """The global numbers of every tombstoned block (of shards not opened too: their blocks.npy is read)."""
        opened = dict(zip(self.numbers, self.live))
        dead = []
        for number, info in enumerate(self.manifest.shards):
            if not self.tombstones.of(info.name).size:
                continue
            live = opened.get(number) or Liveness(
                np.load(self.root / info.name / "blocks.npy"), info.tokens, self.tombstones.of(info.name)
            )
            dead.append(live.dead_blocks + info.block_base)
        return np.concatenate(dead) if dead else np.empty(0, dtype=np.int64)

    def shards_by_name(self) -> dict[str, Shard]:
        return {s.info.name: s for s in self.shards}

    def warm(self, pages: bool = True, hashes: bool = False) -> None:
        """Shard after shard: with `hashes`, check the sha256 of every file not checked yet (reading it also
        brings it into the page cache; an AppError naming the first file that differs); with `pages`, map every
        page a fill reads at random into this process (Shard.warm; a shard already warm is skipped)."""
        t = time.perf_counter()
        for shard in self.shards:
            if hashes:
                self.files.verify(self.files.unverified(self.files.of_shard(shard.info)))
            if pages:
                shard.warm()
        if hashes:
            self.files.verify(self.files.unverified())  # BM25, delta BM25, tombstones
        logger.info(
            "warmed %d shards (pages mapped: %s, sha256 checked: %s) in %.1f s",
            len(self.shards),
            pages,
            hashes,
            time.perf_counter() - t,
        )

    def block_shards(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard number, block number within that shard) of each global block, from the manifest alone."""
        blocks = np.asarray(blocks, dtype=np.int64)
        shard_no = np.searchsorted(self._block_bases, blocks, side="right") - 1
        return shard_no, blocks - self._block_bases[shard_no]

    def block_hits(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every token of the given global blocks (of opened shards), as (shard numbers, positions)."""
        shard_no, positions = [], []
        at = {n: i for i, n in enumerate(self.numbers)}
        for s, local in zip(*(a.tolist() for a in self.block_shards(blocks))):
            _, first, end = self.shards[at[s]].blocks[local]
            positions.append(np.arange(first, end, dtype=np.int64))
            shard_no.append(np.full(end - first, s, dtype=np.int64))
        if not positions:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(shard_no), np.concatenate(positions)

    @property
    def total_tokens(self) -> int:
        return self.manifest.counts.tokens

    def search(
        self, queries: np.ndarray, k: int, groups: list[int] | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k tokens by inner product over all shards, per query: (shard numbers, positions)
        (`search_scored` without the scores)."""
        return [(hits.shard_no, hits.positions) for hits in self.search_scored(queries, k, groups)]

    def search_scored(self, queries: np.ndarray, k: int, groups: list[int] | None = None) -> list[ScoredHits]:
        """Top-k tokens by inner product over the opened shards, per query (ScoredHits),
        ties at the k-th score broken by (shard, position) (`top_hits`), so several shard groups' top k merge into
        one top k (each group re-scores its own best refine * k: at least what one process would re-score).

        Exact shards answer with exact scores; the best refine * k of the ANN shards' hits (`_rescore_best`)
        are re-scored from the stored vectors, per group of consecutive queries (`groups`: their sizes, e.g. each
        request's queries in a batch;
        default one group): each group's distinct hits times its own queries, so a batch costs what its
        requests cost alone (not hits x all queries) and scores each request as if it came alone."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        ends = np.cumsum(groups if groups is not None else [q.shape[0]]).tolist()
        if not ends or ends[-1] != q.shape[0]:
            raise ValueError(f"groups {groups} do not add up to the {q.shape[0]} queries")
        bounds = list(zip([0] + ends[:-1], ends))
        assigned = None
        if self._lists is not None:  # shared by two shards or more (indexer.shared_lists): there is a pool
            assert self._pool is not None
            assigned = self._pool.submit(self._lists.assign, q).result()  # one OpenMP thread

        approx = self._approx()  # their best refine * k over them all are re-scored; the others answer k
        wanted = [{s: self._hits(s, k) for s in approx}]
        wanted.append({s: self._hits(s, k) for s in range(len(self.shards)) if s not in approx})
        answers = best_of_shards(lambda tasks: self._search_all(tasks, q, k, assigned), wanted, q.shape[0])
        results = [answers[s] for s in range(len(self.shards))]
        self._rescore_best(q, results, bounds, k * self.refine)
        scores = np.concatenate([r[0] for r in results], axis=1)
        ids = np.concatenate([r[1] for r in results], axis=1)
        shard_no = np.concatenate(
            [np.full(r[1].shape, self.numbers[s], dtype=np.int64) for s, r in enumerate(results)], axis=1
        )
        out = []
        for row in range(q.shape[0]):
            valid = ids[row] >= 0
            out.append(top_hits(scores[row][valid], shard_no[row][valid], ids[row][valid].astype(np.int64), k))
        return out

    def _rescore_best(
        self, q: np.ndarray, results: list[tuple[np.ndarray, np.ndarray]], bounds: list[tuple[int, int]], keep: int
    ) -> None:
        """The ANN shards' hits of each query merged by their ANN scores (one quantizer's estimates of the same
        inner product), the best `keep` of them re-scored exactly from their shards' stored vectors, in place
        (the others dropped: id -1): the re-scoring reads `keep` vectors a query however many shards there are.
        Exact shards' hits (Flat, or scored by the codes re-scoring would read) stay as they are."""
        approx = self._approx()
        if not approx:
            return
        scores = np.concatenate([results[i][0] for i in approx], axis=1)
        ids = np.concatenate([results[i][1] for i in approx], axis=1).astype(np.int64)
        owner = np.concatenate([np.full(results[i][1].shape[1], j, dtype=np.int64) for j, i in enumerate(approx)])
        kept = np.full((q.shape[0], min(keep, ids.shape[1])), -1, dtype=np.int64)
        kept_owner = np.full(kept.shape, -1, dtype=np.int64)
        for row in range(q.shape[0]):
            valid = np.flatnonzero(ids[row] >= 0)
            best = top_hits(scores[row, valid], owner[valid], ids[row, valid], keep)
            kept[row, : best.positions.size] = best.positions
            kept_owner[row, : best.positions.size] = best.shard_no
        for j, i in enumerate(approx):
            mine = np.where(kept_owner == j, kept, -1)
            exact = [_rescore(self.shards[i], q[a:b], mine[a:b]) for a, b in bounds]
            results[i] = (np.concatenate(exact), mine)

    def _search_all(
        self, tasks: list[Task], q: np.ndarray, k: int, assigned: Assigned | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each task's (shard s, query rows or None for all, hits) FAISS search, on the shard pool."""

        def one(task: Task) -> tuple[np.ndarray, np.ndarray]:
            s, rows, hits = task
            if rows is None:
                return self.faiss_search(s, q, k, assigned, hits)
            some = None if assigned is None else Assigned(*(part[rows] for part in assigned))
            return self.faiss_search(s, q[rows], k, some, hits)

        return list(self._pool.map(one, tasks)) if self._pool else [one(t) for t in tasks]

    def _approx(self) -> list[int]:
        """The places of the ANN shards whose hits are re-scored from stored vectors."""
        return [i for i, s in enumerate(self.shards) if not is_exact(s.info.factory) and s.vectors.rescores]

    def _hits(self, s: int, k: int) -> int:
        """The hits shard s answers: refine * k where they are to be re-scored (`_approx`), else k (at most its
        tokens)."""
        shard = self.shards[s]
        return min(k * self.refine if s in self._approx() else k, len(shard))

    def assign(self, q: np.ndarray) -> Assigned | None:
        """The queries assigned to their nearest IVF lists in the shards sharing them (indexer.shared_lists), or
        None when no two shards share lists."""
        return self._lists.assign(q) if self._lists is not None else None

    def faiss_search(
        self, s: int, q: np.ndarray, k: int, assigned: Assigned | None = None, hits: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Shard s's own FAISS search for the queries: `hits`, by default k (exact shards) or refine * k (ANN
        shards, to be re-scored), among the lists of `assign` where the shard shares them."""
        shard, live = self.shards[s], self.live[s]  # s: the shard's place among the opened ones
        hits = self._hits(s, k) if hits is None else hits
        params = None if live is None else search_params(shard.index, live.selector)
        if assigned is not None and self._lists is not None and s in self._lists.ivfs:
            return self._lists.search(s, assigned, hits, params)
        return shard.index.search(q, hits, params=params)

    def close(self) -> None:
        if self.bm25 is not None:
            self.bm25.close(list(self._delta_bm25.values()))  # not those a later generation took over
        if self._pool:
            self._pool.shutdown(wait=False)


def _rescore(shard, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Exact inner products of each query row with its hits' stored vectors (-inf where there is no hit)."""
    scores = np.full(ids.shape, -np.inf, dtype=np.float32)
    valid = ids >= 0
    if not valid.any():
        return scores
    rows, inverse = unique_inverse(ids[valid])  # sorted rows: sequential reads of the mmap
    exact = shard.vectors.dot(rows, q)  # [distinct hits, queries]
    query_of = np.broadcast_to(np.arange(ids.shape[0])[:, None], ids.shape)[valid]
    scores[valid] = exact[inverse, query_of]
    return scores

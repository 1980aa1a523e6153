"""Query pairs: relation-like queries trained against their answer in the subject's own document.

A pair is a query with one <mask> ("The language of Franz Kafka is <mask> .", written by
recipes/prepare_typed_queries.py from our own text), its answers ("German") and the id of the document
that states them. Its positives are the answers' occurrences in that document's blocks (word-aligned
token runs: "German" inside "German-language" too); every other token of the batch is a negative,
including answers of the same kind in the other documents of the batch (batches hold one kind of
query, so "French" in another person's document is the hard negative). The query is laid out as the
fill engine lays out a user's query (MASK_s MASK_e, no title), the documents as the index holds them
(their title in front): the objective is the one a fill asks of the encoder.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import AppError
from corpus.tokens import WORD_END, WORD_START
from training.data import Batch, BatchConfig, BatchRows, TrainBlock
from training.masking import MaskingConfig

BLOCKS_PER_DOC = 4  # a document's first blocks that are candidates (the answer must be in one of them)


@dataclass(frozen=True)
class QueryPair:
    query: str
    kind: str  # the relation field: a batch holds pairs of one kind
    doc: str  # the id of the document that answers it
    positives: tuple[tuple[int, int, int], ...]  # (block of the document, first token, last token)


def load_pairs(path: Path) -> list[dict]:
    """The JSON lines of a pairs file ({"relation", "query", "answers", "doc"}), or an AppError naming the fix."""
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise AppError(f"query pairs {path}: cannot read it ({exc})") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not (isinstance(row["query"], str) and isinstance(row["doc"], str) and row["answers"]):
                raise ValueError("query and doc must be strings, answers a non-empty list")
        except (ValueError, KeyError, TypeError) as exc:
            raise AppError(
                f"query pairs {path} line {number}: {exc}; each line is {{'query', 'answers', 'doc'}} "
                "(recipes/prepare_typed_queries.py writes them)"
            ) from exc
        rows.append(row)
    return rows


def occurrences(block: TrainBlock, phrase: list[int]) -> list[tuple[int, int]]:
    """(first, last) token of every word-aligned occurrence of `phrase`'s ids in the block."""
    n, ids = len(phrase), block.ids
    if n == 0 or n > len(ids):
        return []
    hits = np.flatnonzero(ids[: len(ids) - n + 1] == phrase[0])
    out = []
    for a in hits.tolist():
        if ids[a : a + n].tolist() == phrase and block.flags[a] & WORD_START and block.flags[a + n - 1] & WORD_END:
            out.append((a, a + n - 1))
    return out


def match_pairs(rows: list[dict], blocks: dict[str, list[TrainBlock]], encoder) -> list[QueryPair]:
    """The rows whose document is among `blocks` and holds an answer in its first blocks, with their positives."""
    pairs = []
    for row in rows:
        doc_blocks = blocks.get(row["doc"], [])[:BLOCKS_PER_DOC]
        if not doc_blocks or row["query"].count("<mask>") != 1:
            continue
        phrases = encoder.phrase_ids([str(a) for a in row["answers"]])
        found = tuple(
            (b, first, last)
            for b, block in enumerate(doc_blocks)
            for p in phrases
            for first, last in occurrences(block, p)
        )
        if found:
            pairs.append(QueryPair(row["query"], str(row.get("relation", "")), row["doc"], tuple(sorted(set(found)))))
    return pairs


class PairBatches:
    """Batches of `size` pairs of one kind and distinct documents, in a seeded order per epoch: `batch_at(i)` is
    the same batch whenever it is asked for (a resumed run goes on where it stopped)."""

    def __init__(self, pairs: list[QueryPair], blocks: dict[str, list[TrainBlock]], encoder, size: int, seed: int):
        if not pairs:
            raise AppError("no query pair has an answer in its document's blocks: check the pairs' doc ids")
        self.pairs, self.blocks, self.encoder, self.size, self.seed = pairs, blocks, encoder, size, seed
        self._epoch: tuple[int, list[list[int]]] | None = None

    def _batches(self, epoch: int) -> list[list[int]]:
        if self._epoch is None or self._epoch[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            by_kind: dict[str, list[int]] = defaultdict(list)
            for i in rng.permutation(len(self.pairs)).tolist():
                by_kind[self.pairs[i].kind].append(i)
            batches = []
            for members in by_kind.values():
                batch: list[int] = []
                docs: set[str] = set()
                for i in members:
                    if self.pairs[i].doc in docs:
                        continue  # left for the next epoch's order
                    batch.append(i)
                    docs.add(self.pairs[i].doc)
                    if len(batch) == self.size:
                        batches.append(batch)
                        batch, docs = [], set()
                if len(batch) >= 2:
                    batches.append(batch)
            self._epoch = (epoch, [batches[j] for j in rng.permutation(len(batches)).tolist()])
        return self._epoch[1]

    def batch_at(self, position: int) -> Batch:
        if not self._batches(0):
            raise AppError(
                "the query pairs make no batch of two: each batch needs two pairs of one kind (relation) from "
                "different documents"
            )
        epoch = 0
        while position >= len(self._batches(epoch)):
            position -= len(self._batches(epoch))
            epoch += 1
        return pair_batch([self.pairs[i] for i in self._batches(epoch)[position]], self.blocks, self.encoder)


def pair_batch(pairs: list[QueryPair], blocks: dict[str, list[TrainBlock]], encoder) -> Batch:
    """The queries of `pairs` against every token of their documents' first blocks (titles as context)."""
    rows = BatchRows(encoder, BatchConfig(masking=MaskingConfig()), None)
    first_block = {}  # document -> the batch number of its first candidate block
    for doc in dict.fromkeys(p.doc for p in pairs):
        first_block[doc] = rows.seq_base
        rows.add_candidates(blocks[doc][:BLOCKS_PER_DOC])
    for pair in pairs:
        ids, positions = encoder.query_layout(pair.query)
        base = first_block[pair.doc]
        positives = [(base + b, first, last) for b, first, last in pair.positives]
        rows.add_laid_out_query(ids, positions[0], blocks[pair.doc][0].doc, positives)
    return rows.batch()

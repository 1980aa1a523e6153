"""Evidence: where the shown phrases occur. The only stage after the candidates that reads a shard again
(document ids and texts), and only for the occurrences it returns: each want's places are asked of the shards
best first, as many as it may show, in one call for all of a request's wants (`gather`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from fill.ranker import CandidatePool
from fill.schemas import Evidence
from fill.shard_group import R, Shards, ShardTask, by_shard
from indexer.shard import Shard

CONTEXT_CHARS = 80
AHEAD = 2  # places asked per evidence still wanted: one round answers most wants (a round is a call per group)


def context_window(text: str, start: int, end: int, width: int = CONTEXT_CHARS) -> str:
    """The phrase with up to `width` chars either side, cut at white space, '...' marking cuts."""
    a, b = max(0, start - width), min(len(text), end + width)
    if a > 0:
        space = text.find(" ", a, start)
        a = space + 1 if space != -1 else a
    if b < len(text):
        space = text.rfind(" ", end, b)
        b = space if space != -1 else b
    snippet = " ".join(text[a:b].split())
    return ("... " if a > 0 else "") + snippet + (" ..." if b < len(text) else "")


class Place(NamedTuple):
    """Where an occurrence sits, as evidence shows it."""

    doc_id: str
    block: int  # its global block number
    start: int  # its first and end char in the document's text
    end: int
    context: str  # the text around it (`context_window`)


SpotAt = tuple[int, int, int, int]  # an occurrence in one shard: (document row, global block, start char, end char)


def read_places(shard: Shard, spots: Sequence[SpotAt]) -> list[Place]:
    """The Place of each occurrence of `shard` (document row, global block, start char, end char): its
    document's id and the context around the chars; each document read once."""
    texts: dict[int, str] = {}
    out = []
    for row, block, start, end in spots:
        text = texts.get(row)
        if text is None:
            text = texts[row] = shard.doc_text(row)
        out.append(Place(shard.doc_id(row), block, start, end, context_window(text, start, end)))
    return out


@dataclass(frozen=True)
class PlacesTask:
    """Places in one shard's documents (a fill.shard_group task, `read_places`)."""

    dense: ClassVar[bool] = False  # reads text only: a Ray ingress runs it (fill.scatter)

    shard_no: int
    places: tuple[SpotAt, ...]

    def compute(self, shard: Shard) -> list[Place]:
        return read_places(shard, self.places)


class Lazy(Sequence[Any]):
    """A sequence whose item i is `make(i)`, computed when asked: a want is asked a few places at a time, and a
    frequent phrase has thousands of occurrences."""

    def __init__(self, n: int, make: Callable[[int], Any]) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]  # no slices: `gather` asks one item at a time
        return self.make(i)


@dataclass
class Want:
    """One list of evidence to gather: places (shard number, a place of the task), best first; the first
    `limit` distinct places (by document id and chars) with their scores."""

    items: Sequence[tuple[int, Any]]
    scores: Sequence[float] | np.ndarray
    limit: int


def gather(
    shards: Shards,
    wants: list[Want],
    along: Sequence[ShardTask[R]] = (),
    task: Callable[[int, tuple[Any, ...]], ShardTask[list[Place]]] = PlacesTask,
) -> tuple[list[list[Evidence]], list[R]]:
    """The evidence of every want, asked of the shards in as few calls as there are rounds: the first round
    asks for each want's first AHEAD x `limit` places, a later round only for the wants still short (places found
    twice) that have places left. `task(shard_no, places)` makes one shard's task. The tasks `along` travel with
    the first round (one call to the shards, not two) and their results come back second."""
    out: list[list[Evidence]] = [[] for _ in wants]
    seen: list[set[Any]] = [set() for _ in wants]
    taken = [0] * len(wants)
    along_results: list[R] = []
    first = True
    while True:
        asks = []  # (want, item index)
        for w, want in enumerate(wants):
            need = want.limit - len(out[w])
            if need > 0 and taken[w] < len(want.items):
                more = min(len(want.items), taken[w] + AHEAD * need)  # a place is often found twice: ask ahead
                asks += [(w, i) for i in range(taken[w], more)]
                taken[w] = more
        if not asks and not first:
            break
        per, where = by_shard([wants[w].items[i] for w, i in asks])
        tasks = [task(s, tuple(items)) for s, items in per.items()]
        results: list[Any] = shards.gather([*tasks, *along] if first else tasks)
        if first:
            along_results, first = results[len(tasks) :], False
        found: dict[int, list[Place]] = dict(zip(per, results[: len(tasks)]))
        for (w, i), (s, j) in zip(asks, where):
            place = found[s][j]
            if len(out[w]) < wants[w].limit and (place.doc_id, place.start, place.end) not in seen[w]:
                seen[w].add((place.doc_id, place.start, place.end))
                out[w].append(
                    Evidence(
                        doc_id=place.doc_id,
                        block=place.block,
                        start=place.start,
                        end=place.end,
                        context=place.context,
                        score=wants[w].scores[i],
                    )
                )
        if not asks:
            break
    return out, along_results


def pool_want(pool: CandidatePool, occurrences: list[int], limit: int) -> Want:
    """The want of up to `limit` of a ranked phrase's occurrences (pool spans, best first) as evidence."""

    def place(j: int) -> tuple[int, SpotAt]:
        part, k = pool.where(occurrences[j])
        start = int(part.char[k])
        return part.shard_no, (int(part.row[k]), int(part.block[k]), start, start + int(part.keys.length[k]))

    return Want(
        Lazy(len(occurrences), place), Lazy(len(occurrences), lambda j: float(pool.score[occurrences[j]])), limit
    )

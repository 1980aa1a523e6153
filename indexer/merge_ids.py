"""The document ids of `indexer merge`'s inputs. An id that more than one input holds would be one document
served twice (`/info` counting both, a delete removing both and reporting one), so the merge refuses it with an
error naming the ids and the inputs that hold them (`duplicates_error`), unless told which copy to keep
(`--on-duplicate keep-first | keep-last`): the other copies are then deleted in the merged index as a delete
deletes, by tombstones (indexer.tombstones: never served, also not by BM25), and `indexer compact` drops them for
good (`drop_copies`).

Only live documents count: the inputs hold no deleted document (merge wants them compacted first), and a document
with rows in several shards of one input (a long one crosses a shard's end) is one copy, not a duplicate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.errors import AppError
from indexer.integrity import open_docs
from indexer.manifest import Manifest
from indexer.shard import shard_name
from indexer.tombstones import Tombstones

OnDuplicate = Literal["refuse", "keep-first", "keep-last"]
SHOWN = 10  # duplicate ids named in the error


@dataclass(frozen=True)
class Dropped:
    """The copies a de-duplicating merge deletes: their rows (by the merged index's shard names), how many
    documents (one per id and input) and how many tokens they hold."""

    tombstones: Tombstones
    documents: int
    tokens: int


def document_places(inputs: list[Path], manifests: list[Manifest]) -> pa.Table:
    """Every document row of the inputs: `id`, `input` (its place in `inputs`), `shard` (its number in the merged
    index: the inputs' shards in order) and `row` (in its shard's docs.arrow)."""
    parts: list[pa.Table] = []
    for i, (root, manifest) in enumerate(zip(inputs, manifests)):
        for info in manifest.shards:
            ids = open_docs(root / info.name / "docs.arrow", info.documents).column("id")
            n = len(ids)
            parts.append(
                pa.table(
                    {
                        "id": ids.cast(pa.string()),
                        "input": pa.array(np.full(n, i, dtype=np.int32)),
                        "shard": pa.array(np.full(n, len(parts), dtype=np.int32)),
                        "row": pa.array(np.arange(n, dtype=np.int64)),
                    }
                )
            )
    return pa.concat_tables(parts)


def duplicates(places: pa.Table) -> pa.Table:
    """`id`, `input_min`, `input_max` of each id that more than one input holds, sorted by id."""
    held = places.group_by("id").aggregate([("input", "min"), ("input", "max")])
    return held.filter(pc.not_equal(held["input_min"], held["input_max"])).sort_by("id")


def duplicates_error(places: pa.Table, dups: pa.Table, inputs: list[Path]) -> AppError:
    """The refusal: how many ids more than one input holds, the first SHOWN of them with their inputs, and the
    fixes."""
    shown = dups["id"].slice(0, SHOWN)
    held = places.filter(pc.is_in(places["id"], value_set=shown.combine_chunks()))
    by_id = held.group_by("id").aggregate([("input", "distinct")]).to_pydict()
    where = dict(zip(by_id["id"], by_id["input_distinct"]))
    named = "; ".join(
        f"{doc_id!r} (in {', '.join(str(inputs[i]) for i in sorted(where[doc_id]))})" for doc_id in shown.to_pylist()
    )
    more = f"; and {dups.num_rows - SHOWN} more" if dups.num_rows > SHOWN else ""
    return AppError(
        f"{dups.num_rows} document id(s) are held by more than one input of indexer merge: {named}{more}. Merged, "
        "each would be one document served twice (counted twice, and a delete would remove every copy); nothing "
        "was written. Pass --on-duplicate keep-first (or keep-last) to keep each such id's copy in the first (or "
        "last) input that holds it and delete the others, or delete the ids from all inputs but one (`indexer "
        "delete --index IN --ids ID`, then `indexer compact --index IN`) and merge again"
    )


def drop_copies(root: Path, places: pa.Table, dups: pa.Table, keep: OnDuplicate) -> Dropped:
    """Tombstone, in the merged index at `root` (its shards placed), every copy of a duplicate id but the one in
    the first input that holds it (`keep-first`) or the last (`keep-last`)."""
    keeper = "input_max" if keep == "keep-last" else "input_min"
    joined = places.join(dups.select(["id", keeper]), keys="id", join_type="inner")
    lost = joined.filter(pc.not_equal(joined["input"], joined[keeper]))
    tombstones, tokens = Tombstones(), 0
    shards, rows = lost["shard"].to_numpy(), lost["row"].to_numpy()
    for number in np.unique(shards).tolist():
        name, dead = shard_name(number), np.sort(rows[shards == number])
        tombstones = tombstones.plus(name, dead)
        blocks = np.load(root / name / "blocks.npy")
        hidden = np.isin(blocks[:, 0], dead)
        tokens += int((blocks[hidden, 2] - blocks[hidden, 1]).sum())
    documents = lost.group_by(["id", "input"]).aggregate([]).num_rows
    return Dropped(tombstones, documents, tokens)

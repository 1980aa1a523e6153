"""fill.shard_group: the typed shard tasks and their results are plain data that survive pickling unchanged (what
a Ray shard group receives and sends back), so fills and scores through pickled tasks equal the local ones."""

from __future__ import annotations

import pickle
from collections import defaultdict

import numpy as np
import pytest

from encoder.reader_files import ReaderCard, vocab_fingerprint
from encoder.reader_model import load_model, save_reader
from fill.candidates import ShardCandidates
from fill.choices import Votes
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.evidence import Place
from fill.schemas import FillRequest, ScoreRequest
from fill.shard_group import ShardGroup
from fill.windows import WindowRead
from indexer.phrase_index import ScoredHits

TIMES = {"took_ms", "timings_ms"}


class PickledShards:
    """Shards whose every task and result goes through pickle (as over Ray), recording the results' types."""

    one_round = False

    def __init__(self, group: ShardGroup) -> None:
        self.group = group
        self.kinds: dict[str, set[type]] = defaultdict(set)

    def search(self, queries, k, groups=None):
        return pickle.loads(pickle.dumps(self.group.search(pickle.loads(pickle.dumps(queries)), k, groups)))

    def gather(self, tasks):
        results = pickle.loads(pickle.dumps(self.group.gather(pickle.loads(pickle.dumps(list(tasks))))))
        for task, result in zip(tasks, results):
            items = result if isinstance(result, list) else [result]
            self.kinds[type(task).__name__] |= {type(item) for item in items}
        return results


@pytest.fixture(scope="module")
def engines(tiny_index, tiny_bert_dir, tmp_path_factory):
    reader_dir = tmp_path_factory.mktemp("reader")  # an untrained reader of the tiny model's vocabulary
    model, tokenizer = load_model(tiny_bert_dir)
    save_reader(model, tokenizer, ReaderCard(vocab=vocab_fingerprint(tokenizer)), reader_dir)
    local = FillEngine.open(EngineConfig(index=tiny_index, reader_dir=reader_dir))
    pickled = FillEngine(
        local.encoder, local.index, local.scoring, local.reader, PickledShards(ShardGroup(local.index))
    )
    yield local, pickled
    local.close()


@pytest.mark.parametrize("mode", ["dense", "restricted", "hybrid"])
def test_fills_and_scores_through_pickled_tasks_equal_the_local_ones(engines, mode):
    local, pickled = engines
    for request in (
        FillRequest(text="Marie Curie was born in <mask> .", mode=mode, evidence=3, reader=True),
        ScoreRequest(text="Marie Curie was born in <mask> .", mode=mode, choices=["Warsaw", "Paris"], evidence=2),
    ):
        want = local.handle(request).model_dump(exclude=TIMES)
        assert pickled.handle(request).model_dump(exclude=TIMES) == want


def test_every_task_gives_its_typed_result(engines):
    local, pickled = engines
    pickled.handle(FillRequest(text="Marie Curie was born in <mask> .", evidence=3, reader=True))
    pickled.handle(
        ScoreRequest(text="Marie Curie was born in <mask> .", choices=["Warsaw", "Paris"], evidence=2, calibrate=True)
    )
    kinds = pickled.shards.kinds
    assert kinds["CandidateTask"] <= {ShardCandidates, type(None)} and ShardCandidates in kinds["CandidateTask"]
    assert kinds["PlacesTask"] == {Place} and kinds["VoteEvidenceTask"] == {Place}
    assert kinds["WindowTask"] == {WindowRead} and kinds["VotesTask"] == {Votes}
    assert kinds["BlockTokensTask"] == {np.ndarray} and kinds["CountsTask"] == {np.ndarray}
    planned = local.plan(FillRequest(text="Marie Curie was born in <mask> ."))
    queries = local.encoder.encode_layouts([(planned.ids, planned.mask_at)])[0]
    hits = pickled.shards.search(queries.q_start, 4)
    assert len(hits) == 1 and isinstance(hits[0], ScoredHits) and hits[0].positions.dtype == np.int64
    mine = local.shards.search(queries.q_start, 4)[0]
    assert hits[0].scores.size == 4 and all(np.array_equal(a, b) for a, b in zip(hits[0], mine))

"""fill.scatter: a fill over shard groups in ONE call per group (search and candidates together, the rest read from the
ingress's own text side of the shards) answers exactly as one process does: the same spans, logits bit for bit,
fills field for field, with k small enough that each group's own top k holds hits the global top k drops."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from encoder.reader_files import ReaderCard, vocab_fingerprint
from encoder.reader_model import load_model, save_reader
from fill.candidates import CandidateTask
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.scatter import ScatterShards, kept
from fill.schemas import FillRequest, ScoreRequest
from fill.shard_group import ShardGroup
from indexer.build import BuildConfig, build_index
from indexer.phrase_index import PhraseIndex
from tests.conftest import CORPUS, write_jsonl

TIMES = {"took_ms", "timings_ms"}
PEOPLE = ["Marie Curie", "Allan Peiper", "Ada Lovelace", "Niels Bohr", "Lise Meitner", "Alan Turing"]
PLACES = ["Warsaw", "Alexandra", "London", "Copenhagen", "Vienna", "Paris", "Passy", "Victoria"]
QUERIES = [
    "Marie Curie was born in <mask> .",
    "<mask> was born in Warsaw in <mask> .",
    "The Seine flows through <mask> .",
    "Niels Bohr worked in <mask> with <mask> .",
]


@pytest.fixture(scope="module")
def split_index(tmp_path_factory, tiny_bert_dir):
    """~1,500 tokens in 6+ shards: sentences about the same people and places, so every query hits many shards."""
    rows = list(CORPUS)
    for i in range(60):
        who, where, other = PEOPLE[i % 6], PLACES[i % 8], PLACES[(i * 3 + 1) % 8]
        text = f"{who} was born in {where} in {1800 + i}. {who} later worked in {other} with {PEOPLE[(i + 2) % 6]}."
        rows.append({"id": f"g{i}", "title": who, "text": text})
    root = tmp_path_factory.mktemp("split")
    out = root / "idx"
    corpus = write_jsonl(root / "corpus.jsonl", rows)
    build_index(BuildConfig(corpus=corpus, out=out, model=tiny_bert_dir, block_tokens=16, shard_tokens=250))
    return out


class GroupCalls:
    """Three shard groups in this process; every call and its answer pickled (as over Ray), and counted."""

    def __init__(self, root, plan: list[list[int]]) -> None:
        self.groups = [ShardGroup(PhraseIndex(root, shard_nos=own, bm25=False)) for own in plan]
        self.calls = 0
        self.called: list[int] = []  # the group of every call

    def __call__(self, calls):
        self.calls += len(calls)
        self.called += [g for g, _, _ in calls]
        out = []
        for g, method, args in calls:
            result = getattr(self.groups[g], method)(*pickle.loads(pickle.dumps(args)))
            out.append(pickle.loads(pickle.dumps(result)))
        return out

    def close(self):
        for g in self.groups:
            g.index.close()


@pytest.fixture(scope="module")
def engines(split_index, tiny_bert_dir, tmp_path_factory):
    reader_dir = tmp_path_factory.mktemp("reader")  # an untrained reader of the tiny model's vocabulary
    model, tokenizer = load_model(tiny_bert_dir)
    save_reader(model, tokenizer, ReaderCard(vocab=vocab_fingerprint(tokenizer)), reader_dir)
    local = FillEngine.open(EngineConfig(index=split_index, reader_dir=reader_dir))
    n = len(local.index.shards)
    assert n >= 6
    plan = [list(range(0, 2)), list(range(2, n - 2)), list(range(n - 2, n))]
    calls = GroupCalls(split_index, plan)
    text = PhraseIndex(split_index, dense=False)
    owner = {s: g for g, own in enumerate(plan) for s in own}
    shards = ScatterShards(owner, ShardGroup(text), calls)
    scattered = FillEngine(local.encoder, text, local.scoring, local.reader, shards)
    yield local, scattered, calls
    local.close()
    text.close()
    calls.close()


@pytest.mark.parametrize("mode", ["dense", "hybrid", "restricted"])
@pytest.mark.parametrize("k", [3, 8, 1024])
def test_scattered_fills_equal_one_process(engines, mode, k):
    local, scattered, _ = engines
    for text in QUERIES:
        for options in ({}, {"alpha": 0.5, "top_k": 8, "evidence": 3, "lexical_weight": 4.0}):
            request = FillRequest(text=text, mode=mode, k=k, reader=True, **options)
            want = local.handle(request).model_dump(exclude=TIMES)
            assert scattered.handle(request).model_dump(exclude=TIMES) == want, (text, options)
    request = ScoreRequest(text=QUERIES[0], mode=mode, k=k, choices=["Warsaw", "Paris"], evidence=2)
    assert scattered.handle(request).model_dump(exclude=TIMES) == local.handle(request).model_dump(exclude=TIMES)


def test_a_fill_is_one_call_per_group(engines):
    local, scattered, calls = engines
    for mode in ("dense", "hybrid", "restricted"):
        before = len(calls.called)
        scattered.handle(FillRequest(text=QUERIES[3], mode=mode, reader=True, evidence=3))
        called = calls.called[before:]  # windows, evidence, block tokens: read here
        if mode == "restricted":  # no search: every mask's candidates in one call to each group holding its blocks
            assert called and len(set(called)) == len(called), called
        else:
            assert sorted(called) == list(range(len(calls.groups))), mode


def test_kept_gives_the_spans_and_logits_one_process_forms(engines):
    """With k 3 each group forms spans from hits the global top 3 drops; `kept` cuts them away, and what stays is
    the one-process candidates array for array (logits bit for bit, lexical bonus included)."""
    local, scattered, _ = engines
    cut = 0
    for text in QUERIES:
        request = FillRequest(text=text, mode="hybrid", k=3, lexical_weight=4.0)
        planned = scattered.plan(request)
        prepared = scattered.prepare([planned])[0]
        lexical = prepared.lexical
        assert lexical is not None and lexical.bonus is not None
        form = scattered._form(prepared)
        q = np.concatenate([prepared.queries.q_start, prepared.queries.q_end])
        _, raw = scattered.shards.search_forming(q, 3, [q.shape[0]], [form])
        for m, hits in enumerate(prepared.hits):
            mine = kept(raw[0][m], hits, lexical)
            cut += sum(c.size for c in raw[0][m]) - sum(c.size for c in mine)
            query = form.masks[m]
            query = type(query)(query.q_start, query.q_end, query.scale, query.max_span_tokens, lexical.bonus, False)
            shards = sorted(set(hits.shard_nos()) | set(lexical.by_shard))
            empty = np.empty(0, dtype=np.int64)
            tasks = [
                CandidateTask(s, hits.start.in_shard(s), hits.end.in_shard(s), lexical.by_shard.get(s, empty), query)
                for s in shards
            ]
            want = [c for c in local.shards.gather(tasks) if c is not None]
            assert [c.shard_no for c in mine] == [c.shard_no for c in want]
            for a, b in zip(mine, want):
                for name in ("first", "last", "start_logits", "start_of", "end_logits", "end_of", "block", "row"):
                    x, y = getattr(a, name), getattr(b, name)
                    assert x.dtype == y.dtype and np.array_equal(x, y), name
                assert (a.start_max, a.end_max) == (b.start_max, b.end_max)
                assert np.array_equal(a.blocks, b.blocks) and np.array_equal(a.bounds, b.bounds)
                assert a.keys.texts(np.arange(a.size)) == b.keys.texts(np.arange(b.size))
    assert cut > 0  # the groups' own top k formed spans the global top k does not

"""FillEngine against a brute-force reference on a real (tiny, random-vector) index on disk.

The index is written with indexer.shard_writer.write_shard + indexer.manifest.Manifest and opened with
indexer.phrase_index.PhraseIndex; the encoder is a fake returning fixed query vectors. The reference below
re-implements NPM inference with plain loops (no fill.spans): enumerate every valid span, keep
those touching the top-k start / end hits, softmax over distinct starts / ends, sum (or max) per
phrase, rank by mass * len^alpha, normalise.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from common.masks import count_masks
from corpus.tokens import WORD_END, WORD_START
from encoder.model import QueryVectors
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.manifest import BuildSettings, Counts, Manifest, ModelInfo
from indexer.phrase_index import PhraseIndex
from indexer.shard_writer import ShardContent, ShardPlan, write_shard

DIM = 16
SCALE = 1.0 / math.sqrt(DIM)


def dense_request(**fields) -> FillRequest:
    """A dense-mode request past the validator (the reference is dense retrieval; these indexes have no BM25)."""
    return FillRequest.model_construct(mode="dense", **fields)


ALL = 10**6  # top_k large enough to return every phrase

# words as their token pieces; multi-piece words: first piece WORD_START only, last WORD_END only
WORDS = [
    ["alpha"],
    ["beta"],
    ["gamma"],
    ["delta"],
    ["Alpha"],
    ["BETA"],
    ["epsilon"],
    ["7"],
    ["+"],
    ["alpha", "bet"],
    ["gam", "ma", "ray"],
    ["eps", "il", "ons"],
    ["Gam", "ma"],
]
CLOSING = [",", ".", "!", "»", "…", "」"]  # attached to the previous word
OPENING = ["«", "(", "「"]  # the next word attaches to it
DASH = ["—", "-"]  # free-standing, spaces around
FIXED = ["alpha", "beta", ",", "gamma", ".", "delta"]  # "alpha beta, gamma. delta" recurs everywhere


@dataclass
class Doc:
    id: str
    text: str
    offsets: list[tuple[int, int]]
    flags: list[int]


@dataclass
class RefBlock:
    shard: int
    global_block: int
    doc_id: str
    text: str
    first: int  # shard-local token positions [first, end)
    end: int


@dataclass
class RefShard:
    vectors: np.ndarray  # float16
    flags: np.ndarray
    offsets: np.ndarray
    blocks: list[RefBlock] = field(default_factory=list)


def make_doc(rng: np.random.Generator, doc_id: str) -> Doc:
    items: list[tuple[str, list[str]]] = []  # (kind, pieces)
    n_items = int(rng.integers(8, 22))
    fixed_at = int(rng.integers(0, n_items)) if rng.random() < 0.6 else -1
    for k in range(n_items):
        if k == fixed_at:
            items += [("close" if w in CLOSING else "word", [w]) for w in FIXED]
            continue
        r = rng.random()
        if r < 0.68:
            items.append(("word", WORDS[int(rng.integers(len(WORDS)))]))
        elif r < 0.85:
            items.append(("close", [CLOSING[int(rng.integers(len(CLOSING)))]]))
        elif r < 0.93:
            items.append(("open", [OPENING[int(rng.integers(len(OPENING)))]]))
        else:
            items.append(("word", [DASH[int(rng.integers(len(DASH)))]]))
    text = "  " if rng.random() < 0.3 else ""
    offsets, flags = [], []
    prev_open = True
    for kind, pieces in items:
        if not (kind == "close" or prev_open):
            text += " "
        for p, piece in enumerate(pieces):
            flag = (WORD_START if p == 0 else 0) | (WORD_END if p == len(pieces) - 1 else 0)
            offsets.append((len(text), len(text) + len(piece)))
            flags.append(flag)
            text += piece
        prev_open = kind == "open"
    text += " \n" if rng.random() < 0.3 else ""
    return Doc(doc_id, text, offsets, flags)


def cut_blocks(rng: np.random.Generator, doc: Doc) -> list[tuple[int, int]]:
    """Token ranges of 3..8 tokens, cut before a word start (and now and then mid-word)."""
    n, out, a = len(doc.flags), [], 0
    while a < n:
        b = min(n, a + int(rng.integers(3, 9)))
        if b < n and rng.random() < 0.8:
            while b > a + 1 and not doc.flags[b] & WORD_START:
                b -= 1
        out.append((a, b))
        a = b
    return out


@dataclass
class Corpus:
    root: Path
    shards: list[RefShard]
    docs: dict[str, str]  # doc id -> text
    tokens: int


def build_corpus(root: Path, seed: int, n_docs: int = 9, n_shards: int = 3) -> Corpus:
    rng = np.random.default_rng(seed)
    docs = [make_doc(rng, f"doc{seed}-{d}") for d in range(n_docs)]
    blocks = [(doc, a, b) for doc in docs for a, b in cut_blocks(rng, doc)]
    # cut the block list into shards at block boundaries (a document may straddle two shards)
    cuts = sorted(rng.choice(np.arange(1, len(blocks)), size=n_shards - 1, replace=False).tolist())
    groups = [blocks[a:b] for a, b in zip([0] + cuts, cuts + [len(blocks)])]
    root.mkdir(parents=True, exist_ok=True)
    infos, ref_shards = [], []
    token_base = block_base = 0
    for number, group in enumerate(groups):
        rows: dict[str, int] = {}
        doc_ids, doc_texts, block_rows, offsets, flags = [], [], [], [], []
        ref_blocks = []
        for local_b, (doc, a, b) in enumerate(group):
            if doc.id not in rows:
                rows[doc.id] = len(doc_ids)
                doc_ids.append(doc.id)
                doc_texts.append(doc.text)
            first = len(flags)
            block_rows.append((rows[doc.id], first, first + b - a))
            offsets += doc.offsets[a:b]
            flags += doc.flags[a:b]
            ref_blocks.append(RefBlock(number, block_base + local_b, doc.id, doc.text, first, first + b - a))
        n = len(flags)
        vectors = rng.standard_normal((n, DIM)).astype(np.float16)
        content = ShardContent(
            vectors=vectors,
            token_ids=np.arange(n, dtype=np.int32),
            offsets=np.asarray(offsets, dtype=np.int32).reshape(-1, 2),
            flags=np.asarray(flags, dtype=np.uint8),
            blocks=np.asarray(block_rows, dtype=np.int64).reshape(-1, 3),
            doc_ids=doc_ids,
            doc_titles=[""] * len(doc_ids),
            doc_texts=doc_texts,
        )
        infos.append(write_shard(root, ShardPlan(number, n, len(group), token_base, block_base, "Flat"), content))
        ref_shards.append(RefShard(vectors, content.flags, content.offsets, ref_blocks))
        token_base += n
        block_base += len(group)
    Manifest(
        created_at="2024-01-01T00:00:00+00:00",
        model=ModelInfo(
            path="fake", fingerprint="0" * 64, model_type="fake", tokenizer="Fake", vocab_size=1, mask_token="<mask>"
        ),
        dim=DIM,
        index_type="flat",
        similarity_scale=SCALE,
        build=BuildSettings(corpus=Path("synthetic"), out=root),
        corpus={"path": "synthetic", "format": "jsonl"},
        counts=Counts(documents=n_docs, empty_documents=0, blocks=block_base, tokens=token_base, shards=len(groups)),
        shards=infos,
    ).save(root)
    return Corpus(root, ref_shards, {d.id: d.text for d in docs}, token_base)


class FakeEncoder:
    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = starts, ends
        self.calls = 0

    def query_layout(self, text: str) -> tuple[list[int], list[int]]:
        masks = count_masks(text)
        assert masks == self.starts.shape[0]
        return [0] * (2 * masks), list(range(0, 2 * masks, 2))

    def content_tokens(self, ids: list[int]) -> frozenset[int]:
        return frozenset()  # (the layout holds only mask tokens)

    def encode_layouts(self, layouts: list[tuple[list[int], list[int]]], shape=None) -> list[QueryVectors]:
        assert len(layouts) == 1
        self.calls += 1
        return [QueryVectors(q_start=self.starts.copy(), q_end=self.ends.copy())]


def query_vectors(seed: int, masks: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + seed)
    return (rng.standard_normal((masks, DIM)) * 1.5).astype(np.float32), (
        rng.standard_normal((masks, DIM)) * 1.5
    ).astype(np.float32)


# ---------------------------------------------------------------- brute-force reference


def is_strippable(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch)[0] == "P"


def stripped(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and is_strippable(text[a]):
        a += 1
    while b > a and is_strippable(text[b - 1]):
        b -= 1
    return a, b


@dataclass
class RefSpan:
    shard: int
    i: int
    j: int
    block: RefBlock
    score: float = 0.0


@dataclass
class RefPhrase:
    text: str
    tokens: int
    mass: float = 0.0
    occ: list[tuple[str, int, int, int, float]] = field(default_factory=list)  # doc id, block, start, end, score
    value: float = 0.0


def all_valid_spans(corpus: Corpus, max_len: int) -> list[RefSpan]:
    out = []
    for s, shard in enumerate(corpus.shards):
        for blk in shard.blocks:
            for i in range(blk.first, blk.end):
                for j in range(i, min(blk.end, i + max_len)):
                    if shard.flags[i] & WORD_START and shard.flags[j] & WORD_END:
                        out.append(RefSpan(s, i, j, blk))
    return out


def logits(corpus: Corpus, q: np.ndarray) -> dict[tuple[int, int], float]:
    out = {}
    for s, shard in enumerate(corpus.shards):
        for p in range(shard.vectors.shape[0]):
            out[(s, p)] = sum(float(x) * float(y) for x, y in zip(shard.vectors[p], q)) * SCALE
    return out


def top_k(lg: dict[tuple[int, int], float], k: int) -> set[tuple[int, int]]:
    order = sorted(lg, key=lambda key: -lg[key])
    if k < len(order):  # the test data must not have a near-tie at the cut
        assert lg[order[k - 1]] - lg[order[k]] > 1e-4, "near-tie at the top-k cut; pick another seed"
    return set(order[:k])


def reference(
    corpus: Corpus,
    qs: np.ndarray,
    qe: np.ndarray,
    k: int,
    max_len: int,
    alpha: float,
    case_sensitive: bool = True,
    aggregate: str = FillRequest.model_fields["aggregate"].default,
) -> list[RefPhrase]:
    """Brute force: every valid span touching an exact top-k hit; a phrase's len is its own token count."""
    ls, le = logits(corpus, qs), logits(corpus, qe)
    hit_s, hit_e = top_k(ls, k), top_k(le, k)
    spans = [sp for sp in all_valid_spans(corpus, max_len) if (sp.shard, sp.i) in hit_s or (sp.shard, sp.j) in hit_e]

    def probs(keys, lg):
        m = max(lg[key] for key in keys)
        z = {key: math.exp(lg[key] - m) for key in keys}
        tot = sum(z.values())
        return {key: v / tot for key, v in z.items()}

    p_start = probs({(sp.shard, sp.i) for sp in spans}, ls)
    p_end = probs({(sp.shard, sp.j) for sp in spans}, le)
    phrases: dict[str, RefPhrase] = {}
    for sp in sorted(spans, key=lambda sp: (sp.shard, sp.i, sp.j)):
        sp.score = p_start[(sp.shard, sp.i)] + p_end[(sp.shard, sp.j)]
        off = corpus.shards[sp.shard].offsets
        a, b = stripped(sp.block.text, int(off[sp.i][0]), int(off[sp.j][1]))
        if a >= b:
            continue
        text = sp.block.text[a:b]
        # the phrase's length in tokens: the tokens of the span that the stripped phrase covers
        n_tok = sum(1 for t in range(sp.i, sp.j + 1) if off[t][0] < b and off[t][1] > a)
        key = text if case_sensitive else text.lower()
        ph = phrases.setdefault(key, RefPhrase(text, n_tok))
        assert ph.tokens == n_tok or not case_sensitive, "test data: a phrase with two token counts"
        ph.mass = max(ph.mass, sp.score) if aggregate == "max" else ph.mass + sp.score
        ph.occ.append((sp.block.doc_id, sp.block.global_block, a, b, sp.score))
    out = list(phrases.values())
    for ph in out:
        ph.value = ph.mass * ph.tokens**alpha
    total = sum(ph.value for ph in out)
    for ph in out:
        ph.value /= total
    out.sort(key=lambda ph: (-ph.value, ph.text))
    return out


# ---------------------------------------------------------------- comparison helpers


def assert_same_ranking(cands, ref: list[RefPhrase], case_sensitive: bool = True) -> None:
    norm = (lambda t: t) if case_sensitive else str.lower
    assert len(cands) == len(ref)
    ref_by = {norm(ph.text): ph for ph in ref}
    got = [norm(c.phrase) for c in cands]
    assert len(set(got)) == len(got), "a phrase is listed twice"
    assert set(got) == set(ref_by)
    np.testing.assert_allclose([c.score for c in cands], [ph.value for ph in ref], rtol=1e-5, atol=1e-12)
    for c in cands:
        assert np.isclose(c.score, ref_by[norm(c.phrase)].value, rtol=1e-5, atol=1e-12), c.phrase
    # order: exact, except inside groups of values too close to tell apart in float32
    pos = 0
    while pos < len(ref):
        end = pos + 1
        while end < len(ref) and ref[end - 1].value - ref[end].value <= 1e-6 * ref[end - 1].value:
            end += 1
        assert set(got[pos:end]) == {norm(ph.text) for ph in ref[pos:end]}, f"order differs at rank {pos}"
        if end - pos == 1:
            assert got[pos] == norm(ref[pos].text)
        pos = end


def assert_evidence(cands, ref: list[RefPhrase], corpus: Corpus, n_evidence: int, case_sensitive: bool = True) -> None:
    norm = (lambda t: t) if case_sensitive else str.lower
    ref_by = {norm(ph.text): ph for ph in ref}
    for c in cands:
        ph = ref_by[norm(c.phrase)]
        best: dict[tuple[str, int, int], float] = {}
        for doc_id, _, a, b, sc in ph.occ:
            best[(doc_id, a, b)] = max(sc, best.get((doc_id, a, b), -1.0))
        assert 1 <= len(c.evidence) == min(n_evidence, len(best))
        wheres = [(e.doc_id, e.start, e.end) for e in c.evidence]
        assert len(set(wheres)) == len(wheres)
        scores = [e.score for e in c.evidence]
        assert all(x >= y for x, y in zip(scores, scores[1:]))
        np.testing.assert_allclose(scores, sorted(best.values(), reverse=True)[: len(scores)], rtol=1e-5)
        for e in c.evidence:
            text = corpus.docs[e.doc_id]
            assert (
                text[e.start : e.end] == c.phrase if case_sensitive else text[e.start : e.end].lower() == norm(c.phrase)
            )
            # the evidence is one of the phrase's occurrences, with its block and its best score
            assert any(o[:4] == (e.doc_id, e.block, e.start, e.end) for o in ph.occ), (c.phrase, e)
            assert np.isclose(e.score, best[(e.doc_id, e.start, e.end)], rtol=1e-5)
            assert text[e.start : e.end] in e.context


# ---------------------------------------------------------------- fixtures


_CACHE: dict[int, Corpus] = {}


@pytest.fixture(scope="module")
def corpus_for(tmp_path_factory):
    def get(seed: int) -> Corpus:
        if seed not in _CACHE:
            _CACHE[seed] = build_corpus(tmp_path_factory.mktemp(f"npm_idx_{seed}") / "idx", seed)
        return _CACHE[seed]

    yield get
    _CACHE.clear()


@pytest.fixture(scope="module")
def index_for(corpus_for):
    opened: dict[int, PhraseIndex] = {}

    def get(seed: int) -> tuple[Corpus, PhraseIndex]:
        corpus = corpus_for(seed)
        if seed not in opened:
            opened[seed] = PhraseIndex(corpus.root, verify=True)
        return corpus, opened[seed]

    yield get
    for idx in opened.values():
        idx.close()


# ---------------------------------------------------------------- tests

SEEDS = [0, 1, 2, 3]


def check(
    cands, corpus, qs, qe, k, max_len, alpha, case_sensitive=True, n_evidence=3, aggregate="max"
) -> list[RefPhrase]:
    """Assert the engine's candidates equal the reference's (ranking, scores, evidence)."""
    ref = reference(corpus, qs, qe, k, max_len, alpha, case_sensitive, aggregate)
    assert_same_ranking(cands, ref, case_sensitive)
    assert_evidence(cands, ref, corpus, n_evidence, case_sensitive)
    return ref


def test_synthetic_index_is_what_the_reference_thinks(index_for):
    corpus, index = index_for(0)
    assert len(index.shards) == 3
    assert index.total_tokens == corpus.tokens == sum(len(s) for s in index.shards)
    for shard, ref in zip(index.shards, corpus.shards):
        np.testing.assert_array_equal(np.asarray(shard.vectors), ref.vectors)
        np.testing.assert_array_equal(np.asarray(shard.flags), ref.flags)
        for blk in ref.blocks:
            local = blk.global_block - shard.info.block_base
            assert shard.doc_id(int(shard.blocks[local, 0])) == blk.doc_id
            assert list(shard.block_of(np.arange(blk.first, blk.end))) == [local] * (blk.end - blk.first)
    # the data exercise what they should: recurring phrases, punctuation-only spans, multi-piece words
    ref = reference(corpus, *[q[0] for q in query_vectors(0, 1)], corpus.tokens, 10, 0.0)
    assert max(len(ph.occ) for ph in ref) >= 5
    assert any(len({o[1] for o in ph.occ}) >= 3 for ph in ref)  # a phrase in three blocks at least
    punct_only = [
        sp
        for sp in all_valid_spans(corpus, 1)
        if (lambda a, b: a >= b)(*stripped(sp.block.text, *map(int, corpus.shards[sp.shard].offsets[sp.i])))
    ]
    assert len(punct_only) > 5
    # a block that starts mid-word (its first token is no word start)
    assert any(not s.flags[b.first] & WORD_START for s in corpus.shards for b in s.blocks)
    # a document straddling two shards
    assert any(
        set(b.doc_id for b in s.blocks) & set(b.doc_id for b in t.blocks)
        for s, t in zip(corpus.shards, corpus.shards[1:])
    )
    assert {"alphabet", "gammaray", "Gamma", "alpha beta, gamma. delta"} <= {ph.text for ph in ref}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("max_len", [1, 3, 10])
@pytest.mark.parametrize("alpha", [0.0, 0.5])
@pytest.mark.parametrize("aggregate", ["max", "sum"])
def test_engine_matches_bruteforce(index_for, seed, max_len, alpha, aggregate):
    corpus, index = index_for(seed)
    qs, qe = query_vectors(seed, 1)
    engine = FillEngine(FakeEncoder(qs, qe), index)
    params = dict(k=corpus.tokens, top_k=ALL, max_span_tokens=max_len, alpha=alpha, aggregate=aggregate)
    result = engine.fill(dense_request(text="The <mask> was seen.", **params))
    assert len(result.masks) == 1 and result.masks[0].index == 0
    cands = result.masks[0].candidates
    assert np.isclose(sum(c.score for c in cands), 1.0)
    assert all(len(c.evidence) >= 1 for c in cands)
    ref = check(cands, corpus, qs[0], qe[0], corpus.tokens, max_len, alpha, aggregate=aggregate)
    assert len(ref) > 5
    assert result.filled == f"The {ref[0].text} was seen."
    if max_len == 1:
        assert all(" " not in c.phrase for c in cands)


@pytest.mark.parametrize("seed", [0, 2])
def test_top_k_truncates_but_normalises_over_all(index_for, seed):
    corpus, index = index_for(seed)
    qs, qe = query_vectors(seed, 1)
    engine = FillEngine(FakeEncoder(qs, qe), index)
    res = engine.fill(dense_request(text="<mask>", k=corpus.tokens, top_k=4, max_span_tokens=3, alpha=0.0, evidence=1))
    ref = reference(corpus, qs[0], qe[0], corpus.tokens, 3, 0.0)
    cands = res.masks[0].candidates
    assert [c.phrase for c in cands] == [ph.text for ph in ref[:4]]
    np.testing.assert_allclose([c.score for c in cands], [ph.value for ph in ref[:4]], rtol=1e-5)
    assert sum(c.score for c in cands) < 1.0
    assert all(len(c.evidence) == 1 for c in cands)
    assert res.filled == ref[0].text


@pytest.mark.parametrize("seed", [1, 3])
def test_case_insensitive_matches_bruteforce(index_for, seed):
    corpus, index = index_for(seed)
    qs, qe = query_vectors(seed, 1)
    engine = FillEngine(FakeEncoder(qs, qe), index)
    params = dense_request(
        text="<mask>!", k=corpus.tokens, top_k=ALL, max_span_tokens=3, alpha=0.0, case_sensitive=False
    )
    cands = engine.fill(params).masks[0].candidates
    ref = reference(corpus, qs[0], qe[0], corpus.tokens, 3, 0.0, case_sensitive=False)
    assert_same_ranking(cands, ref, case_sensitive=False)
    assert_evidence(cands, ref, corpus, params.evidence, case_sensitive=False)
    sensitive = reference(corpus, qs[0], qe[0], corpus.tokens, 3, 0.0)
    assert len(ref) < len(sensitive)  # "Alpha"/"alpha", "BETA"/"beta", "Gamma"/"gamma" merged


@pytest.mark.parametrize("seed", SEEDS)
def test_two_masks(index_for, seed):
    corpus, index = index_for(seed)
    qs, qe = query_vectors(seed, 2)
    engine = FillEngine(FakeEncoder(qs, qe), index)
    params = dense_request(text="A <mask> and [MASK] here.", k=corpus.tokens, top_k=ALL, max_span_tokens=3, alpha=0.0)
    res = engine.fill(params)
    assert [m.index for m in res.masks] == [0, 1]
    tops = []
    for m in range(2):
        ref = reference(corpus, qs[m], qe[m], corpus.tokens, 3, 0.0)
        assert_same_ranking(res.masks[m].candidates, ref)
        assert_evidence(res.masks[m].candidates, ref, corpus, params.evidence)
        tops.append(ref[0].text)
    assert res.filled == f"A {tops[0]} and {tops[1]} here."
    # the masks are scored with their own vectors: swapping them swaps the answers
    swapped = FillEngine(FakeEncoder(qs[::-1].copy(), qe[::-1].copy()), index).fill(
        params.model_copy(update={"text": "<mask> <mask>"})
    )
    assert swapped.filled == f"{tops[1]} {tops[0]}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("max_len", [1, 3, 10])
@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_small_k_candidates_touch_top_hits(index_for, seed, max_len, alpha):
    corpus, index = index_for(seed)
    qs, qe = query_vectors(seed, 1)
    engine = FillEngine(FakeEncoder(qs, qe), index)
    k = 3
    res = engine.fill(dense_request(text="<mask>", k=k, top_k=ALL, max_span_tokens=max_len, alpha=alpha))
    full = reference(corpus, qs[0], qe[0], corpus.tokens, max_len, alpha)
    cands = res.masks[0].candidates
    # a strict subset of all phrases; every phrase occurs in a span that starts or ends at a top-k hit
    assert cands and {c.phrase for c in cands} < {ph.text for ph in full}
    hit_s, hit_e = top_k(logits(corpus, qs[0]), k), top_k(logits(corpus, qe[0]), k)
    touching = [sp for sp in all_valid_spans(corpus, max_len) if (sp.shard, sp.i) in hit_s or (sp.shard, sp.j) in hit_e]
    assert touching, "no top-k hit is a usable word boundary; pick another seed"
    for c in cands:
        assert any(
            corpus.docs[sp.block.doc_id][
                slice(
                    *stripped(
                        sp.block.text,
                        int(corpus.shards[sp.shard].offsets[sp.i][0]),
                        int(corpus.shards[sp.shard].offsets[sp.j][1]),
                    )
                )
            ]
            == c.phrase
            for sp in touching
        ), c.phrase
    check(cands, corpus, qs[0], qe[0], k, max_len, alpha)


def test_k_larger_than_index_and_no_candidates(index_for):
    corpus, index = index_for(1)
    qs, qe = query_vectors(1, 1)
    engine = FillEngine(FakeEncoder(qs, qe), index)
    big = engine.fill(dense_request(text="<mask>", k=corpus.tokens * 5, top_k=ALL, max_span_tokens=3))
    exact = engine.fill(dense_request(text="<mask>", k=corpus.tokens, top_k=ALL, max_span_tokens=3))
    assert [(c.phrase, c.score) for c in big.masks[0].candidates] == [
        (c.phrase, c.score) for c in exact.masks[0].candidates
    ]
    # max_span_tokens=0: no span at all, the mask is left in place
    none = engine.fill(dense_request(text="x <mask> y", k=corpus.tokens, max_span_tokens=0))
    assert none.masks[0].candidates == [] and none.filled == "x <mask> y"


def _tiny_index(root: Path, text: str, pieces: list[tuple[int, int, int]]) -> PhraseIndex:
    """One shard, one block, one document; all token vectors zero (every logit 0: uniform softmax)."""
    n = len(pieces)
    content = ShardContent(
        vectors=np.zeros((n, DIM), np.float16),
        token_ids=np.arange(n, dtype=np.int32),
        offsets=np.array([p[:2] for p in pieces], np.int32),
        flags=np.array([p[2] for p in pieces], np.uint8),
        blocks=np.array([[0, 0, n]], np.int64),
        doc_ids=["d"],
        doc_titles=[""],
        doc_texts=[text],
    )
    root.mkdir(parents=True)
    info = write_shard(root, ShardPlan(0, n, 1, 0, 0, "Flat"), content)
    Manifest(
        created_at="2024-01-01T00:00:00+00:00",
        model=ModelInfo(
            path="fake", fingerprint="0", model_type="fake", tokenizer="Fake", vocab_size=1, mask_token=None
        ),
        dim=DIM,
        index_type="flat",
        similarity_scale=SCALE,
        corpus={},
        build=BuildSettings(corpus=Path("synthetic"), out=root),
        counts=Counts(documents=1, empty_documents=0, blocks=1, tokens=n, shards=1),
        shards=[info],
    ).save(root)
    return PhraseIndex(root)


def test_exact_scores_on_hand_made_index(tmp_path):
    """ "beta, gamma": tokens beta(SE) ,(SE) gamma(SE); uniform P_start = P_end = 1/3, every span 2/3."""
    index = _tiny_index(tmp_path / "idx", "beta, gamma", [(0, 4, 3), (4, 5, 3), (6, 11, 3)])
    zero = np.zeros((1, DIM), np.float32)
    engine = FillEngine(FakeEncoder(zero, zero), index)
    res = engine.fill(dense_request(text="<mask>", k=3, top_k=10, max_span_tokens=3, alpha=0.0, aggregate="sum"))
    # spans: beta | beta, -> "beta" (4/3); ", gamma" | gamma -> "gamma" (4/3); "beta, gamma" (2/3); "," dropped
    got = {c.phrase: c.score for c in res.masks[0].candidates}
    assert got.keys() == {"beta", "gamma", "beta, gamma"}
    assert np.isclose(got["beta"], 0.4) and np.isclose(got["gamma"], 0.4) and np.isclose(got["beta, gamma"], 0.2)
    assert [c.phrase for c in res.masks[0].candidates] == ["beta", "gamma", "beta, gamma"]  # tie -> by text
    assert res.filled == "beta"
    ev = {c.phrase: c.evidence for c in res.masks[0].candidates}
    assert [(e.start, e.end) for e in ev["beta"]] == [(0, 4)]  # two spans, one place in the text
    assert [(e.start, e.end) for e in ev["gamma"]] == [(6, 11)]
    index.close()


def test_phrase_length_ignores_stripped_punctuation(tmp_path):
    """ ", beta gamma": the spans ", beta" and "beta" are both the 1-token phrase "beta".

    Uniform P = 1/3 so every span scores 2/3; masses: beta 4/3, beta gamma 4/3, gamma 2/3. With
    alpha = 1: values 4/3, 8/3, 2/3 -> 2/7, 4/7, 1/7. The engine takes "beta" as 2 tokens (from
    ", beta") and "beta gamma" as 3 (from ", beta gamma") and reports 4/11, 6/11, 1/11.
    """
    index = _tiny_index(tmp_path / "idx", ", beta gamma", [(0, 1, 3), (2, 6, 3), (7, 12, 3)])
    zero = np.zeros((1, DIM), np.float32)
    res = FillEngine(FakeEncoder(zero, zero), index).fill(
        dense_request(text="<mask>", k=3, top_k=10, max_span_tokens=3, alpha=1.0, aggregate="sum")
    )
    got = {c.phrase: c.score for c in res.masks[0].candidates}
    index.close()
    assert got.keys() == {"beta", "gamma", "beta gamma"}
    np.testing.assert_allclose([got["beta gamma"], got["beta"], got["gamma"]], [4 / 7, 2 / 7, 1 / 7])


def test_max_aggregation_on_hand_made_index(tmp_path):
    """The same "beta, gamma" index with max: every span scores 2/3, so every phrase has mass 2/3."""
    index = _tiny_index(tmp_path / "idx", "beta, gamma", [(0, 4, 3), (4, 5, 3), (6, 11, 3)])
    zero = np.zeros((1, DIM), np.float32)
    res = FillEngine(FakeEncoder(zero, zero), index).fill(
        dense_request(text="<mask>", k=3, top_k=10, max_span_tokens=3, alpha=0.0, aggregate="max")
    )
    index.close()
    got = {c.phrase: c.score for c in res.masks[0].candidates}
    assert got.keys() == {"beta", "gamma", "beta, gamma"}
    np.testing.assert_allclose(list(got.values()), [1 / 3] * 3)

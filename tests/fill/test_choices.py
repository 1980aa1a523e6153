"""Closed-set scoring (fill.choices, FillEngine.score) against a brute-force reference over every token of
the tiny index, and its phrase matching rules (whole words, spans, one block)."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import AppError
from corpus.tokens import WORD_END, WORD_START
from encoder.synonyms import WordNeighbours
from fill.choices import ChoicePhrases, match, sharpen
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import Choice, ScoreRequest
from tests.conftest import CORPUS

DOCS = {d["id"]: d["text"] for d in CORPUS}


@pytest.fixture(scope="module")
def engine(tiny_index) -> FillEngine:
    e = FillEngine.open(EngineConfig(index=tiny_index))
    yield e
    e.close()


def _all_tokens(engine: FillEngine) -> int:
    return sum(len(s) for s in engine.index.shards)


def _reference(engine: FillEngine, request: ScoreRequest) -> np.ndarray:
    """The masses of the first mask's choices with every token of the index retrieved, by plain loops."""
    q = engine.encoder.encode_queries([request.text])[0]
    choices = request.choice_list()
    phrases = [(c, engine.encoder.phrase_ids([p])[0]) for c, choice in enumerate(choices) for p in set(choice.phrases)]
    sides = [(q.q_start[0], True)] + ([(q.q_end[0], False)] if request.scorer == "npm" else [])
    logits, votes = [], []
    for query, forward in sides:
        for shard in engine.index.shards:
            vecs = np.asarray(shard.vectors[np.arange(len(shard))], dtype=np.float32)
            for pos in range(len(shard)):
                logits.append(float(vecs[pos] @ query) * engine.index.scale)
                voted = set()
                for c, ids in phrases:
                    a = pos if forward else pos - len(ids) + 1
                    b = a + len(ids) - 1
                    if a < 0 or b >= len(shard):
                        continue
                    same_block = shard.block_of(np.array([a]))[0] == shard.block_of(np.array([b]))[0]
                    if (
                        list(shard.token_ids[a : b + 1]) == ids
                        and same_block
                        and shard.flags[a] & WORD_START
                        and shard.flags[b] & WORD_END
                    ):
                        voted.add(c)
                votes.append(voted)
    logits = np.array(logits) / request.temperature
    p = np.exp(logits - logits.max())
    p /= p.sum()
    mass = np.zeros(len(choices))
    for prob, voted in zip(p, votes):
        for c in voted:
            mass[c] += prob
    return mass


@pytest.mark.parametrize("scorer", ["npm", "npm_single"])
@pytest.mark.parametrize("temperature", [1.0, 5.0])
def test_masses_equal_the_brute_force_reference(engine, scorer, temperature):
    request = ScoreRequest(
        text="Marie Curie was born in <mask> .",
        choices=["Warsaw", {"label": "France", "phrases": ["France", "Paris"]}, "capital of France", "Mars"],
        k=_all_tokens(engine),
        scorer=scorer,
        temperature=temperature,
        mode="dense",
        synonyms=0,
        calibrate=False,
        sharpness=1.0,
    )
    mask = engine.score(request).masks[0]
    expected = _reference(engine, request)
    assert [c.label for c in mask.choices] == ["Warsaw", "France", "capital of France", "Mars"]  # request order
    np.testing.assert_allclose([c.mass for c in mask.choices], expected, rtol=1e-6, atol=1e-12)
    assert expected[:3].min() > 0 and expected[3] == 0  # every choice but Mars occurs
    probs = np.array([c.probability for c in mask.choices])
    assert probs.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(probs, expected / expected.sum(), rtol=1e-6)
    assert mask.predicted == mask.choices[int(np.argmax(probs))].label and not mask.abstained


@pytest.mark.parametrize("calibrate", [False, True])
@pytest.mark.parametrize("sharpness", [1.0, 3.0, 0.5])
def test_calibration_divides_each_mass_by_the_choices_base_rate(engine, calibrate, sharpness):
    """...and `sharpness` raises the shares to its power: the same winner, surer above 1, less sure below."""
    choices = ["Warsaw", {"label": "France", "phrases": ["France", "Paris", "capital of France"]}]
    request = ScoreRequest(
        text="Marie Curie was born in <mask> .",
        choices=choices,
        k=_all_tokens(engine),
        mode="dense",
        synonyms=0,
        calibrate=calibrate,
        sharpness=sharpness,
    )
    mask = engine.score(request).masks[0]
    expected = _reference(engine, request)
    np.testing.assert_allclose([c.mass for c in mask.choices], expected, rtol=1e-6)  # the masses are raw
    tokens = np.concatenate([np.asarray(s.token_ids[: len(s)]) for s in engine.index.shards])
    first = lambda phrase: engine.encoder.phrase_ids([phrase])[0][0]  # noqa: E731
    prior = np.array(
        [
            np.sum(tokens == first("Warsaw")),
            sum(np.sum(tokens == first(p)) for p in ("France", "Paris", "capital of France")),
        ],
        dtype=float,
    )
    assert prior.min() >= 1 and prior[0] != prior[1]
    relative = (expected / prior if calibrate else expected) ** sharpness
    probs = [c.probability for c in mask.choices]
    np.testing.assert_allclose(probs, relative / relative.sum(), rtol=1e-5)  # the masses to 1e-6, cubed
    assert mask.predicted == mask.choices[int(np.argmax(relative))].label
    share = (expected / prior if calibrate else expected) / (expected / prior if calibrate else expected).sum()
    assert 0.5 < share.max() < 1.0  # a winner, not alone: a power moves its probability
    if sharpness == 1.0:
        assert max(probs) == pytest.approx(share.max(), rel=1e-6)
    else:
        assert (max(probs) - share.max()) * (sharpness - 1.0) > 0


def test_synonyms_vote_as_phrases_of_their_choice(engine):
    base = dict(text="Marie Curie was born in <mask> .", k=_all_tokens(engine), mode="dense", calibrate=False)
    mask = engine.score(ScoreRequest(choices=["Paris", "Warsaw"], synonyms=4, **base)).masks[0]
    words = engine.encoder.word_neighbours.expand(
        [engine.encoder.phrase_ids(["Paris"])[0], engine.encoder.phrase_ids(["Warsaw"])[0]], 4
    )
    assert [c.synonyms for c in mask.choices] == [[w for _, w in near] for near in words]
    assert all(len(c.synonyms) == 4 for c in mask.choices)
    spelled = [{"label": c.label, "phrases": [c.label, *c.synonyms]} for c in mask.choices]
    same = engine.score(ScoreRequest(choices=spelled, synonyms=0, **base)).masks[0]
    np.testing.assert_allclose([c.mass for c in mask.choices], [c.mass for c in same.choices], rtol=1e-9)
    assert all(not c.synonyms for c in same.choices)


def test_a_multi_token_phrase_is_matched_as_a_span_with_its_evidence(engine):
    request = ScoreRequest(
        text="Paris is the <mask> .",
        choices=["capital of France", "capital of Spain"],
        k=_all_tokens(engine),
        evidence=3,
        mode="dense",
    )
    france, spain = engine.score(request).masks[0].choices
    assert spain.mass == 0.0 and not spain.evidence  # "capital of" occurs, "Spain" after it does not
    assert france.probability == 1.0 and france.evidence
    for ev in france.evidence:
        assert DOCS[ev.doc_id][ev.start : ev.end] == "capital of France"
        assert "capital of France" in ev.context
    scores = [ev.score for ev in france.evidence]
    assert scores == sorted(scores, reverse=True)


def test_no_vote_inside_a_word_or_across_blocks(engine):
    shard = engine.index.shards[0]
    ids = np.asarray(shard.token_ids[: len(shard)])
    flags = np.asarray(shard.flags[: len(shard)])
    inner = [i for i in range(len(ids)) if flags[i] & WORD_START and not flags[i] & WORD_END]
    assert inner, "the tiny corpus has a word of several word pieces"
    i = inner[0]
    piece = np.array([ids[i]])
    ok, _ = match(shard, np.array([i]), piece, forward=True)
    assert not ok[0]  # the word's first piece alone is not a whole word
    starts = shard.block_starts
    assert starts.size > 1, "the tiny index's first shard has several blocks"
    b = int(starts[1])  # a span running over a block boundary never matches
    two = np.array([ids[b - 1], ids[b]])
    assert not match(shard, np.array([b - 1]), two, forward=True)[0][0]
    assert not match(shard, np.array([b]), two, forward=False)[0][0]


def test_a_mask_no_token_votes_for_is_abstained_with_uniform_probabilities(engine):
    mask = engine.score(
        ScoreRequest(
            text="Paris is the <mask> .",
            choices=["Mars", "Jupiter", "Venus"],
            k=_all_tokens(engine),
            mode="dense",
            synonyms=0,
        )
    ).masks[0]
    assert mask.abstained and mask.predicted is None
    assert [c.probability for c in mask.choices] == pytest.approx([1 / 3] * 3)
    assert all(c.mass == 0.0 for c in mask.choices)


def test_each_mask_is_scored(engine):
    result = engine.score(
        ScoreRequest(text="<mask> is the capital of <mask> .", choices=["Paris", "France"], k=_all_tokens(engine))
    )
    assert [m.index for m in result.masks] == [0, 1]
    assert set(result.timings_ms) == {"encode", "search", "score"}
    for m in result.masks:
        assert sum(c.probability for c in m.choices) == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["restricted", "hybrid"])
def test_bm25_modes_vote_with_the_top_blocks_tokens(engine, mode):
    request = ScoreRequest(
        text="The Seine flows through <mask> .", choices=["Paris", "Warsaw"], mode=mode, blocks=1, k=1, synonyms=0
    )
    mask = engine.score(request).masks[0]
    assert sum(c.probability for c in mask.choices) == pytest.approx(1.0)
    if mode == "restricted":  # the one block BM25 finds is Paris's: only its tokens vote
        assert mask.predicted == "Paris" and mask.choices[1].mass == 0.0


def test_phrases_are_tokenized_as_in_running_text(engine):
    phrases = ChoicePhrases.of(
        engine.encoder,
        [Choice(label="a", phrases=["Paris", "capital of France"]), Choice(label="b", phrases=["Seine"])],
    )
    assert phrases.choice == [0, 0, 1] and phrases.labels == ["a", "b"]
    assert phrases.ids[1].tolist() == engine.encoder.phrase_ids(["capital of France"])[0]
    assert phrases.lookups == 2 + 1  # choice a: its one-token phrases together, "capital of France"; choice b
    with pytest.raises(AppError, match="no token"):
        ChoicePhrases.of(engine.encoder, [Choice(label="a", phrases=["\u200b"]), Choice(label="b", phrases=["x"])])


def test_sharpening_keeps_the_winner_and_sums_to_one():
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.5, 0.5, 0.0]])
    for power in (0.5, 1.0, 3.0):
        out = sharpen(probs, power)
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-12)
        assert (out.argmax(axis=1) == probs.argmax(axis=1)).all()
    assert sharpen(probs, 3.0)[0, 0] > 0.6 > sharpen(probs, 0.5)[0, 0]
    np.testing.assert_allclose(sharpen(probs, 1.0), probs, rtol=1e-12)


@pytest.mark.parametrize(
    "choices, named",
    [
        ([{"label": "a", "phrases": ["good"]}, {"label": "b", "phrases": ["good"]}], ["phrase 'good'", "'a'", "'b'"]),
        ([{"label": "b", "phrases": ["good"]}, {"label": "a", "phrases": ["good"]}], ["phrase 'good'", "'a'", "'b'"]),
        (["good", {"label": "b", "phrases": ["fine", "good"]}], ["phrase 'good'", "choice 'good'", "choice 'b'"]),
        ([{"label": "a", "phrases": ["good", "fine", "good"]}, "b"], ["choice 'a' repeats the phrase 'good'"]),
        # an uncased tokenizer writes these alike: the same phrase to the index
        ([{"label": "a", "phrases": ["Good"]}, {"label": "b", "phrases": ["great", "GOOD"]}], ["'Good'", "'GOOD'"]),
        ([{"label": "a", "phrases": ["good movie", "Good  Movie"]}, "b"], ["'good movie'", "'Good Movie'", "'a'"]),
    ],
)
def test_a_phrase_repeated_in_its_choice_or_another_is_refused_naming_it_and_the_labels(engine, choices, named):
    """Before, two choices listing "good" both took its votes and the first listed all its synonyms (200); a
    phrase repeated inside a choice was dropped silently. The tokens decide what is the same phrase."""
    with pytest.raises(AppError) as caught:
        engine.plan(ScoreRequest(text="It was <mask> .", choices=choices))
    error = caught.value
    assert (error.kind, error.field, error.status) == ("validation", "choices", 422)
    for words in named:
        assert words in error.message, error.message


def test_a_synonym_is_never_a_word_of_another_choices_phrase(engine, monkeypatch):
    """ "good" is the nearest word to "great"; it is a word of the other choice's "good movie", whose votes (its
    start token "good") it would hand to "great": it is not added, the next nearest is."""
    vocab = engine.encoder.tokenizer.get_vocab()
    placed = {"great": [1, 0, 0, 0], "good": [0.99, 0.01, 0, 0], "terrific": [0.9, 0.1, 0, 0], "movie": [0, 1, 0, 0]}
    table = _placed_table(vocab, placed)
    monkeypatch.setattr(
        engine.encoder, "word_neighbours", WordNeighbours(engine.encoder.tokenizer, table, engine.encoder.phrase_ids)
    )
    choices = [Choice(label="a", phrases=["great"]), Choice(label="b", phrases=["good movie", "film"])]
    phrases = ChoicePhrases.of(engine.encoder, choices, synonyms=2)
    assert phrases.synonyms[0][0] == "terrific" and "good" not in phrases.synonyms[0]
    assert not {"great", "good", "movie", "film"} & set(phrases.synonyms[0] + phrases.synonyms[1])
    one_token = [
        {int(ids[0]) for ids, c in zip(phrases.ids, phrases.choice) if c == k and ids.size == 1} for k in (0, 1)
    ]
    assert one_token[0].isdisjoint(one_token[1])  # no word votes for both choices
    given = {t for ids in engine.encoder.phrase_ids(["great", "good movie", "film"]) for t in ids}
    added = {vocab[w] for words in phrases.synonyms for w in words}
    assert given.isdisjoint(added)


def _placed_table(vocab: dict[str, int], placed: dict[str, list[float]]) -> np.ndarray:
    """An input-embedding table: every token on its own random direction, the `placed` words at the given points."""
    table = np.zeros((max(vocab.values()) + 1, 68), dtype=np.float32)
    table[:, 4:] = np.random.default_rng(0).standard_normal((table.shape[0], 64))
    for word, point in placed.items():
        table[vocab[word]] = 0.0
        table[vocab[word], :4] = point
    return table

"""The fill's types, declared once: what a fill asks for (`FillOptions`, `FillRequest`) and what it
returns (`FillResult` and its parts). The engine takes and returns these; the HTTP layer (service/)
validates requests and serialises results with the very same classes."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from common.masks import count_masks

MAX_MASKS = 16
MAX_TEXT_CHARS = 2000
SYNONYMS = 20  # words added per closed-set choice (ScoreRequest.synonyms), chosen on UCI imdb (docs/QUALITY.md)
MAX_SYNONYMS = 50
SHARPNESS = 3.5  # power of the closed-set choices' probabilities (ScoreRequest.sharpness), fitted on UCI imdb
SCORE_BLOCKS = 200  # BM25 blocks whose tokens vote in a closed-set score (ScoreRequest.blocks), chosen on UCI imdb
MAX_BLOCKS = 100  # BM25 blocks a fill may ask for (FillOptions.blocks)
MAX_SCORE_BLOCKS = 400  # and a closed-set score
MASK_SCHEMA_PATTERN = r"<[Mm][Aa][Ss][Kk]>|\[[Mm][Aa][Ss][Kk]\]"  # common.masks.MASK_PATTERN, as JSON Schema writes it

Mode = Literal["dense", "restricted", "hybrid"]
Aggregate = Literal["max", "sum"]
MODES: tuple[Mode, ...] = get_args(Mode)
AGGREGATIONS: tuple[str, ...] = get_args(Aggregate)


class FillOptions(BaseModel):
    """How to fill: everything of a request but its text (also the options of `fill-eval`)."""

    model_config = ConfigDict(extra="forbid")

    top_k: int = Field(5, ge=1, le=100, description="phrases returned per mask")
    k: int = Field(1024, ge=1, le=8192, description="tokens retrieved by each of the start and end searches")
    max_span_tokens: int = Field(10, ge=1, le=32, description="longest phrase, in tokens")
    alpha: float = Field(0.0, ge=-4.0, le=4.0, description="length preference: rank by mass * len^alpha")
    evidence: int = Field(3, ge=0, le=20, description="occurrences returned per phrase")
    case_sensitive: bool = Field(True, description="aggregate phrases case-sensitively")
    mode: Mode | None = Field(
        None,
        description="hybrid (the default when the index has BM25, else dense): the candidates of both, "
        "scored with the lexical prior; dense: FAISS top-k start/end tokens; restricted: every token of the top BM25 "
        "blocks for the query (masks blanked)",
    )
    blocks: int = Field(3, ge=1, le=MAX_BLOCKS, description="BM25 blocks used by restricted and hybrid modes")
    drop_stopwords: bool = Field(
        True,
        description="drop fills made only of stopwords ('in', 'of the'), single letters, "
        "or phrases starting / ending with a lower-case stopword ('in London')",
    )
    strict_spans: bool = Field(
        False,
        description="NPM's span rule: also drop fills holding a stopword or a "
        "punctuation char anywhere ('University of Warsaw', 'Paris, France')",
    )
    aggregate: Aggregate = Field(
        "max",
        description="a phrase's mass over its occurrences: max (its best occurrence; the default) or sum "
        "(NPM's total probability, which favours phrases that occur often among the hits)",
    )
    lexical_weight: float | None = Field(
        None,
        ge=0.0,
        le=50.0,
        description="restricted and hybrid modes: weight of the lexical prior (a block's "
        "BM25 score for the query, masks blanked, over the best block's) added to the start and end logits of "
        "the block's tokens; default: the value fitted for the mode (GET /info); 0: encoder scores only",
    )
    reader: bool | None = Field(
        None,
        description="re-rank the retrieved phrases with the reader, which reads the query together with windows "
        "around the top candidates (default: on when the server has a reader, GET /info; true on a server without "
        "one is an error). alpha and aggregate shape the retrieval ranking the windows come from; the reader's "
        "phrase mass is the sum over its spans",
    )
    min_confidence: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="abstain below it: a mask whose best fill has a lower confidence comes "
        "back with no candidates, abstained true, and stays <mask> in `filled`; 0 always answers",
    )


class MaskedText(BaseModel):
    """A text with masks (what `/fill` and `/score` both take). Types are strict: "5" is not an integer, 0 is
    not a boolean, NaN and infinities are not numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    text: str = Field(
        ...,
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="text with 1 to 16 masks written <mask> or [MASK] (any case)",
        examples=["Allan Peiper was born in <mask> ."],
        # the mask requirement in the schema; the validator below checks it with a message that says how
        json_schema_extra={"pattern": MASK_SCHEMA_PATTERN},
    )

    @field_validator("text")
    @classmethod
    def _masks(cls, text: str) -> str:
        n = count_masks(text)
        if n == 0:
            raise ValueError("text contains no mask; write <mask> (or [MASK]) where a phrase should go")
        if n > MAX_MASKS:
            raise ValueError(f"text contains {n} masks; at most {MAX_MASKS} are allowed")
        return text


def _integer_only(value: object) -> object:
    """Strict numbers: an integer field takes a JSON integer, not 5.0 (which JSON Schema would count as one: the
    fuzz tests know this rule) nor "5" nor true (strict mode)."""
    if isinstance(value, float):
        raise ValueError(f"must be an integer written without a decimal point (5, not 5.0); got {value!r}")
    return value


class FillRequest(FillOptions, MaskedText):
    """A text with masks to fill, and how to fill them."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @field_validator("top_k", "k", "max_span_tokens", "evidence", "blocks", mode="before")
    @classmethod
    def _no_floats(cls, value: object) -> object:
        return _integer_only(value)


class Evidence(BaseModel):
    doc_id: str
    block: int
    start: int = Field(description="char offset of the phrase in the document text")
    end: int
    context: str
    score: float = Field(description="span score P_start + P_end of this occurrence")


class Candidate(BaseModel):
    phrase: str
    score: float = Field(description="aggregated mass, normalised over all candidates of the mask")
    confidence: float = Field(
        ge=0.0,
        le=1.0,
        description="probability that this fill is correct, calibrated on held-apart data "
        "(docs/QUALITY.md); monotone in `score` within a mask",
    )
    evidence: list[Evidence] = Field(default_factory=list)


class MaskFill(BaseModel):
    index: int
    candidates: list[Candidate]
    abstained: bool = Field(
        False,
        description="true when the mask is left unfilled: its best fill's confidence is below "
        "min_confidence, or the index offered no candidate",
    )


STAGES = ("encode", "search", "spans", "rank", "read")


class FillResult(BaseModel):
    filled: str
    masks: list[MaskFill]
    took_ms: float
    timings_ms: dict[str, float] = Field(
        default_factory=dict,
        description="ms per stage: encode (query), search (FAISS / BM25), spans (each shard's candidates: spans, "
        "exact scores, phrase texts), rank (phrases over all shards, confidence, evidence), read (the reader: windows, "
        "its forward pass, re-ranking)",
    )


# ---------------------------------------------------------------- closed-set scoring (POST /score, fill.choices)

MAX_CHOICES = 64
MAX_PHRASES = 32
Scorer = Literal["npm", "npm_single"]
# a label or phrase: 1 to 200 chars, not all white space (stated in the schema; a phrase the tokenizer
# turns into nothing is refused by the engine, fill.choices.ChoicePhrases)
Word = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]


class Choice(BaseModel):
    """One label of a closed set, and the phrases (synonyms, possibly of several words) that vote for it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    label: Word
    phrases: list[Word] = Field(
        ...,
        min_length=1,
        max_length=MAX_PHRASES,
        description='phrases counted for the label, e.g. ["great", "excellent"]',
    )

    @field_validator("phrases")
    @classmethod
    def _phrases(cls, phrases: list[str]) -> list[str]:
        return [" ".join(p.split()) for p in phrases]  # a phrase left with no token is refused by the engine


class ScoreRequest(MaskedText):
    """A text with masks, and a closed set of choices to score each mask against (NPM's zero-shot
    classification: the retrieved tokens' probability mass that lands on each choice's phrases)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    choices: list[Word | Choice] = Field(
        ...,
        min_length=2,
        max_length=MAX_CHOICES,
        description="2 to 64 distinct labels: a string (the label is its own phrase) or {label, phrases}; a "
        "phrase (as the model's tokenizer writes it) in one choice, once",
        examples=[
            ["positive", "negative"],
            [
                {"label": "positive", "phrases": ["great", "good"]},
                {"label": "negative", "phrases": ["terrible", "bad"]},
            ],
        ],
    )
    k: int = Field(
        4096,
        ge=1,
        le=8192,
        description="tokens retrieved by each search (the start and, with the npm scorer, the end query)",
    )
    temperature: float = Field(
        1.0,
        ge=0.01,
        le=100.0,
        description="softmax temperature over the retrieved tokens' "
        "exact scores (higher: flatter; NPM's READMEs use 5, 1 measured best here)",
    )
    mode: Mode | None = Field(
        None,
        description="restricted (the default; dense on an index without BM25): every token of the top "
        "`blocks` BM25 blocks for the query (masks blanked) votes, weighted by its exact score; dense: the FAISS "
        "top-k tokens (NPM's closed-set setting); hybrid: both",
    )
    blocks: int = Field(
        SCORE_BLOCKS,
        ge=1,
        le=MAX_SCORE_BLOCKS,
        description="BM25 blocks used by restricted and hybrid modes (their every token votes; more blocks, more "
        "votes and more time: 100 blocks took half the time of 200 and were 2 points less accurate on UCI imdb)",
    )
    scorer: Scorer = Field(
        "npm",
        description="npm: start and end queries, one softmax over both searches' tokens; a start token votes "
        "when a choice's phrase begins there, an end token when one ends there. npm_single: the start query only",
    )
    evidence: int = Field(1, ge=0, le=20, description="occurrences returned per choice, best first")
    synonyms: int = Field(
        SYNONYMS,
        ge=0,
        le=MAX_SYNONYMS,
        description="NPM's fuzzy verbalizers without a hand-made list: each "
        "choice's one-token words are joined by up to this many words nearest to them in the encoder's "
        "word-embedding space, each word kept for the one choice it is nearest to and never a word of a phrase "
        "given (encoder.synonyms, fill.choice_phrases); 0: only the phrases given",
    )

    calibrate: bool = Field(
        True,
        description="divide each choice's mass by its base rate in the index (how often "
        "its phrases' first tokens occur) before normalising: a label with more or more frequent "
        "words is not favoured by every query",
    )
    sharpness: float = Field(
        SHARPNESS,
        ge=0.1,
        le=20.0,
        description="the choices' probabilities raised to this power and normalised again (temperature scaling: "
        "the winner stays, only how sure it is changes; 1: each choice's share of the votes). The default was "
        "fitted with the other defaults on the tuning set, UCI imdb (docs/QUALITY.md): votes alone are under-confident",
    )

    @field_validator("k", "blocks", "evidence", "synonyms", mode="before")
    @classmethod
    def _no_floats(cls, value: object) -> object:
        return _integer_only(value)

    @field_validator("choices")
    @classmethod
    def _choices(cls, choices: list[Word | Choice]) -> list[Word | Choice]:
        seen: set[str] = set()
        for i, c in enumerate(choices):
            label = c if isinstance(c, str) else c.label
            if label in seen:
                raise ValueError(f"choice {i} repeats the label {label!r}; labels must be distinct")
            seen.add(label)
        return choices

    def choice_list(self) -> list[Choice]:
        """Every choice as a Choice (a string is a label that is its own phrase)."""
        return [Choice(label=c, phrases=[c]) if isinstance(c, str) else c for c in self.choices]


class ChoiceScore(BaseModel):
    label: str
    probability: float = Field(
        ge=0.0,
        le=1.0,
        description="the choice's share of the mass of all choices (they sum to 1; uniform when the mask abstained)",
    )
    mass: float = Field(
        ge=0.0,
        description="the retrieved tokens' probability that voted for the choice, "
        "unnormalised over the choices (of the softmax over everything retrieved)",
    )
    evidence: list[Evidence] = Field(
        default_factory=list,
        description="the occurrences of its phrases whose tokens "
        "voted most, best first (`score`: the voting token's probability)",
    )
    synonyms: list[str] = Field(
        default_factory=list,
        description="the words added to its phrases (the request's "
        "`synonyms`), nearest first; each votes as one of its phrases",
    )


class MaskScore(BaseModel):
    index: int
    choices: list[ChoiceScore] = Field(description="in the request's order")
    predicted: str | None = Field(description="the label of the most probable choice (none when abstained)")
    abstained: bool = Field(False, description="true when no retrieved token voted for any choice")


SCORE_STAGES = ("encode", "search", "score")


class ScoreResult(BaseModel):
    masks: list[MaskScore]
    took_ms: float
    timings_ms: dict[str, float] = Field(default_factory=dict, description="ms per stage: encode, search, score")

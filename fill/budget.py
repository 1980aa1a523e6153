"""What one request may cost: a budget on its size, checked before any work (its time: fill.deadline)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.errors import AppError
from common.masks import count_masks
from fill.schemas import FillRequest, ScoreRequest

if TYPE_CHECKING:
    from fill.choice_phrases import ChoicePhrases


def _masks(n: int) -> str:
    return f"{n} mask" if n == 1 else f"{n} masks"


class Budget:
    """Bounds on what makes a request expensive, each a product of request fields, checked before any work.

    - search: masks x queries x k, the hits the FAISS searches return and re-score (queries: a fill's start and
      end; a score's one or two; none in restricted mode): most of the time of a request with a large k;
    - candidates: masks x (k + blocks x block_tokens) x max_span_tokens, the candidate spans scored and
      grouped into phrases (blocks count in restricted and hybrid modes only; k in dense and hybrid); a
      closed-set score: masks x queries x (k + blocks x block_tokens), the tokens scored and matched;
    - evidence: masks x top_k x evidence, the occurrences looked up and cut into contexts;
    - matches (a closed-set score): masks x queries x retrieved tokens x phrase lookups (`phrases`: per choice
      one for its one-token phrases and synonyms together, one per phrase of several tokens), each done at every
      retrieved token (6-12 ns each measured, bench/bench_score_cost.py: 64 choices x 32 phrases made a default
      score ~5 default fills). The default bound admits a default one-mask score of 64 one-word choices with
      their default synonyms (64 lookups), and of up to 655 lookups (2^26 // 102,400 retrieved tokens).

    `cost` is what a request costs in default fills (a one-mask hybrid fill with the default fields): the larger
    of its search and its candidates over a default fill's, plus a score's matches over MATCHES_PER_FILL; the
    service serves heavier requests in a lane of their own (service.state)."""

    def __init__(
        self, max_candidates: int, max_evidence: int, max_search: int = 16384, max_matches: int = 2**26
    ) -> None:
        self.max_candidates = max_candidates
        self.max_evidence = max_evidence
        self.max_search = max_search
        self.max_matches = max_matches

    @staticmethod
    def retrieved(request: FillRequest | ScoreRequest, mode: str, block_tokens: int) -> int:
        """Tokens one query of a mask retrieves: k (dense, hybrid) plus the BM25 blocks' tokens (restricted,
        hybrid)."""
        return (request.k if mode != "restricted" else 0) + (request.blocks * block_tokens if mode != "dense" else 0)

    @staticmethod
    def queries(request: FillRequest | ScoreRequest) -> int:
        """Searches per mask: a fill's start and end; a score's start (and end with the npm scorer)."""
        return 2 if isinstance(request, FillRequest) or request.scorer == "npm" else 1

    @staticmethod
    def search(request: FillRequest | ScoreRequest, mode: str) -> int:
        return 0 if mode == "restricted" else count_masks(request.text) * Budget.queries(request) * request.k

    @staticmethod
    def candidates(request: FillRequest | ScoreRequest, mode: str, block_tokens: int) -> int:
        tokens = Budget.retrieved(request, mode, block_tokens)
        if isinstance(request, ScoreRequest):
            return count_masks(request.text) * Budget.queries(request) * tokens
        return count_masks(request.text) * tokens * request.max_span_tokens

    @staticmethod
    def phrases(request: FillRequest | ScoreRequest, phrases: ChoicePhrases | None = None) -> int:
        """A score's phrase lookups at each retrieved token (fill.choices.votes): `phrases.lookups`, one per choice
        for all its one-token phrases and synonyms, one per phrase of several tokens; without the tokenized
        `phrases`, one per phrase given (never fewer: a choice's synonyms join a lookup of its own one-token
        phrases); 0 for a fill."""
        if not isinstance(request, ScoreRequest):
            return 0
        if phrases is not None:
            return phrases.lookups
        return sum(len(c.phrases) for c in request.choice_list())

    @staticmethod
    def matches(
        request: FillRequest | ScoreRequest, mode: str, block_tokens: int, phrases: ChoicePhrases | None = None
    ) -> int:
        """A score's phrase matches: masks x queries x retrieved tokens x phrase lookups (0 for a fill)."""
        return (
            count_masks(request.text)
            * Budget.queries(request)
            * Budget.retrieved(request, mode, block_tokens)
            * Budget.phrases(request, phrases)
        )

    @staticmethod
    def cost(
        request: FillRequest | ScoreRequest, mode: str, block_tokens: int, phrases: ChoicePhrases | None = None
    ) -> float:
        """The request's cost in default fills (see the class doc); a score's `phrases` as in `phrases`."""
        return (
            max(
                Budget.search(request, mode) / Budget.search(DEFAULT_FILL, "hybrid"),
                Budget.candidates(request, mode, block_tokens)
                / Budget.candidates(DEFAULT_FILL, "hybrid", block_tokens),
            )
            + Budget.matches(request, mode, block_tokens, phrases) / MATCHES_PER_FILL
        )

    def describe(self) -> dict[str, Any]:
        """The bounds and how a request's cost is counted (the OpenAPI schema's `x-cost-budget`)."""
        return {
            "max_search": self.max_search,
            "max_candidates": self.max_candidates,
            "max_evidence": self.max_evidence,
            "max_matches": self.max_matches,
            "search": "masks x queries (fill: 2; score: 2 with the npm scorer, else 1) x k (0 in restricted mode)",
            "candidates": "fill: masks x (k + blocks x block_tokens) x max_span_tokens; score: masks x queries x "
            "(k + blocks x block_tokens); k counts in dense and hybrid modes, blocks in restricted "
            "and hybrid",
            "evidence": "fill: masks x top_k x evidence; score: masks x choices x evidence",
            "matches": "score: masks x queries x (k + blocks x block_tokens) x phrase lookups (per choice one for "
            "its one-token phrases and synonyms together, one per phrase of several tokens)",
            "over_budget": 422,
        }

    def check(
        self, request: FillRequest | ScoreRequest, mode: str, block_tokens: int, phrases: ChoicePhrases | None = None
    ) -> None:
        """AppError (validation, 422) naming the fields when the request is over a bound: its search first, then
        a fill's candidate spans and evidence (`_check_fill`), a closed-set score's retrieved tokens, phrase
        matches (of its tokenized `phrases`, else counted from the request: `phrases`) and evidence
        (`_check_score`)."""
        self._check_search(request, mode)
        if isinstance(request, ScoreRequest):
            self._check_score(request, mode, block_tokens, phrases)
        else:
            self._check_fill(request, mode, block_tokens)

    def _check_search(self, request: FillRequest | ScoreRequest, mode: str) -> None:
        hits = self.search(request, mode)
        if hits > self.max_search:
            raise AppError(
                f"request too expensive: {_masks(count_masks(request.text))} x {self.queries(request)} searches x k "
                f"{request.k} = {hits:,} hits searched and re-scored, over the server's budget of {self.max_search:,} "
                "(FILL_MAX_SEARCH); lower k or the masks",
                kind="validation",
            )

    def _check_fill(self, request: FillRequest, mode: str, block_tokens: int) -> None:
        """A fill's candidate spans (`candidates`) against the candidate budget; masks x top_k x evidence against
        the evidence budget."""
        masks = count_masks(request.text)
        spans = self.candidates(request, mode, block_tokens)
        if spans > self.max_candidates:
            terms = []
            if mode != "restricted":
                terms.append(f"k {request.k}")
            if mode != "dense":
                terms.append(f"blocks {request.blocks} x {block_tokens} block tokens")
            raise AppError(
                f"request too expensive: {_masks(masks)} x ({' + '.join(terms)}) x max_span_tokens "
                f"{request.max_span_tokens} = {spans:,} candidate spans, over the server's budget of "
                f"{self.max_candidates:,} (FILL_MAX_CANDIDATES); lower k, blocks, max_span_tokens or the masks",
                kind="validation",
            )
        evidence = masks * request.top_k * request.evidence
        if evidence > self.max_evidence:
            raise AppError(
                f"request too expensive: {_masks(masks)} x top_k {request.top_k} x evidence {request.evidence} = "
                f"{evidence:,} occurrences, over the server's budget of {self.max_evidence:,} "
                "(FILL_MAX_EVIDENCE); lower top_k, evidence or the masks",
                kind="validation",
            )

    def _check_score(
        self, request: ScoreRequest, mode: str, block_tokens: int, phrases: ChoicePhrases | None = None
    ) -> None:
        """A closed-set score's masks x queries x (k + blocks x block tokens), the retrieved tokens scored exactly
        and matched, against the candidate budget; its phrase matches (`matches`) against the matches budget;
        masks x choices x evidence against the evidence budget."""
        masks, searches = count_masks(request.text), self.queries(request)
        tokens = self.retrieved(request, mode, block_tokens)
        scored = masks * searches * tokens
        if scored > self.max_candidates:
            raise AppError(
                f"request too expensive: {_masks(masks)} x {searches} queries x {tokens:,} retrieved tokens = "
                f"{scored:,}, over the server's budget of {self.max_candidates:,} (FILL_MAX_CANDIDATES); lower k, "
                "blocks or the masks, or use the npm_single scorer",
                kind="validation",
            )
        matches = self.matches(request, mode, block_tokens, phrases)
        if matches > self.max_matches:
            raise AppError(
                f"request too expensive: {scored:,} retrieved tokens (masks x queries) x "
                f"{self.phrases(request, phrases)} phrase lookups = {matches:,} phrase matches, over the server's "
                f"budget of {self.max_matches:,} (FILL_MAX_MATCHES; a lookup per choice for its one-token phrases "
                "and synonyms, one per phrase of several tokens); lower k, blocks, the masks, the choices or "
                "their phrases of several tokens",
                kind="validation",
            )
        evidence = masks * len(request.choices) * request.evidence
        if evidence > self.max_evidence:
            raise AppError(
                f"request too expensive: {_masks(masks)} x {len(request.choices)} choices x evidence "
                f"{request.evidence} = {evidence:,} occurrences, over the server's budget of {self.max_evidence:,} "
                "(FILL_MAX_EVIDENCE); lower evidence, the choices or the masks",
                kind="validation",
            )


DEFAULT_FILL = FillRequest(text="<mask>")  # the unit of Budget.cost
MATCHES_PER_FILL = 2**23  # phrase matches that cost about one default fill (~12 ns each at worst, measured)

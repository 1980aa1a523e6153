"""What one request may cost: a budget on its size, checked before any work, and a deadline on its
time, checked between the engine's steps (so a late request stops computing, not only its response)
by the clock that times those steps."""

from __future__ import annotations

import time

from common.errors import AppError
from common.masks import count_masks
from fill.schemas import STAGES, FillRequest, ScoreRequest


def _masks(n: int) -> str:
    return f"{n} mask" if n == 1 else f"{n} masks"


class Budget:
    """Bounds on the two things that make a fill expensive, each a product of request fields.

    - candidates: masks x (k + blocks x block_tokens) x max_span_tokens, the candidate spans scored and
      grouped into phrases (blocks count in restricted and hybrid modes only; k in dense and hybrid);
    - evidence: masks x top_k x evidence, the occurrences looked up and cut into contexts.
    """

    def __init__(self, max_candidates: int, max_evidence: int) -> None:
        self.max_candidates = max_candidates
        self.max_evidence = max_evidence

    @staticmethod
    def retrieved(request: FillRequest | ScoreRequest, mode: str, block_tokens: int) -> int:
        """Tokens one query of a mask retrieves: k (dense, hybrid) plus the BM25 blocks' tokens (restricted,
        hybrid)."""
        return (request.k if mode != "restricted" else 0) + (request.blocks * block_tokens if mode != "dense" else 0)

    @staticmethod
    def candidates(request: FillRequest, mode: str, block_tokens: int) -> int:
        return count_masks(request.text) * Budget.retrieved(request, mode, block_tokens) * request.max_span_tokens

    def check(self, request: FillRequest, mode: str, block_tokens: int) -> None:
        """AppError (validation, 422) naming the fields when the request is over a bound."""
        masks = count_masks(request.text)
        cost = self.candidates(request, mode, block_tokens)
        if cost > self.max_candidates:
            terms = []
            if mode != "restricted":
                terms.append(f"k {request.k}")
            if mode != "dense":
                terms.append(f"blocks {request.blocks} x {block_tokens} block tokens")
            raise AppError(
                f"request too expensive: {_masks(masks)} x ({' + '.join(terms)}) x max_span_tokens "
                f"{request.max_span_tokens} = {cost:,} candidate spans, over the server's budget of "
                f"{self.max_candidates:,} (FILL_MAX_CANDIDATES); lower k, blocks, max_span_tokens or the masks",
                kind="validation")
        evidence = masks * request.top_k * request.evidence
        if evidence > self.max_evidence:
            raise AppError(
                f"request too expensive: {_masks(masks)} x top_k {request.top_k} x evidence {request.evidence} = "
                f"{evidence:,} occurrences, over the server's budget of {self.max_evidence:,} "
                "(FILL_MAX_EVIDENCE); lower top_k, evidence or the masks", kind="validation")

    def check_score(self, request: ScoreRequest, mode: str, block_tokens: int) -> None:
        """`check` for a closed-set score: masks x searches x (k + blocks x block tokens), the retrieved tokens
        scored exactly and matched, against the candidate budget; masks x choices x evidence against the
        evidence budget."""
        masks, searches = count_masks(request.text), 2 if request.scorer == "npm" else 1
        tokens = self.retrieved(request, mode, block_tokens)
        cost = masks * searches * tokens
        if cost > self.max_candidates:
            raise AppError(
                f"request too expensive: {_masks(masks)} x {searches} queries x {tokens:,} retrieved tokens = "
                f"{cost:,}, over the server's budget of {self.max_candidates:,} (FILL_MAX_CANDIDATES); lower k, "
                "blocks or the masks, or use the npm_single scorer", kind="validation")
        evidence = masks * len(request.choices) * request.evidence
        if evidence > self.max_evidence:
            raise AppError(
                f"request too expensive: {_masks(masks)} x {len(request.choices)} choices x evidence "
                f"{request.evidence} = {evidence:,} occurrences, over the server's budget of {self.max_evidence:,} "
                "(FILL_MAX_EVIDENCE); lower evidence, the choices or the masks", kind="validation")


class Deadline:
    """A request's time limit: `check` raises AppError (timeout, 504) once `seconds` have passed since
    `start` (time.perf_counter)."""

    def __init__(self, seconds: float, start: float | None = None) -> None:
        self.seconds = seconds
        self.at = (time.perf_counter() if start is None else start) + seconds

    def left(self) -> float:
        return self.at - time.perf_counter()

    def check(self, stage: str) -> None:
        if time.perf_counter() > self.at:
            raise self.error(stage)

    def error(self, stage: str) -> AppError:
        return AppError(f"request timed out after {self.seconds:g} s (FILL_REQUEST_TIMEOUT), in its {stage} "
                           "stage; retry later, or ask for less (k, max_span_tokens, masks)", kind="timeout")


class StageClock:
    """The engine's time per stage of one fill (FillResult.timings_ms), checking the deadline at each lap."""

    def __init__(self, encode_ms: float, search_ms: float, deadline: Deadline | None,
                 stages: tuple[str, ...] = STAGES) -> None:
        self.spent = dict.fromkeys(stages, 0.0)
        self.spent["encode"], self.spent["search"] = encode_ms, search_ms
        self.deadline = deadline
        self.mark = time.perf_counter()
        if deadline is not None:
            deadline.check("queue")

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent[stage] += (now - self.mark) * 1000
        self.mark = now
        if self.deadline is not None:
            self.deadline.check(stage)

    def timings(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.spent.items()}

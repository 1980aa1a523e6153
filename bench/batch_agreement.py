"""Batched fills against fills made one at a time, on the engine (no HTTP):

    OMP_NUM_THREADS=1 python -m bench.batch_agreement --index data-local/bench/idx_10m \
        --corpus data-local/debian/corpus_10m.jsonl [--probes 100] [--batch 16]

Each cloze probe (bench.shared.make_probes) is filled in dense and in hybrid mode alone, then again in batches of
--batch (`FillEngine.batch`: each planned, the batch prepared together padded to its bucketed shape, each
finished, as the server's batcher does).
Printed: responses equal field for field (timings aside), responses equal within TOLERANCE (`agree`), responses
with the same `filled` text (top-1), and the largest score / confidence difference of a candidate found in both.
Where the encoder runs in bf16, a batch's padded shape can change the rounding of its matrix products (oneDNN on
AMX CPUs blocks them by shape; on AVX-512-BF16 without AMX, and in fp32, batched fills came out equal field for
field), so a batched fill is held to the lone one within TOLERANCE, not bit for bit. Near ties can still move
more (TOLERANCE's comment): on a large probe set a few responses out of the tolerance are expected."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Hashable

# Batched and lone fills of a request agree within this much, absolutely, in every score and confidence of a
# candidate both hold and every evidence score (scores and confidences lie in [0, 1], an evidence score in [0, 2]).
# Top fills and abstentions must be equal: no tolerance there. Measured on the sample index's 200 probes x 2 modes
# with batched passes on another bf16 GEMM kernel than lone ones (torch's own instead of oneDNN's, as AMX picks its
# kernel by shape; docs/OPERATIONS.md, "Batching"): the test's 12 requests and the first 100 moved by at most 0.012,
# by 0.028 with the reader's kernel changed too (ONEDNN_MAX_CPU_ISA=AVX512_CORE); 0.05 is 4x / 1.8x that. Not a
# bound on every request: 7 of the 400 fell outside it (by up to 0.98), 2 with another top fill, the reader's
# re-ranking amplifying small moves (without the reader 399 stayed within 0.011; the other, a tie at the top, swapped).
TOLERANCE = 0.05


def agree(a: dict[str, Any], b: dict[str, Any], tol: float = TOLERANCE) -> bool:
    """Whether two fills of one request (FillResult.model_dump, timings left out) agree within `tol`: the same
    `filled` text and masks; per mask the same abstained flag and top phrase, its candidates the same with scores
    within `tol` (`ranked_agree`: in the same order but for near ties, the same but at the top_k cut-off), and each
    candidate both hold with confidences within `tol` and its evidence the same within `tol` (`ranked_agree`)."""
    if a["filled"] != b["filled"] or len(a["masks"]) != len(b["masks"]):
        return False
    return all(_mask_agrees(x, y, tol) for x, y in zip(a["masks"], b["masks"]))


def _mask_agrees(x: dict[str, Any], y: dict[str, Any], tol: float) -> bool:
    cx, cy = x["candidates"], y["candidates"]
    if x["abstained"] != y["abstained"] or [c["phrase"] for c in cx[:1]] != [c["phrase"] for c in cy[:1]]:
        return False
    if not ranked_agree(cx, cy, _phrase, tol):
        return False
    by_phrase = {c["phrase"]: c for c in cy}
    for c in cx:
        d = by_phrase.get(c["phrase"])
        if d is not None and (
            abs(c["confidence"] - d["confidence"]) > tol or not ranked_agree(c["evidence"], d["evidence"], _place, tol)
        ):
            return False
    return True


def _phrase(candidate: dict[str, Any]) -> Hashable:
    return candidate["phrase"]


def _place(evidence: dict[str, Any]) -> Hashable:
    return (evidence["doc_id"], evidence["block"], evidence["start"], evidence["end"], evidence["context"])


def ranked_agree(
    xs: list[dict[str, Any]], ys: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable], tol: float
) -> bool:
    """Two lists ranked by `score` (a mask's candidates, a candidate's evidence), items matched by `key`, agree
    within `tol`: an item of both scores within `tol` in the two, and an item of one list only scores at most `tol`
    above the other's last item (the cut-off it fell behind: top_k, the evidence limit, the hits retrieved). Both
    ranked, two items of both can then be in swapped order only as a near tie: p above q in one and q above p in the
    other puts their scores within 2 x `tol` in both."""
    sx, sy = {key(i): i["score"] for i in xs}, {key(i): i["score"] for i in ys}
    if not (_near_cut(sx, sy, ys, tol) and _near_cut(sy, sx, xs, tol)):
        return False
    return all(abs(score - sy[k]) <= tol for k, score in sx.items() if k in sy)


def _near_cut(mine: dict[Hashable, float], theirs: dict[Hashable, float], their_items: list[Any], tol: float) -> bool:
    """Whether every item of `mine` missing from `theirs` scores at most `tol` above their last item's score."""
    cut = their_items[-1]["score"] if their_items else 0.0
    return all(score <= cut + tol for k, score in mine.items() if k not in theirs)


def largest_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest score or confidence difference of a candidate both fills hold, over their masks."""
    diffs = [0.0]
    for x, y in zip(a["masks"], b["masks"]):
        by_phrase = {c["phrase"]: c for c in y["candidates"]}
        for c in x["candidates"]:
            if (d := by_phrase.get(c["phrase"])) is not None:
                diffs += [abs(c["score"] - d["score"]), abs(c["confidence"] - d["confidence"])]
    return max(diffs)


def main() -> None:
    from bench.shared import make_probes
    from common.process import single_thread_blas
    from fill.engine import FillEngine
    from fill.schemas import FillRequest
    from service.batcher import bucket_shape
    from service.config import Settings

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    single_thread_blas()
    engine = FillEngine.open(Settings(index=args.index).engine_config())  # FILL_* variables apply, as in the server
    requests = [
        FillRequest(text=t, mode=m) for t in make_probes(args.corpus, args.probes, seed=7) for m in ("dense", "hybrid")
    ]
    skip = {"took_ms", "timings_ms"}
    alone = [engine.fill(r).model_dump(exclude=skip) for r in requests]
    batched = []
    for i in range(0, len(requests), args.batch):
        batched += [r.model_dump(exclude=skip) for r in engine.batch([*requests[i : i + args.batch]], bucket_shape)]
    pairs = list(zip(batched, alone))
    print(
        f"{len(requests)} requests in batches of {args.batch}: equal field for field {sum(x == y for x, y in pairs)}, "
        f"equal within {TOLERANCE} {sum(agree(x, y) for x, y in pairs)}, same filled text (top-1) "
        f"{sum(x['filled'] == y['filled'] for x, y in pairs)}; largest score / confidence difference "
        f"{max((largest_difference(x, y) for x, y in pairs), default=0.0):.3g}"
    )


if __name__ == "__main__":
    main()

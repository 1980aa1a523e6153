"""bench/batch_agreement.py's comparison: two fills of one request agree within the stated tolerance, or not."""

from __future__ import annotations

import copy

from bench.batch_agreement import TOLERANCE, agree, largest_difference, ranked_agree


def _evidence(doc: str, score: float) -> dict:
    return {"doc_id": doc, "block": 0, "start": 0, "end": 5, "context": f"... {doc} ...", "score": score}


def _fill(*candidates: tuple[str, float, float], abstained: bool = False) -> dict:
    """A one-mask FillResult dump (timings left out): candidates as (phrase, score, confidence)."""
    cands = [
        {"phrase": p, "score": s, "confidence": c, "evidence": [_evidence("d1", s), _evidence("d2", s / 2)]}
        for p, s, c in candidates
    ]
    top = "<mask>" if abstained or not cands else cands[0]["phrase"]
    return {"filled": f"born in {top} .", "masks": [{"index": 0, "candidates": cands, "abstained": abstained}]}


BASE = _fill(("Paris", 0.90, 0.80), ("Lyon", 0.06, 0.10), ("Nice", 0.03, 0.05), ("Rome", 0.01, 0.02))


def test_equal_fills_and_differences_within_the_tolerance_agree():
    assert agree(BASE, copy.deepcopy(BASE)) and largest_difference(BASE, BASE) == 0.0
    moved = _fill(("Paris", 0.88, 0.79), ("Lyon", 0.07, 0.11), ("Nice", 0.03, 0.06), ("Rome", 0.02, 0.02))
    assert agree(BASE, moved) and agree(moved, BASE)
    assert abs(largest_difference(BASE, moved) - 0.02) < 1e-9


def test_near_ties_may_swap_and_the_last_candidate_may_change_at_the_cut_off():
    swapped = _fill(("Paris", 0.90, 0.80), ("Lyon", 0.06, 0.10), ("Rome", 0.031, 0.05), ("Nice", 0.029, 0.04))
    assert agree(BASE, swapped)
    cut = _fill(("Paris", 0.90, 0.80), ("Lyon", 0.06, 0.10), ("Nice", 0.03, 0.05), ("Oslo", 0.012, 0.02))
    assert agree(BASE, cut) and agree(cut, BASE)


def test_a_different_top_fill_or_abstention_never_agrees():
    other_top = _fill(("Lyon", 0.48, 0.45), ("Paris", 0.47, 0.44))
    close_top = _fill(("Paris", 0.48, 0.45), ("Lyon", 0.47, 0.44))
    assert not agree(close_top, other_top)  # a near tie, but the top fill (and `filled`) differs
    abstained = copy.deepcopy(BASE)
    abstained["masks"][0]["abstained"] = True
    assert not agree(BASE, abstained)


def test_differences_above_the_tolerance_do_not_agree():
    step = TOLERANCE + 0.01
    assert not agree(BASE, _fill(("Paris", 0.90 - step, 0.80), ("Lyon", 0.06, 0.10), ("Nice", 0.03, 0.05)))
    assert not agree(BASE, _fill(("Paris", 0.90, 0.80 - step), ("Lyon", 0.06, 0.10), ("Nice", 0.03, 0.05)))
    # a candidate scoring well above the other list's last one cannot have fallen behind its cut-off
    assert not agree(BASE, _fill(("Paris", 0.87, 0.78), ("Oslo", 0.08, 0.12), ("Lyon", 0.05, 0.10)))
    # two candidates swapped that are no near tie: one of them moved by more than the tolerance
    assert not agree(BASE, _fill(("Paris", 0.90, 0.80), ("Nice", 0.09, 0.12), ("Lyon", 0.05, 0.09)))


def test_evidence_of_a_shared_candidate_is_compared_within_the_tolerance():
    other = copy.deepcopy(BASE)
    other["masks"][0]["candidates"][0]["evidence"][0]["score"] += TOLERANCE / 2
    assert agree(BASE, other)
    other["masks"][0]["candidates"][0]["evidence"][0]["doc_id"] = "d9"  # another place, scoring 0.9
    assert not agree(BASE, other)
    # a marginal occurrence (a hit at the edge of the retrieved ones) may be found in one fill only
    extra = copy.deepcopy(BASE)
    extra["masks"][0]["candidates"][0]["evidence"].append(_evidence("d3", 0.0002))
    assert agree(BASE, extra) and agree(extra, BASE)


def test_ranked_agree_on_bare_lists():
    def items(*scores: tuple[str, float]) -> list[dict]:
        return [{"k": k, "score": s} for k, s in scores]

    def key(item: dict) -> str:
        return item["k"]

    assert ranked_agree([], [], key, 0.01)
    assert ranked_agree(items(("a", 0.005)), [], key, 0.01)  # alone, within the tolerance of nothing
    assert not ranked_agree(items(("a", 0.5)), [], key, 0.01)
    assert ranked_agree(items(("a", 0.5), ("b", 0.4)), items(("b", 0.45), ("a", 0.44)), key, 0.06)  # a near tie
    assert not ranked_agree(items(("a", 0.5), ("b", 0.4)), items(("b", 0.5), ("a", 0.4)), key, 0.06)

"""Tests for common.masks: how a query writes its masks."""

from __future__ import annotations

import pytest

from common.masks import blank_masks, count_masks, split_on_masks

# ---------------------------------------------------------------- masks


@pytest.mark.parametrize(
    "text, segments",
    [
        ("no mask here", ["no mask here"]),
        ("a <mask> b", ["a ", " b"]),
        ("a [MASK] b", ["a ", " b"]),
        ("<MASK>", ["", ""]),
        ("[mask] and <Mask>", ["", " and ", ""]),
        ("x <mask>[MASK]<mAsK> y", ["x ", "", "", " y"]),
        ("Paris is the <mask> of France.", ["Paris is the ", " of France."]),
    ],
)
def test_split_on_masks(text, segments):
    assert split_on_masks(text) == segments
    assert count_masks(text) == len(segments) - 1


@pytest.mark.parametrize("text", ["mask", "<mask", "mask>", "[MASK", "< mask >", "<masks>x", "[ MASK ]", "<mas k>"])
def test_not_a_mask(text):
    assert count_masks(text) == 0
    assert split_on_masks(text) == [text]


def test_count_masks_mixed():
    assert count_masks("<mask> [MASK] <MASK> [mask] <Mask>") == 5
    assert count_masks("") == 0


def test_blank_masks():
    assert blank_masks("Paris is the <mask> of [MASK].") == "Paris is the   of  ."

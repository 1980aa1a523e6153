"""common.packing: a dataclass's integer arrays pickled in their smallest dtype and unpickled exactly as they were."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, fields

import numpy as np
import pytest

from common.packing import reduce_packed, smallest_dtype
from tests.conftest import assert_same_fields


@dataclass
class Inner:
    codes: np.ndarray

    __reduce__ = reduce_packed


@dataclass(frozen=True)
class Outer:
    small: np.ndarray
    negative: np.ndarray
    wide: np.ndarray
    empty: np.ndarray
    floats: np.ndarray
    grid: np.ndarray
    inner: Inner
    number: float
    label: str | None

    __reduce__ = reduce_packed


def _outer() -> Outer:
    rng = np.random.default_rng(0)
    return Outer(
        small=rng.integers(0, 200, 5000).astype(np.int64),
        negative=rng.integers(-30_000, 30_000, 5000).astype(np.int64),
        wide=np.array([0, 2**40], dtype=np.int64),  # needs all 8 bytes: pickled as it is
        empty=np.empty(0, dtype=np.int64),
        floats=rng.standard_normal(100),  # not integers: as they are
        grid=rng.integers(0, 70_000, (50, 2)).astype(np.int64),
        inner=Inner(rng.integers(32, 127, 3000).astype(np.int32)),
        number=0.25,
        label=None,
    )


def test_a_round_trip_gives_every_field_back_with_its_dtype():
    original = _outer()
    assert_same_fields(original, pickle.loads(pickle.dumps(original, protocol=5)))


def test_small_integers_travel_in_fewer_bytes():
    original = _outer()
    as_they_are = sum(
        len(pickle.dumps(getattr(original, f.name), protocol=5)) for f in fields(original) if f.name != "inner"
    ) + len(pickle.dumps(original.inner.codes, protocol=5))
    packed = len(pickle.dumps(original, protocol=5))
    # small: 1 byte a value of 8; negative: 2 of 8; grid: 4 of 8; codes: 1 of 4 -> well under half
    assert packed < 0.4 * as_they_are


@pytest.mark.parametrize(
    ("values", "dtype"),
    [([0, 255], np.uint8), ([0, 256], np.uint16), ([-1, 127], np.int8), ([-1, 255], np.int16), ([0, 2**31], np.uint32)],
)
def test_the_smallest_dtype_holds_the_extremes(values, dtype):
    assert smallest_dtype(np.array(values, dtype=np.int64)) == np.dtype(dtype)

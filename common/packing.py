"""Dataclasses of arrays pickled small: what a shard group sends back over Ray (service.ray_backend).

The shard-local stage's answers hold int64 arrays whose values are small: positions within one shard, rows of a
span's distinct starts, code points of mostly ASCII text. Pickled as they are, one mask's candidates on the T-REx
dev index were ~1.5 MB a fill, and Ray's transfer of them the costliest of its calls. `reduce_packed` is a
dataclass's `__reduce__` that stores every integer array in the smallest integer dtype holding its values (with
its own dtype, to restore it) and rebuilds the dataclass with the arrays exactly as they were (values, dtype and
shape), so the ingress computes with the same arrays as a one-process engine. In one process nothing is pickled
and this costs nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def smallest_dtype(values: np.ndarray) -> np.dtype:
    """The smallest integer dtype that holds every value of the (integer, non-empty) array."""
    lo, hi = int(values.min()), int(values.max())
    kinds = (np.uint8, np.uint16, np.uint32, np.uint64) if lo >= 0 else (np.int8, np.int16, np.int32, np.int64)
    return next(np.dtype(t) for t in kinds if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)


def _packed(value: Any) -> tuple[Any, str | None]:
    """(the value to pickle, the dtype to restore it to, or None when it is pickled as it is)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.size == 0:
        return value, None
    small = smallest_dtype(value)
    if small.itemsize >= value.dtype.itemsize:
        return value, None
    return value.astype(small), value.dtype.str


def reduce_packed(obj: Any) -> tuple[Any, tuple[Any, ...]]:
    """`__reduce__` of a dataclass (its fields all init fields): its integer arrays pickled in their smallest
    dtype, the dataclass rebuilt by `unpacked` with each array back in its own dtype."""
    fields = [(f.name, *_packed(getattr(obj, f.name))) for f in dataclasses.fields(obj)]
    return unpacked, (type(obj), fields)


def unpacked(cls: type, fields: list[tuple[str, Any, str | None]]) -> Any:
    """The dataclass `cls` from the fields `reduce_packed` stored."""
    return cls(**{name: value if dtype is None else value.astype(np.dtype(dtype)) for name, value, dtype in fields})

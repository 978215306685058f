"""Argument checks shared by the plan builders (private to :mod:`fpreduce.plans`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fpreduce.base.errors import InvalidArgument


def check_n(n: int) -> None:
    """Raise unless ``n`` (the number of workers) is a positive int."""
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise InvalidArgument(f"number of workers must be a positive int, got {n!r}")


def check_param(family: str, what: str, v: object, least: int) -> None:
    """Raise unless the parameter ``what`` of plan ``family`` is an int >= ``least``."""
    if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < least:
        raise InvalidArgument(f"plan {family!r}: {what} must be an integer >= {least}, got {v!r}")


def check_perm(perm: Sequence[int] | np.ndarray, n: int) -> tuple[int, ...]:
    """``perm`` as a tuple, after checking it is a permutation of 0..n-1."""
    p = tuple(int(v) for v in perm)
    if sorted(p) != list(range(n)):
        raise InvalidArgument(f"perm must be a permutation of 0..{n - 1}")
    return p

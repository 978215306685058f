"""The exact sum of float32 columns by compiled buckets: the same ExactSum as the numpy path and the Fractions.

Tall columns (a column at a time) and wide blocks, subnormals, signed zeros (an all -0 column
sums to -0), NaN and both infinities (left out of the buckets, said in the flags).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit

pytestmark = pytest.mark.skipif(not jit.enabled(), reason="the buckets are a compiled kernel")


def data(n: int, c: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal((n, c)) * np.exp2(rng.integers(-160, 128, (n, c)).astype(float))).astype(np.float32)
    x[rng.random((n, c)) < 0.05] = 0.0
    x[rng.random((n, c)) < 0.05] = -0.0
    x[0, 0], x[1 % n, 0] = np.float32(1e-45), -np.float32(3e-45)  # subnormals
    x[:, -1] = -0.0
    return x


@pytest.mark.parametrize(("n", "c"), [(3000, 1), (400, 5), (5, 4), (7, 300), (2, 1500)])
def test_buckets_give_the_numpy_paths_sums(n: int, c: int) -> None:
    X = data(n, c, n + c)
    if c > 3 and n > 3:
        X[2, 1], X[1, 2], X[0, 2], X[3, 0] = np.inf, np.nan, -np.inf, -np.inf
    got = fr.exact_sum(X)
    with jit.disabled():
        want = fr.exact_sum(X)
    assert list(got.values) == list(want.values)
    assert np.array_equal(got.to_float64().view(np.uint64), want.to_float64().view(np.uint64))
    assert np.signbit(got.to_float64()[-1])  # an all -0 column
    for j in range(min(c, 8)):
        if np.isfinite(X[:, j]).all():
            assert got.fraction(j) == sum((Fraction(float(v)) for v in X[:, j]), Fraction(0))
    for fmt, mode in (("bf16", "nearest_even"), ("fp16", "up"), ("fp32", "toward_zero")):
        assert np.array_equal(got.round(fmt, mode), want.round(fmt, mode), equal_nan=True)


def test_buckets_cancel_exactly() -> None:
    """2^127 - 2^127 + 2^-149 in a tall column: the smallest subnormal survives the largest cancellation."""
    x = np.array([2.0**127, 1e-45, -(2.0**127)] * 3 + [-1e-45] * 2, dtype=np.float32)[:, None]
    assert fr.exact_sum(x).fraction(0) == Fraction(1, 2**149)


def test_exact_sum_reads_as_the_scans_path_does() -> None:
    """fr.exact_sum of tall float32 columns goes straight to the buckets; the runner's scan first proves float64
    sums exact where it can. Both give every sum in the same terms (V odd, or an integer with k = 0; zero as
    (0, 0)), and short columns take the scan (its float64 sums spare the buckets' per-column work)."""
    from fpreduce.core.exact import _TALL, exact_sum_counting_zeros

    rng = np.random.default_rng(5)
    X = rng.standard_normal((_TALL, 4)).astype(np.float32)
    X[:, 0] = np.float32(0.75)  # a float64-exact column: the scan's fast path
    X[:, 1] = np.tile([4.0, -4.0], _TALL // 2)  # a zero sum
    X[:, 2] = 2.0**100  # an integer sum with trailing zero bits
    X[3, 3] = np.float32(1e-45)  # a subnormal among normals
    got, want = fr.exact_sum(X), exact_sum_counting_zeros(X)[0]
    assert list(got.values) == list(want.values)
    assert got.values[0] == (3 * _TALL // 4, 0)
    assert got.values[1] == (0, 0)
    assert got.values[2] == (_TALL * 2**100, 0)
    assert Fraction(got.values[3][0]) * Fraction(2) ** got.values[3][1] == sum(
        (Fraction(float(v)) for v in X[:, 3]), Fraction(0)
    )

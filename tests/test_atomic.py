"""The atomic plan's per-element orders (fpreduce._collectives) and their gather (fpreduce._fastpath)."""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import pytest

import fpreduce as fr
from fpreduce import plans as P
from fpreduce._collectives import block_orders, block_rows, key_layout
from fpreduce._fastpath import _gather_orders


def perm_codes(o: np.ndarray) -> np.ndarray:
    """Each row (a permutation of 0..n-1) as its index in lexicographic order of all n! permutations."""
    n = o.shape[1]
    table = {p: i for i, p in enumerate(permutations(range(n)))}
    return np.array([table[tuple(int(v) for v in row)] for row in o])


def chi2(counts: np.ndarray, expected: float) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def assert_uniform(codes: np.ndarray, k: int) -> None:
    """All k outcomes occur, with Pearson's chi-square far below anything a bias would give.

    The seeds are fixed, so this is deterministic; the bound is ~ dof + 10 sqrt(2 dof)
    (a tail probability below 1e-9 for uniform draws), while a tie broken by the
    worker index instead of a redraw, or a shared order, gives chi-square in the thousands.
    """
    counts = np.bincount(codes, minlength=k)
    assert counts.size == k
    assert counts.min() > 0
    assert chi2(counts, codes.size / k) < (k - 1) + 10 * math.sqrt(2 * (k - 1))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 64, 100, 300, 1024, 1025])
def test_orders_are_chunk_independent_permutations(n):
    a = P.atomic(n, seed=9)
    rows = block_rows(n)
    total = 2 * rows + 77
    o = a.orders(0, total)
    assert o.shape == (total, n)
    assert o.dtype == (np.uint8 if n <= 256 else np.uint16)
    assert o.flags.c_contiguous
    assert (np.sort(o, axis=1) == np.arange(n)).all()
    for lo, hi in [(0, 1), (3, rows + 5), (rows - 1, rows + 1), (rows + 13, total), (total - 1, total), (5, 5)]:
        assert (a.orders(lo, hi) == o[lo:hi]).all(), (lo, hi)
    assert (P.atomic(n, seed=9).orders(rows + 1, 2 * rows + 3) == o[rows + 1 : 2 * rows + 3]).all()
    parts = [a.orders(lo, min(total, lo + 97)) for lo in range(0, total, 97)]  # chunks not aligned to blocks
    assert (np.concatenate(parts) == o).all()
    last = total // rows  # the last (partial) block, straight from block_orders
    assert (o[rows * last :] == block_orders(9, last, n)[: total - rows * last]).all()
    if n > 2:
        assert not (P.atomic(n, seed=10).orders(0, 100) == o[:100]).all()
        k = math.factorial(min(n, 20))  # distinct orders among 200 uniform draws: about k (1 - (1 - 1/k)^200)
        assert len({tuple(r) for r in o[:200].tolist()}) >= 0.8 * k * (1 - (1 - 1 / k) ** 200)


def test_orders_dtype_for_many_workers():
    assert P.atomic(257, seed=1).orders(0, 3).dtype == np.uint16
    assert block_orders(0, 0, 2).dtype == np.uint8


@pytest.mark.parametrize("n", [3, 4])
def test_orders_are_uniform_over_all_permutations(n):
    k = math.factorial(n)
    codes = perm_codes(P.atomic(n, seed=21).orders(0, 2000 * k))
    assert_uniform(codes, k)


def test_neighbouring_elements_are_independent():
    # n = 3 packs 21 elements' keys into one sorted row: the joint law of the orders
    # of elements 2i and 2i+1 (mostly in the same row) is uniform over the 36 pairs
    codes = perm_codes(P.atomic(3, seed=4).orders(0, 72000))
    assert_uniform(codes[0::2] * 6 + codes[1::2], 36)
    # and each worker is first equally often for larger n (a row of 64 keys per element)
    first = P.atomic(64, seed=2).orders(0, 64000)[:, 0]
    assert_uniform(first.astype(np.intp), 64)
    # 1024 workers on 32-bit keys: about 1 element in 9 ties and is redrawn
    o = P.atomic(1024, seed=2).orders(0, 20480)
    assert_uniform(o[:, 0].astype(np.intp), 1024)
    assert_uniform(o[:, 511].astype(np.intp), 1024)


@pytest.mark.parametrize(("n", "bits"), [(4, 2), (3, 2), (8, 5), (2, 1)])
def test_ties_are_redrawn_and_stay_uniform(n, bits):
    """With 1-5 random bits most elements tie (4 workers on 2 bits: only 24/256
    of the draws are tie-free) and go through the redraw rounds."""
    w, g, t, b = key_layout(n)
    assert bits < w - t - b
    rows = block_rows(n)
    o = np.concatenate([block_orders(3, blk, n, random_bits=bits) for blk in range(4)])
    assert o.shape == (4 * rows, n)
    assert (np.sort(o, axis=1) == np.arange(n)).all()
    assert (block_orders(3, 2, n, random_bits=bits) == o[2 * rows : 3 * rows]).all()  # deterministic
    if n <= 4:
        assert_uniform(perm_codes(o), math.factorial(n))
    else:
        assert_uniform(o[:, 0].astype(np.intp), n)  # first worker
        assert_uniform(o[:, -1].astype(np.intp), n)  # last worker
    assert not (o == block_orders(3, 0, n)[0]).all(axis=1).all()


def test_random_bits_must_leave_room():
    with pytest.raises(fr.InvalidArgument, match="random_bits"):
        block_orders(0, 0, 4, random_bits=0)
    w, g, t, b = key_layout(4)
    with pytest.raises(fr.InvalidArgument, match="random_bits"):
        block_orders(0, 0, 4, random_bits=w - t - b + 1)


def test_key_layout_fits_and_keeps_ties_rare():
    for n in [1, 2, 3, 5, 16, 17, 31, 64, 65, 256, 1000, 1024, 1025, 4096]:
        w, g, t, b = key_layout(n)
        assert n - 1 < 1 << b
        assert g - 1 < 1 << t
        assert g * n <= max(64, n)
        r = w - t - b
        assert r > 0
        assert n * (n - 1) / 2 / 2**r <= 1 / 8, n


def test_relabel_composes_with_small_dtypes():
    a = P.atomic(300, seed=3)
    p1 = np.roll(np.arange(300), 7)
    p2 = np.arange(300)[::-1]
    o = a.orders(10, 60)
    r = a.relabel(p1).relabel(p2)
    got = r.orders(10, 60)
    assert got.dtype == o.dtype
    assert (got == p2[p1[o]]).all()


@pytest.mark.parametrize(("n", "width"), [(5, 1), (64, 1000), (3, 70000), (300, 200)])
def test_gather_orders_matches_fancy_indexing(n, width):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((n, width + 40), dtype=np.float32)
    lo, hi = 17, 17 + width
    o = P.atomic(n, seed=1).orders(5, 5 + width)
    want = A[o.T.astype(np.intp), np.arange(lo, hi)]
    got = _gather_orders(A, o, lo, hi)
    assert got.shape == (n, width)
    assert got.flags.c_contiguous
    assert np.array_equal(got, want)
    assert np.array_equal(_gather_orders(A, o.astype(np.intp), lo, hi), want)  # any integer orders
    assert np.array_equal(_gather_orders(np.asfortranarray(A), o, lo, hi), want)  # any layout of A
    buf = np.full((n, width + 3), np.nan, dtype=np.float32)
    Y = _gather_orders(A, o, lo, hi, buf)
    assert np.shares_memory(Y, buf)
    assert np.array_equal(Y, want)
    assert np.isnan(buf[:, width:]).all()
    assert _gather_orders(A, o[:0], lo, lo).shape == (n, 0)

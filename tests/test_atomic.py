"""The atomic plan's per-element orders (fpreduce.plans), their gather and fused kernel (fpreduce.core)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from itertools import permutations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce import plans as P
from fpreduce.base import jit
from fpreduce.plans import per_element as PE
from fpreduce.plans._atomic_kernel import kernel_width
from fpreduce.plans.per_element import draw_groups, orders_numpy

JIT = PE.kernel_available()
needs_jit = pytest.mark.skipif(not JIT, reason="numba not installed (or FPREDUCE_NO_JIT)")
NS = [1, 2, 3, 7, 64, 255, 256, 257, 1024, 1025]


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
    (a tail probability below 1e-9 for uniform draws), while a biased draw (a
    rejection skipped, a shared order) gives chi-square in the hundreds or thousands.
    """
    counts = np.bincount(codes, minlength=k)
    assert counts.size == k
    assert counts.min() > 0
    assert chi2(counts, codes.size / k) < (k - 1) + 10 * math.sqrt(2 * (k - 1))


@pytest.fixture
def numpy_orders():
    with jit.disabled():
        yield


@pytest.fixture
def narrow(monkeypatch):
    """Force the rejection path: ``narrow(bits, group_bits)`` draws ``bits``-bit values."""

    def set_bits(bits: int, group_bits: int) -> None:
        monkeypatch.setattr(PE, "_DRAW_BITS", bits)
        monkeypatch.setattr(PE, "_GROUP_BITS", group_bits)

    return set_bits


def both_orders(plan: P.PerElementPlan, lo: int, hi: int) -> np.ndarray:
    """plan.orders(lo, hi) from numpy, checked equal to the numba kernel's when numba is there."""
    want = orders_numpy(PE.atomic_key(plan.seed), lo, hi, plan.shuffled(), PE._DRAW_BITS, PE._GROUP_BITS)
    got = plan.orders(lo, hi)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)
    return want


@pytest.mark.parametrize("n", NS)
def test_numpy_and_numba_orders_agree_and_are_chunk_independent(n):
    a = P.atomic(n, seed=9)
    w = kernel_width(n)
    total = 3 * w + 8197  # spans kernel blocks and numpy's chunks of 8192 elements
    o = both_orders(a, 0, total)
    assert o.shape == (total, n)
    assert o.dtype == (np.uint8 if n <= 256 else np.uint16)
    assert o.flags.c_contiguous
    assert (np.sort(o, axis=1) == np.arange(n)).all()
    for lo, hi in [(0, 1), (3, w + 5), (w - 1, w + 1), (w + 13, total), (total - 1, total), (5, 5), (8191, 8193)]:
        assert np.array_equal(both_orders(a, lo, hi), o[lo:hi]), (lo, hi)
    parts = [a.orders(lo, min(total, lo + 97)) for lo in range(0, total, 97)]  # chunks not aligned to blocks
    assert np.array_equal(np.concatenate(parts), o)
    if n > 2:
        assert not (P.atomic(n, seed=10).orders(0, 100) == o[:100]).all()
        k = math.factorial(min(n, 20))  # distinct orders among 200 uniform draws: about k (1 - (1 - 1/k)^200)
        assert len({tuple(r) for r in o[:200].tolist()}) >= 0.8 * k * (1 - (1 - 1 / k) ** 200)


@pytest.mark.parametrize("seed", [0, 1, 2, 77, 2**31 - 1, 2**63 + 5, 2**64, 3**50])
@pytest.mark.parametrize("n", [2, 3, 7, 64, 257])
def test_orders_agree_for_many_seeds(seed, n):
    a = P.atomic(n, seed=seed)
    o = both_orders(a, 1001, 1001 + 3 * kernel_width(n) + 7)
    assert (np.sort(o, axis=1) == np.arange(n)).all()
    assert np.array_equal(both_orders(a, 2**40 + 3, 2**40 + 70), a.orders(2**40 + 3, 2**40 + 70))  # far elements


def test_orders_depend_on_the_whole_seed():
    o = [P.atomic(5, seed=s).orders(0, 50) for s in (1, 1 + 2**64, 1 + 2**65)]
    assert not np.array_equal(o[0], o[1])
    assert not np.array_equal(o[1], o[2])


def test_orders_dtype_for_many_workers():
    assert P.atomic(257, seed=1).orders(0, 3).dtype == np.uint16
    assert P.atomic(256, seed=1).orders(0, 3).dtype == np.uint8
    assert P.atomic(2, seed=1).orders(0, 3).dtype == np.uint8
    assert P.atomic(1, seed=1).orders(0, 3).tolist() == [[0]] * 3


@pytest.mark.parametrize("n", [3, 4])
def test_orders_are_uniform_over_all_permutations(n):
    k = math.factorial(n)
    codes = perm_codes(P.atomic(n, seed=21).orders(0, 2000 * k))
    assert_uniform(codes, k)


def test_neighbouring_elements_are_independent():
    codes = perm_codes(P.atomic(3, seed=4).orders(0, 72000))  # orders of elements 2i and 2i+1: 36 pairs
    assert_uniform(codes[0::2] * 6 + codes[1::2], 36)
    first = P.atomic(64, seed=2).orders(0, 64000)[:, 0]  # each worker first equally often
    assert_uniform(first.astype(np.intp), 64)
    o = P.atomic(1024, seed=2).orders(0, 20480)
    assert_uniform(o[:, 0].astype(np.intp), 1024)
    assert_uniform(o[:, 511].astype(np.intp), 1024)
    assert_uniform(o[:, 1023].astype(np.intp), 1024)


@pytest.mark.parametrize("n", [2, 3, 64, 100, 256, 1000, 1024, 1025, 4096])
def test_draw_groups_keep_rejections_rare(n):
    starts, thr = draw_groups(n)
    assert starts[0] == 0
    assert starts[-1] == n - 1
    assert (np.diff(starts) >= 1).all()
    for g in range(thr.size):
        P_ = math.prod(n - k for k in range(int(starts[g]), int(starts[g + 1])))
        assert P_ <= 2**20 or starts[g + 1] - starts[g] == 1
        if starts[g + 1] < n - 1:  # greedy: the next step did not fit
            assert P_ * (n - int(starts[g + 1])) > 2**20
        assert int(thr[g]) == (2**32 - P_) % P_
        assert int(thr[g]) < 2**20  # a draw is rejected with probability below 2^-12
    assert draw_groups(1)[0].tolist() == [0]
    assert draw_groups(1)[1].size == 0


@pytest.mark.parametrize(
    ("n", "bits", "group_bits"), [(4, 3, 3), (3, 2, 2), (8, 5, 4), (5, 3, 3), (4, 8, 5), (6, 8, 8)]
)
def test_rejections_are_redrawn_and_stay_uniform(narrow, n, bits, group_bits):
    """With a few bits per draw, most groups reject (4 workers on 3 bits: P = 6 rejects 2 draws in 8)."""
    narrow(bits, group_bits)
    starts, thr = draw_groups(n, bits, group_bits)
    assert thr.max() > 0  # some group can reject
    a = P.atomic(n, seed=3)
    o = both_orders(a, 0, 40000)
    assert (np.sort(o, axis=1) == np.arange(n)).all()
    assert np.array_equal(both_orders(a, 1234, 9999), o[1234:9999])  # deterministic, chunk independent
    if n <= 4:
        assert_uniform(perm_codes(o), math.factorial(n))
    else:
        for k in range(n):
            assert_uniform(o[:, k].astype(np.intp), n)
    narrow(32, 20)
    assert not np.array_equal(a.orders(0, 200), o[:200])


def test_rejections_happen_with_narrow_draws(narrow, monkeypatch):
    """The numpy redraw loop runs (counted through its mix), and both paths still agree."""
    narrow(2, 2)  # n = 3: one group of ranges 3, 2 would need 6 > 4: groups [3], [2]; P = 3 rejects 1 draw in 4
    calls = []
    real = PE._mix

    def counting(z):  # type: ignore[no-untyped-def]
        calls.append(z.size)
        return real(z)

    monkeypatch.setattr(PE, "_mix", counting)
    both_orders(P.atomic(3, seed=1), 0, 1000)
    assert len(calls) > 2  # element seeds, one word, then redraw rounds


def test_bits_must_fit_the_workers(narrow):
    narrow(2, 2)
    with pytest.raises(fr.InvalidArgument, match="bits"):
        P.atomic(5, seed=0).orders(0, 3)
    with pytest.raises(fr.InvalidArgument, match="bits"):
        draw_groups(4, 0)


def test_relabel_composes_with_small_dtypes():
    a = P.atomic(300, seed=3)
    p1 = np.roll(np.arange(300), 7)
    p2 = np.arange(300)[::-1]
    o = a.orders(10, 60)
    r = a.relabel(p1).relabel(p2)
    got = both_orders(r, 10, 60)
    assert got.dtype == o.dtype
    assert (got == p2[p1[o]]).all()


@pytest.mark.parametrize(("n", "width"), [(5, 1), (64, 1000), (3, 70000), (300, 200)])
def test_gathered_orders_are_fancy_indexing(n, width):
    """Each element summed in its own order (the engine gathers the leaves) is the left fold of the leaves picked
    by fancy indexing: bf16 accumulation, where the order shows, in any layout of X and either path."""
    rng = np.random.default_rng(n)
    A = fr.round_to(rng.standard_normal((n, width + 40), dtype=np.float32), "bf16")
    lo, hi = 17, 17 + width
    plan = P.atomic(n, seed=1)
    o = plan.orders(5, 5 + width)
    Y = A[o.T.astype(np.intp), np.arange(lo, hi)]  # column j: its leaves in its own order
    kw = dict(input="bf16", accumulate="bf16", offset=5, total=5 + width + 40)
    want = fr.reduce(Y, "sequential", input="bf16", accumulate="bf16")
    for X in (A[:, lo:hi], np.asfortranarray(A)[:, lo:hi]):
        for compiled in (True, False):
            with jit.disabled() if not compiled else nullcontext():
                got = fr.reduce(X, plan, **kw)
            assert got.shape == (width,)
            assert np.array_equal(bits_of(got), bits_of(want)), compiled
    assert fr.reduce(A[:, lo:lo], plan, **kw).shape == (0,)


def test_gather_orders_fills_the_engines_buffer():
    """Kept on the private helper on purpose (issue 24): the gather writes into the engine's reused buffer and
    leaves the rest of it alone, and takes orders of any integer dtype; memory and dtypes no result shows (the
    gathered bits: test_gathered_orders_are_fancy_indexing)."""
    from fpreduce.core._fastpath import _gather_orders

    n, width = 64, 1000
    A = np.random.default_rng(n).standard_normal((n, width + 40), dtype=np.float32)
    lo, hi = 17, 17 + width
    o = P.atomic(n, seed=1).orders(5, 5 + width)
    want = A[o.T.astype(np.intp), np.arange(lo, hi)]
    got = _gather_orders(A, o, lo, hi)
    assert got.flags.c_contiguous
    assert np.array_equal(got, want)
    assert np.array_equal(_gather_orders(A, o.astype(np.intp), lo, hi), want)  # any integer orders
    buf = np.full((n, width + 3), np.nan, dtype=np.float32)
    Y = _gather_orders(A, o, lo, hi, buf)
    assert np.shares_memory(Y, buf)
    assert np.array_equal(Y, want)
    assert np.isnan(buf[:, width:]).all()


# -- the fused kernel (orders, gather and fold in one numba pass) against the numpy path ---------------------------

FORMATS = [("bf16", "bf16"), ("bf16", "tf32"), ("tf32", "tf32"), ("bf16", "fp32"), ("tf32", "fp32"), ("fp32", "fp32")]


def bits_of(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def run_both(X, **kw):  # type: ignore[no-untyped-def]
    """(fused result, numpy-path result, number of blocks the fused kernel completed: the route trace)."""
    with fr.trace_routes() as ran:
        fused = fr.reduce(X, "atomic", **kw)
    with jit.disabled():
        plain = fr.reduce(X, "atomic", **kw)
    return fused, plain, ran.count(fr.Route.FUSED_ATOMIC)


@needs_jit
@pytest.mark.parametrize(("fin", "fa"), FORMATS)
@pytest.mark.parametrize("n", [2, 3, 64, 257])
def test_fused_equals_numpy_path(monkeypatch, fin, fa, n):
    rng = np.random.default_rng(n)
    m = 40000  # more than one engine block
    X = fr.round_to(rng.standard_normal((n, m), dtype=np.float32) * np.float32(4.0), fin)
    fused, plain, done = run_both(X, input=fin, accumulate=fa, seed=7)
    assert np.array_equal(bits_of(fused), bits_of(plain))
    assert done == 2  # both blocks fused
    part, _, _ = run_both(X[:, 1000:30000], input=fin, accumulate=fa, seed=7, offset=1000, total=m)
    assert np.array_equal(bits_of(part), bits_of(fused[1000:30000]))  # chunks: the element index is global


@needs_jit
def test_fused_falls_back_when_it_must(monkeypatch):
    rng = np.random.default_rng(1)
    X = fr.round_to(rng.standard_normal((8, 300), dtype=np.float32), "bf16")
    X[3, 5] = np.nan
    fused, plain, done = run_both(X, input="bf16", accumulate="bf16")
    assert done == 0
    assert np.array_equal(bits_of(fused), bits_of(plain))
    Y = rng.standard_normal((8, 300), dtype=np.float32)  # not bf16 values: the inputs need rounding first
    fused, plain, done = run_both(Y, input="bf16", accumulate="bf16")
    assert done == 0
    assert np.array_equal(bits_of(fused), bits_of(plain))
    for kw in [
        dict(input="fp16", accumulate="fp32"),
        dict(input="bf16", accumulate="fp16"),
        dict(input="bf16", accumulate="bf16", rounding="toward_zero"),
        dict(input="bf16", accumulate="bf16", average="premultiply"),
    ]:
        fused, plain, done = run_both(X[:, 10:], **kw)
        assert done == 0, kw
        assert np.array_equal(bits_of(fused), bits_of(plain)), kw
    big = np.full((4, 10), 3e38, dtype=np.float32)  # bf16 sums beyond float32: Inf, past Veltkamp's range
    big = fr.round_to(big, "bf16")
    fused, plain, done = run_both(big, input="bf16", accumulate="bf16")
    assert done == 0
    assert np.isinf(fused).all()
    assert np.array_equal(bits_of(fused), bits_of(plain))
    fused, plain, done = run_both(big, input="bf16", accumulate="fp32")  # fp32: Inf is no NaN
    assert done == 1
    assert np.isinf(fused).all()
    assert np.array_equal(bits_of(fused), bits_of(plain))


@needs_jit
@pytest.mark.parametrize(("n", "bits", "group_bits"), [(3, 2, 2), (4, 3, 3), (7, 5, 4)])
def test_fused_follows_the_rejection_path(monkeypatch, narrow, n, bits, group_bits):
    narrow(bits, group_bits)
    rng = np.random.default_rng(n)
    X = fr.round_to(rng.standard_normal((n, 3000), dtype=np.float32), "bf16")
    fused, plain, done = run_both(X, input="bf16", accumulate="bf16", seed=4)
    assert done == 1
    assert np.array_equal(bits_of(fused), bits_of(plain))
    ref = fr.reduce_reference(X[:, :200], P.atomic(n, seed=4), input="bf16", accumulate="bf16")
    assert np.array_equal(bits_of(fused[:200]), bits_of(ref))


SPECIAL = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0**-8,
    1.0 + 2.0**-7,
    3.0,
    -3.0,
    2.0**-126,
    -(2.0**-126),
    2.0**-133,
    -(2.0**-140),
    2.0**-149,
    3.0 * 2.0**-140,
    2.0**127,
    -(2.0**127),
    3e38,
    float("inf"),
    float("-inf"),
    float("nan"),
    65504.0,
    1.5 * 2.0**-130,
    2.0**24 + 2.0**17,
    1.0 + 2.0**-10,
]
values = st.one_of(
    st.sampled_from(SPECIAL), st.floats(width=32, allow_nan=True, allow_infinity=True), st.floats(-4.0, 4.0, width=32)
)


@needs_jit
@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 6),
    m=st.integers(1, 12),
    data=st.data(),
    formats=st.sampled_from(FORMATS),
    seed=st.integers(0, 2**70),
)
def test_fused_matches_numpy_path_and_reference(n, m, data, formats, seed):
    fin, fa = formats
    raw = np.array(data.draw(st.lists(values, min_size=n * m, max_size=n * m)), dtype=np.float32).reshape(n, m)
    X = fr.round_to(raw, fin)  # representable inputs: the fused path applies (NaN/overflow: falls back)
    kw = dict(input=fin, accumulate=fa, seed=seed)
    fused = fr.reduce(X, "atomic", **kw)
    with jit.disabled():
        plain = fr.reduce(X, "atomic", **kw)
    assert np.array_equal(bits_of(fused), bits_of(plain))
    ref = fr.reduce_reference(X, P.atomic(n, seed=seed), input=fin, accumulate=fa)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(fused), nan)
    assert np.array_equal(bits_of(fused)[~nan], bits_of(ref)[~nan])  # signed zeros included


@needs_jit
def test_fused_signed_zeros():
    for col, want in [
        ([-0.0, -0.0], -0.0),
        ([-0.0, 0.0], 0.0),
        ([0.0, -0.0], 0.0),
        ([-0.0, -0.0, -0.0], -0.0),
        ([1.0, -1.0], 0.0),
        ([-(2.0**-140), 2.0**-140], 0.0),
    ]:
        X = np.array(col, dtype=np.float32)[:, None].repeat(5, axis=1)
        for fa in ("bf16", "tf32", "fp32"):
            got = fr.reduce(X, "atomic", input="bf16", accumulate=fa, seed=1)
            assert np.array_equal(bits_of(got), bits_of(np.full(5, want, dtype=np.float32))), (col, fa)

"""Natively stored 2- and 1-byte inputs and threads: the same bits as the float32 copy on one thread.

bf16 (ml_dtypes, torch), fp16 (numpy) and fp8 (ml_dtypes) arrays reach the left folds of wide
rows as their words (never widened to a float32 copy); the columns split over any number of threads.
Both are checked against the float32 path on one thread, whose bits the rest of the suite
proves against the exact reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit, threads
from fpreduce.base.errors import InvalidArgument
from fpreduce.core import routes
from fpreduce.core.routes import Route

ml_dtypes = pytest.importorskip("ml_dtypes")
pytestmark = pytest.mark.skipif(not jit.enabled(), reason="the left folds of words are compiled kernels")

DTYPES = {
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint32 if np.asarray(a).dtype == np.float32 else np.uint64)


def data(fmt: str, n: int, m: int, seed: int = 0) -> np.ndarray:
    """Values of ``fmt`` over a wide range, with signed zeros, subnormals and ties among them."""
    rng = np.random.default_rng(seed)
    fp8 = fmt.startswith("fp8")
    x = rng.standard_normal((n, m)) * np.exp2(rng.integers(-12 if fp8 else -30, 6 if fp8 else 12, (n, m)))
    x[0, :40] = np.tile([0.0, -0.0], 20)
    x[1 % n, 40:80] = np.arange(40) * 2.0 ** (-9 if fp8 else -24)  # fp16's and fp8's subnormals (bf16's: below)
    return x.astype(np.float32).astype(DTYPES[fmt])


#: (input, plan, accumulators, modes): each kind of row loop on words (a compile each: the nearest-even kinds
#: 0, 1, 2; kind 5 by the processor's mode and stochastic), the segments of a ring, and a copy where the
#: accumulator does not hold the inputs (bf16 into fp16)
GRID = [
    ("bf16", "sequential", ("bf16", "fp32", "fp16"), ("nearest_even", "toward_zero", "stochastic")),
    ("bf16", "ring:gloo", ("bf16", "fp32"), ("nearest_even", "stochastic")),  # rows by rotation; segments
    ("fp16", "sequential", ("fp16", "fp32"), ("nearest_even", "up")),
    ("fp8_e4m3", "sequential", ("fp8_e4m3", "fp32"), ("nearest_even", "up")),  # 1-byte words, int8
    ("fp8_e5m2", "sequential", ("fp8_e5m2",), ("nearest_even",)),  # uint8
]


LEFT = (Route.WIDE_LEFT, Route.SEGMENT_FOLDS, Route.RING_ROWS)  # the left folds of rows: words and threads


@pytest.mark.parametrize(("fmt", "plan", "accs", "modes"), GRID)
def test_words_give_the_float32_paths_bits_on_any_threads(fmt: str, plan: str, accs: tuple, modes: tuple) -> None:
    X = data(fmt, 7, 3001)
    wide = X.astype(np.float32)
    seen = set()
    for acc in accs:
        for mode in modes:
            kw = {"accumulate": acc, "rounding": mode, "seed": 3, "offset": 5, "total": 3010}  # (a ring cut inside X)
            ref = fr.reduce(wide, plan, input=fmt, threads=1, **kw)
            for t in (1, 2, 3):
                with routes.trace() as tr:
                    got = fr.reduce(X, plan, threads=t, **kw)
                assert np.array_equal(bits(got), bits(ref)), (acc, mode, t)
                d = fr.explain(X, plan, threads=t, **kw)
                seen |= {r for r in tr if r in LEFT}
                if d.route in LEFT:  # words where the accumulator holds them
                    assert d.words == (acc in (fmt, "fp32"))
                    assert d.threads == t
    assert seen, "no left fold of words ran"


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"])
def test_every_word_widens_exactly(fmt: str) -> None:
    """All 65,536 (256) words, each added to +0 (one rounding of an exact value: itself; -0 + +0 = +0); ml_dtypes'
    and numpy's casts the independent widening."""
    size = np.dtype(DTYPES[fmt]).itemsize
    words = np.arange(1 << (8 * size), dtype=np.uint16 if size == 2 else np.uint8).view(DTYPES[fmt])
    X = np.stack([np.zeros(words.size, dtype=DTYPES[fmt]), words])
    assert fr.explain(X, "sequential", accumulate="fp32").words
    got = fr.reduce(X, "sequential", accumulate="fp32", threads=2)
    with np.errstate(invalid="ignore"):  # (signalling NaNs)
        want = words.astype(np.float32) + np.float32(0.0)
    finite = np.isfinite(want)
    assert np.array_equal(bits(got[finite]), bits(want[finite]))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e5m2"])
def test_inf_and_nan_words_take_the_float32_path(fmt: str) -> None:
    X = data(fmt, 5, 2500, seed=1)
    X[2, 7], X[3, 9], X[4, 11], X[1, 11] = np.nan, np.inf, -np.inf, np.inf
    for acc in ("bf16", "fp32"):
        ref = fr.reduce(X.astype(np.float32), "sequential", input=fmt, accumulate=acc, threads=1)
        got = fr.reduce(X, "sequential", accumulate=acc, threads=2)
        assert np.array_equal(bits(got), bits(ref))
        assert np.isnan(got[11])
        assert np.isnan(got[7])
        assert got[9] == np.inf


def test_bf16_words_whose_sum_overflows_are_summed_again() -> None:
    """bf16 words are checked in their sums (no Inf or NaN word marked as read): finite words whose sum overflows
    give the same bits as the float32 copy's fold, in every mode, with and without stochastic rounding."""
    X = data("bf16", 4, 700, seed=2)
    top = float(np.finfo(DTYPES["bf16"]).max)
    X[:, 5], X[:, 600] = top, -top  # (600: a column in the stochastic fold's second stretch)
    for acc, mode in (("fp32", "nearest_even"), ("bf16", "nearest_even"), ("bf16", "up"), ("bf16", "stochastic")):
        kw = {"accumulate": acc, "rounding": mode, "seed": 1}
        ref = fr.reduce(X.astype(np.float32), "sequential", input="bf16", threads=1, **kw)
        got = fr.reduce(X, "sequential", threads=2, **kw)
        assert np.array_equal(bits(got), bits(ref)), (acc, mode)
        assert np.isinf(got[5]) or got[5] == top, (acc, mode)


@pytest.mark.parametrize("fmt", ["fp16", "fp8_e5m2"])
def test_words_checks_join_by_their_largest_magnitude(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A word's check is its magnitude (Inf and NaN words are the largest): rows whose largest magnitudes are 1.5
    and 2.5 (words 0x3E00 and 0x4100 in fp16: their OR 0x7F00 is beyond Inf's 0x7C00) are folded once, as their
    words, on any number of threads; an Inf word is found and the rows folded again from their float32 values."""
    from fpreduce.core import _narrow

    calls: list[np.dtype] = []
    fold = _narrow.fold_left

    def spy(X: np.ndarray, *args: object, **kw: object) -> object:
        calls.append(X.dtype)
        return fold(X, *args, **kw)

    monkeypatch.setattr(_narrow, "fold_left", spy)
    X = np.zeros((3, 5000), dtype=DTYPES[fmt])
    X[0], X[1], X[2] = 1.5, 2.5, 0.25
    for t in (1, 2, 3):
        calls.clear()
        got = fr.reduce(X, "sequential", accumulate=fmt, threads=t)
        assert np.all(got == (4.25 if fmt == "fp16" else 4.0)), t
        assert len(calls) == 1, t
        assert calls[0].itemsize <= 2, t
    X[1, 4000] = np.inf
    calls.clear()
    got = fr.reduce(X, "sequential", accumulate=fmt, threads=2)
    assert np.isinf(got[4000])
    assert np.all(np.delete(got, 4000) == got[0])
    assert len(calls) == 2, calls


def test_torch_bf16_tensors_are_read_as_words() -> None:
    torch = pytest.importorskip("torch")
    X = data("bf16", 4, 3000)
    T = torch.from_numpy(X.view(np.int16)).view(torch.bfloat16)
    assert fr.explain(T, "sequential", accumulate="bf16").words
    got = fr.reduce(T, "sequential", accumulate="bf16", threads=2, result="native")
    want = fr.reduce(X.astype(np.float32), "sequential", input="bf16", accumulate="bf16", threads=1)
    assert got.dtype == torch.bfloat16
    assert np.array_equal(got.float().numpy(), want)


def test_words_only_where_the_array_is_the_input_format() -> None:
    X = data("bf16", 3, 3000)
    assert not fr.explain(X.astype(np.float32), "sequential", input="bf16").words  # a float32 array: float32 rows
    assert not fr.explain(X, "sequential", average="premultiply").words  # inputs scaled on load: a copy
    assert not fr.explain(X, "pairwise").words  # not a left fold of rows


@pytest.mark.parametrize("plan", ["pairwise", "rabenseifner", "((0,1),(2,(3,4)))"])
def test_trees_give_the_same_bits_on_any_threads(plan: str) -> None:
    """The row-block kernel of a tree: columns split, each thread its own buffers (stochastic: draws by element)."""
    X = data("bf16", 5, 4501).astype(np.float32)
    for kw in ({"accumulate": "bf16"}, {"accumulate": "bf16", "rounding": "stochastic", "seed": 2}):
        ref = fr.reduce(X, plan, input="bf16", threads=1, **kw)
        for t in (2, 3):
            d = fr.explain(X, plan, input="bf16", threads=t, **kw)
            if "rounding" not in kw:  # (a stochastic Rabenseifner gathers its segments: the engine's blocks)
                assert d.route is Route.ROW_BLOCKS
                assert d.threads == t
            assert np.array_equal(bits(fr.reduce(X, plan, input="bf16", threads=t, **kw)), bits(ref))


def test_threads_split_and_resolve() -> None:
    for size in (1, 63, 64, 1000, 4097):
        for parts in (1, 2, 3, 7):
            spans = threads.split(size, parts)
            assert spans[0][0] == 0
            assert spans[-1][1] == size
            assert len(spans) <= parts
            assert all(a < b and a % 64 == 0 for a, b in spans)
            assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    assert threads.resolve(None, threads.MIN_WORK - 1) == 1
    assert threads.resolve(None, 64 * threads.MIN_WORK) == threads.available()
    assert threads.resolve(5, 10) == 5


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork")
def test_a_forked_child_runs_its_own_threads() -> None:
    """A child forked after the pool started (a sweep's process pool) must not wait on its parent's threads."""
    import multiprocessing as mp

    X = data("bf16", 4, 3000)
    want = fr.reduce(X, "sequential", threads=2)  # the parent's pool exists now
    with mp.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(fr.reduce, (X, "sequential"), {"threads": 2}).get(timeout=120)
    assert np.array_equal(bits(got), bits(want))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_threads_are_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="threads"):
        fr.reduce(np.ones((2, 3), np.float32), "sequential", threads=bad)  # type: ignore[arg-type]


def test_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FPREDUCE_THREADS", "3")
    assert threads.available() == 3
    monkeypatch.setenv("FPREDUCE_THREADS", "zero")
    with pytest.raises(InvalidArgument, match="FPREDUCE_THREADS"):
        threads.available()

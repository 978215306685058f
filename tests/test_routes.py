"""The route table: every route runs where ``fr.explain`` says, and gives the Fraction reference's bits.

Each shape below is reduced in every accumulator format and every rounding mode on
three sets of edge data (finite edges: subnormal boundary, tiny opposite addends,
ties, signed zeros; overflow in every mode; NaN and Inf), with the compiled kernels
and with the numpy twins (``jit.disabled()``). For each run: the route the engine ran
first is the one ``fr.explain`` decided (``fr.trace_routes``), the bits equal the numpy
twin's, and the edge columns equal ``fr.reduce_reference`` (exact rationals, one
rounding per addition) or, in stochastic rounding, ``test_tall.sr_tree`` (each addition
of the element's tree rounded by the documented law in Fractions, its uniform from an
independent splitmix64; where the inputs need no conversion). ``test_every_route_is_exercised``
fails if a member of ``fr.Route`` is decided by none of these cases or run by none.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_tall import sr_tree

import fpreduce as fr
from fpreduce.base import jit

FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
MODES = ("nearest_even", "toward_zero", "up", "down", "stochastic")
EDGE = 14  # the edge columns come first; the rest are random values of the format

# name: (plan, workers, columns, algorithm, input format (None: the accumulator's))
SHAPES: dict[str, tuple[str, int, int, str, str | None]] = {
    "sequential_wide": ("sequential", 5, 2100, "plain", None),
    "fp32_rows_wide": ("sequential", 5, 2100, "plain", "fp32"),
    "bf16_rows_wide": ("pairwise", 5, 2100, "plain", "bf16"),
    "sequential_few": ("sequential", 5, 3, "plain", None),
    "sequential_one_column": ("sequential", 5, 1, "plain", None),
    "one_worker": ("sequential", 1, 20, "plain", None),
    "pairwise_wide": ("pairwise", 5, 2100, "plain", None),
    "pairwise_few": ("pairwise", 5, 3, "plain", None),
    "tree_wide": ("((0,1),((2,3),4))", 5, 2100, "plain", None),
    "tree_few": ("((0,1),((2,3),4))", 5, 3, "plain", None),
    "left_deep_tree_wide": ("(((3,1),0),(2))", 4, 2100, "plain", None),
    "ring_wide": ("ring:nccl", 4, 2100, "plain", None),
    "ring_narrow": ("ring:nccl", 4, 40, "plain", None),
    "nccl_tree_chunks": ("tree:nccl:2", 4, 4200, "plain", None),
    "rabenseifner": ("rabenseifner", 4, 64, "plain", None),
    "atomic": ("atomic", 5, 300, "plain", None),
    "kahan": ("sequential", 5, 40, "kahan", None),
    "binned": ("sequential", 5, 40, "binned", None),
    "exact": ("sequential", 5, 40, "exact", None),
}


def _edges(fmt: str, n: int, kind: str) -> np.ndarray:
    """(n, EDGE) values of ``fmt`` at its edges; kind ``finite``, ``overflow`` or ``special`` (NaN, Inf)."""
    f = fr.get_format(fmt)
    s, tiny_normal, top = 2.0 ** (f.emin - f.precision + 1), 2.0**f.emin, f.max_finite
    u = 2.0 ** (1 - f.precision)  # ulp of 1
    half_top = 2.0 ** (f.emax - f.precision)  # half an ulp of the largest binade
    cols = [
        [s, -s, s, -s, s],
        [-s, s, s, -s, -s],
        [tiny_normal, -s, -s, s, 0.0],
        [-tiny_normal, s, s, -s, -0.0],
        [1.0, u / 2, u / 2, -1.0, s],
        [1.0 + u, u / 2, -u / 4 if u / 4 >= s else -s, 0.0, -0.0],
        [-0.0, -0.0, -0.0, -0.0, -0.0],
        [0.0, -0.0, -0.0, -0.0, -0.0],
        [3.0 * s, -3.0 * s, -0.0, 0.0, -0.0],
        [tiny_normal - s, s, -s, s, tiny_normal],
    ]
    if kind == "finite":
        cols += [[top / 4, top / 4, -top / 8, s, -s], [-1.0, u, -u / 2, u / 2, s]]
        cols += [[3 * tiny_normal, -s, -s, s, -s], [-3 * tiny_normal, s, -s, 2 * s, s]]  # inexact, gap 2 smin
    elif kind == "overflow":
        cols += [[top, top, -top, top, -top], [top, half_top, half_top, -top, s]]
        cols += [[-top, -half_top, -s, s, 0.0], [top, -top, top, top, -top]]
    else:
        cols += [[np.inf, 1.0, 1.0, -1.0, s], [np.inf, -np.inf, 1.0, 1.0, 1.0]]
        cols += [[np.nan, 1.0, -1.0, s, 0.0], [-np.inf, -s, -top, -top, -0.0]]
    E = np.array(cols, dtype=np.float64).T
    return np.resize(E, (max(n, 5), EDGE))[:n] if n != 5 else E


def _data(fmt: str, n: int, m: int, kind: str, seed: int) -> np.ndarray:
    """(n, m) values of ``fmt``: the edge columns, then random values over several binades."""
    f = fr.get_format(fmt)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, max(m, EDGE))) * 2.0 ** rng.integers(-4, 5, (n, 1))
    X[:, :EDGE] = _edges(fmt, n, kind)
    X = fr.round_to(X, f)
    return np.asarray(X[:, :m], dtype=np.float64 if f.precision > 24 else np.float32)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: the same bits, or both NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def _element_plan(plan: fr.plans.AnyPlan, j: int, m: int) -> fr.plans.AnyPlan:
    """The plan of one tree that sums element j of ``plan`` (segments and per-element orders)."""
    if isinstance(plan, fr.plans.SegmentedPlan):
        return plan.trees[int(np.searchsorted(plan.bounds(m), j, side="right")) - 1]
    if isinstance(plan, fr.plans.PerElementPlan):
        return fr.plans.sequential(plan.n, plan.orders(j, j + 1)[0])
    return plan


def _check(shape: str, fmt: str, mode: str, kind: str, seen_routes: set[fr.Route]) -> None:
    text, n, m, alg, inp = SHAPES[shape]
    inp = inp or fmt
    X = _data(inp, n, m, kind, seed=len(shape) + 7 * len(kind))
    kw = dict(input=inp, accumulate=fmt, rounding=mode, algorithm=alg, seed=3)
    plan = fr.plans.parse(text, n, seed=3)  # (reduced as text: sequential and pairwise are never built)
    if alg == "binned" and fmt == "fp64":  # its documented limits: |x| < 2**960 (every data set holds top / 4),
        refused = "2\\*\\*960|stochastic rounding needs"  # and no stochastic rounding into fp64
        for compiled in (True, False):
            with jit.disabled() if not compiled else _nothing(), pytest.raises(fr.InvalidArgument, match=refused):
                fr.reduce(X, text, **kw)
        return
    results = []
    for compiled in (True, False):
        with jit.disabled() if not compiled else _nothing():
            d = fr.explain(X, text, **kw)
            with fr.trace_routes() as ran:
                results.append(fr.reduce(X, text, **kw))
        where = f"{shape} {fmt} {mode} {kind} compiled={compiled}\n{d}\nran: {ran}"
        assert ran, where
        assert ran[0] is d.route, where
        if d.inner is not None and d.route is fr.Route.BLOCKS:
            assert d.inner.route in ran or d.inner.rerun in ran, where
        if d.route not in (fr.Route.BLOCKS, fr.Route.CHUNK_TREES, fr.Route.FP64_ROWS):  # what explain says of reruns
            assert set(ran[1:]) <= ({d.rerun} if d.rerun is not fr.Route.BLOCKS else set(fr.Route)), where
        seen_routes.update(ran)
    same = _same(results[0], results[1])
    assert same.all(), f"{shape} {fmt} {mode} {kind}: compiled != numpy at {np.flatnonzero(~same)[:8]}"
    if mode == "stochastic":
        if alg == "plain" and inp == fmt and shape != "one_worker":  # no conversion of the inputs: only additions
            key = int(np.random.default_rng(3).integers(0, 2**63))
            for j in range(min(EDGE, m)):
                tree = _element_plan(plan, j, m)
                want = sr_tree(tree.root, X[:, j].astype(np.float64), fmt, key, j)
                assert _same(results[0][j : j + 1], np.array([want])).all(), f"{shape} {fmt} {kind}: column {j}"
        return
    for j in range(min(EDGE, m)):
        kwr = dict(input=inp, accumulate=fmt, rounding=mode)
        if alg in ("binned", "exact"):
            if not np.isfinite(X[:, j]).all() or alg == "binned":
                continue  # (binned and exact have their own Fraction tests; only the exact sum is checked here)
            want = fr.exact_sum(fr.round_to(X[:, [j]], fmt)).round(fmt, mode)
        elif alg == "kahan":
            continue  # (compensated sums: tests/test_compensated.py against Fractions)
        else:
            want = fr.reduce_reference(X[:, [j]], _element_plan(plan, j, m), **kwr)
        assert _same(results[0][j : j + 1], want).all(), f"{shape} {fmt} {mode} {kind}: column {j} {X[:, j]}"


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("shape", list(SHAPES))
def test_route_runs_as_decided_with_the_reference_bits(shape: str) -> None:
    for fmt in FORMATS:
        for mode in MODES:
            for kind in ("finite", "overflow", "special"):
                _check(shape, fmt, mode, kind, set())


def test_every_route_is_exercised() -> None:
    """Every member of the route table is decided by the cases above and runs: a case that decides a route not
    yet run is reduced here under ``fr.trace_routes`` on the edge data (finite, overflow, NaN/Inf: a rerun runs
    only when the data refuse its route), whatever else ran in this process."""
    decided: set[fr.Route] = set()
    ran: set[fr.Route] = set()
    for shape, (text, n, m, alg, inp) in SHAPES.items():
        for fmt in FORMATS:
            X = _data(inp or fmt, n, m, "finite", 0)
            for mode in MODES:
                for compiled in (True, False):
                    kw = dict(input=inp or fmt, accumulate=fmt, rounding=mode, algorithm=alg, seed=3)
                    with jit.disabled() if not compiled else _nothing():
                        d = fr.explain(X, text, **kw)
                        new = {d.route} | ({d.inner.route} if d.inner is not None else set()) | {d.rerun}
                        new -= {None}
                        decided |= new  # type: ignore[arg-type]
                        for kind in ("finite", "overflow", "special"):
                            if not new - ran or (alg == "binned" and fmt == "fp64"):  # (binned fp64: refused)
                                break
                            with fr.trace_routes() as seen:
                                fr.reduce(_data(inp or fmt, n, m, kind, len(shape)), text, **kw)
                            ran |= set(seen)
    missing = set(fr.Route) - decided
    assert not missing, f"routes no case decides: {sorted(r.value for r in missing)}"
    assert not set(fr.Route) - ran, f"routes decided but never run: {sorted(r.value for r in set(fr.Route) - ran)}"


def test_explain_says_what_and_why() -> None:
    X = np.ones((64, 4096), np.float32)
    text = str(fr.explain(X, "sequential", input="bf16", accumulate="bf16"))
    assert "route:   wide_left" in text
    assert "bf16 accumulator, nearest_even" in text
    assert "kind 1" in text
    with jit.disabled():
        text = str(fr.explain(X, "sequential", input="bf16", accumulate="bf16"))
    assert "route:   blocks" in text
    assert "numpy_fast" in text
    ring = fr.explain(X, "ring", input="bf16", accumulate="bf16")
    assert ring.route is fr.Route.RING_ROWS
    assert ring.rerun is fr.Route.BLOCKS  # Veltkamp's float32 rounding leaves sums near 2**128 to the blocks
    ring = fr.explain(X, "ring", input="bf16", accumulate="bf16", rounding="stochastic", seed=1)
    assert ring.route is fr.Route.SEGMENT_FOLDS  # stochastic rounding draws by element: segment by segment
    assert ring.rerun is fr.Route.BLOCKS
    assert fr.explain(X, "sequential", accumulate="fp32").rerun is None  # native additions answer every sum


def test_explain_says_when_scaled_inputs_run_in_column_blocks() -> None:
    """An average that scales every input runs in column blocks (``engine._in_blocks``): explain gives a block's
    route (its columns, on one thread), the block width and the threads the blocks spread over; a narrow array, or
    no scaling, runs at once and says nothing of blocks."""
    from fpreduce.core import engine

    X = np.ones((64, 1 << 16), np.float32)
    w = engine._block_width(64)
    dec = fr.explain(X, "sequential", input="bf16", accumulate="bf16", average="premultiply", threads=2)
    assert (dec.blocks, dec.threads, dec.route) == (w, 2, fr.Route.WIDE_LEFT)
    assert f"64 x {w}" in " ".join(dec.why)  # the block's shape, not the whole array's
    assert dec.to_dict()["blocks"] == w
    assert f"blocks:  {w} columns at a time" in str(dec)
    for at_once in (
        fr.explain(X, "sequential", input="bf16", accumulate="bf16", threads=2),
        fr.explain(X[:, : 2 * w - 1], "sequential", input="bf16", accumulate="bf16", average="premultiply"),
    ):
        assert at_once.blocks == 0
        assert "blocks" not in at_once.to_dict()
        assert "blocks:" not in str(at_once)


@pytest.mark.parametrize("fmt", ["bf16", "tf32", "fp16", "fp8_e5m2"])
@pytest.mark.parametrize(("plan", "m"), [("sequential", 3), ("sequential", 2100), ("pairwise", 2100), ("ring", 2100)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_stochastic_rounding_overflows_at_the_top_with_its_probability(fmt, plan, m, sign):
    """top + half an ulp of the top binade lies halfway between the top and the overflow threshold: stochastic
    rounding gives ±Inf with probability 1/2, in every element independently, compiled as in numpy. (The float32
    kernels once took the upper neighbour 2**128 for Inf when the sum was negative: never -Inf.)"""
    f = fr.get_format(fmt)
    X = np.zeros((4, m), np.float32)
    X[0], X[1] = sign * f.max_finite, sign * 2.0 ** (f.emax - f.precision)
    kw = dict(input=fmt, accumulate=fmt, rounding="stochastic", seed=11)
    got = fr.reduce(X, plan, **kw)
    with jit.disabled():
        assert _same(got, fr.reduce(X, plan, **kw)).all()
    over = np.isinf(got)
    assert np.all(got[~over] == sign * f.max_finite)
    assert np.all(got[over] == sign * np.inf)
    if m > 1000:  # binomial(m, 1/2): 0.4 .. 0.6 is more than 9 standard deviations wide
        assert 0.4 < over.mean() < 0.6, over.mean()

"""Hypothesis strategies for testing reductions: formats, values, arrays, plans, problems.

For fpreduce's own property tests and for users testing their own reduction code
against the bit-exact emulation. Needs hypothesis (``pip install 'fpreduce[test]'``).

Every value drawn is exactly representable in its format. Draws are weighted
towards the cases where summation order matters or implementations go wrong:
values that create ties (powers of two and short odd significands, so that one
addend is half an ulp, or 1.5 ulps, of another), all-ones significands (carry
propagation), subnormals, the extremes (max finite, smallest subnormal, smallest
normal), -0.0; arrays add columns built for cancellation (x, -x pairs) and
swamping (one large value, many values near half its ulp).

Example, a user's test of their own float32 reduction (a parameter server adding
the workers' rows one after another)::

    import numpy as np
    from hypothesis import given
    import fpreduce as fr
    from fpreduce import strategies as fst

    def my_sum(X):
        acc = X[0].copy()
        for row in X[1:]:
            acc = acc + row
        return acc

    @given(fst.arrays("fp32", fst.shapes(), max_magnitude=2.0**100))
    def test_my_sum_is_a_left_fold(X):
        want = fr.reduce(X, "sequential")  # bit-exact left fold, float32
        assert (my_sum(X).view(np.uint32) == want.view(np.uint32)).all()

The same test with ``np.sum(X, axis=0)`` in place of ``my_sum`` is false: for a
single column numpy adds with 8 interleaved accumulators from 8 rows on, and it
starts from +0.0 (a column of -0.0 sums to +0.0). With ``fst.shapes(elements=(1,
1))`` hypothesis finds it within a few hundred examples and shrinks it to 1.0 and
seven addends of half its ulp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

try:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as e:  # pragma: no cover - exercised only without hypothesis
    raise ImportError("fpreduce.strategies needs hypothesis; install it with: pip install 'fpreduce[test]'") from e

from fpreduce import plans as _plans
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import FORMATS, Format, from_bits, get_format, to_bits
from fpreduce.core.rounding import round_to
from fpreduce.plans import RANDOM_TREE, tree_from_gaps

__all__ = [
    "FAMILIES",
    "Problem",
    "arrays",
    "formats",
    "permutations",
    "plans",
    "problems",
    "shapes",
    "values",
    "worker_counts",
]

# The fallback when fpreduce.plans has no FAMILIES tuple.
FAMILIES: tuple[str, ...] = ("sequential", "reverse", "pairwise", "ring", RANDOM_TREE)


def formats(*, exclude: Sequence[str] = ()) -> st.SearchStrategy[str]:
    """Format names (``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8_e4m3``, ``fp8_e5m2``).

    Args:
        exclude: names to leave out (checked: a typo raises InvalidArgument).
    """
    drop = {get_format(x).name for x in exclude}
    names = [n for n in FORMATS if n not in drop]
    if not names:
        raise InvalidArgument("exclude= leaves no format to draw")
    return st.sampled_from(names)


def _limit(f: Format, max_magnitude: float | None) -> float:
    """The largest value of ``f`` not above ``max_magnitude`` (max finite by default)."""
    if max_magnitude is None:
        return f.max_finite
    if not max_magnitude >= 0:
        raise InvalidArgument(f"max_magnitude must be >= 0, got {max_magnitude!r}")
    return float(round_to(np.array([min(float(max_magnitude), f.max_finite)]), f, "toward_zero")[0])


def _pattern_key(f: Format, v: float) -> int:
    """Ordered key of a nonnegative value: its bit pattern without the padding bits."""
    return int(to_bits(v, f)) >> (f.bits - f.storage_bits)


def _from_key(f: Format, key: int, negative: bool) -> float:
    pattern = (key | (int(negative) << (f.storage_bits - 1))) << (f.bits - f.storage_bits)
    return float(from_bits(np.array([pattern], dtype=np.uint64), f)[0])


def _exponent_floor(v: float) -> int:
    return math.frexp(v)[1] - 1


def values(
    fmt: str | Format,
    *,
    allow_nan: bool = False,
    allow_infinity: bool = False,
    allow_subnormal: bool = True,
    max_magnitude: float | None = None,
) -> st.SearchStrategy[float]:
    """Single values exactly representable in ``fmt``, as Python floats.

    Branches (weighted towards the edge cases): the special values (±0.0, ±1,
    ±max finite, ±smallest subnormal, ±largest subnormal, ±smallest normal,
    1 ± 1 ulp); powers of two, favouring 2**-1, 2**0, 2**1 and a quarter, half and
    one ulp of 1 (``2**-p`` is half an ulp: a tie when added to 1); short odd and all-ones
    significands times a power of two (ties, 1.5 ulps, carries); subnormals; and any
    finite value (a uniform bit pattern).

    Args:
        fmt: format name or Format.
        allow_nan: also draw NaN.
        allow_infinity: also draw ±Inf (formats with Inf only).
        allow_subnormal: draw subnormals (±0 is always possible).
        max_magnitude: draw only ``|v| <= max_magnitude`` (e.g. to rule out overflow
            of a sum); defaults to the format's max finite value.
    """
    f = get_format(fmt)
    top = _limit(f, max_magnitude)
    p, qmin = f.precision, _exponent_floor(f.smallest_subnormal)
    if not allow_subnormal:
        qmin = f.emin - p + 1
    emin_v = f.emin if not allow_subnormal else qmin  # smallest power of two drawn
    emax_v = _exponent_floor(top) if top > 0 else emin_v - 1

    def ok(v: float) -> bool:
        sub = 0 < abs(v) < f.smallest_normal
        return abs(v) <= top and (allow_subnormal or not sub)

    one_ulp = 2.0 ** (1 - p)
    specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f.max_finite,
        -f.max_finite,
        f.smallest_subnormal,
        -f.smallest_subnormal,
        f.smallest_normal - f.smallest_subnormal,
        f.smallest_normal,
        -f.smallest_normal,
        1.0 + one_ulp,
        1.0 - one_ulp / 2,
        2.0 - one_ulp,
    ]
    specials = [v for v in specials if ok(v)] or [0.0, -0.0]
    specials += [v for v in (-0.0, 0.0, f.max_finite, f.smallest_subnormal, f.smallest_normal) if ok(v)]
    branches: list[st.SearchStrategy[float]] = [_weighted(st.sampled_from(specials), 3)]
    signs = st.sampled_from([1.0, -1.0])
    if emax_v >= emin_v:
        # 1 and its neighbours, and a quarter, half and one ulp of 1: ties with values near 1
        near = [e for e in sorted({-p - 1, -p, 1 - p, -1, 0, 1}) if emin_v <= e <= emax_v] or [emax_v]
        exps = st.sampled_from(near)
        anywhere = st.sampled_from(range(emin_v, emax_v + 1))  # uniform: no bias to small ints
        branches.append(_weighted(st.builds(lambda s, e: s * 2.0**e, signs, exps), 2))
        branches.append(st.builds(lambda s, e: s * 2.0**e, signs, anywhere))
        sigs = sorted({1, 3, 5, 7, 2**p - 1, 2 ** (p - 1) + 1, 2**p - 3} - {0})
        branches.append(_weighted(_scaled(sigs, qmin, top, exps).filter(ok), 2))
    if allow_subnormal and top >= f.smallest_subnormal:
        kmax = 2 ** (p - 1) - 1 if top >= f.smallest_normal else int(top / f.smallest_subnormal)
        branches.append(st.builds(lambda k, s: s * k * f.smallest_subnormal, st.integers(1, kmax), signs))
    maxkey = _pattern_key(f, top) if top > 0 else 0
    lowkey = 0 if allow_subnormal else _pattern_key(f, f.smallest_normal)
    if maxkey >= lowkey:
        # exponent field uniform, fraction from hypothesis' integers (short fractions often)
        fb = f.fraction_bits
        fields = st.sampled_from(range(lowkey >> fb, (maxkey >> fb) + 1))
        keys = st.builds(lambda e, m: min(max((e << fb) | m, lowkey), maxkey), fields, st.integers(0, 2**fb - 1))
        anyv = st.builds(lambda k, neg: _from_key(f, k, neg), keys, st.booleans())
        branches.append(_weighted(anyv, 3))
    if allow_nan:
        branches.append(st.just(math.nan))
    if allow_infinity and f.has_inf:
        branches.append(st.sampled_from([math.inf, -math.inf]))
    return st.one_of(branches)


def _weighted(s: st.SearchStrategy[float], k: int) -> st.SearchStrategy[float]:
    """``s`` as ``k`` distinct branches of ``one_of`` (which draws branches uniformly)."""
    return st.one_of([s] + [s.map(float) for _ in range(k - 1)])


def _scaled(sigs: list[int], qmin: int, top: float, exps: st.SearchStrategy[int]) -> st.SearchStrategy[float]:
    """``±m * 2**q`` for a significand ``m < 2**p``, near the exponents of ``exps`` or anywhere."""

    @st.composite
    def draw_one(draw: Any) -> float:
        m = draw(st.sampled_from(sigs))
        qmax = _exponent_floor(top / m) if top >= m * 2.0**qmin else qmin - 1
        if qmax < qmin:
            return 0.0
        # place the leading bit near a favoured exponent e: q = e - bit_length(m) + 1
        e = draw(exps)
        q = draw(st.one_of(st.just(e - m.bit_length() + 1), st.integers(qmin, qmax)))
        q = min(max(q, qmin), qmax)
        while q > qmin and m * 2.0**q > top:
            q -= 1
        return draw(st.sampled_from([1.0, -1.0])) * m * 2.0**q

    return draw_one()


def shapes(
    *, workers: st.SearchStrategy[int] | None = None, elements: tuple[int, int] = (1, 8)
) -> st.SearchStrategy[tuple[int, int]]:
    """(workers, elements) shapes; workers from :func:`worker_counts` (1..16) by default."""
    w = worker_counts(1, 16) if workers is None else workers
    return st.tuples(w, st.integers(*elements))


def arrays(
    fmt: str | Format,
    shape: tuple[int, int] | st.SearchStrategy[tuple[int, int]],
    *,
    allow_nan: bool = False,
    allow_infinity: bool = False,
    allow_subnormal: bool = True,
    max_magnitude: float | None = None,
) -> st.SearchStrategy[NDArray[np.floating]]:
    """(workers, elements) arrays of values of ``fmt``: float32 (float64 for fp64).

    Each column is plain (independent :func:`values`), or built for cancellation
    (a value and its negation in pairs, in shuffled rows), or for swamping (one
    power of two ``2**E`` and values near half its ulp, where every addition order
    rounds differently), or for ties (one value near 1, the rest small multiples of
    half its ulp). Options as for :func:`values`; ``max_magnitude`` bounds every
    entry.
    """
    f = get_format(fmt)
    top = _limit(f, max_magnitude)
    vals = values(
        f,
        allow_nan=allow_nan,
        allow_infinity=allow_infinity,
        allow_subnormal=allow_subnormal,
        max_magnitude=max_magnitude,
    )
    shape_st = shape if isinstance(shape, st.SearchStrategy) else st.just(tuple(shape))

    @st.composite
    def draw_array(draw: Any) -> NDArray[np.floating]:
        n, m = draw(shape_st)
        if n < 1 or m < 0:
            raise InvalidArgument(f"shape must be (workers >= 1, elements >= 0), got {(n, m)}")
        X = draw(hnp.arrays(f.value_dtype, (n, m), elements=vals))
        for c in range(m):
            kind = draw(st.sampled_from(["plain", "plain", "cancel", "swamp", "tie"]))
            if kind == "cancel" and n >= 2:
                half = n // 2
                rows = draw(st.permutations(range(n)))
                X[rows[half : 2 * half], c] = -X[rows[:half], c]
            elif kind in ("swamp", "tie"):
                col = _structured_column(draw, f, n, top, kind, allow_subnormal)
                if col is not None:
                    X[:, c] = col
        return X

    return draw_array()


def _structured_column(
    draw: Any, f: Format, n: int, top: float, kind: str, allow_subnormal: bool
) -> NDArray[np.floating] | None:
    """One large value and n - 1 addends near half its ulp (swamping, ties), rows shuffled.

    ``swamp``: the large value is ``2**E`` for a drawn E. ``tie``: an odd significand
    (1, 3 or all ones) with its leading bit at ``2**0`` where the range allows.
    Addends are ``±k * 2**(E - p + j)`` for k in {1, 3, 5} and j in -2..1: half an
    ulp of the large value and its neighbours, so that each addition order rounds
    (and breaks ties) differently.
    """
    p = f.precision
    qmin = _exponent_floor(f.smallest_subnormal) if allow_subnormal else f.emin
    low = qmin + p + 3  # the smallest addend k * 2**(E - p - 2) stays representable
    if top <= 0 or _exponent_floor(top) < low:
        return None
    high = _exponent_floor(top)
    if kind == "swamp":
        E = draw(st.integers(low, high))
        big = 2.0**E
    else:
        E = min(max(0, low), high)
        msig = draw(st.sampled_from([1, 3, 2**p - 1]))
        big = msig * 2.0 ** (E - msig.bit_length() + 1)
        if big > top:
            big = 2.0**E
    ks = [1, 1, 1, 3] + ([5] if p >= 4 else [])
    out = np.empty(n, dtype=f.value_dtype)
    out[0] = big * draw(st.sampled_from([1.0, -1.0]))
    for i in range(1, n):
        k = draw(st.sampled_from(ks))
        j = draw(st.integers(-2, 1))
        out[i] = draw(st.sampled_from([1.0, -1.0])) * k * 2.0 ** (E - p + j)
    rows = draw(st.permutations(range(n)))
    return out[list(rows)]


def worker_counts(min_value: int = 1, max_value: int = 64) -> st.SearchStrategy[int]:
    """Worker counts in ``[min_value, max_value]``, favouring powers of two and their neighbours.

    Collectives special-case non-powers of two (recursive doubling's pre-step,
    Rabenseifner), so 2**k - 1, 2**k and 2**k + 1 are drawn often.
    """
    if min_value < 1 or max_value < min_value:
        raise InvalidArgument(f"need 1 <= min_value <= max_value, got {min_value}, {max_value}")
    special = sorted(
        {
            v
            for k in range(0, max_value.bit_length() + 1)
            for v in (2**k - 1, 2**k, 2**k + 1)
            if min_value <= v <= max_value
        }
    )
    ints = st.integers(min_value, max_value)
    if not special:
        return ints
    favoured = st.sampled_from(special)
    return st.one_of(favoured, favoured.map(int), favoured.map(int), ints)


def permutations(n: int) -> st.SearchStrategy[NDArray[np.int64]]:
    """Permutations of ``0..n-1`` as int64 arrays (shrinking towards the identity)."""
    if n < 1:
        raise InvalidArgument(f"n must be >= 1, got {n}")
    return st.permutations(range(n)).map(lambda p: np.array(p, dtype=np.int64))


_PARAMETERS: dict[str, tuple[str, ...]] = {
    "kary": ("kary:2", "kary:3", "kary:4"),
    "blocked": ("blocked:1", "blocked:2", "blocked:4", "blocked:8"),
    "ring": ("ring:nccl", "ring:mpich", "ring:ompi", "ring:gloo"),
    "tree": ("tree:nccl:1", "tree:nccl:2", "tree:nccl:4", "tree:nccl:8"),
    "hier": ("hier:1", "hier:2", "hier:4", "hier:8"),
}


def _available(n: int, families: Sequence[str]) -> list[str]:
    """Plan texts for ``n`` workers: bare families expanded to typical parameters, then
    those that parse (e.g. ``hier:8`` needs 8 | n)."""
    ok = []
    for name in families:
        for text in _PARAMETERS.get(name, (name,)):
            if text == RANDOM_TREE:
                ok.append(text)
                continue
            try:
                _plans.parse(text, n)
            except InvalidArgument:
                continue
            ok.append(text)
    return ok


def _default_families() -> tuple[str, ...]:
    """Every family of ``fpreduce.plans.FAMILIES`` (or ``FAMILIES`` here) and ``random_tree``."""
    fams = tuple(getattr(_plans, "FAMILIES", FAMILIES))
    return fams + (() if RANDOM_TREE in fams else (RANDOM_TREE,))


def plans(n: int | st.SearchStrategy[int], families: Sequence[str] | None = None) -> st.SearchStrategy[Any]:
    """Plans over ``n`` workers: a family's plan relabelled by a drawn permutation.

    Args:
        n: worker count or a strategy of them.
        families: plan texts for :func:`fpreduce.plans.parse` (``pairwise``,
            ``ring:gloo``, ``kary:4``, ...), bare family names with parameters
            (``kary``, ``blocked``, ``ring``, ``tree``, ``hier``: typical
            parameters are drawn) and ``random_tree`` (random shape: adjacent
            nodes of a permuted leaf list merged in a drawn order). Default:
            every family of ``fpreduce.plans.FAMILIES`` and ``random_tree``.
            Texts that do not parse for a drawn ``n`` (``hier:8`` for n = 6) are
            skipped.
    """
    fams = tuple(families) if families is not None else _default_families()
    if not fams:
        raise InvalidArgument("families= is empty")
    if families is not None and not isinstance(n, st.SearchStrategy):
        for name in fams:
            if not _available(int(n), [name]):
                _plans.parse(name, int(n))  # fail early, with the parser's message
    n_st = n if isinstance(n, st.SearchStrategy) else st.just(int(n))

    @st.composite
    def draw_plan(draw: Any) -> Any:
        k = draw(n_st)
        names = _available(k, fams)
        if not names:
            raise InvalidArgument(f"none of the families {fams} gives a plan for n={k}")
        name = draw(st.sampled_from(names))
        perm = draw(permutations(k))
        if name == RANDOM_TREE:
            gaps = draw(permutations(k - 1)) if k > 1 else np.zeros(0, dtype=np.int64)
            return tree_from_gaps(perm, gaps)
        return _plans.parse(name, k).relabel(perm)

    return draw_plan()


class Problem(NamedTuple):
    """A reduction problem: sum the rows of ``X`` along ``plan``, ``input`` -> ``accumulate``."""

    X: NDArray[np.floating]
    plan: Any
    input: str
    accumulate: str


def problems(
    *,
    workers: st.SearchStrategy[int] | None = None,
    elements: tuple[int, int] = (1, 8),
    inputs: st.SearchStrategy[str] | None = None,
    accumulators: st.SearchStrategy[str] | None = None,
    families: Sequence[str] | None = None,
    allow_overflow: bool = True,
) -> st.SearchStrategy[Problem]:
    """Whole problems ``(X, plan, input, accumulate)`` for property tests of a reduction.

    Args:
        workers: strategy of worker counts (default ``worker_counts(1, 16)``).
        elements: inclusive range of the number of columns.
        inputs, accumulators: strategies of format names (default: every format).
        families: plan families, as for :func:`plans`.
        allow_overflow: if False, entries are bounded so that no partial sum can
            overflow the accumulator (``|x| <= max_finite / (2 n)``).

    >>> from hypothesis import given, settings
    >>> import fpreduce as fr
    >>> @settings(max_examples=10)
    ... @given(problems())
    ... def test_runs(prob):
    ...     assert fr.reduce(prob.X, prob.plan, input=prob.input, accumulate=prob.accumulate).shape == (
    ...         prob.X.shape[1],)
    >>> test_runs()
    """
    w = worker_counts(1, 16) if workers is None else workers
    ins = formats() if inputs is None else inputs
    accs = formats() if accumulators is None else accumulators

    @st.composite
    def draw_problem(draw: Any) -> Problem:
        n = draw(w)
        m = draw(st.integers(*elements))
        fin, facc = draw(ins), draw(accs)
        cap = None
        if not allow_overflow:
            cap = min(get_format(fin).max_finite, get_format(facc).max_finite) / (2 * n)
        X = draw(arrays(fin, (n, m), max_magnitude=cap))
        plan = draw(plans(n, families))
        return Problem(X, plan, fin, facc)

    return draw_problem()

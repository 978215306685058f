"""Dot products and matrix-vector products, bit-exactly, along any plan of one tree.

``dot(a, b, plan)`` sums the products ``a_i * b_i`` along ``plan`` (a left fold by
default), every addition rounded once to the accumulator format. The inputs are first
rounded to the input format (to nearest, or stochastically with
:func:`fpreduce.core.primitives.round_inputs`' counter-based generator). Products are:

* ``products="fused"``: exact (a product of two values of at most 26 bits is exact in
  float64) and fused into the addition that consumes it, one rounding of ``acc + a*b``
  as an FMA computes it. At a node of the tree whose children are a leaf and a partial
  sum, the leaf's product is fused; at a node of two leaves the left product is
  rounded on its own first (``fma(a_r, b_r, a_l * b_l)``), so a left fold is the FMA
  chain ``acc = a_0 b_0; acc = fma(a_i, b_i, acc)``, and one term gives its rounded product.
* ``products="<format>"``: each product rounded once to that format (in the rounding
  mode), then summed; an addend wider than the accumulator is added exactly and
  the sum rounded once (``addends="wide"`` of :func:`fpreduce.core.primitives.partial_sums`).
  With a product format that fits the accumulator the bits are
  ``reduce(round(a*b), plan, ...)``'s.

Stochastic rounding draws from the engine's counter-based generator: the t-th
addition (evaluation order) of element ``e`` counter t, a product rounded to its
format counter ``2**60 + i``, a left leaf rounded on its own ``2**62 + i``; the
inputs ``a`` and ``b`` counters ``2**61 + i`` and ``2**61 + 2**40 + i``. A left fold
runs compiled (:mod:`fpreduce.core._steps`), any other tree too (its in-place program, column by
column), or in numpy without numba (the same bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.dtypes import as_float_array
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.fpflags import own_flags
from fpreduce.core._fastpath import _left_spine, _program
from fpreduce.core._steps import FIRST_T, add_any_numpy, fold_rows, tree_kernel
from fpreduce.core.formats import Format, as_native, get_format, holds, input_format
from fpreduce.core.grid import grid_of
from fpreduce.core.options import Result, get_result
from fpreduce.core.primitives import INPUT_T, _sr_inputs, as_rows, stream_key
from fpreduce.core.rounding import Mode, get_mode, round_to
from fpreduce.plans import Plan, Tree, fold, parse

__all__ = ["dot", "matvec"]

PRODUCT_T = 1 << 60  # counter of the product in row i, rounded to its format: PRODUCT_T + i


def _inputs(a: ArrayLike, fin: Format, sr: bool, key: int, offset: int, base: int) -> np.ndarray:
    """An operand as float64 values of ``fin``, shape (terms, columns): to nearest, or stochastically."""
    A = as_rows(a, "dot")
    if sr:  # an operand of one column is shared by every column (matvec's x): element 0
        return _sr_inputs(A, fin, key, offset if A.shape[1] > 1 else 0, base)
    return np.asarray(round_to(A, fin), dtype=np.float64)


def _leaf_values(P: np.ndarray, prod: str, m: Mode, key: int, offset: int) -> np.ndarray:
    """The leaves: exact products (fused) or products rounded once to their format."""
    if prod == "fused":
        return P
    fp = get_format(prod)
    if m is Mode.STOCHASTIC:
        return _sr_inputs(P, fp, key, offset, PRODUCT_T)
    return np.asarray(round_to(P, fp, m), dtype=np.float64)


@own_flags
def dot(
    a: ArrayLike,
    b: ArrayLike,
    plan: Plan | str = "sequential",
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    products: str = "fused",
    seed: int | np.random.Generator | None = None,
    input_rounding: str | Mode = "nearest_even",
    offset: int = 0,
    result: Result | str = "float",
) -> NDArray[np.floating]:
    """The dot products of the columns of ``a`` and ``b`` (terms, columns; 1-D: one), summed along ``plan``.

    Args:
        a, b: float arrays that broadcast to shape (terms,) or (terms, columns).
        plan: a plan of one tree for every column (``Plan``, or text such as
            ``"sequential"``, ``"pairwise"``, ``"((0,1),(2,3))"``).
        input: the inputs' format (at most 26 bits for fused products; fp64 inputs
            take ``products="fp64"`` to nearest: float64's multiply). Default: a's and b's
            own format (:func:`fpreduce.reduce`'s ``input``; float64 arrays are fp64), the
            wider when one holds the other's values, fp32 when neither does (bf16 and fp16).
        accumulate: every addition's format.
        rounding: the mode of every rounding (products, additions).
        products: ``fused`` or a format name (see the module).
        seed: for stochastic rounding (rounding or input_rounding).
        input_rounding: ``nearest_even`` or ``stochastic``.
        offset: column j is element ``offset + j`` of the generators (an operand of
            one column, broadcast to every column, rounds as element 0).
        result: ``float`` or ``native`` (the accumulator's own dtype; a torch tensor when
            ``a`` is one), as :func:`fpreduce.reduce`'s.

    Returns:
        float32 (float64 for an fp64 accumulator), shape (columns,) (0-d for 1-D inputs).

    >>> import numpy as np
    >>> a, b = np.array([-1.125, 1.0625]), np.array([1.0, 1.0625])  # 1.0625**2 = 1.125 + 2**-8
    >>> kw = dict(input="bf16", accumulate="bf16")
    >>> float(dot(a, b, **kw)), float(dot(a, b, products="bf16", **kw))  # FMA keeps the 2**-8
    (0.00390625, 0.0)
    """
    fin, fa, m = _input_of(a, b, input), get_format(accumulate), get_mode(rounding)
    native = get_result(result) == "native"
    sr_in = get_mode(input_rounding)
    if sr_in not in (Mode.NEAREST_EVEN, Mode.STOCHASTIC):
        raise InvalidArgument(f"input_rounding must be nearest_even or stochastic, got {sr_in.value!r}")
    if products != "fused":
        get_format(products)
    if fin.precision > 26 and not (products == "fp64" and m is Mode.NEAREST_EVEN):
        given = "" if input is not None else " (input defaults to the arrays' own format: float64 is fp64)"
        raise InvalidArgument(
            f"products of {fin.name} inputs{given} are exact in float64 only up to 26 bits: use input='fp32' or "
            f"products='fp64' with rounding='nearest_even' (got products={products!r}, rounding={m.value!r})"
        )
    key, _ = stream_key(seed, m is Mode.STOCHASTIC or sr_in is Mode.STOCHASTIC)
    sr = sr_in is Mode.STOCHASTIC
    A, B = _inputs(a, fin, sr, key, offset, INPUT_T), _inputs(b, fin, sr, key, offset, INPUT_T + (1 << 40))
    with np.errstate(over="ignore", invalid="ignore"):
        P = A * B  # exact for inputs of at most 26 bits
    n = P.shape[0]
    L = _leaf_values(P, products, m, key, offset)
    if isinstance(plan, str) and plan.strip() == "sequential":  # no tree of n leaves to build
        res = fold_rows(L, fa, m, key, offset, keep=False)[0]
    else:
        p = parse(plan, n) if isinstance(plan, str) else plan
        if not isinstance(p, Plan):
            raise InvalidArgument(f"dot takes a plan of one tree for every element, got {type(p).__name__}")
        if p.n != n:
            raise InvalidArgument(f"plan has {p.n} leaves but there are {n} products")
        spine = _left_spine(p.root, n)
        if spine is not None and np.array_equal(spine, np.arange(n)):
            res = fold_rows(L, fa, m, key, offset, keep=False)[0]
        else:
            res = _fold_tree(p.root, L, fa, m, key, offset)
    out = np.asarray(res, dtype=np.float64).astype(fa.value_dtype)
    out = out.reshape(()) if np.ndim(a) <= 1 and np.ndim(b) <= 1 else out
    return as_native(out, fa, a) if native else out  # type: ignore[no-any-return]


def _input_of(a: ArrayLike, b: ArrayLike, input: object | None) -> Format:
    """The inputs' format of ``dot(a, b)``: ``input`` (checked against a's and b's own formats as
    :func:`fpreduce.core.formats.input_format` checks it), else their own: the wider when one holds the
    other's values (bf16 and fp32: fp32), fp32 when neither does (bf16 and fp16, as torch promotes them)."""
    fa = input_format(a, as_float_array(a, "dot: a must be a float array, got {dtype}"), input, "a")
    fb = input_format(b, as_float_array(b, "dot: b must be a float array, got {dtype}"), input, "b")
    if input is not None or holds(fa, fb):
        return fa
    return fb if holds(fb, fa) else get_format("fp32")


def _fold_tree(root: Tree, L: np.ndarray, f: Format, m: Mode, key: int, offset: int) -> np.ndarray:
    """The tree's sums of the leaves ``L`` (products): compiled, or :func:`_fold_tree_numpy` (the same bits)."""
    kern = tree_kernel()
    n, d = L.shape
    if kern is None or n < 2:
        return _fold_tree_numpy(root, L, f, m, key, offset)
    prog, nbuf, top = _program(root, n)  # leaves are rows of L; ops in the evaluation order of plans.fold
    out = np.empty(d)
    with np.errstate(over="ignore", invalid="ignore"):
        kern(
            np.ascontiguousarray(L),
            np.array(prog, dtype=np.int64).reshape(-1, 3),
            top,
            out,
            np.empty(max(nbuf, 1)),
            grid_of(f, m),
            np.uint64(key),
            int(offset),
        )
    return out


def _fold_tree_numpy(root: Tree, L: np.ndarray, f: Format, m: Mode, key: int, offset: int) -> np.ndarray:
    """The tree's sums of the leaves ``L``, vectorized over the columns (see the module for the rules)."""
    d = L.shape[1]
    e = np.arange(offset, offset + d, dtype=np.uint64)
    k = np.uint64(key)
    count = [0]

    def alone(i: int) -> np.ndarray:  # a leaf rounded on its own: its addition to a zero of its sign
        x = L[i]
        return add_any_numpy(x, np.copysign(0.0, x), f, m, k, FIRST_T + i, e)

    def combine(x: Any, y: Any) -> tuple[str, Any]:
        if x[0] == "leaf" and y[0] == "leaf":
            u, v = alone(x[1]), L[y[1]]
        else:
            u = L[x[1]] if x[0] == "leaf" else x[1]
            v = L[y[1]] if y[0] == "leaf" else y[1]
        t = count[0]
        count[0] += 1
        return ("sum", add_any_numpy(u, v, f, m, k, t, e))

    with np.errstate(over="ignore", invalid="ignore"):
        res = fold(root, lambda i: ("leaf", i), combine)
        return alone(res[1]) if res[0] == "leaf" else res[1]


@own_flags
def matvec(
    A: ArrayLike,
    x: ArrayLike,
    plan: Plan | str = "sequential",
    **options: Any,
) -> NDArray[np.floating]:
    """``A @ x`` for A of shape (rows, terms): each row's dot product with ``x`` along ``plan``.

    Every option is :func:`dot`'s (``input``, ``accumulate``, ``rounding``,
    ``products``, ``seed``, ``input_rounding``, ``offset``, ``result``): row r of ``A`` is
    element ``offset + r``; ``x`` is one vector, rounded once (its element 0).

    >>> import numpy as np
    >>> A = np.array([[1.0, 2.0**-9, 2.0**-9], [1.0, 1.0, 1.0]])
    >>> matvec(A, np.ones(3), input="fp32", accumulate="bf16").tolist()  # float64 arrays are fp64 inputs
    [1.0, 3.0]
    """
    M = as_float_array(A, "matvec: A must be a float array, got {dtype}")
    if M.ndim != 2:
        raise InvalidArgument(f"matvec: A must have shape (rows, terms), got shape {M.shape}")
    v = as_float_array(x, "matvec: x must be a float array, got {dtype}")
    if v.ndim != 1 or v.shape[0] != M.shape[1]:
        raise InvalidArgument(f"matvec: x must have shape ({M.shape[1]},), got shape {v.shape}")
    native = get_result(options.pop("result", "float")) == "native"
    options["input"] = _input_of(A, x, options.get("input"))  # A's and x's own formats, before they are numpy's
    y = dot(M.T, v[:, None], plan, **options)
    return as_native(y, options.get("accumulate", "fp32"), A) if native else y  # type: ignore[no-any-return]

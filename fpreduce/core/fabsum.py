"""FABsum (Blanchard, Higham & Mary 2020): fast sums inside blocks, an accurate sum across them.

The n terms are cut into blocks of ``block`` consecutive terms (the last one shorter
when ``block`` does not divide n); each block is summed by a plain left fold in the
accumulator format, and the block sums by an accurate algorithm (``kahan`` by
default; ``neumaier``, ``exact``, or ``plain``), optionally in a wider format. The
error bound is ``(b + O(1)) u`` to first order with Kahan across the blocks: it no
longer grows with n (recursive summation's is ``(n - 1) u``), and its probabilistic
counterpart is about ``lam sqrt(b) u`` (Blanchard, Higham & Mary, "A class of fast and
accurate summation algorithms", SIAM J. Sci. Comput. 42(3), 2020).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.base.fpflags import own_flags
from fpreduce.core.engine import reduce
from fpreduce.core.formats import Format, as_native, get_format, input_format
from fpreduce.core.options import Result, get_result
from fpreduce.core.primitives import as_rows
from fpreduce.core.rounding import Mode, get_mode

__all__ = ["block_sums", "fabsum", "fabsum_bound"]


def _block_count(n: int, block: int) -> int:
    if not (isinstance(block, int | np.integer) and block >= 1):
        raise InvalidArgument(f"block must be an integer >= 1, got {block!r}")
    return -(-n // int(block))


def _generator(rounding: str | Mode, seed: int | np.random.Generator | None) -> np.random.Generator | None:
    if get_mode(rounding) is not Mode.STOCHASTIC:
        return None
    if seed is None:
        raise InvalidArgument("stochastic rounding needs seed= for reproducibility")
    return np.random.default_rng(seed)


@own_flags
def block_sums(
    X: ArrayLike,
    block: int,
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
) -> NDArray[np.floating]:
    """The plain left-fold sums of each block of ``block`` consecutive rows: shape (blocks, elements).

    Block c holds rows ``c * block .. min(n, (c + 1) * block) - 1`` (the last may be
    shorter); each is ``reduce(rows, "sequential", ...)`` with the same options.
    Stochastic rounding: the full blocks are one reduction whose element ``c * d + j``
    is block c of column j, the ragged block another, drawing from one generator.
    """
    A = as_rows(X, "block_sums")
    n, d = A.shape
    nb = _block_count(n, block)
    full = n // int(block)
    opts = dict(input=input_format(X, A, input), accumulate=accumulate, rounding=rounding)
    rng = _generator(rounding, seed)
    parts = []
    if full:
        Y = A[: full * block].reshape(full, block, d).transpose(1, 0, 2).reshape(block, full * d)
        parts.append(reduce(Y, "sequential", seed=rng, **opts).reshape(full, d))  # type: ignore[arg-type]
    if nb > full:
        parts.append(reduce(A[full * block :], "sequential", seed=rng, **opts).reshape(1, d))  # type: ignore[arg-type]
    return np.concatenate(parts, axis=0)


@own_flags
def fabsum(
    X: ArrayLike,
    block: int,
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
    across: str = "kahan",
    across_format: str | Format | None = None,
    result: Result | str = "float",
) -> NDArray[np.floating]:
    """FABsum of the rows of ``X`` (terms, elements): plain sums in blocks, ``across`` over the block sums.

    Args:
        X: shape (terms, elements) (or (terms,)).
        block: the block size b (>= 1; b >= n is a plain left fold, b = 1 is ``across`` alone).
        input, accumulate, rounding, seed: as :func:`fpreduce.reduce` (the blocks'; ``input``
            defaults to X's own format).
        across: the algorithm over the block sums, in order: ``kahan``, ``neumaier``,
            ``plain`` or ``exact`` (:func:`fpreduce.reduce`'s algorithms).
        across_format: the format of the sum across blocks (default ``accumulate``);
            the block sums enter it exactly when it is at least as wide.
        result: ``float`` or ``native`` (``across_format``'s own dtype; a torch tensor for a
            torch X), as :func:`fpreduce.reduce`'s.

    Returns:
        shape (elements,), float32 (float64 for an fp64 result).

    >>> import numpy as np
    >>> x = np.full(4096, 0.1, dtype=np.float32)
    >>> float(fabsum(x, 64, accumulate="bf16")[0]), float(fabsum(x, 4096, accumulate="bf16")[0])
    (394.0, 32.0)
    """
    fa, native = get_format(accumulate), get_result(result) == "native"
    fo = fa if across_format is None else get_format(across_format)
    rng = _generator(rounding, seed)  # one stream: the blocks draw first, then the sum across
    S = block_sums(X, block, input=input, accumulate=fa, rounding=rounding, seed=rng)
    y = reduce(S, "sequential", input=fa, accumulate=fo, rounding=rounding, seed=rng, algorithm=across)
    return as_native(y, fo, X) if native else y  # type: ignore[no-any-return]


def fabsum_bound(n: int, block: int, fmt: str | Format, across: str = "kahan") -> dict[str, float | None]:
    """First-order worst-case error bounds (relative to ``sum |x_i|``) of FABsum and of the plain fold.

    ``fabsum``: ``(b - 1) u`` inside the largest block plus the error of the sum across
    ``m = ceil(n / b)`` block sums: ``2 u`` for Kahan and Neumaier (Goldberg, Thm 8),
    ``u`` for the exact sum rounded once, ``(m - 1) u`` for a plain fold. ``recursive``:
    ``(n - 1) u``. A bound is None where it is not informative: 1 or more, or, for Kahan
    and Neumaier, where the neglected second-order term ``O(m u^2)`` is no longer below
    ``u`` (``m u >= 1``; in bf16 with b = 32 from n = 8192 on: the compensated sum of
    2**19 block sums does break down at n = 2**24, see replications/fabsum_error.py).
    """
    u = get_format(fmt).unit_roundoff
    m = _block_count(n, block)
    b = min(int(block), n)
    tail = {"kahan": 2 * u, "neumaier": 2 * u, "exact": u, "plain": (m - 1) * u}
    if across not in tail:
        raise InvalidArgument(f"across must be one of {sorted(tail)}, got {across!r}")
    fab = (b - 1) * u + (tail[across] if m > 1 else 0.0)
    second_order_ok = across not in ("kahan", "neumaier") or m * u < 1
    rec = (n - 1) * u
    return {"fabsum": fab if fab < 1 and second_order_ok else None, "recursive": rec if rec < 1 else None, "u": u}

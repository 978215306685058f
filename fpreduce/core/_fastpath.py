"""The engine's fast path: plain round-to-nearest folds of float32 blocks, in place.

Used by :func:`fpreduce.core.engine.reduce` for accumulators of fp32, bf16, tf32 and fp16
when the inputs need no conversion; any block that needs input rounding, holds
NaN/Inf or could overflow is recomputed by the general path, so the bits are the
same either way (tests/test_engine_fastpaths.py compares both with the Fraction
reference). Trees are compiled once per shape into in-place steps on reused buffers.
"""

from __future__ import annotations

import numpy as np

from fpreduce.core.arith import Program, _Arith, _Loader
from fpreduce.core.formats import Format
from fpreduce.plans import Tree, fold, sequential

_STRIP = 1 << 15  # elements gathered at a time (at least 64 columns): a strip of A and its indices stay in L2


def _gather_orders(A: np.ndarray, orders: np.ndarray, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
    """Y (n, hi-lo): Y[k, j] = A[orders[j, k], lo + j], C-contiguous (rows contiguous with ``out``).

    ``orders`` (hi-lo, n) is any integer array of valid worker indices
    (:meth:`PerElementPlan.orders` gives uint8 up to 256 workers). Gathered in
    strips of w = ``_STRIP // n`` columns (at least 64), which stay in L2: the
    strip of A is copied to a contiguous (n, w) buffer, its flat indices
    ``orders[j, k] * w + j`` are computed from ``orders[strip].T`` (uint16 when
    n * w <= 2^16), and one ``np.take`` fills the strip of Y. Y is
    ``out[:, :hi-lo]`` when ``out`` (n, >= hi-lo, A's dtype, contiguous rows) is
    given (a buffer reused from block to block: no fresh pages), else new.
    """
    n, width = A.shape[0], hi - lo
    S = orders.T
    Y = np.empty((n, width), dtype=A.dtype) if out is None else out[:, :width]
    if width == 0:
        return Y
    strip = min(max(64, _STRIP // n), width)
    it = np.uint16 if n * strip <= 1 << 16 else np.int32 if n * strip < 1 << 31 else np.intp  # narrow: fewer bytes
    bufs = None
    for s in range(0, width, strip):
        w = min(strip, width - s)
        if bufs is None or w != bufs[0].shape[1]:  # the first strip, and a short last one
            bufs = (np.empty((n, w), A.dtype), np.empty((n, w), A.dtype), np.empty((n, w), it), np.arange(w, dtype=it))
        src, part, flat, ramp = bufs
        np.copyto(src, A[:, lo + s : lo + s + w])
        np.multiply(S[:, s : s + w], w, out=flat, dtype=it, casting="unsafe")
        flat += ramp
        np.take(src.reshape(-1), flat, out=part, mode="wrap")  # indices are in range: wrap is a no-op
        Y[:, s : s + w] = part
    return Y


# Veltkamp splitting c = s * (2**(24-p) + 1), s <- c - (c - s) rounds every normal
# float32 s to nearest even on p bits (unbounded exponent), leaves values of p bits
# unchanged (subnormals included) and turns s of more than about 2**128 / 2**(24-p)
# (and Inf, NaN) into NaN: checked exhaustively over all 2**32 float32 patterns for
# p = 8 and p = 11, the only precisions it is used for.
_VELTKAMP_P = (8, 11)


def _program(shape: Tree | None, n: int) -> Program:
    """Compile a tree over slots into in-place ops ``(out, a, b)``: buf[out] = a + b.

    Operands >= 0 are slots (leaves), < 0 are buffers ``-1 - i``; returns (ops,
    number of buffers, root operand). A left child's buffer is reused in place, so
    a left fold needs one buffer and a balanced tree about log2(n).
    """
    if shape is None:
        shape = fold(sequential(n).root, lambda i: i, lambda a, b: (a, b))
    ops: list[tuple[int, int, int]] = []
    free: list[int] = []
    count = [0]

    def combine(a: int, b: int) -> int:
        if a < 0:
            out = a
            if b < 0:
                free.append(b)
        elif b < 0:
            out = b
        else:
            if free:
                out = free.pop()
            else:
                count[0] += 1
                out = -count[0]
        ops.append((out, a, b))
        return out

    root = fold(shape, lambda i: i, combine)
    return ops, count[0], root


def _left_spine(root: Tree, n: int) -> np.ndarray | None:
    """The leaf order of a left-deep tree (``((a, b), c), ...``), or None for any other tree."""
    rights: list[int] = []
    node = root
    while not isinstance(node, int):
        right = node[1]
        if not isinstance(right, int):
            return None
        rights.append(right)
        node = node[0]
    rights.append(node)
    return np.array(rights[::-1], dtype=np.int64)


def fold_order(root: Tree) -> np.ndarray | None:
    """The leaves in the order a left fold adds them, for a left-deep tree or a right-deep one, else None.

    A right-deep tree ``a + (b + (c + d))`` is the left fold of ``d, c, b, a`` with each
    addition's operands swapped: IEEE addition is commutative, in every rounding mode
    (stochastic rounding too: it rounds the exact sum), so the bits are the same.
    Walks the spine only: O(depth) for a tree that is neither.
    """
    for side in (0, 1):
        spine: list[int] = []
        node = root
        while not isinstance(node, int):
            leaf = node[1 - side]
            if not isinstance(leaf, int):
                break
            spine.append(leaf)
            node = node[side]
        if isinstance(node, int):
            spine.append(node)
            return np.array(spine[::-1], dtype=np.int64)
    return None


def _program_of(ar: _Arith, shape: Tree | None, n: int) -> Program:
    """``_program(shape, n)``, compiled once per shape object during one reduction (kept in ``ar``)."""
    hit = ar.programs.get(id(shape))
    if hit is None or hit[0] is not shape:
        hit = (shape, _program(shape, n))
        ar.programs[id(shape)] = hit
    return hit[1]


def _fast_block(shape: Tree | None, B: np.ndarray, order, load: _Loader, ar: _Arith, dest=None):  # type: ignore[no-untyped-def]
    """The plain fold of one block when its inputs need no conversion, else None.

    ``B`` (n, width) holds the inputs (leaf k is row ``order[k]``, or row k if
    ``order`` is None). Applies to nearest-even accumulators of 24 bits (adds
    only) or of a precision in ``_VELTKAMP_P`` (Veltkamp rounding after every
    add), with float32 inputs of a format that fits in the accumulator's. The
    fold runs optimistically; the input checks are gathered on the way (while
    each row is in cache) and verified at the end: anything else (inputs that
    need rounding beyond what ``_small_ok`` covers, NaN, Inf, possible
    overflow) returns None and goes through the general path, same bits. The
    result may be written into ``dest`` (the output slice) in place.
    """
    fa, fin = ar.fa, load.fin
    n, width = B.shape
    if not ar.fast or load.premul is not None or not load.fits or B.dtype != np.float32 or n < 2:
        return None
    p = fa.precision
    if p != 24 and p not in _VELTKAMP_P:
        return None
    native = fin.precision >= 24  # float32 values are fp32 values
    small = not native and fin.emin != -126  # fp16 / fp8 inputs
    ops, nbuf, root = _program_of(ar, shape, n)
    slot_row = list(range(n)) if order is None else [int(k) for k in order]
    work = ar.scratch(nbuf + 6, width)
    bufs, (c, orf, mx, mn, r0, r1) = work[:nbuf], work[nbuf:]
    if dest is not None and dest.dtype == np.float32 and dest.flags.c_contiguous:
        bufs[-1 - root] = dest  # the root's register: the result lands in place
    sigma = np.float32(2.0 ** (24 - p) + 1)
    orb = orf.view(np.uint32)  # OR of the checked bit patterns
    orb[...] = 0
    rows = [B[k] for k in range(n)]
    add, mul, sub, bor = np.add, np.multiply, np.subtract, np.bitwise_or
    if small:
        mx[...] = -np.inf
        mn[...] = np.inf
        down = np.float32(2.0 ** (-126 - fin.emin))  # fin's subnormals onto float32's (see _small_ok)
        up = np.float32(2.0 ** (126 + fin.emin))
        rounded = (r0, r1)

    def leaf(k: int, which: int) -> np.ndarray:
        x = rows[slot_row[k]]
        if native:
            return x
        if not small:
            bor(orb, x.view(np.uint32), orb)  # per row, while it is in cache: cheaper than a reduce
            return x
        np.maximum(mx, x, out=mx)
        np.minimum(mn, x, out=mn)
        y = rounded[which]
        mul(x, down, y)
        bor(orb, y.view(np.uint32), orb)
        return y  # the fold runs on values scaled by 2**(-126 - emin), see _small_ok

    veltkamp = p != 24
    with np.errstate(over="ignore", invalid="ignore"):
        for out, a, b in ops:
            o = bufs[-1 - out]
            add(leaf(a, 0) if a >= 0 else bufs[-1 - a], leaf(b, 1) if b >= 0 else bufs[-1 - b], o)
            if veltkamp:  # o <- c - (c - o), c = o * sigma
                mul(o, sigma, c)
                sub(c, o, o)
                sub(c, o, o)
    res = bufs[-1 - root]
    if not native and (orb & np.uint32((1 << (24 - fin.precision)) - 1)).any():
        return None  # some input needs rounding to the input format
    if small and not _small_ok(float(np.max(mx)), float(np.min(mn)), fin, fa, n):
        return None
    if p != 24 and fa.emin == -126 and np.isnan(np.max(res)):
        return None  # NaN/Inf inputs or a sum beyond Veltkamp's range
    if res is not dest:
        res = res.copy()  # scratch is reused by the next block
    if small:
        res *= up  # exact: back from the scaled domain
    return res


def _small_ok(hi: float, lo: float, fin: Format, fa: Format, n: int) -> bool:
    """Whether float32 inputs within [lo, hi] were rounded to ``fin`` (p <= 11, emin > -126) right.

    The engine scales x by 2**(-126 - emin) (exact above 2**emin; below, float32's
    subnormal grid is fin's subnormal quantum times 2**(p - 24)) and checks that
    the low 24 - p bits of every scaled value are zero. When they are, a value of
    at least 2**emin has at most p bits and is fin's, and a smaller one was
    rounded (once, to nearest even, sign kept) on a grid 2**(24 - p) times finer
    and landed on a multiple of fin's quantum, which is then its nearest-even
    rounding (an exact multiple is unchanged, or lies within half a fine step of
    it). The fold then runs on the scaled values and its result is scaled back
    (exactly): a partial sum that the accumulator must round has at least
    p_acc + 1 bits above fin's quantum, so it is a normal float32 in the scaled
    domain (rounded as unscaled), and a smaller one is exact in both (Hauser's
    gradual underflow argument), so the bits are those of the unscaled fold. This
    function adds |x| <= fin.max_finite (no overflow on
    input) and, for a narrow accumulator, n * max|x| * (1 + 2**-p)**n <= its
    max_finite, under which no partial sum of any tree overflows. NaN fails
    every comparison.
    """
    big = max(hi, -lo)
    if not big <= fin.max_finite:
        return False
    return fa.precision >= 24 or n * big * (1 + 2.0**-fa.precision) ** n <= fa.max_finite * (1 - 2.0**-30)


def _fused_atomic(plan, A: np.ndarray, lo: int, hi: int, offset: int, load: _Loader, ar: _Arith, dest=None):  # type: ignore[no-untyped-def]
    """The atomic plan's plain folds of columns lo..hi-1 in one numba pass (orders, gather, fold), else None.

    Used only with numba, for the nearest-even folds ``_fast_block`` does on its
    own (fp32 accumulators with plain adds; bf16 and tf32 ones with Veltkamp
    rounding), float32 inputs already in the input format (fp32, or bf16/tf32:
    the low 24 - p bits of every input are zero), no premultiply or predivide.
    Element ``offset + lo + j``'s order is the plan's (``PerElementPlan.orders``,
    same generator). A block whose inputs need rounding or whose result holds a
    NaN (NaN/Inf inputs, or a sum beyond Veltkamp's range) returns None: the
    caller recomputes it on the numpy path, same bits.
    """
    from fpreduce.plans.per_element import fused_fold, kernel_available

    fa, fin = ar.fa, load.fin
    n = A.shape[0]
    if not kernel_available() or not ar.fast or load.premul is not None or not load.fits:
        return None
    if A.dtype != np.float32 or n < 2 or hi <= lo:
        return None
    p = fa.precision
    if not (p == 24 or (p in _VELTKAMP_P and fa.emin == -126)):
        return None
    if fin.precision >= 24:
        check = 0
    elif fin.emin == -126:
        check = (1 << (24 - fin.precision)) - 1
    else:
        return None  # fp16 / fp8 inputs: the numpy path
    out = dest if dest is not None and dest.dtype == np.float32 and dest.flags.c_contiguous else None
    if out is None:
        out = np.empty(hi - lo, dtype=np.float32)
    sigma = np.float32(2.0 ** (24 - p) + 1)
    done = fused_fold(plan, A, lo, hi, offset + lo, out, sigma=sigma, veltkamp=p != 24, check=check)
    return out if done else None

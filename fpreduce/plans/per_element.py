"""Per-element random orders: the atomic plan, its splitmix64 / Lemire / Fisher-Yates draws.

:class:`PerElementPlan` sums every element in its own uniformly random order, as
GPU ``atomicAdd`` does; :func:`atomic` builds one from a seed. The orders are drawn
by a counter-based generator (splitmix64 of the seed and the element index), so an
element's order never depends on how the elements are chunked. :func:`orders_numpy`
draws them vectorized over elements; the numba kernel (private module
``_atomic_kernel``) draws the same bits and, through :func:`fused_fold`, folds the
elements in the same pass. Both are used only when :func:`kernel_available`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fpreduce.base import counter, jit
from fpreduce.base.errors import InvalidArgument
from fpreduce.plans import _atomic_kernel as _kernel
from fpreduce.plans._checks import check_n, check_perm

__all__ = [
    "PerElementPlan",
    "atomic",
    "atomic_key",
    "draw_groups",
    "fused_fold",
    "kernel_available",
    "orders_numpy",
]


_M64 = (1 << 64) - 1
_GOLD = counter.GOLD  # splitmix64 (fpreduce.base.counter): the state's increment
_REDRAW = 0xD1B54A32D192ED03  # separates an element's redraw stream from its main one
_U64 = np.uint64
_DRAW_BITS = 32  # bits per draw; tests narrow these two (n <= 2^bits) to force the rejection path
_GROUP_BITS = 20  # Fisher-Yates steps share a draw while the product of their ranges is <= 2^this


def _order_dtype(n: int) -> np.dtype:
    """The smallest unsigned integer type that holds 0..n-1 (uint8, uint16, uint32 or uint64)."""
    size = 1 << max(0, ((n - 1).bit_length() - 1) // 8).bit_length()  # bytes: 1, 2, 4 or 8
    return np.dtype(f"u{size}")


def atomic_key(seed: int) -> int:
    """The 64-bit key of the atomic plan's orders for ``seed`` (any integer >= 0, 64 bits at a time)."""
    s, k = int(seed), 0
    while True:
        k = counter.mix_int((k ^ (s & _M64)) + _GOLD)
        s >>= 64
        if not s:
            return k


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on a uint64 array (:func:`fpreduce.base.counter.mix_numpy`)."""
    return counter.mix_numpy(z)


def _check_bits(n: int, bits: int) -> None:
    if not (1 <= bits <= 32 and n <= 1 << bits):
        raise InvalidArgument(f"need 1 <= bits <= 32 and n <= 2^bits, got bits={bits} for {n} workers")


def draw_groups(n: int, bits: int = 32, group_bits: int = 20) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
    """The Fisher-Yates steps that share a draw, and each group's rejection threshold.

    Steps k = 0..n-2 (range s = n - k) are grouped greedily from k = 0: a group
    takes the next step while the product P of its ranges stays <= 2^min(group_bits,
    bits) (a group has at least one step). Returns (starts, thresholds): group g is
    steps ``starts[g]..starts[g+1]-1`` and rejects when the remainder of its draw is
    below ``(2^bits - P) % P`` (below 2^-12 of the draws for the defaults).
    """
    _check_bits(n, bits)
    limit = 1 << min(group_bits, bits)
    starts, thr = [0], []
    k = 0
    while k < n - 1:
        P = n - k
        k += 1
        while k < n - 1 and P * (n - k) <= limit:
            P *= n - k
            k += 1
        starts.append(k)
        thr.append(((1 << bits) - P) % P)
    if n <= 1:
        starts = [0]
    return np.array(starts, dtype=np.int64), np.array(thr, dtype=np.uint64)


def orders_numpy(
    key: int, lo: int, hi: int, init: np.ndarray, bits: int = 32, group_bits: int = 20
) -> NDArray[np.unsignedinteger]:
    """The orders of elements lo..hi-1 (see :class:`PerElementPlan`), vectorized over elements in numpy.

    ``init`` (n,) is the array shuffled (``arange(n)``, or a relabelling), of the
    orders' dtype. Row j of the result (hi-lo, n) is element lo + j's order.
    """
    n = init.size
    starts, thrs = draw_groups(n, bits, group_bits)
    out = np.empty((hi - lo, n), dtype=init.dtype)
    sh, ub = _U64(32 - bits), _U64(bits)
    low = _U64((1 << bits) - 1)
    m32 = _U64(0xFFFFFFFF)
    chunk = min(1 << 13, max(1 << 10, (1 << 21) // max(1, n)))  # elements at a time: (n, chunk) slots near cache
    for c0 in range(lo, hi, chunk):
        c1 = min(hi, c0 + chunk)
        w = c1 - c0
        e = np.arange(c0 + 1, c1 + 1, dtype=np.uint64)
        h = _mix(e * _U64(_GOLD) + _U64(key))  # element e's 64-bit seed: splitmix64 of its counter
        redraws = np.zeros(w, dtype=np.uint64)
        idx = np.empty((max(n - 1, 1), w), dtype=np.intp)
        z = h
        mbuf = np.empty(w, dtype=np.uint64)
        for g in range(thrs.size):
            k0, k1 = int(starts[g]), int(starts[g + 1])
            if g % 2 == 0:  # one 64-bit word: the low half is group g's draw, the high half group g + 1's
                z = _mix(h + _U64(((g // 2 + 1) * _GOLD) & _M64))
            rest = (z & m32) if g % 2 == 0 else (z >> _U64(32))
            if bits < 32:
                rest >>= sh
            for k in range(k0, k1):  # batched Lemire, in place
                np.multiply(rest, _U64(n - k), out=mbuf)
                np.right_shift(mbuf, ub, out=idx[k], casting="unsafe")
                np.bitwise_and(mbuf, low, out=rest)
            bad = np.flatnonzero(rest < thrs[g])
            while bad.size:  # rejected: redraw the group from the element's own redraw stream
                redraws[bad] += _U64(1)
                x = (_mix((h[bad] ^ _U64(_REDRAW)) + redraws[bad] * _U64(_GOLD)) & m32) >> sh
                r = np.empty((k1 - k0, bad.size), dtype=np.intp)
                for k in range(k0, k1):
                    m = x * _U64(n - k)
                    r[k - k0] = m >> ub
                    x = m & low
                ok = x >= thrs[g]
                idx[k0:k1, bad[ok]] = r[:, ok]
                bad = bad[~ok]
        P = np.repeat(init[:, None], w, axis=1)  # (n, w): slot-major
        flat_P = P.reshape(-1)
        cols = np.arange(w, dtype=np.intp)
        if n > 1:  # flat indices of slot k + idx[k] of every element, all steps at once
            idx += np.arange(n - 1)[:, None]
            idx *= w
            idx += cols
        for k in range(n - 1):  # forward Fisher-Yates: swap slots k and k + idx[k]
            flat = idx[k]
            v = flat_P[flat]
            flat_P[flat] = P[k]
            P[k] = v
        out[c0 - lo : c1 - lo] = P.T
    return out


@dataclass(frozen=True)
class PerElementPlan:
    """Every element a sequential left fold in its own uniformly random order.

    GPU ``atomicAdd`` into one accumulator per element: the N contributions land
    in whatever order the hardware serialises them. Element e's order is a
    forward Fisher-Yates shuffle of ``0..n-1`` (then relabelled by ``perm``):
    step k = 0..n-2 swaps slot k with slot k + r_k, r_k uniform on 0..n-k-1.
    With ``key = atomic_key(seed)``, ``h = mix(key + (e + 1) * G)`` (``mix`` the
    splitmix64 finalizer, G its odd constant, all mod 2^64); the steps are cut
    into groups (:func:`draw_groups`: consecutive steps while the product P of
    their ranges is <= 2^20), and group g draws the low (g even) or high (g odd)
    32 bits x of word ``mix(h + (g // 2 + 1) * G)``. Batched Lemire: r = x, and
    for each step of the group m = r * s, r_k = m >> 32, r = m mod 2^32; the
    group is kept unless the final r < (2^32 - P) mod P (r_k's are then the
    mixed-radix digits of Lemire's exact draw on 0..P-1, so independent and
    exactly uniform), else it is drawn again from the low 32 bits of
    ``mix((h ^ R) + c * G)``, c = 1, 2, ... counting the element's redraws (R a
    fixed constant), below 2^-12 of the groups. Every order is then exactly
    uniform over the n! permutations (idealising ``mix`` as random bits),
    independent across elements, and a function of (seed, e) only, never of how
    the elements are chunked. :func:`orders_numpy` computes it in numpy, the
    numba kernel (``_atomic_kernel.atomic_kernel``) too (same bits; tests compare them).

    Attributes:
        name: ``atomic``.
        n: number of workers.
        seed: the seed of the orders.
        perm: a worker relabelling applied to every order (worker w becomes
            ``perm[w]``), or None.
    """

    name: str
    n: int
    seed: int
    perm: tuple[int, ...] | None = None

    def shuffled(self) -> NDArray[np.unsignedinteger]:
        """The array every element shuffles: ``arange(n)``, or ``perm``, in the orders' dtype."""
        dt = _order_dtype(self.n)
        return np.arange(self.n, dtype=dt) if self.perm is None else np.asarray(self.perm, dtype=dt)

    def orders(self, lo: int, hi: int) -> NDArray[np.unsignedinteger]:
        """Worker orders of elements lo..hi-1: shape (hi-lo, n), row = first to last.

        Row j is element lo + j's order (see the class), relabelled by ``perm``,
        C-contiguous, of the smallest unsigned type that holds n - 1 (uint8 up to
        256 workers, uint16 up to 65536). Computed by the numba kernel when
        :func:`kernel_available`, else in numpy: the same bits.
        """
        if not 0 <= lo <= hi:
            raise InvalidArgument(f"need 0 <= lo <= hi, got lo={lo}, hi={hi}")
        init = self.shuffled()
        key, bits = atomic_key(self.seed), _DRAW_BITS
        if not kernel_available() or hi == lo:
            return orders_numpy(key, lo, hi, init, bits, _GROUP_BITS)
        out = np.empty((hi - lo, self.n), dtype=init.dtype)
        dummy = np.zeros((1, 1), dtype=np.float32)
        _kernel.run(
            dummy,
            dummy.view(np.uint32),
            0,
            key,
            lo,
            hi - lo,
            bits,
            *draw_groups(self.n, bits, _GROUP_BITS),
            init,
            out,
            np.zeros(1, np.float32),
            np.float32(1),
            False,
            0,
            False,
        )
        return out

    def depths(self) -> NDArray[np.int64]:
        """Worst case: any worker can come first, n-1 additions from the root."""
        return np.full(self.n, self.n - 1, dtype=np.int64)

    def relabel(self, perm: Sequence[int] | np.ndarray) -> PerElementPlan:
        """Worker w becomes ``perm[w]`` in every order (composes with earlier relabels)."""
        p = check_perm(perm, self.n)
        new = p if self.perm is None else tuple(p[w] for w in self.perm)
        return PerElementPlan(self.name, self.n, self.seed, new)

    def draw(self) -> str:
        """A one-line description (the orders are per element)."""
        tail = "" if self.perm is None else f", relabelled {list(self.perm)}"
        return f"atomic: each element a sequential fold in its own random order (seed={self.seed}{tail})"


def atomic(n: int, seed: int = 0) -> PerElementPlan:
    """GPU atomics: each element summed in its own uniformly random, seeded order."""
    check_n(n)
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidArgument(f"seed must be a non-negative int, got {seed!r}")
    return PerElementPlan("atomic", n, int(seed))


def kernel_available() -> bool:
    """Whether the numba kernel runs now: numba installed and :func:`fpreduce.base.jit.enabled` (read per call)."""
    return _kernel.HAVE_KERNEL and jit.enabled()


def fused_fold(
    plan: PerElementPlan,
    A: NDArray[np.float32],
    lo: int,
    hi: int,
    e0: int,
    out: NDArray[np.float32],
    *,
    sigma: np.float32,
    veltkamp: bool,
    check: int,
) -> bool:
    """Columns lo..hi-1 of ``A`` folded in ``plan``'s orders in one numba pass (needs :func:`kernel_available`).

    Column ``lo + j`` is element ``e0 + j`` of the plan: ``out[j]`` is the left fold
    in float32 of ``A[order[k], lo + j]`` (k = 0..n-1, the order of
    :meth:`PerElementPlan.orders`), each sum rounded by Veltkamp's splitting
    (``c = t * sigma; t = c - (c - t)``) when ``veltkamp``. ``A`` is a
    float32 (n, m) array, ``out`` a distinct buffer of at least hi - lo float32.

    Returns:
        True, or False (``out`` partly written) when some input has a bit of
        ``check`` set (it needs rounding first) or some result is NaN (NaN or Inf
        inputs, or a sum past Veltkamp's range): the caller recomputes the block.
    """
    init = plan.shuffled()
    A = np.ascontiguousarray(A)  # a transposed or strided array copied once: the kernels compile for 'C' rows only
    bad = _kernel.run(
        A,
        A.view(np.uint32),
        lo,
        atomic_key(plan.seed),
        e0,
        hi - lo,
        _DRAW_BITS,
        *draw_groups(plan.n, _DRAW_BITS, _GROUP_BITS),
        init,
        np.zeros((1, 1), dtype=init.dtype),
        out,
        sigma,
        veltkamp,
        check,
        True,
    )
    return not bad

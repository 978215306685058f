"""Integer buckets and 32-bit limbs: the arithmetic of the general exact-sum path.

``_column_block`` adds the significands of a float64 block into int64 buckets keyed by
(column, exponent) with ``np.bincount`` (exact: see :mod:`fpreduce.core.exact`), and
``_finish_block`` carry-propagates the buckets into 32-bit limbs, from which the
correctly rounded float64 ``hi`` and ``lo`` are read vectorized; ``_LazyValues`` turns
limbs into exact Python integers for the columns that need them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.jit import jit, jitable

_E_OFFSET = 1073  # frexp exponents of finite nonzero float64 lie in [-1073, 1024]
_NE = 1024 + _E_OFFSET + 1
_CHUNK_ROWS = 1 << 16
_BLOCK_CELLS = 1 << 20  # bincount bins / accumulator cells per column block (bounded memory)


def _bucket_kernel(u, acc, flags):  # type: ignore[no-untyped-def]
    """acc[j, E] += the signed significand of the float32 bits ``u[i, j]`` (E its biased exponent; 1 for the
    subnormals, whose significand has no hidden bit): ``x = m * 2**(E - 150)`` exactly. ``flags[j]`` ORs
    :data:`NAN`, :data:`PINF`, :data:`NINF` (those terms left out of the sums: bucket 255) and :data:`NOT_NEGZERO`
    (a term other than -0). Columns go in blocks of ``_BUCKET_COLS`` (their buckets stay in L2), rows sliced from
    0 (no wraparound checks); a tall array a column at a time (a row slice per element costs more than its add).

    Per element only two ORs watch for the flags (some term's bits other than -0's; some exponent 255); a
    column that met NaN or Inf, rare, is read once more for which (:func:`_special`): the per-element flags
    cost as much as the bucket add itself (1 ns of 2.5 per element on a tall column)."""
    n, c = u.shape
    if c < _BUCKET_COLS // 4:
        for j in range(c):
            nz = np.uint32(0)
            sp = np.uint32(0)
            for i in range(n):
                b = u[i, j]
                nz |= b ^ np.uint32(_NEG_ZERO)
                sp |= _bucket_add(acc, j, b) + np.uint32(1)
            flags[j] = _column_flags(u, j, nz, sp)
        return
    nzs = np.zeros(_BUCKET_COLS, dtype=np.uint32)
    sps = np.zeros(_BUCKET_COLS, dtype=np.uint32)
    for c0 in range(0, c, _BUCKET_COLS):
        c1 = min(c0 + _BUCKET_COLS, c)
        nzs[:] = 0
        sps[:] = 0
        for i in range(n):
            r = u[i, c0:c1]
            for j in range(c1 - c0):
                nzs[j] |= r[j] ^ np.uint32(_NEG_ZERO)
                sps[j] |= _bucket_add(acc, c0 + j, r[j]) + np.uint32(1)
        for j in range(c1 - c0):
            flags[c0 + j] = _column_flags(u, c0 + j, nzs[j], sps[j])


@jitable
def _bucket_add(acc, j, b):  # type: ignore[no-untyped-def]
    """acc[j, E] += the signed significand of the float32 bits ``b`` (:func:`_bucket_kernel`); returns E. NaN and
    Inf land in bucket 255, which no sum reads (branch free: no select per element)."""
    e = (b >> np.uint32(23)) & np.uint32(0xFF)
    neg = np.int64(b >> np.uint32(31))
    m = np.int64((b & np.uint32(0x7FFFFF)) | (np.uint32(e != 0) << np.uint32(23)))
    acc[j, max(e, np.uint32(1))] += (m ^ -neg) + neg
    return e


@jitable
def _column_flags(u, j, nz, sp):  # type: ignore[no-untyped-def]
    """Column ``j``'s flags from its ORs (``nz``: of its bits xor -0's; ``sp``: of its exponents plus one, bit 8
    set by an exponent 255): NaN and Inf looked up by a second read of the column, only when it has one."""
    f = np.uint8(NOT_NEGZERO) if nz != np.uint32(0) else np.uint8(0)
    if sp >> np.uint32(8):
        for i in range(u.shape[0]):
            f |= _special(u[i, j])
    return f


@jitable
def _special(b):  # type: ignore[no-untyped-def]
    """:data:`NAN`, :data:`PINF` or :data:`NINF` for float32 bits ``b`` that are NaN or ±Inf; 0 otherwise."""
    if (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000):
        return np.uint8(0)
    if (b & np.uint32(0x7FFFFF)) != np.uint32(0):
        return np.uint8(NAN)
    return np.uint8(NINF) if b >> np.uint32(31) else np.uint8(PINF)


_NEG_ZERO = 0x80000000
NAN, PINF, NINF, NOT_NEGZERO = 1, 2, 4, 8  # the flags of a float32 column (:func:`_bucket_kernel`)
_BUCKET_COLS = 64
_buckets = jit(_bucket_kernel, "the exact sums' buckets")


def float32_block(
    a: NDArray[np.float32],
) -> tuple[_Limbs, NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_], NDArray[np.uint8]]:
    """:func:`_column_block` of float32 columns in one compiled pass over their bits (NaN and Inf left out, said
    in the flags returned last: :func:`_bucket_kernel`). Needs numba (:data:`_buckets`)."""
    n, c = a.shape
    acc = np.zeros((c, 256), dtype=np.int64)  # bucket E: value m * 2**(E - 150) = 2**(E - 1 + k0 + s)
    flags = np.zeros(c, dtype=np.uint8)
    assert _buckets is not None
    _buckets(np.ascontiguousarray(a).view(np.uint32), acc, flags)
    k0 = _E_OFFSET - 125  # (E = 1 is frexp's exponent -125 of float32's smallest normal)
    return (*_finish_block(acc[:, 1:255], None, -_E_OFFSET - 24, k0, k0 + 254, max(n, 1).bit_length() + 25), flags)


def _column_block(
    a: NDArray[np.floating], sigbits: int
) -> tuple[_Limbs, NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Exact sums ``(V, s)`` of the columns of a finite 2-D float64 block."""
    n, c = a.shape
    split = sigbits == 53
    acc_hi = np.zeros((c, 0), dtype=np.int64)  # buckets for exponents kr[0] .. kr[1]-1
    acc_lo = acc_hi
    rows = max(1, min(_CHUNK_ROWS, _BLOCK_CELLS // max(c, 1)))
    cols = np.arange(c, dtype=np.int64)
    kr = [_NE, 0]
    for r0 in range(0, n, rows):
        x = np.asarray(a[r0 : r0 + rows], dtype=np.float64)
        fr, ex = np.frexp(x)
        nz = fr != 0
        if not nz.any():
            continue
        ex = ex.astype(np.int64)
        e0 = int(np.min(ex, where=nz, initial=_NE))
        e1 = int(np.max(ex, where=nz, initial=-_NE))
        ne = e1 - e0 + 1
        nk = [min(kr[0], e0 + _E_OFFSET), max(kr[1], e1 + _E_OFFSET + 1)]
        if nk != kr:
            grown = []
            for old in (acc_hi, acc_lo) if split else (acc_hi,):
                g = np.zeros((c, nk[1] - nk[0]), dtype=np.int64)
                if kr[0] < kr[1]:
                    g[:, kr[0] - nk[0] : kr[1] - nk[0]] = old
                grown.append(g)
            acc_hi = grown[0]
            acc_lo = grown[1] if split else acc_hi
            kr = nk
        key = (cols * ne + np.where(nz, ex - e0, 0)).ravel()
        mf = np.ldexp(fr, sigbits).ravel()  # exact integer significands
        parts: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = [(acc_hi, mf)]
        if split:
            m = mf.astype(np.int64)
            parts = [(acc_hi, (m >> 26).astype(np.float64)), (acc_lo, (m & ((1 << 26) - 1)).astype(np.float64))]
        for acc, w in parts:
            b = np.bincount(key, weights=w, minlength=c * ne)
            acc[:, e0 + _E_OFFSET - kr[0] : e1 + _E_OFFSET + 1 - kr[0]] += b.reshape(c, ne).astype(np.int64)
    return _finish_block(
        acc_hi,
        acc_lo if split else None,
        -_E_OFFSET - sigbits,
        kr[0],
        kr[1],
        max(n, 1).bit_length() + (28 if split else sigbits) + 1,
    )


_M32 = (1 << 32) - 1
_PAD = 4  # zero limbs below the lowest bucket


def _add_one(L: NDArray[np.int64], rows: NDArray[np.bool_]) -> None:
    """Add 1 (at limb 0) to the limb vectors selected by ``rows``, in place."""
    carry = rows.astype(np.int64)
    for j in range(L.shape[1]):
        t = L[:, j] + carry
        L[:, j] = t & _M32
        carry = t >> 32


def _rn_limbs(
    A: NDArray[np.int64], base: int
) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.int64], NDArray[np.bool_]]:
    """RN64 of nonneg 32-bit limb vectors (value sum A_j 2**(32j+base)).

    Returns (magnitude, rounded up, cut bit index, ok); ``ok`` False means fall back."""
    c = A.shape[0]
    U = np.uint64
    nzm = A != 0
    zero = ~nzm.any(axis=1)
    t = A.shape[1] - 1 - np.argmax(nzm[:, ::-1], axis=1)
    t = np.where(zero, 2, t)
    okt = t >= 2
    t = np.maximum(t, 2)
    rows = np.arange(c)
    cum = np.cumsum(nzm, axis=1)
    low_nz = (cum[rows, t - 2] - nzm[rows, t - 2]) > 0
    At = A[rows, t].astype(U)
    A1 = A[rows, t - 1].astype(U)
    A2 = A[rows, t - 2].astype(U)
    b = np.frexp(At.astype(np.float64))[1].astype(np.int64)
    b = np.where(zero, 1, b)
    bU = b.astype(U)
    G = (((At << U(32)) | A1) << (U(32) - bU)) | (A2 >> bU)
    st = ((A2 & ((U(1) << bU) - U(1))) != 0) | low_nz
    m = G >> U(11)
    r = G & U(0x7FF)
    up = (r > U(0x400)) | ((r == U(0x400)) & (st | ((m & U(1)) == U(1))))
    m = m + up.astype(U)
    e = base + 32 * (t - 2) + 64 + b - 1
    ok = zero | (okt & (e > -1000) & (e < 1000))
    ee = np.where(ok & ~zero, e - 52, 0)
    mag = np.ldexp(m.astype(np.float64), ee.astype(np.int32))
    mag[zero] = 0.0
    up &= ~zero
    return mag, up, 32 * t + b - 53, ok


def _finish_block(
    acc_hi: NDArray[np.int64], acc_lo: NDArray[np.int64] | None, s: int, k0: int, k1: int, nbits: int
) -> tuple[_Limbs, NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Carry-propagate the buckets into limbs; hi/lo vectorized; fallback mask."""
    c = acc_hi.shape[0]
    if k0 >= k1:
        A = np.zeros((c, _PAD + 1), dtype=np.int64)
        z = np.zeros(c)
        return (A, np.zeros(c, dtype=bool), s - 32 * _PAD), z, z.copy(), np.zeros(c, dtype=bool)
    its = 0
    while nbits > 17:  # |bucket| < 2**nbits; each pass keeps 16 bits and carries the rest
        nbits = max(nbits - 16, 16) + 1
        its += 1
    w = k1 - k0 + (26 if acc_lo is not None else 0) + 16 * its + 32
    w = -(-w // 32) * 32
    C = np.zeros((c, w), dtype=np.int64)
    if acc_lo is not None:
        C[:, : k1 - k0] = acc_lo
        C[:, 26 : 26 + k1 - k0] += acc_hi
    else:
        C[:, : k1 - k0] = acc_hi
    for _ in range(its):
        q = C >> 16
        C &= 0xFFFF
        C[:, 16:] += q[:, :-16]
    nl = w // 32
    # |C| < 2**17 now, so each 32-digit limb is an integer below 2**49: exact in float64
    p2 = np.ldexp(1.0, np.arange(32))
    L = (C.reshape(c * nl, 32).astype(np.float64) @ p2).astype(np.int64).reshape(c, nl)
    carry = np.zeros(c, dtype=np.int64)
    for j in range(nl):
        t = L[:, j] + carry
        L[:, j] = t & _M32
        carry = t >> 32
    neg = carry < 0
    bad = (carry != 0) & (carry != -1)
    L[neg] = _M32 - L[neg]
    _add_one(L, neg)
    A = np.concatenate([np.zeros((c, _PAD), dtype=np.int64), L], axis=1)
    base = k0 + s - 32 * _PAD
    mag, up, P, ok = _rn_limbs(A, base)
    pos = np.arange(A.shape[1], dtype=np.int64) * 32
    k = np.clip(P[:, None] - pos[None, :], 0, 32).astype(np.uint64)
    mask = ((np.uint64(1) << k) - np.uint64(1)).astype(np.int64)
    R = A & mask
    R[up] = mask[up] - R[up]
    _add_one(R, up)
    lmag, _, _, ok2 = _rn_limbs(R, base)
    ok &= ok2 & ~bad
    sign = np.where(neg, -1.0, 1.0)
    hi = sign * mag
    lo = np.where(up, -1.0, 1.0) * sign * lmag
    lo = np.where(hi == 0, 0.0, lo) + 0.0
    hi = hi + 0.0
    return (A, neg, base), hi, lo, ~ok


_Limbs = tuple[NDArray[np.int64], NDArray[np.bool_], int]


def _limb_value(lb: _Limbs, j: int, s: int) -> int:
    A, neg, base = lb
    v = int.from_bytes(A[j].astype("<u4").tobytes(), "little")
    v = v << (base - s) if base >= s else v >> (s - base)
    return -v if neg[j] else v


def _lowest_terms(v: int, s: int) -> tuple[int, int]:
    """``v * 2**s`` as ``(V, k)`` with ``V`` odd or ``k = 0`` (an integer), and (0, 0) for zero: the form of
    ``float.as_integer_ratio``, so a sum reads the same whichever path found it."""
    if v == 0:
        return 0, 0
    if s >= 0:
        return v << s, 0
    t = min((v & -v).bit_length() - 1, -s)
    return v >> t, s + t


class _LazyValues:
    """Per-column ``(V, s)`` built on demand from the limb blocks."""

    def __init__(self, blocks: list[tuple[int, _Limbs]], n: int, s: int) -> None:
        self._blocks = blocks
        self._n = n
        self._s = s
        self._cache: dict[int, tuple[int, int]] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, j: int) -> tuple[int, int]:
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(j)
        r = self._cache.get(j)
        if r is None:
            for c0, lb in reversed(self._blocks):
                if j >= c0:
                    r = _lowest_terms(_limb_value(lb, j - c0, self._s), self._s)
                    break
            assert r is not None
            self._cache[j] = r
        return r

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return (self[j] for j in range(self._n))

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, list | _LazyValues) else NotImplemented

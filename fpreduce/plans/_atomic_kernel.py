"""The atomic plan's numba kernel: orders drawn, shuffled and (optionally) folded in one pass.

Private to :mod:`fpreduce.plans`: :mod:`fpreduce.plans.per_element` calls
:func:`run` (and :func:`kernel_width`) only when :func:`fpreduce.base.jit.enabled`.
The kernel draws exactly the orders of :func:`~fpreduce.plans.per_element.orders_numpy`
(tests compare them bit for bit). It is compiled by numba on its first call, with
LLVM ``noalias`` on its array arguments (:func:`_jit_noalias`); at that moment its
helpers (:data:`_HELPERS`, plain Python functions until then) become numba functions
compiled the same way, and :func:`_prefetch`, a Python no-op, the LLVM prefetch
intrinsic: numba resolves a function's globals when it compiles it.
"""

from __future__ import annotations

import numpy as np

from fpreduce.base import counter
from fpreduce.base.jit import jit, kernel, serialized
from fpreduce.base.jit import numba as jit_numba

__all__ = ["HAVE_KERNEL", "atomic_kernel", "kernel_width", "run"]


def kernel_width(n: int) -> int:
    """Elements per block of the numba kernel: about 2^14 slots (n x width: in L1), 64 to 4096 elements."""
    return min(1 << 12, max(64, (1 << 14) // max(1, n)))


_GOLD = np.uint64(counter.GOLD)  # splitmix64's increment (fpreduce.base.counter), as in per_element (numpy)
_REDRAW = np.uint64(0xD1B54A32D192ED03)
_M32 = np.uint64(0xFFFFFFFF)


def atomic_kernel(
    A,
    Au,
    col0,
    key,
    e0,
    count,
    bits,
    gstart,
    gthr,
    init,
    orders,
    out,
    sigma,
    velt,
    check,
    fold,
    h,
    hi32,
    rest,
    redraws,
    idx,
    perm,
    acc,
):  # type: ignore[no-untyped-def]
    """numba: the orders of elements e0..e0+count-1 (as ``orders_numpy``) and, with ``fold``, their folds.

    Without ``fold``, writes the orders into ``orders`` (count, n) and returns 0. With
    ``fold``, element e0 + j is the left fold of ``A[order[k], col0 + j]`` (k = 0..n-1)
    in float32, each sum rounded by Veltkamp's splitting (``c = t * sigma; t = c - (c -
    t)``) when ``velt``, written to ``out[j]``; returns 1 (leaving ``out`` partly
    written) when some input has a bit of ``check`` set or some result is NaN, else 0.
    Works in blocks of ``acc.size`` elements (``kernel_width(n)``; the other trailing
    arguments are scratch of that width): the draws of all steps (vectorized over the
    elements), the forward Fisher-Yates swaps into a slot-major (n, width) block (the
    next block of A prefetched meanwhile), the input check, then the fold slot by slot
    over the elements (independent: no latency chain; AVX-512 gathers, which the
    ``noalias`` compilation of :func:`_jit_noalias` allows). The helpers it calls are
    numba functions compiled the same way (:data:`_HELPERS`): LLVM inlines the small
    per-element ones; a per-block one costs one call per block of ``acc.size`` elements.
    """
    n = init.shape[0]
    ub = np.uint64(bits)
    sh = np.uint64(32 - bits)
    blk = acc.shape[0]
    orb = np.uint32(0)
    for b0 in range(0, count, blk):
        w = min(blk, count - b0)
        c0 = col0 + b0
        _seed_block(key, e0 + b0, w, h, redraws)
        _draw_block(n, ub, sh, gstart, gthr, w, h, hi32, rest, redraws, idx)
        nxt = c0 + w  # the next block of A is prefetched, a line at a time, while the swaps run
        wn = min(blk, col0 + count - nxt) if fold else 0
        _shuffle_block(init, idx, w, perm, Au, nxt, wn)
        if not fold:
            for j in range(w):
                for k in range(n):
                    orders[b0 + j, k] = perm[k, j]
            continue
        orb = _or_inputs(Au, n, c0, w, orb)  # the block is in cache: prefetched during the previous block's swaps
        if orb & check:
            return 1
        if _fold_block(A, perm, c0, w, sigma, velt, acc, out, b0):
            return 1
    if fold:
        orders[0, 0] = orb & np.uint32(1)  # keeps the pass over A when nothing is checked (``orders``: scratch)
    return 0


def _seed_block(key, e, w, h, redraws):  # type: ignore[no-untyped-def]
    """``h[j]``: the 64-bit seed of element e + j (splitmix64 of its counter); no redraws yet."""
    for j in range(w):
        h[j] = counter.mix(np.uint64(e + j + 1) * _GOLD + key)
        redraws[j] = 0


def _draw_block(n, ub, sh, gstart, gthr, w, h, hi32, rest, redraws, idx):  # type: ignore[no-untyped-def]
    """``idx[k, j]``: step k's draw r_k for element j, group by group (batched Lemire), rejected groups redrawn."""
    low = (np.uint64(1) << ub) - np.uint64(1)
    for g in range(gstart.shape[0] - 1):
        k0, k1 = gstart[g], gstart[g + 1]
        thr = gthr[g]
        if g % 2 == 0:  # one 64-bit word: the low half is group g's draw, the high half group g + 1's
            c = np.uint64(g // 2 + 1) * _GOLD
            for j in range(w):
                z = counter.mix(h[j] + c)
                hi32[j] = z >> np.uint64(32)
                rest[j] = (z & _M32) >> sh
        else:
            for j in range(w):
                rest[j] = hi32[j] >> sh
        for k in range(k0, k1):  # batched Lemire: each step takes the high part of rest * s
            s = np.uint64(n - k)
            ik = idx[k]
            for j in range(w):
                m = rest[j] * s
                ik[j] = m >> ub
                rest[j] = m & low
        bad = 0
        for j in range(w):
            bad += rest[j] < thr
        if bad:  # rare (below 2^-12 per group)
            _redraw_group(n, ub, sh, k0, k1, thr, w, h, rest, redraws, idx)


def _redraw_group(n, ub, sh, k0, k1, thr, w, h, rest, redraws, idx):  # type: ignore[no-untyped-def]
    """Steps k0..k1-1 drawn again for the elements whose draw was rejected, from each element's own stream."""
    low = (np.uint64(1) << ub) - np.uint64(1)
    for j in range(w):
        if rest[j] >= thr:
            continue
        while True:
            redraws[j] += np.uint64(1)
            z = counter.mix((h[j] ^ _REDRAW) + redraws[j] * _GOLD)
            x = (z & _M32) >> sh
            for k in range(k0, k1):
                m = x * np.uint64(n - k)
                idx[k, j] = m >> ub
                x = m & low
            if x >= thr:
                break


def _shuffle_block(init, idx, w, perm, Au, nxt, wn):  # type: ignore[no-untyped-def]
    """``perm[:, :w]``: ``init`` shuffled by forward Fisher-Yates (slot k is final after step k); prefetches
    ``Au[:, nxt:nxt + wn]`` meanwhile."""
    n = init.shape[0]
    for k in range(n):
        v0 = init[k]
        for j in range(w):
            perm[k, j] = v0
    for k in range(n - 1):
        pk, ik = perm[k], idx[k]
        for j in range(w):
            i = k + ik[j]
            v = perm[i, j]
            perm[i, j] = pk[j]
            pk[j] = v
        for q in range(0, wn, 16):
            _prefetch(Au, k, nxt + q)
    for q in range(0, wn, 16):
        _prefetch(Au, n - 1, nxt + q)


def _or_inputs(Au, n, c0, w, orb):  # type: ignore[no-untyped-def]
    """``orb`` or'ed with the bits of columns c0..c0+w-1 of the n rows of ``Au`` (the input check)."""
    for k in range(n):
        rb = Au[k]
        for j in range(w):
            orb |= rb[c0 + j]
    return orb


def _fold_block(A, perm, c0, w, sigma, velt, acc, out, o0):  # type: ignore[no-untyped-def]
    """``out[o0 + j]``: the left fold of ``A[perm[k, j], c0 + j]`` over k; True when some result is NaN."""
    n = perm.shape[0]
    p0 = perm[0]
    for j in range(w):
        acc[j] = A[p0[j], c0 + j]
    if velt:  # slot by slot; the elements are independent (no latency chain; gathers)
        for k in range(1, n):
            pk = perm[k]
            for j in range(w):
                x = acc[j] + A[pk[j], c0 + j]
                y = x * sigma
                acc[j] = y - (y - x)
    else:
        for k in range(1, n):
            pk = perm[k]
            for j in range(w):
                acc[j] += A[pk[j], c0 + j]
    nan = False
    for j in range(w):
        x = acc[j]
        nan |= x != x
        out[o0 + j] = x
    return nan


#: The kernel's helpers: module globals replaced by numba functions before numba compiles the kernel.
_HELPERS = ("_seed_block", "_draw_block", "_redraw_group", "_shuffle_block", "_or_inputs", "_fold_block")


def _prefetch(a: np.ndarray, i: int, j: int) -> None:
    """Prefetch ``a[i, j]``'s cache line: a no-op in Python, ``llvm.prefetch`` once numba compiles the kernel."""


def _numba_prefetch():  # type: ignore[no-untyped-def]
    """The numba intrinsic behind :func:`_prefetch` (read, high locality, data cache)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, i, j):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer2(
                context,
                builder,
                ary.data,
                cgutils.unpack_tuple(builder, ary.shape),
                cgutils.unpack_tuple(builder, ary.strides),
                aryty.layout,
                [args[1], args[2]],
                wraparound=False,
                boundscheck=False,
            )
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
            )
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.void(arr, i, j), codegen

    return prefetch


def _jit_noalias(fn):  # type: ignore[no-untyped-def]
    """:func:`fpreduce.base.jit.jit`, compiled with LLVM ``noalias`` on the array arguments, or None without numba.

    The caller passes distinct buffers (read-only ones may share memory): this is
    what lets LLVM vectorize the fold's loads from A (AVX-512 gathers) next to
    the stores into the accumulators. On the first call this module's
    :data:`_HELPERS` are replaced by numba functions compiled the same way, and
    :func:`_prefetch` by the intrinsic, before ``fn`` is compiled.
    """
    if jit(fn) is None:  # no numba, or FPREDUCE_NO_JIT
        return None
    compiled = []

    @serialized
    def make() -> None:
        if compiled:
            return
        jit_numba()  # (the cache directory, before numba.core)
        from numba.core.compiler import CompilerBase, DefaultPassBuilder

        class NoAlias(CompilerBase):
            def define_pipelines(self):  # type: ignore[no-untyped-def]
                self.state.flags.noalias = True
                return [DefaultPassBuilder.define_nopython_pipeline(self.state)]

        def njit(f):  # type: ignore[no-untyped-def]
            return kernel(f, "atomic orders", pipeline_class=NoAlias)

        # the kernel's globals, resolved when numba compiles it: numba functions from here on
        names = globals()
        names["_prefetch"] = _numba_prefetch()
        for name in _HELPERS:
            names[name] = njit(names[name])
        compiled.append(njit(fn))

    def call(*args):  # type: ignore[no-untyped-def]
        if not compiled:
            make()
        return compiled[0](*args)

    call.__name__ = call.__qualname__ = fn.__name__
    return call


def run(A, Au, col0, key, e0, count, bits, gstart, gthr, init, orders, out, sigma, velt, check, fold):  # type: ignore[no-untyped-def]
    """Run :func:`atomic_kernel` compiled (numba must be available) with fresh scratch buffers; its return value.

    ``gstart, gthr`` are :func:`~fpreduce.plans.per_element.draw_groups` of (n, bits).
    """
    n = init.shape[0]
    blk = kernel_width(n)
    return _compiled(
        A,
        Au,
        col0,
        np.uint64(key),
        e0,
        count,
        bits,
        gstart,
        gthr,
        init,
        orders,
        out,
        sigma,
        velt,
        np.uint32(check),
        fold,
        np.empty(blk, np.uint64),
        np.empty(blk, np.uint64),
        np.empty(blk, np.uint64),
        np.zeros(blk, np.uint64),
        np.empty((max(n - 1, 1), blk), init.dtype),
        np.empty((n, blk), init.dtype),
        np.empty(blk, np.float32),
    )


_compiled = _jit_noalias(atomic_kernel)
#: Whether the kernel can run (numba installed and ``FPREDUCE_NO_JIT`` unset at import).
HAVE_KERNEL = _compiled is not None

"""Benchmark of the engine on every shape: ns per addition and ratios to numpy, same process.

Run: python tests/benchmarks/bench_shapes.py [--small] [--numpy]  (FPREDUCE_NO_HWROUND=1: directed
modes rounded in software, not by the processor's mode)

For each shape (rows x columns) it prints the time per addition of ``fr.reduce`` for
the sequential and pairwise plans over several (input -> accumulator, rounding)
cases, and two numpy references measured in the same run: ``np.cumsum(X, axis=0)``
of the same float32 array, and the in-place row adds ``np.add(acc, X[i], out=acc)``;
a directed or stochastic case also prints its ratio to the same plan, formats and
shape in round to nearest (the targets: 1.5x directed, 2x stochastic).
``--numpy`` measures the numpy-only paths (as with ``FPREDUCE_NO_JIT=1``).
A call's time includes building the plan (a tree of n leaves for ``pairwise``).
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext

import numpy as np
from _timing import best, inplace_adds

import fpreduce as fr
from fpreduce.base import jit

CASES = [
    ("fp32", "fp32", "nearest_even"),
    ("bf16", "bf16", "nearest_even"),
    ("bf16", "fp32", "nearest_even"),
    ("fp16", "fp16", "nearest_even"),
    ("tf32", "tf32", "nearest_even"),
    ("fp32", "fp64", "nearest_even"),
    ("bf16", "bf16", "toward_zero"),
    ("bf16", "bf16", "up"),
    ("bf16", "bf16", "down"),
    ("bf16", "bf16", "stochastic"),
    ("fp16", "fp16", "up"),
    ("fp32", "fp32", "toward_zero"),
    ("fp32", "fp32", "up"),
    ("fp32", "fp64", "up"),
]


def run(n: int, m: int, plans: list[str], budget: float) -> None:
    X = np.random.default_rng(0).random((n, m), dtype=np.float32)
    adds = (n - 1) * m
    cs = best(lambda: np.cumsum(X, axis=0))
    ip = best(lambda: inplace_adds(X), 1)
    print(f"\n{n} x {m}: np.cumsum {cs / adds * 1e9:.2f} ns/add, in-place np.add rows {ip / adds * 1e9:.2f} ns/add")
    for plan in plans:
        nearest: dict[tuple[str, str], float] = {}
        for inp, acc, mode in CASES:
            Xi = fr.round_to(X, inp).astype(np.float32)
            kw = {"input": inp, "accumulate": acc, "rounding": mode, "seed": 1}
            t0 = time.perf_counter()
            fr.reduce(Xi, plan, **kw)  # compile / warm up (the same shape: the same kernels and blocks)
            reps = max(1, min(7, int(0.3 / max(time.perf_counter() - t0, 1e-6))))  # short calls: best of more
            t = best(lambda Xi=Xi, kw=kw, plan=plan: fr.reduce(Xi, plan, **kw), reps)
            if mode == "nearest_even":
                nearest[inp, acc] = t
            rn = f" {t / nearest[inp, acc]:6.2f} x RN" if mode != "nearest_even" and (inp, acc) in nearest else ""
            print(
                f"  {plan:10s} {inp}->{acc:5s} {mode:13s} {t / adds * 1e9:10.2f} ns/add"
                f" {t / cs:8.2f} x cumsum {t / ip:8.2f} x in-place{rn}"
            )
            if time.perf_counter() - t0 > budget:
                print("  (stopping this shape: over the time budget)")
                return


def main() -> None:
    small = "--small" in sys.argv
    ctx = jit.disabled() if "--numpy" in sys.argv else nullcontext()
    shapes = [(10**4, 1), (10**4, 16), (10**3, 1000)] if small else [(10**5, 1), (10**5, 16), (10**4, 1000)]
    with ctx:
        print("numpy-only paths" if "--numpy" in sys.argv else f"compiled kernels: {jit.enabled()}")
        for n, m in shapes:
            run(n, m, ["sequential", "pairwise"], 60.0)
        if not small and "--numpy" not in sys.argv:
            run(10**7, 1, ["sequential", "pairwise"], 60.0)


if __name__ == "__main__":
    main()

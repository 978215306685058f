"""Benchmark of the numeric core: ratios against baselines measured in the same run.

Run: python tests/benchmarks/bench_core.py  (xsum and ml_dtypes are used if installed)
Baseline for element-wise work: a plain numpy float32 ``a + b`` of the same size.
"""

from __future__ import annotations

import math

import numpy as np
from _timing import best

import fpreduce as fr


def main() -> None:
    rng = np.random.default_rng(0)
    n = 1 << 20
    a32 = rng.standard_normal(n).astype(np.float32)
    b32 = rng.standard_normal(n).astype(np.float32)
    a64 = a32.astype(np.float64) * 3.7
    base = best(lambda: a32 + b32, 20)
    print(f"baseline float32 a+b, {n} elements: {base * 1e3:.3f} ms")
    for label, fn in [
        ("round_to fp32 -> bf16 nearest", lambda: fr.round_to(a32, "bf16")),
        ("round_to fp32 -> tf32 nearest", lambda: fr.round_to(a32, "tf32")),
        ("round_to fp64 -> fp16 nearest", lambda: fr.round_to(a64, "fp16")),
        ("round_to fp64 -> fp8_e4m3 nearest", lambda: fr.round_to(a64, "fp8_e4m3")),
        ("round_to fp64 -> bf16 stochastic", lambda: fr.round_to(a64, "bf16", "stochastic", rng=1)),
    ]:
        print(f"{label:40s} {best(fn, 3) / base:8.1f} x baseline")

    # exact sums
    x = rng.standard_normal(10**6).astype(np.float32) * np.float32(1e3)
    t_ex = best(lambda: fr.exact_sum(x).to_float64(), 3)
    t_np = best(lambda: np.sum(x, dtype=np.float64), 5)
    t_fsum = best(lambda: math.fsum(x.tolist()), 1)
    xs = x[:20000]
    t_mp_small = best(lambda: fr.exact_sum_mpmath(xs[:, None]), 1)
    t_mp = t_mp_small * (x.size / xs.size)
    t_ex_small = best(lambda: fr.exact_sum(xs[:, None]).to_float64(), 3)
    print(f"exact_sum 10^6 fp32 values: {t_ex * 1e3:.1f} ms")
    print(f"  vs np.sum (float64, inexact): {t_ex / t_np:8.1f} x slower")
    print(f"  vs math.fsum:                 {t_ex / t_fsum:8.2f} x the time")
    print(f"  vs mpmath at exact precision (extrapolated from 2e4 values): {t_mp / t_ex:8.0f} x faster")
    print(f"  (on 2e4 values exact_sum vs mpmath: {t_mp_small / t_ex_small:.0f} x faster)")
    try:
        import xsum  # type: ignore[import-not-found]

        xl = x.astype(np.float64)

        def run_xsum() -> float:
            acc = xsum.xsum_small_accumulator()
            xsum.xsum_add(acc, xl)
            return float(xsum.xsum_round(acc))

        t_xs = best(run_xsum, 3)
        print(f"  throughput vs xsum: {t_xs / t_ex:8.3f} (>=0.5 is the target)")
    except ImportError:
        print("  xsum not installed: pip install xsum to compare")
    X = rng.standard_normal((64, 1 << 16)).astype(np.float32)
    t_X = best(lambda: fr.exact_sum(X).to_float64(), 1)
    t_Xb = best(lambda: np.add.reduce(X, axis=0), 5)
    print(f"exact_sum 64 x 2^16: {t_X * 1e3:.0f} ms = {t_X / t_Xb:.0f} x np.add.reduce(axis=0)")

    # engine
    X = rng.standard_normal((64, 1 << 16)).astype(np.float32)
    b63 = best(lambda: [X[0] + X[i] for i in range(1, 64)], 3)
    for inp, acc in [("bf16", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp8_e5m2")]:
        Xi = fr.round_to(X, inp)  # gradients already in the input format
        t = best(lambda inp=inp, acc=acc, Xi=Xi: fr.reduce(Xi, "sequential", input=inp, accumulate=acc), 1)
        print(f"reduce 64 x 2^16 sequential {inp}->{acc}: {t / b63:6.1f} x 63 float32 adds")
    X = fr.round_to(X, "bf16")
    t = best(lambda: fr.reduce(X, "pairwise", input="bf16", accumulate="bf16"), 1)
    print(f"reduce 64 x 2^16 pairwise bf16->bf16: {t / b63:6.1f} x 63 float32 adds")
    t = best(lambda: fr.reduce(X, "sequential", input="bf16", accumulate="bf16", rounding="toward_zero"), 1)
    print(f"reduce 64 x 2^16 sequential bf16->bf16 toward_zero: {t / b63:6.1f} x 63 float32 adds")
    try:
        import ml_dtypes

        Xb = X.astype(ml_dtypes.bfloat16)

        def mld() -> object:
            acc = Xb[0]
            for i in range(1, 64):
                acc = acc + Xb[i]
            return acc

        t = best(mld, 1)
        print(f"ml_dtypes bfloat16 sequential (same bits): {t / b63:6.1f} x 63 float32 adds")
    except ImportError:
        pass


if __name__ == "__main__":
    main()

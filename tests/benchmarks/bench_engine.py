"""Benchmark of the reduction engine: ratios against N-1 float32 numpy row adds, same run.

Run: python tests/benchmarks/bench_engine.py [--small] [--rounds K] [--numpy]
The baseline is the in-place ``acc = X[0].copy(); np.add(acc, X[k], out=acc)``: N-1
float32 adds of rows, the fastest numpy gets; the allocating ``s = s + X[k]`` (the
baseline of earlier versions) is measured too and its ratio printed beside it.
``--numpy`` measures the numpy-only paths (as with ``FPREDUCE_NO_JIT=1``). fpreduce runs on one
thread here, as the baseline does (``bench_native.py``: threads, natively stored bf16, torch).
ml_dtypes and torch are measured side by side when installed.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import Any

import numpy as np
from _timing import best, inplace_adds

import fpreduce as fr
from fpreduce.base import jit


def plain_adds(X: np.ndarray) -> np.ndarray:
    s = X[0] + X[1]
    for k in range(2, X.shape[0]):
        s = s + X[k]
    return s


def run(n: int, m: int, cases: list[tuple[str, dict[str, Any]]], rounds: int = 1) -> None:
    """Print each case's time over the baseline's; with ``rounds`` > 1, the range over rounds.

    Every round measures the baseline again, so a ratio compares timings taken
    close together (the machine may be shared).
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, m), dtype=np.float32)
    inputs = {kw["input"]: fr.round_to(X, kw["input"]) for _, kw in cases}  # inputs already in their format
    ratios: list[list[float]] = [[] for _ in cases]
    alloc_ratios: list[list[float]] = [[] for _ in cases]
    seq_ratios: list[list[float]] = [[] for _ in cases]
    bases = []
    allocs = []
    for _ in range(rounds):
        base = best(lambda: inplace_adds(X), 3)
        alloc = best(lambda: plain_adds(X), 3)
        bases.append(base)
        allocs.append(alloc)
        seq: dict[tuple[str, str], float] = {}
        for i, (plan, kw) in enumerate(cases):
            Xi = inputs[kw["input"]]
            t = best(lambda Xi=Xi, plan=plan, kw=kw: fr.reduce(Xi, plan, threads=1, **kw))  # numpy's one thread
            ratios[i].append(t / base)
            alloc_ratios[i].append(t / alloc)
            key = (kw["input"], kw["accumulate"])
            if plan == "sequential" and len(kw) == 2:
                seq[key] = t
            elif key in seq:
                seq_ratios[i].append(t / seq[key])
    print(
        f"\nN={n} x {m} elements: baseline {n - 1} in-place float32 row adds = {min(bases) * 1e3:.1f} ms"
        f" (allocating s = s + X[k]: {min(allocs) * 1e3:.1f} ms)"
        + (f" ({rounds} rounds: ratio ranges)" if rounds > 1 else "")
    )

    def fmt(v: list[float]) -> str:
        return f"{min(v):5.2f}" if len(v) == 1 else f"{min(v):5.2f}-{max(v):5.2f}"

    for i, (plan, kw) in enumerate(cases):
        args = " ".join(f"{k}={v}" for k, v in kw.items())
        extra = f"  ({fmt(seq_ratios[i])} x sequential)" if seq_ratios[i] else ""
        print(
            f"  {plan:12s} {args:48s} {fmt(ratios[i]):>11s} x in-place {fmt(alloc_ratios[i]):>11s} x allocating{extra}"
        )
    if n == 64:
        try:
            import ml_dtypes

            Xb = X.astype(ml_dtypes.bfloat16)
            t = best(lambda: plain_adds(Xb))
            print(f"  ml_dtypes bfloat16 sequential adds{'':29s} {t / min(bases):6.2f} x in-place")
        except ImportError:
            pass
        try:
            import torch  # type: ignore[import-not-found]

            Xt = torch.from_numpy(X).to(torch.bfloat16)
            t = best(lambda: plain_adds(Xt))  # type: ignore[arg-type]
            print(f"  torch CPU bf16 sequential adds{'':33s} {t / min(bases):6.2f} x in-place")
        except ImportError:
            pass


def main() -> None:
    small = "--small" in sys.argv
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
    m = 1 << (16 if small else 20)
    bf = {"input": "bf16", "accumulate": "bf16"}
    cases = [
        ("sequential", {"input": "bf16", "accumulate": "fp32"}),
        ("sequential", bf),
        ("sequential", {"input": "fp16", "accumulate": "fp16"}),
        ("sequential", {"input": "fp32", "accumulate": "fp32"}),
        ("pairwise", bf),
        ("ring:nccl", bf),
        ("ring:gloo", bf),
        ("rabenseifner", bf),
        ("atomic", bf),
        ("sequential", {"input": "bf16", "accumulate": "fp32", "output": "bf16"}),
        ("sequential", {"input": "bf16", "accumulate": "bf16", "rounding": "toward_zero"}),
        ("sequential", {"input": "bf16", "accumulate": "bf16", "rounding": "up"}),
        ("sequential", {"input": "fp16", "accumulate": "fp16", "rounding": "toward_zero"}),
        ("ring:nccl", {"input": "bf16", "accumulate": "bf16", "rounding": "toward_zero"}),
        ("sequential", {"input": "bf16", "accumulate": "bf16", "rounding": "stochastic", "seed": 1}),
        ("sequential", {"input": "bf16", "accumulate": "bf16", "algorithm": "kahan"}),
        ("sequential", {"input": "bf16", "accumulate": "bf16", "algorithm": "binned"}),
        ("sequential", {"input": "bf16", "accumulate": "bf16", "algorithm": "exact"}),
    ]
    cases.insert(10, ("sequential", {"input": "bf16", "accumulate": "bf16", "algorithm": "neumaier"}))
    with jit.disabled() if "--numpy" in sys.argv else nullcontext():
        print("numpy-only paths" if "--numpy" in sys.argv else f"compiled kernels: {jit.enabled()}")
        run(64, m, cases, rounds)
        wide = [("sequential", bf), ("ring:nccl", bf), ("pairwise", bf), ("rabenseifner", bf), ("atomic", bf)]
        run(1024, 1 << (12 if small else 16), wide, rounds)


if __name__ == "__main__":
    main()

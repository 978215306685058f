"""Benchmark: natively stored bf16 on T threads against torch's own reduction on the same threads.

Run: python tests/benchmarks/bench_native.py [--small] [--rounds K]

64 workers x 2^20 elements of bf16 (``--small``: 2^16). Every time is printed as a ratio
against two baselines timed in the same round: the in-place float32 adds
``np.add(acc, X[k], out=acc)`` over the float32 copy (numpy's fastest plain fold, one
thread), and ``torch.sum(T, 0)`` of the same bf16 tensor on the same number of threads
(torch accumulates bf16 in float32 and rounds once: fpreduce's ``bf16 -> fp32 -> bf16``;
its order is its own, so only the times compare). fpreduce's rows are the tensor's
memory (``fr.reduce(T, ...)`` reads the bf16 words: no float32 copy).
"""

from __future__ import annotations

import sys

import numpy as np
from _timing import best, inplace_adds

import fpreduce as fr

CASES = [
    ("bf16 -> fp32 -> bf16", {"accumulate": "fp32", "output": "bf16"}),
    ("bf16 -> bf16", {"accumulate": "bf16"}),
    ("bf16 -> bf16, toward_zero", {"accumulate": "bf16", "rounding": "toward_zero"}),
    ("bf16 -> bf16, stochastic", {"accumulate": "bf16", "rounding": "stochastic", "seed": 1}),
    ("bf16 -> bf16, premultiplied by 1/N (NCCL's average)", {"accumulate": "bf16", "average": "premultiply"}),
    (
        "bf16 -> bf16, predivided by N, stochastic",
        {"accumulate": "bf16", "average": "predivide", "rounding": "stochastic", "seed": 1},
    ),  # fmt: skip
    ("bf16 -> bf16, nearest (float32 copy)", {"accumulate": "bf16", "copy": True}),
    (
        "bf16 -> bf16, stochastic (float32 copy)",
        {"accumulate": "bf16", "rounding": "stochastic", "seed": 1, "copy": True},
    ),  # fmt: skip
]


def main() -> None:
    import torch  # type: ignore[import-not-found]

    small = "--small" in sys.argv
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
    n, m = 64, 1 << (16 if small else 20)
    rng = np.random.default_rng(0)
    X32 = fr.round_to(rng.standard_normal((n, m), dtype=np.float32), "bf16")
    T = torch.from_numpy(X32).to(torch.bfloat16)
    for k in range(1, 3):
        got = fr.reduce(T, "sequential", threads=k, **CASES[1][1])
        assert np.array_equal(got, fr.reduce(X32, "sequential", input="bf16", threads=1, **CASES[1][1]))
    res: dict[tuple[str, int], list[tuple[float, float]]] = {}
    bases: list[float] = []
    for _ in range(rounds):
        base = best(lambda: inplace_adds(X32), 3)
        bases.append(base)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            tt = best(lambda: torch.sum(T, 0), 3)
            res.setdefault(("torch.sum(T, 0)", threads), []).append((tt / base, 1.0))
            for name, kw in CASES:
                kw = dict(kw)
                src = X32 if kw.pop("copy", False) else T
                extra = {"input": "bf16"} if src is X32 else {}
                t = best(lambda s=src, kw=kw, x=extra, t=threads: fr.reduce(s, "sequential", threads=t, **x, **kw))
                res.setdefault((name, threads), []).append((t / base, t / tt))
    print(f"{n} x {m} bf16: baseline {n - 1} in-place float32 adds = {min(bases) * 1e3:.1f} ms ({rounds} rounds)")
    print(f"{'':42s} {'T':>2s} {'x in-place':>12s} {'x torch.sum, same T':>20s}")
    for (name, threads), v in res.items():
        a, b = [x[0] for x in v], [x[1] for x in v]
        print(f"{name:42s} {threads:2d} {min(a):5.2f}-{max(a):5.2f} {min(b):13.2f}-{max(b):5.2f}")


if __name__ == "__main__":
    main()

"""Per-step cost of the runner's metrics: ErrorStats.add + CompareStats.add (+ row) for 3 arms x 16 chunks
of 65536 elements, compiled kernels vs the numpy path, in one process (and the results compared).

Run: python tests/benchmarks/bench_stepmetrics.py
The first kernel call's time (compile, or load from numba's cache) is reported apart.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from fpreduce import round_to
from fpreduce.base import jit
from fpreduce.core.formats import get_format
from fpreduce.run import stepmetrics as sm

CHUNK, CHUNKS, REPEAT = 65536, 16, 5


def _data(out: str) -> tuple:
    rng = np.random.default_rng(0)
    m = CHUNK * CHUNKS
    hi = rng.standard_normal(m) * 2.0 ** rng.integers(-20, 20, m)
    lo = hi * 2.0**-60 * rng.standard_normal(m)
    cr = round_to(hi, out)
    ys = [cr, round_to(hi * (1 + 3e-7 * rng.standard_normal(m)), out), round_to(hi * (1 + 1e-6), out)]
    return hi, lo, cr, ys


def step(hi, lo, cr, ys, fmt) -> tuple[float, float, list]:  # type: ignore[no-untyped-def]
    err = [sm.ErrorStats() for _ in ys]
    cmp = [sm.CompareStats() for _ in ys]
    t0 = time.perf_counter()
    for c in range(CHUNKS):
        s = slice(c * CHUNK, (c + 1) * CHUNK)
        for i, y in enumerate(ys):
            err[i].add(y[s], hi[s], lo[s], cr[s], fmt)
            cmp[i].add(y[s], ys[0][s], fmt)
    t1 = time.perf_counter()
    rows = [{**e.row(), **k.row(), "hist": k.hist.tolist()} for e, k in zip(err, cmp, strict=True)]
    return t1 - t0, time.perf_counter() - t1, rows


def main() -> None:
    for out in ("fp32", "fp64"):
        fmt = get_format(out)
        data = _data(out)
        t0 = time.perf_counter()
        step(*data, fmt)
        first = time.perf_counter() - t0
        res = {}
        for kern in (True, False):
            best_add = best_row = float("inf")
            with contextlib.nullcontext() if kern else jit.disabled():
                for _ in range(REPEAT):
                    a, r, rows = step(*data, fmt)
                    best_add, best_row = min(best_add, a), min(best_row, r)
            res[kern] = rows
            print(
                f"{out} {'kernel' if kern else 'numpy '}: add {best_add * 1e3:7.1f} ms/step,"
                f" row (median) {best_row * 1e3:6.1f} ms/step"
            )
        same = repr(res[True]) == repr(res[False])
        print(f"{out} first kernel step (compile or cache load + run): {first:.2f} s; rows identical: {same}")


if __name__ == "__main__":
    main()

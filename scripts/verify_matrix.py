#!/usr/bin/env python3
"""Run the full verification matrix on this machine and print one line per (backend, N, algorithm, dtype).

    python3 scripts/verify_matrix.py [--backend mpi|gloo|all] [--np 2,3,...] [--seed S] [--big]

For every case: the real all-reduce (Open MPI with the algorithm forced, or
torch.distributed gloo) on N local processes vs fpreduce's matching plan; prints
the total number of differing elements over all sizes (goal 0), whether all ranks
agreed, and the smallest / largest contrast (elements differing from the other
plans at the largest size). Exit status 1 if anything differs.
"""
# ruff: noqa: T201  (a command-line script: it prints)

from __future__ import annotations

import argparse
import sys
import time

from fpreduce.backends import gloo, mpi
from fpreduce.backends._common import compare, make_inputs

SIZES = [1, 2, 3, 5, 7, 8, 13, 64, 100, 1000, 4099]
BIG = [1_500_001, 5_000_003]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="all", choices=["mpi", "gloo", "all"])
    ap.add_argument("--np", default="2,3,4,5,6,7,8")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--big", action="store_true", help="also gloo sizes above 2N MiB (segment-size rule)")
    a = ap.parse_args()
    ns = [int(v) for v in a.np.split(",")]
    bad = 0
    total = 0
    if a.backend in ("mpi", "all"):
        print(f"# {mpi.check_available()}", flush=True)
        for n in ns:
            for alg in mpi.ALGORITHMS:
                for dt in mpi.DTYPES:
                    cases = [make_inputs(n, m, dt, a.seed) for m in SIZES]
                    t = time.monotonic()
                    res = mpi.run_allreduce(cases, alg)
                    rs = [
                        compare(X, o, dt, mpi.expected_plan(alg, n, X.shape[1], dt), mpi.contrast_plans(n))
                        for X, o in zip(cases, res, strict=True)
                    ]
                    bad += _line("mpi", n, alg, dt, rs, time.monotonic() - t)
                    total += sum(X.shape[1] for X in cases)
    if a.backend in ("gloo", "all"):
        print(f"# {gloo.check_available()}", flush=True)
        for n in ns:
            dts = ["fp32", "fp16", "bf16", "fp64"]
            sizes = SIZES + (BIG if a.big else [])
            cases = {dt: [make_inputs(n, m, dt, a.seed) for m in sizes] for dt in dts}
            flat = [X for dt in dts for X in cases[dt]]
            t = time.monotonic()
            res = gloo.run_allreduce(flat, [dt for dt in dts for _ in sizes])
            el = time.monotonic() - t
            i = 0
            for dt in dts:
                rs = []
                for X in cases[dt]:
                    plan = gloo.expected_plan("ring", n, X.shape[1], dt)
                    rs.append(compare(X, res[i], dt, plan, gloo.contrast_plans(n)))
                    i += 1
                    total += X.shape[1]
                bad += _line("gloo", n, "ring", dt, rs, el)
    print(f"# {total} elements compared; {'ALL BIT-EXACT' if bad == 0 else f'{bad} case(s) differ'}")
    return 1 if bad else 0


def _line(backend: str, n: int, alg: str, dt: str, rs: list, seconds: float) -> int:
    diff = sum(r.differing for r in rs)
    agree = all(r.ranks_agree for r in rs)
    last = rs[-1]
    notes = sorted({r.plan for r in rs})
    con = ", ".join(f"{k}={v}" for k, v in last.contrast.items())
    print(
        f"{backend:4} N={n} {alg:18} {dt}: differing={diff} over {len(rs)} sizes, ranks agree={agree}, "
        f"plans used={notes}; contrast at M={last.elements}: {con} ({seconds:.1f}s)",
        flush=True,
    )
    return int(diff > 0 or not agree)


if __name__ == "__main__":
    sys.exit(main())

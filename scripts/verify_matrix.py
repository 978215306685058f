#!/usr/bin/env python3
"""Run the full verification matrix on this machine and print one line per (backend, N, algorithm, dtype).

    python3 scripts/verify_matrix.py [--backend mpi|gloo|all] [--np 2,3,...] [--seed S] [--big]
    python3 scripts/verify_matrix.py --default [--np 2,3,...] [--top 22]

For every case: the real all-reduce (Open MPI with the algorithm forced, or
torch.distributed gloo) on N local processes vs fpreduce's matching plan; prints
the total number of differing elements over all sizes (goal 0), whether all ranks
agreed, and the smallest / largest contrast (elements differing from the other
plans at the largest size). Exit status 1 if anything differs.

``--default``: Open MPI with nothing forced (its fixed rules choose) vs ``ompi:default``,
fp32 and fp64, one mpirun per (N, dtype) over a ladder of sizes from 1 to 2^top that
holds both sides of every switch of the rules at that N (and M = N - 1, N: the ring's
fallback); one table row per (N, dtype, algorithm chosen).
"""
# ruff: noqa: T201  (a command-line script: it prints)

from __future__ import annotations

import argparse
import sys
import time

from fpreduce import plans
from fpreduce.backends import gloo, mpi
from fpreduce.backends._common import compare, make_inputs
from fpreduce.plans.ompi import fixed_decision

SIZES = [1, 2, 3, 5, 7, 8, 13, 64, 100, 1000, 4099]
BIG = [1_500_001, 5_000_003]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="all", choices=["mpi", "gloo", "all"])
    ap.add_argument("--np", default="2,3,4,5,6,7,8")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--big", action="store_true", help="also gloo sizes above 2N MiB (segment-size rule)")
    ap.add_argument("--default", action="store_true", help="Open MPI's own choice (nothing forced) vs ompi:default")
    ap.add_argument("--top", type=int, default=22, help="--default: the largest size is 2^top elements")
    a = ap.parse_args()
    ns = [int(v) for v in a.np.split(",")]
    if a.default:
        return _default(ns, a.seed, a.top)
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


def ladder(n: int, item: int, top: int) -> list[int]:
    """Sizes 1 .. 2^top: both sides of every M where the fixed rules switch algorithm at N = ``n`` (scanned
    up to 2^17 elements, past the last switch below 128 ranks), M = N - 1 and N, powers of two, 1,000,003."""
    scan = min(1 << 17, 1 << top)
    alg = [fixed_decision(n, m * item) for m in range(scan + 1)]
    switch = [m for m in range(1, scan + 1) if alg[m] != alg[m - 1]] + [n]
    sizes = {s for m in switch for s in (m - 1, m)} | {1 << k for k in range(top + 1)} | {1_000_003}
    return sorted(s for s in sizes if 1 <= s <= 1 << top)


def _default(ns: list[int], seed: int, top: int) -> int:
    print(f"# {mpi.check_available()}; nothing forced (coll_tuned_use_dynamic_rules 0) vs ompi:default", flush=True)
    head = ["N", "dtype", "algorithm chosen", "plan", "sizes (M)", "elements", "differing", "differ from rd"]
    print("| " + " | ".join([*head, "from ring:ompi"]) + " |")
    print("|" + " --- |" * (len(head) + 1))
    bad = total = 0
    for n in ns:
        contrast = {"rd": plans.rd(n), "ring:ompi": plans.ring(n, "ompi")}
        for dt in mpi.DTYPES:
            item = 8 if dt == "fp64" else 4
            sizes = ladder(n, item, top)
            cases = [make_inputs(n, m, dt, seed) for m in sizes]
            t = time.monotonic()
            outs = mpi.run_allreduce(cases, mpi.DEFAULT, timeout=3600)
            rows: dict[tuple[str, str], list] = {}
            for X, o in zip(cases, outs, strict=True):
                r = compare(X, o, dt, mpi.expected_plan(mpi.DEFAULT, n, X.shape[1], dt), contrast)
                rows.setdefault((fixed_decision(n, X.shape[1] * item), r.plan), []).append(r)
                bad += int(r.differing > 0 or not r.ranks_agree)
                total += X.shape[1]
            for (alg, plan), rs in rows.items():
                ms = [r.elements for r in rs]
                diff = sum(r.differing for r in rs)
                agree = "" if all(r.ranks_agree for r in rs) else " (ranks DISAGREE)"
                con = [sum(r.contrast.get(k, 0) for r in rs) for k in contrast]
                print(
                    f"| {n} | {dt} | {alg} | `{plan}` | {len(ms)}: {_span(ms)} | {sum(ms):,} | {diff}{agree} | "
                    f"{con[0]:,} | {con[1]:,} |",
                    flush=True,
                )
            print(f"#   N={n} {dt}: {len(sizes)} sizes in {time.monotonic() - t:.1f}s", file=sys.stderr, flush=True)
    print(f"# {total:,} elements compared; {'ALL BIT-EXACT' if bad == 0 else f'{bad} case(s) differ'}")
    return 1 if bad else 0


def _span(ms: list[int]) -> str:
    """The sizes of a row: all of them when few, else the first two, the last two and the extremes."""
    show = ms if len(ms) <= 6 else [*ms[:3], "...", *ms[-2:]]
    return ", ".join(f"{m:,}" if isinstance(m, int) else m for m in show)


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

#!/usr/bin/env python3
"""Experiment B on real Open MPI processes: re-ranking (Comm.Split) and arrival order (coll/adapt).

    python3 scripts/experiment_b_mpi.py [--np 3,4,5,6,7,8] [--steps 8] [--seed 0]

Prints, per (N, algorithm), how many re-ranked steps were bit-exact against the
relabelled plan (and how many differed from the un-relabelled plan), then, per N,
how many arrival-order steps equal a sequential fold in some arrival order, how
many in the order of the injected delays, and how many distinct results appeared.
"""
# ruff: noqa: T201  (a command-line script: it prints)

from __future__ import annotations

import argparse
import sys

from fpreduce.backends import experiment_b, mpi


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", default="3,4,5,6,7,8")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ns = [int(v) for v in a.np.split(",")]
    print(f"# {mpi.check_available()}", flush=True)
    bad = 0
    for n in ns:
        for alg in ("ring", "segmented_ring", "rabenseifner", "recursive_doubling", "basic_linear"):
            st = experiment_b.reranking(n, alg, steps=a.steps, elements=1000, seed=a.seed)
            exact = sum(s.differing == 0 and s.ranks_agree for s in st)
            moved = sum(s.differing_unrelabelled > 0 for s in st)
            bad += exact != len(st)
            print(
                f"rerank N={n} {alg:18}: {exact}/{len(st)} steps bit-exact vs relabelled plan; "
                f"{moved}/{len(st)} differ from the un-relabelled plan",
                flush=True,
            )
    for n in [v for v in ns if v <= 6]:
        r = experiment_b.arrival_order(n, steps=2 * a.steps, elements=256, seed=a.seed)
        bad += not r.explained
        print(
            f"arrival N={n}: {sum(map(bool, r.orders))}/{len(r.orders)} steps = a sequential fold in some "
            f"arrival order, {r.matched_delay_order} in the injected delay order; "
            f"{r.distinct} distinct results (of {r.possible} possible)",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

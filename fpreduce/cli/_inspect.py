"""Commands that read what exists, computing nothing: ``show``, ``compare`` and ``list``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _cmd_show(args: argparse.Namespace) -> int:
    from fpreduce.report.tables import summary_table
    from fpreduce.run.rundir import load_run, lock

    d = Path(args.run)
    with lock(d, shared=True):
        res = load_run(d)
    if args.json:
        print(json.dumps(res.summary))
        return 0
    e = res.summary
    done, steps = e.get("steps_done"), e.get("steps")
    state = "complete" if res.complete else f"INCOMPLETE: {done} of {steps} steps (fpreduce run --out RUN --resume)"
    print(f"{d}: {len(res.arms)} arms, {state}")
    print(summary_table(res))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from fpreduce.core.formats import ALIASES, FORMATS
    from fpreduce.plans.families import DESCRIPTIONS

    if args.what == "formats":
        rows = [
            {
                "name": f.name,
                "bits": f.bits,
                "precision": f.precision,
                "exponent_bits": f.exponent_bits,
                "unit_roundoff": f.unit_roundoff,
                "max": f.max_finite,
                "smallest_normal": f.smallest_normal,
                "aliases": [a for a, n in ALIASES.items() if n == f.name],
            }
            for f in FORMATS.values()
        ]
        if args.json:
            print(json.dumps(rows))
            return 0
        print(f"{'name':<10} {'bits':>4} {'p':>3} {'e':>3} {'u':>10} {'max':>10} {'min normal':>11}  also written")
        for r in rows:
            print(
                f"{r['name']:<10} {r['bits']:>4} {r['precision']:>3} {r['exponent_bits']:>3} "
                f"{r['unit_roundoff']:>10.3g} {r['max']:>10.4g} {r['smallest_normal']:>11.4g}  "
                + ", ".join(r["aliases"])  # type: ignore[arg-type]
            )
        print("p: significand bits (with the hidden bit); e: exponent bits; u = 2^-p (round-to-nearest's bound)")
        print("numpy, ml_dtypes and torch dtypes are accepted too (np.float16, ml_dtypes.bfloat16, torch.bfloat16)")
        return 0
    if args.json:
        print(json.dumps(DESCRIPTIONS))
        return 0
    for text in DESCRIPTIONS.values():
        syntax, _, what = text.partition(": ")
        print(f"{syntax:<34} {what}")
    print('an explicit tree over workers 0..N-1 is a plan too: "((0,1),(2,3))"; docs/collectives.md cites the sources')
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``show``, ``compare`` and ``list``."""
    sh = sub.add_parser("show", help="print a finished (or interrupted) run's summary table; recomputes nothing")
    sh.add_argument("run", help="run directory")
    sh.add_argument("--json", action="store_true", help="print its summary.json as one JSON object")
    sh.set_defaults(func=_cmd_show)
    ls = sub.add_parser("list", help="the formats or plan families fpreduce knows, with their syntax")
    ls.add_argument("what", choices=("formats", "plans"), help="formats or plans")
    ls.add_argument("--json", action="store_true", help="print one JSON value and nothing else")
    ls.set_defaults(func=_cmd_list)


__all__ = ["add_commands"]

"""Commands that read what exists, computing nothing: ``show``, ``compare`` and ``list``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.texttable import table

if TYPE_CHECKING:
    from fpreduce.run.rundir import Results


def _cmd_show(args: argparse.Namespace) -> int:
    from fpreduce.report.tables import summary_table
    from fpreduce.run.rundir import load_run, lock

    d = Path(args.run)
    with lock(d, shared=True):
        res = load_run(d)
    if args.json:
        print(jsonfile.dumps(res.summary))
        return 0
    e = res.summary
    done, steps = e.get("steps_done"), e.get("steps")
    state = "complete" if res.complete else f"INCOMPLETE: {done} of {steps} steps (fpreduce run --out RUN --resume)"
    print(f"{d}: {len(res.arms)} arms, {state}")
    print(summary_table(res))
    return 0


def compare_runs(a: Results, b: Results) -> dict[str, Any]:
    """Arm by arm, whether two runs' results are bit-identical, from metrics.csv's per-step digests."""
    ma, mb = a.metrics, b.metrics
    arms = []
    for name in [n for n in ma if n in mb]:
        da, db = ma[name].get("digest"), mb[name].get("digest")
        steps = min(len(ma[name]["step"]), len(mb[name]["step"]))
        row: dict[str, Any] = {"arm": name, "steps": steps}
        if da is None or db is None or np.isnan(da[:steps]).any() or np.isnan(db[:steps]).any():
            row.update(identical=None, first_differing_step=None, steps_differing=None)
        else:
            differ = np.flatnonzero(da[:steps] != db[:steps])
            row.update(
                identical=differ.size == 0 and len(da) == len(db),
                first_differing_step=int(ma[name]["step"][differ[0]]) if differ.size else None,
                steps_differing=int(differ.size),
            )
        arms.append(row)
    return {
        "runs": [str(a.dir), str(b.dir)],
        "arms": arms,
        "only_in_first": [n for n in ma if n not in mb],
        "only_in_second": [n for n in mb if n not in ma],
    }


def _config_diff(a: Path, b: Path) -> list[str]:
    from fpreduce.run.config import diff, load_config
    from fpreduce.run.rundir import CONFIG_TOML

    try:
        return diff(load_config(a / CONFIG_TOML), load_config(b / CONFIG_TOML))
    except InvalidArgument:
        return []  # a run without a readable config.toml: compared by its results alone


def _cmd_compare(args: argparse.Namespace) -> int:
    from fpreduce.run.rundir import load_run, lock

    ra, rb = Path(args.run1), Path(args.run2)
    with lock(ra, shared=True), lock(rb, shared=True):
        doc = compare_runs(load_run(ra), load_run(rb))
    doc["config_differences"] = _config_diff(ra, rb)
    if not doc["arms"]:
        raise InvalidArgument(f"{ra} and {rb} have no arm in common")
    same = all(r["identical"] for r in doc["arms"])
    if args.json:
        print(jsonfile.dumps({**doc, "identical": same}))
        return 0 if same else 1
    body = []
    for r in doc["arms"]:
        verdict = {True: "identical", False: "DIFFER", None: "unknown"}[r["identical"]]
        first = "-" if r["first_differing_step"] is None else str(r["first_differing_step"])
        nd = "-" if r["steps_differing"] is None else f"{r['steps_differing']} of {r['steps']}"
        body.append([r["arm"], r["steps"], verdict, first, nd])
    print(table(["arm", "steps", "bits", "first differing step", "steps differing"], body, align="lrlrr", rule=False))
    for key, what in (("only_in_first", ra), ("only_in_second", rb)):
        if doc[key]:
            print(f"only in {what}: {', '.join(doc[key])}")
    if doc["config_differences"]:
        print("configs differ: " + "; ".join(doc["config_differences"]))
    print(
        "bits: every step's result has the same per-step digest (metrics.csv); unknown: a run written "
        "before digests; a differing step means at least one element's bits differ"
    )
    return 0 if same else 1


def _cmd_list(args: argparse.Namespace) -> int:
    from fpreduce.core.formats import ALIASES, FORMATS, spellings
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
                "spellings": spellings(f.name)[1:],
            }
            for f in FORMATS.values()
        ]
        if args.json:
            print(jsonfile.dumps(rows))
            return 0
        head = ["name", "bits", "p", "e", "u", "max", "min normal", "also written"]
        body = [
            [r["name"], r["bits"], r["precision"], r["exponent_bits"], f"{r['unit_roundoff']:.3g}"]
            + [f"{r['max']:.4g}", f"{r['smallest_normal']:.4g}", ", ".join(r["spellings"])]  # type: ignore[arg-type]
            for r in rows
        ]
        print(table(head, body, align="lrrrrrrl", rule=False))
        print("p: significand bits (with the hidden bit); e: exponent bits; u = 2^-p (round-to-nearest's bound)")
        print("any case; numpy.X is np.X; in Python the dtype objects too (np.float16, ml_dtypes.bfloat16, ...)")
        return 0
    if args.json:
        print(jsonfile.dumps(DESCRIPTIONS))
        return 0
    print(table(None, [text.partition(": ")[::2] for text in DESCRIPTIONS.values()], align="ll"))
    print('an explicit tree over workers 0..N-1 is a plan too: "((0,1),(2,3))"; docs/collectives.md cites the sources')
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``show``, ``compare`` and ``list``."""
    sh = sub.add_parser("show", help="print a finished (or interrupted) run's summary table; recomputes nothing")
    sh.add_argument("run", help="run directory")
    sh.add_argument("--json", action="store_true", help="print its summary.json as one JSON object and nothing else")
    sh.set_defaults(func=_cmd_show)
    cp = sub.add_parser(
        "compare",
        help="are two runs' results bit-identical, arm by arm? first differing step (exit 0 same, 1 different)",
    )
    cp.add_argument("run1", help="a run directory")
    cp.add_argument("run2", help="another run directory")
    cp.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    cp.set_defaults(func=_cmd_compare)
    ls = sub.add_parser("list", help="the formats or plan families fpreduce knows, with their syntax")
    ls.add_argument("what", choices=("formats", "plans"), help="formats or plans")
    ls.add_argument("--json", action="store_true", help="print one JSON value and nothing else")
    ls.set_defaults(func=_cmd_list)


__all__ = ["add_commands"]

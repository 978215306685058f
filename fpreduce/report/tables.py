"""The run's summary as a plain-text table (what ``fpreduce run`` prints): a pure function of summary.json.

One row per arm: its order and formats, the arm it is compared with (``in fp32`` when
the pair's output formats differ), the mean fraction of elements whose bits differ from
that arm, the mean fraction changed by a relaunch with an independently seeded order,
the mean normwise error against the exact sum, and whether every step was reproducible.
"""

from __future__ import annotations

from typing import Any

from fpreduce.base.texttable import table
from fpreduce.run.rundir import Results

__all__ = ["summary_table"]


def _pct(v: float | None) -> str:
    """A fraction as a percentage; ``<0.1%`` / ``>99.9%`` rather than a misleading ``0.0%`` / ``100.0%``."""
    if v is None:
        return "n/a"
    if 0.9995 <= v < 1:
        return ">99.9%"
    return "<0.1%" if 0 < v < 0.0005 else f"{100 * v:.1f}%"


def _err(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2e}"


def _vs(arm: dict[str, Any], arms: dict[str, dict[str, Any]], reference: str) -> str:
    other = str(arm.get("compare_to") or reference)
    if other == arm["name"]:
        return "(itself)"
    oa, ob = arm.get("output") or arm.get("accumulate"), arms.get(other, {}).get("output")
    return other + (f" (in {arm.get('compared_in') or oa})" if ob is not None and oa != ob else "")


def summary_table(results: Results) -> str:
    """The per-arm headline table of a run (runs before compare_to: every arm against the first)."""
    s = results.summary
    arms = {a["name"]: a for a in s["arms"]}
    rows = []
    for a in s["arms"]:
        fmts = f"{a['input']}->{a['accumulate']}" + (f"->{a['output']}" if a["output"] != a["accumulate"] else "")
        if a.get("algorithm", "plain") != "plain":
            fmts += f" {a['algorithm']}"
        if a.get("average", "none") != "none":
            fmts += f" avg={a['average']}"
        vs = _vs(a, arms, results.reference)
        diff = "-" if vs == "(itself)" else _pct(a.get("mean_diff_frac"))
        err = a.get("mean_err_norm")
        repro = {True: "yes", False: "no"}.get(a.get("reproducible"), "n/a")  # type: ignore[arg-type]
        rows.append([a["name"], a["order"], fmts, vs, diff, _pct(a.get("mean_rerun_diff_frac")), _err(err), repro])
    head = ["arm", "order", "formats", "vs", "differ", "relaunch", "norm err", "repro"]
    lines = [table(head, rows, align="llllrrrr")]
    lines += [
        "differ: elements whose bits differ from the 'vs' arm; relaunch: elements changed when the arm runs again",
        "with an independently seeded order; norm err: ||y - s|| / ||s|| against the exact sum; means over steps",
    ]
    return "\n".join(lines)

"""The findings of a run in words: one paragraph each, every number computed from its files.

Values that matter are also printed exactly (``float.hex``); NaN/Inf in the metrics
are counted and left out of statistics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.core.formats import get_format
from fpreduce.run.rundir import Results


def _x(v: float) -> str:
    """A human value with its exact float.hex beside it."""
    return f"{v:.3g} ({float(v).hex()})"


def _pct(v: float) -> str:
    return f"{100 * v:.3g}%"


def _fin(a: NDArray[np.float64]) -> NDArray[np.float64]:
    return a[np.isfinite(a)]


def _acc(arm: dict[str, Any]) -> str:
    return str(arm.get("accumulate", "?"))


def _mean_err(run: Results, arm: str) -> float:
    v = _fin(run.column(arm, "err_mean_rel"))
    return float(np.mean(v)) if v.size else math.nan


def status(run: Results) -> str | None:
    """``INCOMPLETE RUN: k of n steps`` for an unfinished run, else None."""
    s = run.summary
    done = s.get("steps_done", len(run.column(run.reference, "step")))
    return None if s.get("complete", False) else f"INCOMPLETE RUN: {done} of {s.get('steps', '?')} steps"


def paragraphs(run: Results) -> list[str]:
    """The findings of a loaded run (:func:`fpreduce.report.report.findings`), one paragraph each."""
    s, banner = run.summary, status(run)
    rep = next((a.get("reproducible") for a in run.arms if a["name"] == run.reference), None)
    verdict = (
        "was bitwise reproducible: re-running its first steps gave identical bits"
        if rep is True
        else "was NOT bitwise reproducible: re-running its first steps gave different bits"
        if rep is False
        else "was not checked for run-to-run reproducibility"
    )
    return [
        f"{banner}; every number below covers only the completed steps."
        if banner
        else f"The run completed all {s.get('steps_done', s.get('steps', '?'))} configured steps.",
        f"Reference arm {run.reference} {verdict}.",
        *_rerun(run),
        *([] if run.metrics else ["metrics.csv holds no step yet: there is nothing to measure."]),
        *_divergence(run),
        *_errors(run),
        *_pair_findings(run),
        *_training(run),
    ]


def _rerun(run: Results) -> list[str]:
    by = {
        v: [a["name"] for a in run.arms if a["name"] != run.reference and a.get("reproducible") is v]
        for v in (True, False)
    }
    return (
        [
            f"Re-running their first steps with a re-seeded order policy gave different bits for "
            f"{', '.join(by[False])}" + (f" and identical bits for {', '.join(by[True])}" if by[True] else "") + "."
        ]
        if by[False]
        else [f"Re-running their first steps gave identical bits for {', '.join(by[True])}."]
        if by[True]
        else []
    )


def _divergence(run: Results) -> list[str]:
    out = []
    for a in run.arms:
        d, st = run.column(a["name"], "diff_frac"), run.column(a["name"], "step")
        ok = np.isfinite(d)
        if a["name"] == run.reference or not ok.any():
            continue
        d, st, u = d[ok], st[ok], _fin(run.column(a["name"], "ulp_max"))
        what = f"Arm {a['name']} (order {a.get('order')}, {a.get('input')} inputs, {_acc(a)} accumulator)"
        if not np.any(d > 0):
            out.append(f"{what} gave bits identical to {run.reference}'s at all {d.size} steps.")
            continue
        w, med = int(np.argmax(d)), float(np.median(d))
        ulps = (
            f" The largest ulp distance per step had median {float(np.median(u)):g} and worst "
            f"{float(np.max(u)):g} ulps of {a.get('output') or _acc(a)}."
            if u.size
            else ""
        )
        out.append(
            f"{what} differed from {run.reference} in a median {_pct(med)} of elements per step (fraction "
            f"{_x(med)}), worst {_pct(float(d[w]))} at step {int(st[w])}; {int(np.sum(d > 0))} of "
            f"{d.size} steps differed, the first at step {int(st[np.argmax(d > 0)])}.{ulps}"
        )
    return out


def _errors(run: Results) -> list[str]:
    out = []
    for a in run.arms:
        me, mx = _mean_err(run, a["name"]), _fin(run.column(a["name"], "err_max_rel"))
        if not math.isnan(me):
            o = a.get("output") or _acc(a)
            out.append(
                f"Arm {a['name']}: mean relative error against the exact sum {_x(me)} = "
                f"{me / get_format(o).unit_roundoff:.3g} u of its {o} output; "
                f"worst element {_x(float(np.max(mx)) if mx.size else math.nan)}."
            )
        nf = _fin(run.column(a["name"], "nonfinite"))
        if nf.size and nf.sum() > 0:
            out.append(
                f"Arm {a['name']} produced NaN or Inf in {int(nf.sum())} element results "
                f"({int(np.sum(nf > 0))} steps); they are left out of the error statistics."
            )
    n = run.summary.get("workers")
    if isinstance(n, int) and n > 1 and out:
        fmts = sorted({_acc(a) for a in run.arms}, key=lambda f: get_format(f).precision)
        out.append(
            f"For comparison, with N = {n} the worst-case error bound of a recursive sum, relative to "
            f"sum |x_i|, is about (N-1)u, and random-sign rounding errors predict about sqrt(N)u: "
            + "; ".join(
                f"{f}: u = 2^-{get_format(f).precision}, (N-1)u = "
                f"{(n - 1) * get_format(f).unit_roundoff:.3g}, sqrt(N)u = "
                f"{math.sqrt(n) * get_format(f).unit_roundoff:.3g}"
                for f in fmts
            )
            + ". Sums with cancellation can exceed these relative to |sum x_i|."
        )
    return out


def _pair_findings(run: Results) -> list[str]:
    """Arms equal in everything that shapes the sum but the accumulator (or the algorithm)."""
    out, keys = [], ("order", "input", "accumulate", "rounding", "algorithm", "average")
    for vary in ("accumulate", "algorithm"):
        same = [k for k in keys if k != vary]
        for i, a in enumerate(run.arms):
            for b in run.arms[i + 1 :]:
                if a.get(vary) == b.get(vary) or any(a.get(k) != b.get(k) for k in same):
                    continue
                if vary == "accumulate" and get_format(_acc(a)).precision > get_format(_acc(b)).precision:
                    a, b = b, a  # the narrower accumulator first
                ea, eb = _mean_err(run, a["name"]), _mean_err(run, b["name"])
                if math.isnan(ea) or math.isnan(eb):
                    continue
                ratio = (
                    f"multiplied the mean relative error by {_x(eb / ea)}"
                    if ea > 0
                    else "left the mean relative error at 0"
                    if eb == 0
                    else f"raised the mean relative error from 0 to {_x(eb)}"
                )
                da, db = _fin(run.column(a["name"], "diff_frac")), _fin(run.column(b["name"], "diff_frac"))
                div = (
                    f"; the median fraction of elements differing from {run.reference} went from "
                    f"{_pct(float(np.median(da)))} to {_pct(float(np.median(db)))}"
                    if da.size and db.size and run.reference not in (a["name"], b["name"])
                    else ""
                )
                what = "accumulator" if vary == "accumulate" else vary
                oa, ob = a.get("output") or _acc(a), b.get("output") or _acc(b)
                note = f" (errors measured in each arm's output format: {oa} vs {ob})" if oa != ob else ""
                out.append(
                    f"Changing the {what} from {a.get(vary)} to {b.get(vary)} (arm {a['name']} -> "
                    f"{b['name']}) {ratio}{div}{note}."
                )
    return out


def _training(run: Results) -> list[str]:
    ref, out = run.reference, []
    steps, loss_ref = run.column(ref, "step"), run.column(ref, "loss")
    for a in run.arms if _fin(loss_ref).size else []:
        name, loss, pd = a["name"], run.column(a["name"], "loss"), run.column(a["name"], "param_dist")
        k = min(len(loss_ref), len(loss), len(pd))
        if name == ref or k == 0:
            continue
        first, pf = a.get("first_param_divergence_step"), run.column(name, "param_diff_frac")
        if first is None and np.any(pf > 0):
            first = int(steps[np.argmax(pf > 0)])
        la, lr = float(loss[k - 1]), float(loss_ref[k - 1])
        start = (
            f"first differed bitwise from {ref}'s at step {first}"
            if first is not None
            else f"stayed bitwise identical to {ref}'s"
        )
        out.append(
            f"Training: arm {name}'s weights {start}; after the last step ({int(steps[k - 1])}) the "
            f"relative parameter distance was {_x(float(pd[k - 1]))} and the loss differed by "
            f"{_x(la - lr)} ({name} {la:.6g} vs {ref} {lr:.6g})."
        )
    return out

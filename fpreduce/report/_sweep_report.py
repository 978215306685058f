"""The PDF report of a sweep directory: error and divergence against N, fitted slopes, the table.

A growth exponent is fitted (least squares of log error on log N) only on a series with
at least three positive points; it is printed with the range of N it covers and its R²,
and with a caveat where the errors sit below a tenth of the output format's unit
roundoff (most sums exact: the exponent then describes rare rounding events).
Fractions are drawn on linear 0-100% axes; reference slopes only on the error panel. Ulp
distances are drawn one accumulator format per axis (an ulp of bf16 is not an ulp of fp32).
Zeros on a log axis sit on a labelled dotted floor line, as in ``figures/sweep.png``.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import get_format
from fpreduce.report._figure import log_lines, percent_axis, series_style
from fpreduce.report.pdf import _H, Doc, Rect, cell, render
from fpreduce.run.rundir import SWEEP_CSV, SWEEP_MEASURES, read_sweep

_SWEEP_NUM = ("workers", *SWEEP_MEASURES)  # the numeric columns, as rundir.read_sweep parses them
#: (column, axis label, caption, scale); the error column falls back to mean_err_rel for older sweeps
_SWEEP_FIGS = (
    (
        "mean_err_norm",
        "normwise error vs exact sum",
        "Normwise error ||y - s|| / ||s|| against N (log-log). The dashed and dotted lines are reference "
        "slopes sqrt(N) (rounding errors cancelling like a random walk) and N (accumulating), anchored at the "
        "smallest N; the findings give each series' fitted exponent with its range and R^2.",
        "log",
    ),
    (
        "max_ulp",
        "max ulp distance to the compare_to arm",
        "Largest ulp distance between each arm and its compare_to arm against N, in ulps of the accumulator "
        "format named on the axis (one format per figure; log axis; zeros, i.e. identical bits, sit on the "
        "labelled dotted line at the bottom).",
        "log",
    ),
    (
        "mean_diff_frac",
        "elements differing from the compare_to arm",
        "Mean fraction of elements whose bits differ from the compare_to arm against N (linear 0-100%).",
        "percent",
    ),
    (
        "mean_rerun_diff_frac",
        "elements changed by a relaunch",
        "Mean fraction of elements that change when the arm is relaunched with an independently seeded "
        "order, against N (linear 0-100%; 0 for a fixed order).",
        "percent",
    ),
)


def fit_slope(ns: NDArray[np.float64], ys: NDArray[np.float64]) -> tuple[float, float] | None:
    """(exponent k, R²) of the least-squares fit log y = k log N + c over the positive points; None below 3.

    >>> k, r2 = fit_slope(np.array([2.0, 4, 8, 16]), np.array([1.0, 2, 4, 8]))
    >>> round(k, 6), round(r2, 6)
    (1.0, 1.0)
    >>> fit_slope(np.array([32.0, 64]), np.array([1e-3, 2e-3])) is None
    True
    """
    ok = np.isfinite(ys) & (ys > 0) & np.isfinite(ns) & (ns > 0)
    if ok.sum() < 3:
        return None
    x, y = np.log(ns[ok]), np.log(ys[ok])
    k, c = np.polyfit(x, y, 1)
    ss_res = float(np.sum((y - (k * x + c)) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return float(k), (1.0 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def _series(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    series: dict[str, dict[str, Any]] = {}
    several = len({r.get("dist", "") for r in rows}) > 1  # name the data only when it varies
    for r in sorted(rows, key=lambda r: r["workers"]):
        data = f" {r['dist']}" if several else ""
        m = series.setdefault(
            f"{r['arm']}: {r['plan']}{data} {r['input']}->{r['accumulate']}",
            {"accumulate": r["accumulate"], "itself": r.get("compare_to") == r["arm"]},
        )
        for c in _SWEEP_NUM:
            m[c] = np.append(m.get(c, np.array([])), r.get(c, math.nan))
    return series


def _fits(series: dict[str, dict[str, Any]], col: str) -> list[str]:
    lines = []
    for key, m in series.items():
        f = fit_slope(m["workers"], m[col])
        ok = np.isfinite(m[col]) & (m[col] > 0)
        if f is None:
            lines.append(f"{key}: {int(ok.sum())} positive point(s): no exponent fitted (needs 3).")
            continue
        k, r2 = f
        ns = m["workers"][ok]
        span = f"N = {int(ns.min())}..{int(ns.max())} ({int(ok.sum())} points, R^2 = {r2:.2f})"
        text = f"{key}: error grows like N^{k:.2f} over {span}"
        if r2 < 0.9:
            text += "; a poor fit: the points do not follow one power law"
        u = get_format(str(m["accumulate"])).unit_roundoff
        if float(np.median(m[col][ok])) < u / 10:
            text += (
                f"; caveat: the errors (median {float(np.median(m[col][ok])):.3g}) sit below a tenth of u = {u:.3g} "
                f"of {m['accumulate']}: most sums are exact, and the exponent describes rare rounding events"
            )
        lines.append(text + ".")
    return lines


def headline(rows: list[dict[str, Any]]) -> list[str]:
    """One to three sentences from sweep.csv: does the order matter over the grid, how much (the largest mean
    fraction of elements differing from the compare_to arm, where), and per accumulator format how much."""
    pairs = [r for r in rows if r.get("compare_to", "") != r["arm"] and np.isfinite(r["mean_diff_frac"])]
    if not pairs:
        return ["No arm is compared with another arm, so this sweep cannot say whether the order matters."]
    top = max(pairs, key=lambda r: r["mean_diff_frac"])
    if top["mean_diff_frac"] == 0:
        return ["The order does not matter here: no arm's bits differ from its compare_to arm at any N."]

    def where(r: dict[str, Any]) -> str:
        data = f" {r['dist']}" if len({q.get("dist", "") for q in rows}) > 1 else ""
        other = r.get("compare_to") or "the first arm"  # older sweeps: every arm against the first
        return f"{r['arm']} vs {other}, {r['plan']}{data} {r['input']}->{r['accumulate']}, N = {r['workers']}"

    out = [
        f"The order matters here: up to {100 * top['mean_diff_frac']:.3g}% of the elements per step differ from "
        f"the compare_to arm ({where(top)})."
    ]
    by_acc: dict[str, dict[str, Any]] = {}
    for r in pairs:
        if (
            r["accumulate"] != top["accumulate"]
            and r["mean_diff_frac"] >= by_acc.get(r["accumulate"], r)["mean_diff_frac"]
        ):
            by_acc[r["accumulate"]] = r
    if by_acc:
        out.append(
            "Other accumulators: "
            + "; ".join(
                f"with {a} at most {100 * r['mean_diff_frac']:.3g}%" + (f" ({where(r)})" if r["mean_diff_frac"] else "")
                for a, r in by_acc.items()
            )
            + "."
        )
    return out


def _panel(
    fig: Figure,
    rect: Rect,
    series: dict[str, dict[str, Any]],
    col: str,
    label: str,
    scale: str,
    unit: str | None = None,
) -> float:
    """One figure of the sweep report; ``unit``: only the series of that accumulator format (ulp distances)."""
    x, y, w, h = rect
    ax = fig.add_axes((x + 0.07, y + 0.4 * h, w - 0.08, 0.58 * h))  # legend below
    drawn, first = [], []
    for i, (key, m) in enumerate(series.items()):
        if (m["itself"] and col in ("max_ulp", "mean_diff_frac")) or (unit is not None and m["accumulate"] != unit):
            continue  # an arm compared with itself: no divergence to draw; another format: another unit
        ok = np.isfinite(m[col])
        if ok.any():
            drawn.append((m["workers"][ok], m[col][ok], {"ls": "-", "ms": 4, "label": key, **series_style(i)}))
            pos = ok & (m[col] > 0)
            if pos.any():
                first.append((float(m["workers"][pos][0]), float(m[col][pos][0])))
    ns = np.unique(np.concatenate([m["workers"] for m in series.values()]))
    if first and col in ("mean_err_norm", "mean_err_rel"):
        n0 = min(first)[0]
        y0 = float(np.median([f[1] for f in first if f[0] == n0]))
        drawn.append(
            (ns, y0 * np.sqrt(ns / n0), {"color": "k", "ls": "--", "lw": 1, "label": "reference slope sqrt(N)"})
        )
        drawn.append((ns, y0 * ns / n0, {"color": "k", "ls": ":", "lw": 1.2, "label": "reference slope N"}))
    if drawn:
        if scale == "log":
            log_lines(ax, drawn, markers=False)  # zeros on a labelled floor line, as in sweep.png
        else:
            for xs, ys, kw in drawn:
                ax.plot(xs, ys, **kw)
        ax.set_xscale("log")
        ax.set_xticks(ns, [f"{v:g}" for v in ns])
        ax.set_xticks([], minor=True)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    else:
        ax.text(0.5, 0.5, "no values to draw", ha="center", transform=ax.transAxes)
    if scale == "percent":
        percent_axis(ax, label)
    short = f"max ulp distance (ulps of {unit})" if unit is not None else label
    ax.set(xlabel="N workers", ylabel=short, title=label + " against N")
    ax.grid(True, which="both", alpha=0.3)
    return (1 - y) * _H


def write_sweep_report(sweep_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the PDF report of a sweep directory (``sweep.csv``, default ``SWEEP/report.pdf``):
    error and divergence against N per series, fitted exponents with range and R², and the table."""
    d = Path(sweep_dir)
    rows = read_sweep(d)
    if not rows:
        raise InvalidArgument(f"{d / SWEEP_CSV}: no rows; nothing to report")
    series = _series(rows)
    norm = any(np.isfinite(m["mean_err_norm"]).any() for m in series.values())
    err = "mean_err_norm" if norm else "mean_err_rel"
    lines = _fits(series, err)
    figs = list(_SWEEP_FIGS)
    if not norm:  # an older sweep: the per-element relative error stands in
        figs[0] = (
            "mean_err_rel",
            "mean relative error vs exact sum",
            "Mean per-element relative error |y - s| / |s| "
            "against N (log-log), with reference slopes sqrt(N) and N anchored at the smallest N.",
            "log",
        )

    def body(doc: Doc) -> None:
        doc.new_page()
        doc.heading(f"fpreduce sweep report: {d.name}", 18)
        doc.text(
            "How do the error against the exact sum and the divergence between summation orders grow "
            "with the number of workers N, for each plan and format? Reference slopes on the error panel: "
            "sqrt(N) (random-walk rounding errors) and N (worst case).",
            size=11,
        )
        what = "normwise error" if norm else "mean relative error (this sweep predates normwise errors)"
        doc.y += 0.1
        for h in headline(rows):
            doc.text(h, size=11, weight="bold")
        doc.heading(f"Findings: least-squares exponent of the {what} against N", 11)
        for ln in lines or ["(no series)"]:
            doc.text("- " + ln, size=9)
        units = list(dict.fromkeys(str(m["accumulate"]) for m in series.values()))
        first = True
        for col, label, cap, scale in figs:
            for unit in units if col == "max_ulp" else [None]:
                text = f"{label} (ulps of {unit})" if unit is not None else label
                draw = partial(_panel, series=series, col=col, label=text, scale=scale, unit=unit)
                if first:
                    doc.new_page()
                    first = False
                doc.figure(draw, cap)
        doc.new_page()
        doc.heading("Sweep table (sweep.csv)")
        head = list(rows[0])
        keys = sum(1 for h in head if h not in _SWEEP_NUM[1:] and h != "compare_to")  # the columns naming a row
        head = [h for h in head if h not in _SWEEP_NUM[1:]] + [h for h in head if h in _SWEEP_NUM[1:]]
        doc.table(head, [[cell(r[h]) if h in _SWEEP_NUM[1:] else r[h] for h in head] for r in rows], keys=keys)

    return render(Path(out) if out is not None else d / "report.pdf", f"fpreduce sweep {d.name}", body)

"""The PDF report of a sweep directory: error and divergence against N, fitted slopes, the table."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.report.pdf import _H, Doc, Rect, cell, render
from fpreduce.run.rundir import SWEEP_CSV, read_sweep

_SWEEP_NUM = ("workers", "mean_err_rel", "max_err_rel", "mean_diff_frac", "max_ulp")
_SWEEP_FIGS = (
    (
        "mean_err_rel",
        "mean relative error vs exact sum",
        "Mean relative error against N. Look at which "
        "reference slope each series follows: sqrt(N) means rounding errors cancel like a random walk, N means "
        "they accumulate.",
    ),
    (
        "max_ulp",
        "max ulp distance to arm A",
        "Largest ulp distance between the two orders against N (zeros, "
        "i.e. identical bits, are not drawn on the log axis).",
    ),
    (
        "mean_diff_frac",
        "mean fraction of elements differing",
        "Fraction of elements whose bits differ between the two orders against N (zeros not drawn).",
    ),
)


def write_sweep_report(sweep_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the PDF report of a sweep directory (``sweep.csv``, default ``SWEEP/report.pdf``):
    error and divergence against N per series on log axes with sqrt(N) and N slopes, and the table."""
    d = Path(sweep_dir)
    rows = read_sweep(d)
    if not rows:
        raise InvalidArgument(f"{d / SWEEP_CSV}: no rows; nothing to report")
    series: dict[str, dict[str, NDArray[np.float64]]] = {}
    several = len({r.get("dist", "") for r in rows}) > 1  # name the data only when it varies
    for r in sorted(rows, key=lambda r: r["workers"]):
        data = f" {r['dist']}" if several else ""
        m = series.setdefault(f"{r['arm']}: {r['plan']}{data} {r['input']}->{r['accumulate']}", {})
        for c in _SWEEP_NUM:
            m[c] = np.append(m.get(c, np.array([])), r[c])
    lines = []
    for key, m in series.items():
        ok = np.isfinite(m["mean_err_rel"]) & (m["mean_err_rel"] > 0)
        if ok.sum() >= 2:
            k = float(np.polyfit(np.log(m["workers"][ok]), np.log(m["mean_err_rel"][ok]), 1)[0])
            lines.append(
                f"{key}: mean error grows like N^{k:.2f} ({k.hex()}) over N = "
                f"{int(m['workers'][ok][0])}..{int(m['workers'][ok][-1])}."
            )

    def panel(fig: Figure, rect: Rect, col: str, label: str) -> float:
        x, y, w, h = rect
        ax, first = fig.add_axes((x + 0.07, y + 0.3 * h, w - 0.08, 0.68 * h)), []  # legend below
        for i, (key, m) in enumerate(series.items()):
            ok = np.isfinite(m[col]) & (m[col] > 0)
            if ok.any():
                ax.plot(
                    m["workers"][ok],
                    m[col][ok],
                    "o" + ("-", "--", ":")[i // 10 % 3],
                    color=f"C{i % 10}",
                    ms=3,
                    label=key,
                )
                first.append((float(m["workers"][ok][0]), float(m[col][ok][0])))
        if first:
            n0 = min(first)[0]
            y0 = float(np.median([f[1] for f in first if f[0] == n0]))
            ns = np.unique(np.concatenate([m["workers"] for m in series.values()]))
            ax.plot(ns, y0 * np.sqrt(ns / n0), "k--", lw=1, label="slope sqrt(N)")
            ax.plot(ns, y0 * ns / n0, "k:", lw=1.2, label="slope N")
            ax.set(xscale="log", yscale="log")
            ax.set_xticks(ns, [f"{v:g}" for v in ns])
            ax.set_xticks([], minor=True)
            ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.1))
        else:
            ax.text(0.5, 0.5, "no positive values to draw on log axes", ha="center", transform=ax.transAxes)
        ax.set(xlabel="N workers", ylabel=label, title=label + " against N")
        ax.grid(True, which="both", alpha=0.3)
        return (1 - y) * _H

    def body(doc: Doc) -> None:
        doc.new_page()
        doc.heading(f"fpreduce sweep report: {d.name}", 18)
        doc.text(
            "How do the error against the exact sum and the divergence between summation orders grow "
            "with the number of workers N, for each plan and format? Reference slopes: sqrt(N) "
            "(random-walk rounding errors) and N (worst case).",
            size=11,
        )
        doc.heading("Findings: least-squares slope of log mean error against log N", 11)
        for ln in lines or ["(no series with two positive points: no slope)"]:
            doc.text("- " + ln, size=9)
        for col, label, cap in _SWEEP_FIGS:
            doc.figure_page(partial(panel, col=col, label=label), cap)
        doc.new_page()
        doc.heading("Sweep table (sweep.csv)")
        head = list(rows[0])
        doc.table(head, [[cell(r[h]) if h in _SWEEP_NUM[1:] else r[h] for h in head] for r in rows])

    return render(Path(out) if out is not None else d / "report.pdf", f"fpreduce sweep {d.name}", body)

"""The price of determinism on one page: time and numerics of each training mode (``fpreduce price``).

A pure function of a study directory (its ``price.json``, read through
:func:`fpreduce.run.rundir.read_study`). Every sentence is computed from the rows it
describes (:func:`findings`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.report._figure import legend, new_figure, save_figures, series_style
from fpreduce.report.pdf import Doc, draw_png, render
from fpreduce.run import rundir

__all__ = ["findings", "plot_price", "table", "write_price_report"]

Row = Mapping[str, Any]


def _secs(v: float | None) -> str:
    return "never" if v is None or math.isnan(v) else f"{v:.2f} s"


def _reach(r: Row) -> str:
    t = r["time_to_target_s"]
    return "never reaches the target" if t is None or math.isnan(t) else f"reaches the target after {_secs(t)}"


def findings(rows: Sequence[Row], target: float) -> list[str]:
    """Sentences comparing each mode with the reference (the first row), computed from the rows."""
    ref, out = rows[0], []
    if not math.isfinite(target):
        out.append(
            f"{ref['mode']} (the reference) ends with loss {ref['final_loss']:.3g}: training diverged, so there is "
            "no target loss to reach (lower source.lr, or give price.target_loss)."
        )
    out.append(
        f"{ref['mode']} (the reference) takes {ref['step_s'] * 1e3:.1f} ms per step and reaches loss {target:.3g} "
        f"after {_secs(ref['time_to_target_s'])}; relaunched with other timings it gives "
        + ("the same bits." if ref["rerun_bits"] == 0 else f"other bits in {ref['rerun_bits']:.1%} of the weights.")
    )
    for r in rows[1:]:
        faster = ref["step_s"] / r["step_s"]
        speed = f"{faster:.2f}x the reference's steps per second"
        if faster < 1:
            speed = f"{1 / faster:.2f}x slower per step"
        repro = "reproducible (a relaunch gives the same bits)"
        if r["rerun_bits"] > 0:
            repro = f"not reproducible: a relaunch changes {r['rerun_bits']:.1%} of the weights' bits"
        s = f"{r['mode']}: {speed}; {_reach(r)}; {repro}; its final weights differ from the reference's in "
        s += f"{r['bits_vs_reference']:.1%} of their bits (relative distance {r['distance_vs_reference']:.2g})"
        if r["staleness_max"]:
            s += f"; gradients are {r['staleness_mean']:.1f} updates stale on average (at most {r['staleness_max']})"
        out.append(s + ".")
    return out


def table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table."""
    from fpreduce.base.texttable import table as render

    head = ["mode", "ms/step", "to target", "final loss", "bits vs ref", "rerun bits", "stale"]
    body = [
        [r["mode"], f"{r['step_s'] * 1e3:.1f}", _secs(r["time_to_target_s"]), f"{r['final_loss']:.4g}"]
        + [f"{r['bits_vs_reference']:.1%}", f"{r['rerun_bits']:.1%}", f"{r['staleness_mean']:.1f}"]
        for r in rows
    ]
    return render(head, body, align="l")


def plot_price(
    traces: Mapping[str, Mapping[str, list[Any]]], target: float, out_dir: Path, *, title: str
) -> list[Path]:
    """``price.png|pdf``: loss against simulated time and against steps; staleness histograms."""

    def build():  # type: ignore[no-untyped-def]
        fig, (ax, bx, cx) = new_figure(title, f"dashed: the target loss {target:.3g}", 1, 3)
        entries = []
        for i, (m, tr) in enumerate(traces.items()):
            style: dict[str, Any] = series_style(i)
            style["markevery"] = max(1, len(tr["time"]) // 8)
            if i == 0:  # the reference: wide and pale, so a mode drawn on top of it stays visible
                style.update(lw=5, alpha=0.35)
            (line,) = ax.plot(tr["time"], tr["loss"], **style)
            bx.plot(np.arange(1, len(tr["loss"]) + 1), tr["loss"], **style)
            entries.append((line, m))
            stale = tr.get("staleness", [])
            if max(stale, default=0) > 0:
                cx.hist(stale, bins=np.arange(max(stale) + 2) - 0.5, color=style["color"], alpha=0.6)
        for a, xl in ((ax, "simulated time (s)"), (bx, "step (N gradients each)")):
            a.set_yscale("log")
            a.axhline(target, ls="--", color="0.4", lw=0.9)
            a.set_xlabel(xl)
            a.set_ylabel("loss (fixed evaluation batch)")
            a.grid(True)
        cx.set_xlabel("staleness (updates)")
        cx.set_ylabel("gradients")
        cx.set_title("staleness of the applied gradients", fontsize=9)
        if not cx.patches:
            cx.text(0.5, 0.5, "no mode with stale gradients", ha="center", va="center", transform=cx.transAxes)
        legend(fig, entries)
        return fig

    return save_figures(out_dir, {"price": build}, ("png", "pdf"))


def write_price_report(study_dir: str | Path) -> list[Path]:
    """``figures/price.png|pdf`` and ``report.pdf`` of a price study directory, from its ``price.json``."""
    out = Path(study_dir)
    doc = rundir.read_study(out, "price")
    cfg, rows, target = doc["config"], doc["rows"], float(doc["target_loss"])
    sp, cm = cfg["price"], cfg["compute"]
    figs = plot_price(doc["traces"], target, out / "figures", title=f"The price of determinism: {sp['name']}")
    png = next(f for f in figs if f.suffix == ".png")

    def body(d: Doc) -> None:
        d.new_page()
        d.heading(f"The price of determinism: {sp['name']}")
        d.text(
            f"{sp['workers']} workers train the same MLP from the same weights on the same batches for "
            f"{sp['steps']} steps of {sp['workers']} gradients each; gradients in {sp['input']}, summed in "
            f"{sp['accumulate']} with {sp['plan']} (sync, local) or in arrival order (sync:arrival, m_sync), master "
            f"weights in {sp['master']}. Compute: {cm['step'] * 1e3:g} ms per gradient, speeds spread "
            f"{cm['spread']:g}, {cm['jitter']} jitter {cm['scale']:g}, stragglers {cm['straggler_prob']:g}. Each "
            "mode is relaunched with other timings (same data, same weights): 'rerun bits' is what that changes."
        )
        for s in findings(rows, target):
            d.text("- " + s)
        d.text(table(rows), mono=True, size=7.5)
        d.figure_page(
            draw_png(png),
            "Left: loss against simulated time; middle: against steps; right: how stale the applied gradients were.",
        )

    render(out / "report.pdf", f"fpreduce price: {sp['name']}", body)
    return [*figs, out / "report.pdf"]

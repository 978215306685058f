"""Figures and a one-page report of speed-up curves (``fpreduce scale``).

A pure function of a study directory (its ``scale.json``, read through
:func:`fpreduce.run.rundir.read_study`). Every sentence is computed from the rows it
describes (:func:`findings`); the figure draws speed-up against N with the ideal line,
and per plan the all-reduce's time against the compute per worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from fpreduce.analysis.scaling import ScaleRow, format_table
from fpreduce.report._figure import legend, new_figure, save_figures, series_style
from fpreduce.report.pdf import Doc, draw_png, render
from fpreduce.run import rundir

__all__ = ["findings", "plot_scaling", "write_scale_report"]


def _by_plan(rows: Sequence[ScaleRow]) -> dict[str, list[ScaleRow]]:
    out: dict[str, list[ScaleRow]] = {}
    for r in rows:
        out.setdefault(r.plan, []).append(r)
    return out


def findings(rows: Sequence[ScaleRow], *, knee: float = 0.8) -> list[str]:
    """Sentences about the curves, each computed from the rows (efficiency threshold ``knee``)."""
    out = []
    for plan, rs in _by_plan(rows).items():
        rs = sorted(rs, key=lambda r: r.workers)
        big = rs[-1]
        s = (
            f"{plan}: {big.speedup:.1f}x on {big.workers} workers ({big.efficiency:.0%} of ideal); "
            f"the all-reduce takes {big.comm_s * 1e3:.2f} ms of a {big.step_s * 1e3:.2f} ms step "
            f"({big.comm_s / big.step_s:.0%})."
        )
        below = [r for r in rs if r.workers > 1 and r.efficiency < knee]
        if below:
            first = below[0]
            prev = [r for r in rs if r.workers < first.workers]
            before = f" (at {prev[-1].workers}: {prev[-1].speedup:.1f}x)" if prev else ""
            s += f" Efficiency first falls below {knee:.0%} at N = {first.workers}: {first.speedup:.1f}x{before}."
        else:
            s += f" Efficiency stays at or above {knee:.0%} up to N = {big.workers}."
        out.append(s)
    best = max(rows, key=lambda r: (r.speedup, -r.workers)) if rows else None
    if best is not None and len(_by_plan(rows)) > 1:
        out.append(f"Fastest point: {best.plan} on {best.workers} workers, {best.speedup:.1f}x.")
    return out


def plot_scaling(rows: Sequence[ScaleRow], out_dir: Path, *, title: str = "Speed-up") -> list[Path]:
    """``out_dir/speedup.png|pdf``: speed-up vs N (ideal dashed) and each plan's step time split."""

    def build():  # type: ignore[no-untyped-def]
        fig, (ax, bx) = new_figure(title, "compute of the global batch split N ways + one all-reduce", 1, 2)
        entries = []
        ns = sorted({r.workers for r in rows})
        (ideal,) = ax.plot(ns, ns, ls="--", color="0.5", lw=1)
        entries.append((ideal, "ideal (speed-up = N)"))
        for i, (plan, rs) in enumerate(_by_plan(rows).items()):
            x = np.array([r.workers for r in rs])
            style = series_style(i)
            (line,) = ax.plot(x, [r.speedup for r in rs], **style)
            multi = [r for r in rs if r.workers > 1]  # one worker has no all-reduce (0 on a log axis)
            bx.plot([r.workers for r in multi], [r.comm_s * 1e3 for r in multi], **style)
            entries.append((line, plan))
        (comp,) = bx.plot(ns, [rows[0].compute_s * rows[0].workers / n * 1e3 for n in ns], color="0.2", ls=":")
        entries.append((comp, "compute per worker (every plan)"))
        for a in (ax, bx):
            a.set_xscale("log", base=2)
            a.set_xticks(ns, [str(n) for n in ns])
            a.set_xlabel("workers N")
            a.grid(True)
        ax.set_ylabel("speed-up over one worker")
        ax.set_yscale("log", base=2)
        lo = min(1.0, min(r.speedup for r in rows))
        ticks = [2.0**k for k in range(int(np.floor(np.log2(lo))), int(np.log2(max(ns))) + 1)]
        ax.set_yticks(ticks, [f"{v:g}" for v in ticks])
        bx.set_ylabel("time per step (ms)")
        bx.set_yscale("log")
        bx.set_title("all-reduce time (markers) vs compute (dotted)", fontsize=9)
        legend(fig, entries)
        return fig

    return save_figures(out_dir, {"speedup": build}, ("png", "pdf"))


def _rows(doc: Mapping[str, Any]) -> list[ScaleRow]:
    inf = float("inf")
    fields: list[dict[str, Any]] = [{k: (inf if v is None else v) for k, v in r.items()} for r in doc["rows"]]
    return [ScaleRow(**f) for f in fields]


def write_scale_report(study_dir: str | Path) -> list[Path]:
    """``figures/speedup.png|pdf`` and ``report.pdf`` of a scale study directory, from its ``scale.json``."""
    out = Path(study_dir)
    doc = rundir.read_study(out, "scale")
    rows, name = _rows(doc), doc["name"]
    p = SimpleNamespace(**doc["profile"])
    figs = plot_scaling(rows, out / "figures", title=f"Speed-up: {name}")
    png = next(f for f in figs if f.suffix == ".png")

    def body(d: Doc) -> None:
        d.new_page()
        d.heading(f"Speed-up of data-parallel training: {name}")
        d.text(
            f"A step computes the gradient of the global batch split over N workers ({doc['compute_s'] * 1e3:g} ms "
            f"on one worker) and then all-reduces it ({doc['nbytes'] / 1e6:g} MB), with no overlap. Cluster: "
            f"alpha {p.alpha * 1e6:g} us and {1 / p.beta / 1e9:g} GB/s between nodes, {p.alpha_intra * 1e6:g} us "
            f"and {1 / p.beta_intra / 1e9:g} GB/s inside a node of {p.gpus_per_node}, reduction "
            + (f"{1 / p.gamma / 1e9:g} GB/s." if p.gamma > 0 else "free.")
        )
        for s in findings(rows):
            d.text("- " + s)
        d.text(format_table(rows), mono=True, size=7)
        d.figure_page(
            draw_png(png),
            "Left: speed-up against N (dashed: ideal). Right: the all-reduce's time per step against the compute "
            "per worker; above the dotted line, communication takes more of the step than compute.",
        )

    render(out / "report.pdf", f"fpreduce scale: {name}", body)
    return [*figs, out / "report.pdf"]

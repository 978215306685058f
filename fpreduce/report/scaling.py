"""Figures and a one-page report of speed-up curves (``fpreduce scale``).

A pure function of a study directory (its ``scale.json``, read through
:func:`fpreduce.run.rundir.read_study`). Every sentence is computed from the rows it
describes (:func:`findings`) and the cluster's profile (:func:`cluster_text`); the figure
draws speed-up against N with the ideal line, and per plan the all-reduce's time against
the compute per worker, both with the node boundaries marked (the workers of one node
shaded, the number of nodes on the top axis).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from fpreduce.analysis.scaling import ScaleRow, format_table, model_note, size_text
from fpreduce.report._figure import legend, new_figure, save_figures, series_style
from fpreduce.report.pdf import Doc, draw_png, render
from fpreduce.run import rundir

__all__ = ["cluster_text", "findings", "plot_scaling", "rows_of", "write_scale_report"]


def _by_plan(rows: Sequence[ScaleRow]) -> dict[str, list[ScaleRow]]:
    """The curves: one per plan, or per plan and message size when the study has several (``ring 16M``)."""
    several = len({r.nbytes for r in rows if r.nbytes == r.nbytes}) > 1
    out: dict[str, list[ScaleRow]] = {}
    for r in rows:
        out.setdefault(f"{r.plan} {size_text(r.nbytes)}" if several else r.plan, []).append(r)
    return out


def _mb(nbytes: float | list[float]) -> str:
    """A study's message size (or its sizes, a message-size sweep) in MB."""
    sizes = nbytes if isinstance(nbytes, list | tuple) else [nbytes]
    return ", ".join(f"{b / 1e6:g}" for b in sizes) + " MB"


def _gb(v: float) -> str:
    x = v / 1e9
    return f"{x:.0f} GB/s" if x >= 100 else f"{x:.1f} GB/s" if x >= 10 else f"{x:.2f} GB/s"


def cluster_text(p: Any) -> str:
    """The cluster's links and topology in one paragraph, from its profile (a ``Profile`` or its fields)."""
    g, nics = p.gpus_per_node, getattr(p, "nics_per_node", 1)
    if not hasattr(p, "nics_per_node"):
        return (
            f"Cluster: nodes of {g}, {_gb(1 / p.beta_intra)} inside a node and {_gb(1 / p.beta)} between nodes. "
            "A study written before the model shared a node's NICs: its times let every flow leaving a node "
            "use a whole NIC (rerun it)."
        )
    its = "NIC" if nics == 1 else f"{nics} NICs"
    if g > 1:
        nodes = (
            f"nodes of {g} workers (worker i on node i // {g}), {p.alpha_intra * 1e6:g} us and "
            f"{_gb(1 / p.beta_intra)} between two workers of a node"
        )
        share = (
            f"Flows that leave or enter a node at once share its {its}: {g} shards sent across together "
            f"move at {_gb(min(1, nics / g) / p.beta)} each."
        )
    else:
        nodes = "one worker per node"
        verb = "is" if nics == 1 else "are"
        share = f"Every all-reduce of 2 or more workers crosses the network; a worker's {its} {verb} its own."
    reduction = f"{_gb(1 / p.gamma)}." if p.gamma > 0 else "free."
    return (
        f"Cluster: {nodes}; {nics} NIC{'s' if nics > 1 else ''} of {_gb(1 / p.beta)} per node, "
        f"{p.alpha * 1e6:g} us between nodes; reduction {reduction} {share}"
    )


def findings(rows: Sequence[ScaleRow], *, knee: float = 0.8) -> list[str]:
    """Sentences about the curves, each computed from the rows (efficiency threshold ``knee``)."""
    out = []
    for plan, rs in _by_plan(rows).items():
        rs = sorted(rs, key=lambda r: r.workers)
        big = rs[-1]
        s = (
            f"{plan}: {big.speedup:.1f}x on {big.workers} workers ({big.efficiency:.0%} of ideal); "
            f"the all-reduce takes {big.comm_s * 1e3:.2f} ms of a {big.step_s * 1e3:.2f} ms step "
            f"({big.comm_s / big.step_s:.0%})"
        )
        if np.isfinite(big.busbw_bound) and np.isfinite(big.busbw):
            s += f", at a busbw of {_gb(big.busbw)} of the {_gb(big.busbw_bound)} its links allow"
        s += "."
        peak = max(rs, key=lambda r: (r.speedup, -r.workers))
        if peak is not big:
            s += f" Its speed-up peaks at N = {peak.workers} ({peak.speedup:.1f}x): more workers make the step slower."
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


def _mark_nodes(ax: Any, ns: Sequence[int], g: int) -> None:
    """Shade the workers of one node and label the top axis with the number of nodes (boundaries at N = k g)."""
    if g == 1:  # every worker its own node: N is the number of nodes
        return
    ax.axvspan(min(ns) / 1.15, min(g, max(ns)) * 1.07, color="0.85", alpha=0.5, lw=0, zorder=0)
    if max(ns) > g:
        ax.axvline(g * 1.07, color="0.35", lw=0.8, ls="-.")
    top = ax.secondary_xaxis("top")
    top.set_xticks(ns, [str(-(-n // g)) for n in ns])
    top.set_xlabel(f"nodes of {g}", fontsize=8)
    top.tick_params(labelsize=8)


def plot_scaling(
    rows: Sequence[ScaleRow], out_dir: Path, *, title: str = "Speed-up", gpus_per_node: int = 1
) -> list[Path]:
    """``out_dir/speedup.png|pdf``: speed-up vs N (ideal dashed) and each plan's step time split, nodes marked."""

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
            _mark_nodes(a, ns, gpus_per_node)
        if gpus_per_node > 1:
            from matplotlib.patches import Patch

            entries.append((Patch(color="0.85", alpha=0.5), f"inside one node ({gpus_per_node} workers)"))
        if max(ns) > gpus_per_node > 1:
            from matplotlib.lines import Line2D

            entries.append((Line2D([], [], color="0.35", lw=0.8, ls="-."), "beyond: across nodes (NICs)"))
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


def rows_of(doc: Mapping[str, Any]) -> list[ScaleRow]:
    """scale.json's rows (read through :func:`fpreduce.run.rundir.read_study`) as ScaleRows: a ``null``
    bandwidth (an older study's infinity) read as infinite."""
    inf = float("inf")
    fields: list[dict[str, Any]] = [{k: (inf if v is None else v) for k, v in r.items()} for r in doc["rows"]]
    return [ScaleRow(**f) for f in fields]


def write_scale_report(study_dir: str | Path) -> list[Path]:
    """``figures/speedup.png|pdf`` and ``report.pdf`` of a scale study directory, from its ``scale.json``."""
    out = Path(study_dir)
    doc = rundir.read_study(out, "scale")
    rows, name = rows_of(doc), doc["name"]
    p = SimpleNamespace(**doc["profile"])
    figs = plot_scaling(rows, out / "figures", title=f"Speed-up: {name}", gpus_per_node=p.gpus_per_node)
    png = next(f for f in figs if f.suffix == ".png")

    def body(d: Doc) -> None:
        d.new_page()
        d.heading(f"Speed-up of data-parallel training: {name}")
        d.text(
            f"A step computes the gradient of the global batch split over N workers ({doc['compute_s'] * 1e3:g} ms "
            f"on one worker) and then all-reduces it ({_mb(doc['nbytes'])}), with no overlap."
        )
        d.text(cluster_text(p))
        for s in findings(rows):
            d.text("- " + s)
        d.text(
            "busbw = algbw x 2 (N-1)/N (nccl-tests); bound: the most busbw any all-reduce reaches on these links "
            "(each worker moves 2 (N-1)/N of the gradient over its fastest link, each of M nodes 2 (M-1)/M through "
            "its NICs; Patarasuk & Yuan 2009)."
        )
        d.text(format_table(rows), mono=True, size=7)
        d.text(model_note(rows) + " (model: how each point's comm time was found).")
        d.figure_page(
            draw_png(png),
            "Left: speed-up against N (dashed: ideal). Right: the all-reduce's time per step against the compute "
            "per worker; above the dotted line, communication takes more of the step than compute. "
            + (
                f"Shaded: the {p.gpus_per_node} workers of one node; beyond the dash-dotted line the all-reduce "
                "crosses nodes; top axis: the number of nodes."
                if p.gpus_per_node > 1
                else "One worker per node: N is also the number of nodes."
            ),
        )

    render(out / "report.pdf", f"fpreduce scale: {name}", body)
    return [*figs, out / "report.pdf"]

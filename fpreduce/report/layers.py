"""The replay of a recorded DDP all-reduce in a report: its per-parameter table and its figure by layer.

Reads ``RUN/replay.json`` (written by ``fpreduce replay`` through :mod:`fpreduce.run.rundir`);
a run without one has no replay pages.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fpreduce.report._figure import check_formats, new_figure, percent_axis, save_figures, series_style
from fpreduce.report.pdf import Doc
from fpreduce.run.rundir import read_replay

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["CAPTION", "TABLE_NOTE", "VARIANT_LABELS", "labels", "layer_table", "plot_layers", "replay_pages"]

#: the what-ifs of the replay, as the table and the figure name them
VARIANT_LABELS = {
    "order": "another order",
    "relaunch": "relaunch",
    "world": "world size 2N",
    "wide": "wider accumulator",
}


def labels(dtype: str) -> dict[str, str]:
    """:data:`VARIANT_LABELS` with the wider accumulator named (fp64 for fp32 gradients, else fp32)."""
    return {**VARIANT_LABELS, "wide": f"{'fp64' if dtype == 'fp32' else 'fp32'} accumulation"}


CAPTION = (
    "Replay of the recorded all-reduce, by layer: the share of gradient elements (over all recorded steps) whose "
    "bits would differ from what the real run got, had the ring been re-ranked every step (another order, never "
    "the recorded one), the "
    "job relaunched with another rank assignment, run on twice the ranks (a model: each rank's gradient held by "
    "two), or summed in a wider accumulator. The emulation itself differs in none when it is bit-exact."
)


TABLE_NOTE = (
    "cells: % of the parameter's elements (all steps) whose bits differ from the real result "
    "(largest distance in ulps of the dtype)"
)


def _pct(x: float) -> str:
    return "0" if x == 0 else f"{100 * x:.2f}%"


def layer_table(rows: list[dict[str, Any]], dtype: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the per-parameter table: elements, then for the emulation and per variant
    the share of elements whose bits differ from the real result, with the largest distance in
    ulps of the gradients' dtype in parentheses."""
    names = labels(dtype)
    header = ["parameter", "shape", "elements", "emulated", *names.values()]
    out = []
    for r in rows:
        row = [str(r["param"]), "x".join(map(str, r["shape"])) or "scalar", str(r["elements"])]
        for v in ("emulated", *names):
            row.append(_pct(r[f"diff_frac_{v}"]) + (f" ({r[f'ulp_max_{v}']:g})" if r[f"differ_{v}"] else ""))
        out.append(row)
    return header, out


def _by_layer(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, np.ndarray]]:
    layers: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        layers.setdefault(str(r["layer"]), []).append(r)
    names = list(layers)
    fracs = {}
    for v in ("emulated", *VARIANT_LABELS):
        fracs[v] = np.array(
            [sum(r[f"differ_{v}"] for r in layers[k]) / max(1, sum(r["elements"] for r in layers[k])) for k in names]
        )
    return names, fracs


def _fig_layers(doc_: dict[str, Any]) -> Figure:
    names, fracs = _by_layer(doc_["rows"])
    sub = (
        f"{doc_['backend']} ({doc_['plan']}), N = {doc_['world_size']}, {doc_['dtype']}, {doc_['steps']} steps; "
        f"emulation vs real: {100 * doc_['real_match']:.4g}% of elements bit-identical"
    )
    fig, (ax,) = new_figure("Which layers' gradient bits would change", sub)
    x = np.arange(len(names))
    width = 0.8 / len(VARIANT_LABELS)
    for i, (v, label) in enumerate(labels(doc_["dtype"]).items()):
        style = series_style(i)
        ax.bar(x + (i - (len(VARIANT_LABELS) - 1) / 2) * width, fracs[v], width, label=label, color=style["color"])
    ax.set_xticks(x, names, rotation=30 if len(names) > 6 else 0, ha="right" if len(names) > 6 else "center")
    ax.set_xlabel("layer (parameters grouped by module)")
    percent_axis(ax, "% of elements whose bits differ from the real result")
    ax.legend(loc="upper left", ncols=2)
    return fig


def plot_layers(run_dir: str | Path, *, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Draw ``RUN/figures/layers.*`` from the run's replay document (nothing without one)."""
    doc_ = read_replay(run_dir)
    if doc_ is None or not doc_["rows"]:
        return []
    return save_figures(Path(run_dir) / "figures", {"layers": lambda: _fig_layers(doc_)}, check_formats(formats))


def replay_pages(doc: Doc, run_dir: Path) -> None:
    """The replay's pages of a report: the emulation against the real result, then the per-parameter table."""
    r = read_replay(run_dir)
    if r is None:
        return
    doc.new_page()
    doc.heading("Replay of the recorded all-reduce")
    state = "verified against the running library" if r["verified"] else "modelled, not verified here"
    doc.text(
        f"Recording {Path(r['recording']).name}: {r['backend']} (torch {r['torch']}), N = {r['world_size']} ranks, "
        f"{r['dtype']} gradients, average '{r['average']}', {r['steps']} steps. Emulated bucket by bucket with "
        f"{r['plan']} ({state}): {r['elements'] - r['differ']} of {r['elements']} elements bit-identical to the "
        f"real result (real_match = {r['real_match']:.6g}).",
        size=9,
    )
    if r.get("contrast"):
        other = ", ".join(f"{p} {d}" for p, d in r["contrast"].items())
        doc.text(f"Contrast: step 0's elements differing under other plans: {other}.", size=9)
    doc.table(
        ["step", "elements", "differ", "match"],
        [[s["step"], s["elements"], s["differ"], f"{s['match']:.6g}"] for s in r["per_step"]],
        size=8,
    )
    doc.heading("Per parameter: share of elements whose bits would change (over all steps)", 11)
    for v in VARIANT_LABELS:
        doc.text(str(r["variants"][v]), size=8)
    doc.text(TABLE_NOTE, size=8)
    header, rows = layer_table(r["rows"], r["dtype"])
    doc.table(header, rows, size=7)

"""The reveal report: what a black box's probes found, as figures and a PDF (from the revelations; nothing re-run).

* :func:`chunks_figure`: an all-reduce's trees along its elements: each rank's depth (the
  additions on its path to the result) in every run of elements (a ring's rotation shows as
  a diagonal; one tree for all elements as flat columns).
* :func:`tree_figure`: one sum's revealed tree, too large to print, as each summand's depth.
* :func:`hazard_figure`: a sweep over n (:func:`fpreduce.analysis.reveal.hazard_map`), threads or
  batch rows (``knob_map``), message size or ranks (``reveal_collective.hazard_map``, ``ranks_map``):
  one band per region, labelled with the plan family that explains it; a new band is a determinism hazard.
* :func:`write_reveal_report`: a PDF with the table of targets (size, calls, seconds, elements
  verified, verdict, family), each hazard map's table of regions, each target's evidence and plan
  text, and the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from fpreduce.analysis.reveal import REGION_VERIFY, Region, Revelation, match_family, tree_text
from fpreduce.analysis.reveal_collective import CollectiveRevelation
from fpreduce.report._figure import COLORS, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from fpreduce.report.pdf import Doc

__all__ = [
    "Found",
    "chunks_figure",
    "hazard_figure",
    "region_row",
    "regions_note",
    "summary_row",
    "tree_figure",
    "write_reveal_report",
]

#: What a target's reveal gave: one sum's revelation or a collective's.
Found = Union[Revelation, CollectiveRevelation]

HEADER = ("target", "n or N x E", "calls", "seconds", "verified", "differing", "verdict", "family")
_SHOWN = 2000  # characters of an explicit tree's text shown in the report

REGION_HEADER = ("values", "verdict", "accumulate", "plan family", "revealed", "calls", "verified", "differing")


def summary_row(target: str, found: Found) -> list[object]:
    """The report's (and the closing note's) table row of one target."""
    if isinstance(found, CollectiveRevelation):
        size, fams = f"{found.ranks} x {found.elements}", list(found.families)
        seconds = found.probe_seconds + found.verify_seconds
    else:
        size, seconds = str(found.n), found.probe_seconds + found.verify_seconds
        fams = match_family(found.plan) if found.plan is not None else []
    family = ", ".join(fams[:3]) + (", ..." if len(fams) > 3 else "") if fams else "-"
    return [target, size, found.calls, f"{seconds:.2f}", found.checked, found.differing, found.verdict, family]


def region_row(region: Region) -> list[object]:
    """The hazard map's table row of one region (values swept, verdict, accumulator, family, reveals, calls, random
    inputs verified in all and of them differing)."""
    span = str(region.first) if region.first == region.last else f"{region.first}..{region.last}"
    row: list[object] = [span, region.verdict, region.accumulate, region.family or "-", region.sizes, region.calls]
    return [*row, region.checked, region.differing]


def regions_note(regions: Sequence[Region], swept: str) -> str:
    """What a hazard map's 'verified' column counts (from the regions' own numbers)."""
    extra = [r for r in regions if r.extra]
    more = (
        f"; {len(extra)} region(s) then had their first and last values' trees run on {sum(r.extra for r in extra)} "
        f"more random inputs, so that each region with a tree is verified on at least {REGION_VERIFY:,} in all"
        if extra
        else ""
    )
    bad = sum(r.differing for r in regions)
    return (
        f"'verified': random inputs (a collective's: elements) on which each region's revealed trees were run "
        f"against the target: every value of {swept} checked on its own{more}. Differing in all: {bad}"
        + (" (a region whose trees differ on the data is 'no fixed tree')." if bad else ".")
    )


def _depths(found: CollectiveRevelation) -> tuple[Any, Any]:
    """(run edges along the elements, (ranks, runs) depths of every rank in each run's tree)."""
    edges = np.array([r.start for r in found.runs] + [found.elements])
    D = np.stack([r.plan.depths() for r in found.runs], axis=1) if found.runs else np.zeros((found.ranks, 0))
    return edges, D


def chunks_figure(target: str, found: CollectiveRevelation) -> Figure:
    """Each rank's depth in the tree of every run of elements (a heat map over elements x ranks)."""
    fig, (ax,) = new_figure(
        f"{target}: the revealed trees along the {found.elements} elements ({found.ranks} ranks, {found.format})",
        f"{len(found.runs)} run(s) of elements with one tree each; {found.verdict}, "
        f"{found.differing} of {found.checked} verified elements differ; family: "
        f"{', '.join(found.families[:3]) or 'none of the project plans'}",
    )
    if not found.runs:
        ax.text(0.5, 0.5, f"no tree: {found.verdict}", ha="center", va="center", transform=ax.transAxes)
        return fig
    edges, D = _depths(found)
    mesh = ax.pcolormesh(edges, np.arange(found.ranks + 1) - 0.5, D, cmap="viridis", shading="flat")
    bar = fig.colorbar(mesh, ax=ax, label="additions on the rank's path to the result (depth)")
    top = int(D.max()) if D.size else 1
    bar.set_ticks(range(int(D.min()) if D.size else 0, top + 1, max(1, top // 8)))
    ax.set_yticks(range(0, found.ranks, max(1, found.ranks // 16)))
    for e in edges[1:-1]:
        ax.axvline(e, color="white", lw=0.8)
    ax.set_xlabel("element (run edges: white lines)")
    ax.set_ylabel("rank")
    ax.set_xlim(0, found.elements)
    ax.grid(False)
    return fig


def tree_figure(target: str, found: Revelation) -> Figure:
    """A revealed tree too large to print: each leaf's depth (the additions on its path to the result) along
    the leaves (a left fold is a falling line, a balanced tree a flat band, numpy's strided accumulators a comb)."""
    fams = match_family(found.plan) if found.plan is not None else []
    fig, (ax,) = new_figure(
        f"{target}: the revealed tree of {found.n} summands ({found.format}, partial sums in {found.accumulate})",
        f"{found.verdict}; {found.differing} of {found.checked} verified inputs differ; family: "
        f"{', '.join(fams[:3]) or 'none of the project plans (an explicit tree)'}",
    )
    if found.plan is None:
        ax.text(0.5, 0.5, f"no tree: {found.verdict}", ha="center", va="center", transform=ax.transAxes)
        return fig
    depth = found.plan.depths()
    ax.plot(np.arange(found.n), depth, ".", ms=2 if found.n > 256 else 4, color=COLORS[0])
    ax.set_xlabel("leaf (summand index)")
    ax.set_ylabel("additions on the leaf's path (depth)")
    ax.set_xlim(-0.5, found.n - 0.5)
    ax.set_ylim(0, int(depth.max()) + 1)
    return fig


def hazard_figure(target: str, regions: Sequence[Region], *, what: str = "n") -> Figure:
    """One band per region of the sweep, labelled with its family (or verdict): where the tree changes."""
    first, last = regions[0].first, regions[-1].last
    changes = (
        f"{len(regions) - 1} change(s) of explanation: across one, the same data give other bits"
        if len(regions) > 1
        else f"one explanation covers every value of {what} swept"
    )
    fig, (ax,) = new_figure(
        f"{target}: where the summation tree changes with {what} ({first}..{last})",
        f"{len(regions)} region(s); {changes}",
    )
    labels = sorted({r.family or r.verdict for r in regions})
    for r in regions:
        label = r.family or r.verdict
        k = labels.index(label)
        ax.barh(k, r.last - r.first + 1, left=r.first - 0.5, color=COLORS[k % len(COLORS)], height=0.5)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(-1, len(labels))
    ax.set_xlabel(what)
    ax.set_xlim(first - 0.5, last + 0.5)
    if last / max(first, 1) > 50:
        ax.set_xscale("log")
    else:  # whole numbers of summands, threads, rows or ranks
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _explain(doc: Doc, target: str, found: Found) -> None:
    doc.heading(target, size=12)
    doc.text(f"Verdict: {found.verdict}. {found.evidence}")
    if found.plan is None:
        return
    if isinstance(found, CollectiveRevelation):
        shown = [f"elements {r.start}..{r.stop - 1}: {tree_text(r.plan)}" for r in found.runs[:12]]
        more = [f"... and {len(found.runs) - 12} more runs"] if len(found.runs) > 12 else []
        doc.text("\n".join(shown + more), mono=True, size=8)
        text = found.families[0] if found.families else f"{found.plan.name} (no plan text)"
    else:
        fams = match_family(found.plan)
        text = fams[0] if fams else tree_text(found.plan)
        if len(text) > _SHOWN:  # (thousands of leaves: pages of brackets)
            text = f"{text[:_SHOWN]} ... ({len(text)} characters: fpreduce reveal --json prints it whole)"
    doc.text(f"Plan to reuse: {text} (input {found.format}, accumulate {found.accumulate})", mono=True, size=8)


def write_reveal_report(
    out: str | Path,
    found: Sequence[tuple[str, Found]],
    *,
    sweeps: Sequence[tuple[str, Sequence[Region]]] = (),
    title: str = "fpreduce reveal",
    swept: str = "n",
) -> Path:
    """A PDF of the targets revealed (table, evidence, plans) and their figures; returns its path.

    ``sweeps``: hazard maps over ``swept`` (``n``, or ``elements`` for a collective's message size).
    """
    from fpreduce.report.pdf import draw_png, render

    def body(doc: Doc) -> None:
        doc.new_page()
        doc.heading(title)
        doc.text(
            "Each target was probed with masked inputs (all units, +M and -M at two leaves: the result counts "
            "the leaves outside the subtree that joins them) and the tree found was run by fpreduce against the "
            "target on random inputs (normal, heavy-tailed, cancelling): 'verified' elements, of which 'differing' "
            "gave other bits."
        )
        if found:
            doc.table(HEADER, [summary_row(t, f) for t, f in found])
        for t, regions in sweeps:
            doc.heading(f"{t}: the hazard map over {swept}", size=12)
            doc.table(REGION_HEADER, [region_row(r) for r in regions])
            doc.text(regions_note(regions, swept))
        for t, f in found:
            _explain(doc, t, f)
        figures = [
            (
                chunks_figure(t, f),
                f"{t}: each rank's depth in the tree of each run of elements (a ring's chunks "
                "rotate the ranks: a diagonal; one tree for every element: flat columns).",
            )
            for t, f in found
            if isinstance(f, CollectiveRevelation)
        ]
        figures += [
            (
                tree_figure(t, f),
                f"{t}: the revealed tree, each summand's depth (additions on its path to the result): a left "
                "fold falls from n - 1 to 1, a balanced tree is flat at log2(n).",
            )
            for t, f in found
            if isinstance(f, Revelation) and f.plan is not None and f.n > 1
        ]
        figures += [
            (
                hazard_figure(t, regions, what=swept),
                f"{t}: the plan family (or verdict) that explains each value of {swept} revealed; a new band "
                "is a place where the tree changes ('tree k': a tree no plan family names).",
            )
            for t, regions in sweeps
        ]
        for fig, caption in figures:
            doc.figure(_drawer(fig, draw_png), caption, height=0.33)

    return render(Path(out), title, body)


def _drawer(fig: Figure, draw_png: Any) -> Any:
    """The figure as a PNG drawn into a rect of the page (through a temporary file)."""
    import tempfile

    def draw(page: Figure, rect: Any) -> float:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "figure.png"
            fig.savefig(path, dpi=110)
            return float(draw_png(path)(page, rect))

    return draw

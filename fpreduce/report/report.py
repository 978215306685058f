"""The PDF report of a run (or sweep) directory: a pure function of its files.

Pages: title (the question, run, versions, configuration; an ``INCOMPLETE RUN``
banner when ``summary.json`` says so), findings in words computed from
``metrics.csv``/``summary.json``, figures with captions (``RUN/figures/*.png`` from
``fpreduce plot`` when present, else drawn here from ``metrics.csv``), methods
(formats, plans, the exact oracle, metric definitions) and an appendix (the
resolved ``config.toml`` and per-arm summary tables). Nothing is re-run and no
clock is read: the same directory gives a byte-identical PDF (fixed metadata).
NaN/Inf in the metrics are counted in the findings and left out of statistics.
The run is read through :func:`fpreduce.run.rundir.load_run`; the sweep report is
:func:`write_sweep_report`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import get_format
from fpreduce.plans import parse
from fpreduce.report._figure import percent_axis, series_style
from fpreduce.report._findings import groups, headline, paragraphs, status
from fpreduce.report._sweep_report import write_sweep_report
from fpreduce.report.layers import CAPTION as LAYERS_CAPTION
from fpreduce.report.layers import replay_pages
from fpreduce.report.pdf import _H, Doc, Draw, Rect, cell, draw_png, render
from fpreduce.run.config import OrderPolicy, PolicyKind
from fpreduce.run.rundir import Results, load_run

__all__ = ["findings", "write_report", "write_sweep_report"]

QUESTION = (
    "When the gradients of N data-parallel workers are summed in low precision, does the order "
    "of the sum change the bits of the result, by how much, and does it matter? Experiment A sums "
    "in a fixed order every step, Experiment B in an order that changes every step; further arms "
    "vary the accumulator format or the summation algorithm."
)


METRICS = {
    "err_norm": "normwise error ||y - s||_2 / ||s||_2 of the arm's result y against the exact sum s of the same "
    "input-format values, over the elements with finite y and s (the headline error)",
    "err_backward": "backward error max_j |y_j - s_j| / sum_i |x_ij|: the error relative to the size of the terms",
    "err_*_rel": "per-element relative error |y - s| / |s| (elements with s != 0 and finite y): max, mean, median; "
    "dominated by near-cancelling elements, so it is a column, not a headline",
    "err_max_ulp": "largest error |y - s| in ulps of the output format at max(|s|, |y|): 0 when both are 0, "
    "at most 2^(p+1) for a finite result, 0.5 or less when correctly rounded",
    "frac_correct": "fraction of elements equal to the exact sum correctly rounded to the output format",
    "diff_frac": "fraction of elements whose bits differ from the result of the arm's compare_to arm (by default its "
    "fixed-order twin: same formats, rounding, algorithm and averaging); 0 for an arm compared with itself",
    "ulp_max, ulp_mean": "max / mean distance to the compare_to arm's result in ulps of the larger "
    "magnitude, |y - y_ref| / ulp(max(|y|, |y_ref|)), in the wider of the two output formats",
    "rel_l2": "||y - y_ref||_2 / ||y_ref||_2 against the compare_to arm",
    "rerun_diff_frac, rerun_ulp_max": "the same arm re-run at the same step with an independently seeded order "
    "policy (another launch of the job): fraction of elements whose bits differ and the largest ulp distance; 0 "
    "for a fixed order by construction; summary.json's reproducible is true when it is 0 at every step",
    "loss": "training loss of the arm's replica at the step, before the update (training only)",
    "param_dist": "||theta - theta_ref||_2 / ||theta_ref||_2 after the step's update, against the compare_to "
    "arm's replica (training only)",
    "param_diff_frac": "fraction of parameters whose float32 bits differ from the compare_to arm's",
}


CAPTIONS = {  # figure stem (plots.plot_run's names) -> how to read it; the order of the figure pages
    "error": "Error of each arm's result against the exact sum, per step (log scale): the normwise error "
    "||y - s|| / ||s|| and the backward error max |y - s| / sum |x|. Both are relative to the same exact "
    "sums, so arms with different formats compare directly; the findings give the numbers.",
    "divergence": "Bitwise divergence per step on linear 0-100% axes. Left: the fraction of elements whose bits "
    "differ from the arm's compare_to arm (legend: 'B vs A'; pairs with different output formats are compared "
    "in the wider one; an arm compared with itself is not drawn). Right: the fraction that changes when an arm "
    "whose order changes is relaunched with an independently seeded order (a fixed order repeats its bits by "
    "construction: not drawn).",
    "ulp_hist": "Histogram of ulp distances between each arm and its compare_to arm over all steps and elements "
    "(legend: 'B vs A'). The bar at 0 holds identical bits; the tail shows how far apart the rest are.",
    "training": "Training: loss per arm, and the relative parameter distance of each arm's replica to its "
    "compare_to arm's (log scale), the first step of bitwise weight divergence marked. A pair that never "
    "diverges bitwise has no distance to draw (it stays at 0).",
    "layers": LAYERS_CAPTION,
}


_PANELS = {  # fallback figures: stem -> (title, [(column, y label, scale, skip arms compared with themselves)])
    "error": (
        "Error against the exact sum",
        [("err_norm", "normwise error", "log", False), ("err_backward", "backward error", "log", False)],
    ),
    "divergence": (
        "Divergence from the compare_to arm, and on relaunch",
        [
            ("diff_frac", "% of elements differing (vs compare_to)", "percent", True),
            ("rerun_diff_frac", "% changed by a relaunch", "percent", False),
        ],
    ),
    "training": (
        "Training: loss and parameter divergence",
        [("loss", "loss", "linear", False), ("param_dist", "relative parameter distance", "log", True)],
    ),
}


def findings(run_dir: str | Path) -> list[str]:
    """The findings of a run in words, one paragraph each, every number computed from
    ``metrics.csv`` and ``summary.json`` (decimal; the exact values are in the appendix)."""
    return paragraphs(load_run(run_dir, config_required=False))


def _legend_name(run: Results, a: dict[str, object]) -> str:
    """``B (vs A)`` for an arm compared with another arm, else its name."""
    other = str(a.get("compare_to") or run.reference)
    return str(a["name"]) if other == a["name"] else f"{a['name']} (vs {other})"


def _draw_panels(run: Results, stem: str) -> Draw:
    title, panels = _PANELS[stem]

    def draw(fig: Figure, rect: Rect) -> float:
        leg = (math.ceil(len(run.arms) / 3) * 0.17 + 0.45) / _H  # one legend for all panels, below them
        x, y, w, h = rect[0] + 0.07, rect[1] + leg, rect[2] - 0.08, rect[3] - leg - 0.02
        ph, handles = h / len(panels), {}
        for j, (col, label, scale, skip) in enumerate(panels):
            ax = fig.add_axes((x, y + (len(panels) - 1 - j) * ph + 0.12 * ph, w, 0.8 * ph))
            for i, a in enumerate(run.arms):
                v, st = run.column(a["name"], col), series_style(i)
                if v.size == 0 or (skip and (a.get("compare_to") or run.reference) == a["name"]):
                    continue
                if col == "rerun_diff_frac" and str(a.get("order", "")).startswith("fixed:"):
                    continue  # a fixed order repeats its bits by construction
                ok = np.isfinite(v) & (v > 0) if scale == "log" else np.isfinite(v)
                (handles[_legend_name(run, a)],) = ax.plot(run.column(a["name"], "step")[ok], v[ok], "-", ms=3, **st)
                if col == "param_dist" and a.get("first_param_divergence_step") is not None:
                    ax.axvline(a["first_param_divergence_step"], color=st["color"], ls=":", lw=1)
            if scale == "log" and ax.get_lines():
                ax.set_yscale("log")
            if scale == "percent":
                percent_axis(ax, label)
            ax.set(ylabel=label, title=title if j == 0 else "", xlabel="step" if j == len(panels) - 1 else "")
            ax.grid(True, alpha=0.3)
        if handles:
            fig.legend(
                list(handles.values()),
                list(handles),
                loc="upper center",
                ncol=3,
                fontsize=8,
                bbox_to_anchor=(x + w / 2, y - 0.04 * ph),
                frameon=False,
            )
        return (1 - rect[1]) * _H

    return draw


def _figures(run: Results) -> list[tuple[Draw, str, float]]:
    """(draw, caption, height as a fraction of the page): the run's PNGs two to a page, else panels drawn here."""
    pngs = sorted((run.dir / "figures").glob("*.png")) if (run.dir / "figures").is_dir() else []
    if pngs:
        order = list(CAPTIONS)
        pngs.sort(key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.name))
        return [
            (draw_png(p), CAPTIONS.get(p.stem, f"Figure {p.name} from the run's figures directory."), 0.36)
            for p in pngs
        ]
    if not run.metrics:
        return []  # interrupted before the first step: nothing to draw
    stems = ["error", "divergence"][: 1 + (len(run.arms) > 1)] + ["training"] * bool(
        np.isfinite(run.column(run.reference, "loss")).any()
    )
    return [(_draw_panels(run, k), CAPTIONS[k], 0.62) for k in stems]


_POLICIES: dict[PolicyKind, str] = {
    "fixed": "the same plan every step",
    "shuffle": "the plan re-ranked by a fresh random permutation every step",
    "arrival": "a sequential fold in the order the workers' messages arrive (latency model), new every step",
    "atomic": "every element a sequential fold in its own random order, new every step",
    "random_tree": "a random tree shape and leaf order every step",
}


def _methods(doc: Doc, run: Results) -> None:
    doc.new_page()
    doc.heading("Methods")
    doc.heading("Formats", 11)
    fmts = sorted(
        {f for a in run.arms for f in (a.get("input"), a.get("accumulate"), a.get("output")) if f},
        key=lambda f: -get_format(f).precision,
    )
    doc.table(
        ["format", "precision p", "exponents", "max finite", "u = 2^-p", "u (hex)"],
        [
            [
                F.name,
                F.precision,
                f"[{F.emin}, {F.emax}]",
                f"{F.max_finite:.6g}",
                f"{F.unit_roundoff:.3g}",
                F.unit_roundoff.hex(),
            ]
            for F in map(get_format, fmts)
        ],
        size=8,
    )
    doc.heading("Reduction plans", 11)
    workers = int(run.summary.get("workers") or 8)
    n = workers if workers <= 16 else 8  # a tree of more than 16 leaves does not fit the page
    drawn = f"drawn for n = {n} workers" if n == workers else f"drawn for n = {n} workers (the run has {workers})"
    for order in dict.fromkeys(str(a.get("order")) for a in run.arms):
        try:
            policy: OrderPolicy | None = OrderPolicy.parse(order)
        except InvalidArgument:
            policy = None
        plan = policy.plan if policy is not None else ""
        doc.text(
            f"{order}: {_POLICIES[policy.kind] if policy is not None else 'unknown order policy'}"
            + (f"; {drawn}:" if plan else "."),
            size=9,
        )
        if plan:
            try:
                tree = parse(plan, n).draw()
            except (InvalidArgument, ValueError) as e:
                tree = f"(not drawable for n = {n}: {e})"
            doc.text(tree, size=7.5, mono=True, indent=0.25)
        doc.y += 0.05
    doc.heading("Exact oracle", 11)
    doc.text(
        "Every value of a binary format is an integer significand times a power of two, so the exact "
        "column sum is computed as an integer sum per exponent, combined into one integer (numpy integer "
        "arithmetic, vectorized, no rounding at all) and rounded once onto a format when compared. The "
        "test suite checks it against mpmath at a precision wide enough to be exact.",
        size=9,
    )
    doc.heading("Metrics (docs/run-format.md)", 11)
    for k, v in METRICS.items():
        doc.text(f"{k}: {v}", size=9)


def _appendix(doc: Doc, run: Results) -> None:
    doc.new_page()
    doc.heading("Appendix A: resolved config.toml")
    doc.text(
        run.config_text.rstrip() if run.config_text is not None else "(config.toml not found in the run directory)",
        size=7.5,
        mono=True,
    )
    doc.new_page()
    doc.heading("Appendix B: run and per-arm summary (summary.json)")
    timing = ("wall_time_s", "engine_time_s", "source_time_s", "exact_time_s", "metrics_time_s")  # vary per rerun
    doc.table(["key", "value"], [[k, json.dumps(v)] for k, v in run.summary.items() if k != "arms" and k not in timing])
    keys = [k for k in dict.fromkeys(k for a in run.arms for k in a) if k not in ("name", "ulp_hist")]
    doc.heading("Per-arm aggregates", 11)
    doc.table(["field", *(a["name"] for a in run.arms)], [[k, *(cell(a.get(k)) for a in run.arms)] for k in keys])
    hists = [(a["name"], a["ulp_hist"]) for a in run.arms if isinstance(a.get("ulp_hist"), dict)]
    if hists:
        doc.heading("ulp distance to the compare_to arm: counts, bin i is edges[i] <= d < edges[i+1]", 11)
        counts = [list(h.get("counts", [])) for _, h in hists]
        doc.table(
            ["d from", *(name for name, _ in hists)],
            [[e, *(c[i] if i < len(c) else "" for c in counts)] for i, e in enumerate(hists[0][1].get("edges", []))],
        )


#: the headline statistics of the findings, per arm: (label, column, statistic)
_EXACT = (
    ("median err_norm", "err_norm", np.median),
    ("max err_backward", "err_backward", np.max),
    ("max err_max_ulp", "err_max_ulp", np.max),
    ("median diff_frac", "diff_frac", np.median),
    ("median rerun_diff_frac", "rerun_diff_frac", np.median),
)


def _exact_values(doc: Doc, run: Results) -> None:
    """Appendix C: the findings' headline numbers exactly, as float.hex (the prose rounds them)."""
    doc.new_page()
    doc.heading("Appendix C: exact values of the findings' statistics (float.hex)")
    rows = []
    for label, col, fn in _EXACT:
        row = [label]
        for a in run.arms:
            v = run.column(a["name"], col)
            v = v[np.isfinite(v)]
            row.append(float(fn(v)).hex() if v.size else "n/a")
        rows.append(row)
    doc.table(["statistic over steps", *(a["name"] for a in run.arms)], rows, size=7)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the PDF report of a run directory (default ``RUN/report.pdf``, atomically).

    Raises:
        InvalidArgument: the directory, its summary.json or metrics.csv is missing, or they are
            not a fpreduce run's (the one-line message names what is missing).

    >>> write_report("no/such/run")
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: no/such/run: no such run directory
    """
    run = load_run(run_dir, config_required=False)
    s = run.summary

    def body(doc: Doc) -> None:
        doc.new_page()
        if (b := status(run)) is not None:
            doc.banner(b)
        doc.heading(f"fpreduce report: {s.get('name', run.dir.name)}", 18)
        doc.text(QUESTION, size=11)
        doc.heading("Run", 11)
        date = next((str(s[k]) for k in ("date", "created", "started", "finished") if s.get(k)), None)
        date = date or "not recorded (summary.json predates the run date)"
        doc.table(
            ["", ""],
            [
                ["directory", run.dir.name],
                ["date", date],
                ["versions", ", ".join(f"{k} {v}" for k, v in (s.get("versions") or {}).items())],
                ["source", s.get("source", "n/a")],
                ["N workers", s.get("workers", "n/a")],
                ["elements", s.get("elements", "n/a")],
                ["steps", f"{s.get('steps_done', '?')} done of {s.get('steps', '?')}"],
                ["seed", s.get("seed", "n/a")],
                ["first arm (reference)", run.reference],
            ],
            size=9,
        )
        doc.heading("Arms", 11)
        cols = ["order", "input", "accumulate", "output", "rounding", "algorithm", "average", "compare_to"]
        doc.table(["arm", *cols], [[a["name"], *(a.get(c) or "" for c in cols)] for a in run.arms], size=8)
        doc.new_page()
        doc.heading("Findings")
        for h in headline(run):
            doc.text(h, size=11, weight="bold")
        doc.y += 0.1
        for topic, paras in groups(run):
            doc.heading(topic, 11)
            for f in paras:
                doc.text("- " + f, size=9.5)
                doc.y += 0.04
        for i, (draw, caption, height) in enumerate(_figures(run)):
            if i == 0:
                doc.new_page()
            doc.figure(draw, caption, height)
        replay_pages(doc, run.dir)  # fpreduce replay's runs: the emulation and the per-parameter table
        _methods(doc, run)
        _appendix(doc, run)
        _exact_values(doc, run)

    name = s.get("name", run.dir.name)
    return render(Path(out) if out is not None else run.dir / "report.pdf", f"fpreduce report {name}", body)

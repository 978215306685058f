"""The PDF report of a run (or sweep) directory: a pure function of its files.

Pages: title (the question, run, versions, configuration; an ``INCOMPLETE RUN``
banner when ``summary.json`` says so), findings in words computed from
``metrics.csv``/``summary.json``, figures with captions (``RUN/figures/*.png`` from
``fpreduce plot`` when present, else drawn here from ``metrics.csv``), methods
(formats, plans, the exact oracle, metric definitions) and an appendix (the
resolved ``config.toml`` and per-arm summary tables). Nothing is re-run and no
clock is read: the same directory gives a byte-identical PDF (fixed metadata).
NaN/Inf in the metrics are counted in the findings and left out of statistics.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.image import imread
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import get_format
from fpreduce.plans import parse
from fpreduce.report.pdf import _H, _W, Doc, Draw, Rect, render

__all__ = ["findings", "write_report", "write_sweep_report"]

QUESTION = (
    "When the gradients of N data-parallel workers are summed in low precision, does the order "
    "of the sum change the bits of the result, by how much, and does it matter? Experiment A sums "
    "in a fixed order every step, Experiment B in an order that changes every step; further arms "
    "vary the accumulator format or the summation algorithm."
)
METRICS = {
    "err_*_rel": "relative error |y - s| / |s| of the arm's result y against the exact sum s of the same "
    "input-format values (elements with s != 0 and finite y); max, mean, median per step",
    "err_max_ulp": "max error in ulps of the arm's output format",
    "frac_correct": "fraction of elements equal to the exact sum correctly rounded to the output format",
    "diff_frac": "fraction of elements whose bits differ from the reference arm's result (0 for it)",
    "ulp_max, ulp_mean": "max / mean distance to the reference arm's result in ulps of the larger "
    "magnitude, |y - y_ref| / ulp(max(|y|, |y_ref|)), in the wider of the two output formats",
    "rel_l2": "||y - y_ref||_2 / ||y_ref||_2",
    "loss": "training loss of the arm's replica at the step, before the update (training only)",
    "param_dist": "||theta - theta_ref||_2 / ||theta_ref||_2 after the step's update (training only)",
    "param_diff_frac": "fraction of parameters whose float32 bits differ from the reference arm's",
}
CAPTIONS = {  # figure stem (plots.plot_run's names) -> what to look at; the order of the figure pages
    "error": "Error against the exact sum per step (log scale). Look at the gap between arms: a wider "
    "accumulator or a compensated/reproducible algorithm should sit orders of magnitude lower, "
    "while the fixed-order and changing-order arms of one format sit at the same level.",
    "divergence": "Bitwise divergence from the reference arm per step: the fraction of elements whose bits "
    "differ and the largest ulp distance. Look at whether it is non-zero at almost every "
    "step (order dependence) and how much lower it is with an fp32 accumulator.",
    "ulp_hist": "Histogram of ulp distances to the reference arm over all steps and elements. Look at how "
    "much mass sits at 0 (identical bits) and how far the tail reaches.",
    "training": "Training: loss per arm and relative parameter distance to the reference arm (log scale), "
    "the first step of bitwise weight divergence marked. Look at whether the distance keeps "
    "growing (differences compound) and whether the loss curves separate.",
}
_PANELS = {  # fallback figures: stem -> (title, [(column, y label, log y, skip the reference arm)])
    "error": (
        "Error against the exact sum",
        [("err_mean_rel", "mean relative error", True, False), ("err_max_rel", "max relative error", True, False)],
    ),
    "divergence": (
        "Divergence from the reference arm",
        [("diff_frac", "fraction of elements differing", False, True), ("ulp_max", "max ulp distance", False, True)],
    ),
    "training": (
        "Training: loss and parameter divergence",
        [("loss", "loss", False, False), ("param_dist", "relative parameter distance", True, True)],
    ),
}


@dataclass(frozen=True)
class _Run:
    dir: Path
    summary: dict[str, Any]
    config_text: str | None
    metrics: dict[str, dict[str, NDArray[np.float64]]]  # arm -> column -> values over steps

    @property
    def arms(self) -> list[dict[str, Any]]:
        return list(self.summary["arms"])

    @property
    def ref(self) -> str:
        return str(self.summary.get("reference") or self.arms[0]["name"])

    def col(self, arm: str, col: str) -> NDArray[np.float64]:
        return self.metrics.get(arm, {}).get(col, np.array([]))


def _read_csv(path: Path, first: str) -> list[dict[str, str]]:
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{path}: cannot read ({e})") from None
    if not lines or lines[0].split(",")[0] != first:
        raise InvalidArgument(f"{path}: not a fpreduce table (the header must start with {first!r})")
    return [r for r in csv.DictReader(lines) if None not in r.values() and None not in r]  # drop truncated


def _num(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        return math.nan


def _load(run_dir: str | Path) -> _Run:
    d = Path(run_dir)
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such run directory")
    for name in ("summary.json", "metrics.csv"):
        if not (d / name).is_file():
            raise InvalidArgument(f"{d}: {name} is missing; is this a fpreduce run directory?")
    try:
        summary = json.loads((d / "summary.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{d / 'summary.json'}: not valid JSON ({e})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("arms"), list) or not summary["arms"]:
        raise InvalidArgument(f"{d / 'summary.json'}: not a fpreduce run summary (no 'arms' list)")
    for i, a in enumerate(summary["arms"]):
        for key in ("name", "order", "input", "accumulate"):
            if not isinstance(a, dict) or not isinstance(a.get(key), str):
                raise InvalidArgument(f"{d / 'summary.json'}: arms[{i}] has no {key!r}; not a fpreduce run summary")
        for key in ("input", "accumulate", "output"):
            try:
                get_format(a.get(key) or "fp32")
            except InvalidArgument as e:
                raise InvalidArgument(f"{d / 'summary.json'}: arms[{i}].{key}: {e}") from None
    rows = _read_csv(d / "metrics.csv", "step")
    if rows and "arm" not in rows[0]:
        raise InvalidArgument(f"{d / 'metrics.csv'}: not a fpreduce metrics.csv (no 'arm' column)")
    per: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        per.setdefault(r["arm"], []).append(r)
    metrics = {a: {k: np.array([_num(r[k]) for r in rs]) for k in rs[0] if k != "arm"} for a, rs in per.items()}
    cfg = d / "config.toml"
    return _Run(d, summary, cfg.read_text() if cfg.is_file() else None, metrics)


def _x(v: float) -> str:
    """A human value with its exact float.hex beside it."""
    return f"{v:.3g} ({float(v).hex()})"


def _pct(v: float) -> str:
    return f"{100 * v:.3g}%"


def _fin(a: NDArray[np.float64]) -> NDArray[np.float64]:
    return a[np.isfinite(a)]


def _acc(arm: dict[str, Any]) -> str:
    return str(arm.get("accumulate", "?"))


def _mean_err(run: _Run, arm: str) -> float:
    v = _fin(run.col(arm, "err_mean_rel"))
    return float(np.mean(v)) if v.size else math.nan


def _status(run: _Run) -> str | None:
    s = run.summary
    done = s.get("steps_done", len(run.col(run.ref, "step")))
    return None if s.get("complete", False) else f"INCOMPLETE RUN: {done} of {s.get('steps', '?')} steps"


def findings(run_dir: str | Path) -> list[str]:
    """The findings of a run in words, one paragraph each, every number computed from
    ``metrics.csv`` and ``summary.json`` (values that matter also as ``float.hex``)."""
    return _findings(_load(run_dir))


def _findings(run: _Run) -> list[str]:
    s, banner = run.summary, _status(run)
    rep = next((a.get("reproducible") for a in run.arms if a["name"] == run.ref), None)
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
        f"Reference arm {run.ref} {verdict}.",
        *_rerun(run),
        *([] if run.metrics else ["metrics.csv holds no step yet: there is nothing to measure."]),
        *_divergence(run),
        *_errors(run),
        *_pair_findings(run),
        *_training(run),
    ]


def _rerun(run: _Run) -> list[str]:
    by = {
        v: [a["name"] for a in run.arms if a["name"] != run.ref and a.get("reproducible") is v] for v in (True, False)
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


def _divergence(run: _Run) -> list[str]:
    out = []
    for a in run.arms:
        d, st = run.col(a["name"], "diff_frac"), run.col(a["name"], "step")
        ok = np.isfinite(d)
        if a["name"] == run.ref or not ok.any():
            continue
        d, st, u = d[ok], st[ok], _fin(run.col(a["name"], "ulp_max"))
        what = f"Arm {a['name']} (order {a.get('order')}, {a.get('input')} inputs, {_acc(a)} accumulator)"
        if not np.any(d > 0):
            out.append(f"{what} gave bits identical to {run.ref}'s at all {d.size} steps.")
            continue
        w, med = int(np.argmax(d)), float(np.median(d))
        ulps = (
            f" The largest ulp distance per step had median {float(np.median(u)):g} and worst "
            f"{float(np.max(u)):g} ulps of {a.get('output') or _acc(a)}."
            if u.size
            else ""
        )
        out.append(
            f"{what} differed from {run.ref} in a median {_pct(med)} of elements per step (fraction "
            f"{_x(med)}), worst {_pct(float(d[w]))} at step {int(st[w])}; {int(np.sum(d > 0))} of "
            f"{d.size} steps differed, the first at step {int(st[np.argmax(d > 0)])}.{ulps}"
        )
    return out


def _errors(run: _Run) -> list[str]:
    out = []
    for a in run.arms:
        me, mx = _mean_err(run, a["name"]), _fin(run.col(a["name"], "err_max_rel"))
        if not math.isnan(me):
            o = a.get("output") or _acc(a)
            out.append(
                f"Arm {a['name']}: mean relative error against the exact sum {_x(me)} = "
                f"{me / get_format(o).unit_roundoff:.3g} u of its {o} output; "
                f"worst element {_x(float(np.max(mx)) if mx.size else math.nan)}."
            )
        nf = _fin(run.col(a["name"], "nonfinite"))
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


def _pair_findings(run: _Run) -> list[str]:
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
                da, db = _fin(run.col(a["name"], "diff_frac")), _fin(run.col(b["name"], "diff_frac"))
                div = (
                    f"; the median fraction of elements differing from {run.ref} went from "
                    f"{_pct(float(np.median(da)))} to {_pct(float(np.median(db)))}"
                    if da.size and db.size and run.ref not in (a["name"], b["name"])
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


def _training(run: _Run) -> list[str]:
    ref, out = run.ref, []
    steps, loss_ref = run.col(ref, "step"), run.col(ref, "loss")
    for a in run.arms if _fin(loss_ref).size else []:
        name, loss, pd = a["name"], run.col(a["name"], "loss"), run.col(a["name"], "param_dist")
        k = min(len(loss_ref), len(loss), len(pd))
        if name == ref or k == 0:
            continue
        first, pf = a.get("first_param_divergence_step"), run.col(name, "param_diff_frac")
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


def _draw_panels(run: _Run, stem: str) -> Draw:
    title, panels = _PANELS[stem]

    def draw(fig: Figure, rect: Rect) -> float:
        leg = (math.ceil(len(run.arms) / 3) * 0.17 + 0.45) / _H  # one legend for all panels, below them
        x, y, w, h = rect[0] + 0.07, rect[1] + leg, rect[2] - 0.08, rect[3] - leg - 0.02
        ph, handles = h / len(panels), {}
        for j, (col, label, log, skip) in enumerate(panels):
            ax = fig.add_axes((x, y + (len(panels) - 1 - j) * ph + 0.12 * ph, w, 0.8 * ph))
            for i, a in enumerate(run.arms):
                v, c = run.col(a["name"], col), f"C{i % 10}"
                if v.size == 0 or (skip and a["name"] == run.ref):
                    continue
                ok = np.isfinite(v) & (v > 0) if log else np.isfinite(v)
                (handles[a["name"]],) = ax.plot(
                    run.col(a["name"], "step")[ok], v[ok], ".-" if i < 10 else ".--", color=c
                )
                if col == "param_dist" and a.get("first_param_divergence_step") is not None:
                    ax.axvline(a["first_param_divergence_step"], color=c, ls=":", lw=1)
            if log and ax.get_lines():
                ax.set_yscale("log")
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


def _draw_png(path: Path) -> Draw:
    def draw(fig: Figure, rect: Rect) -> float:
        img = imread(path)
        h = min(rect[3], rect[2] * _W * img.shape[0] / img.shape[1] / _H)  # keep the aspect, top aligned
        ax = fig.add_axes((rect[0], rect[1] + rect[3] - h, rect[2], h))
        ax.imshow(img, interpolation="none")  # embedded as is, no resampling
        ax.set_axis_off()
        return (1 - rect[1] - rect[3] + h) * _H

    return draw


def _figures(run: _Run) -> list[tuple[Draw, str]]:
    pngs = sorted((run.dir / "figures").glob("*.png")) if (run.dir / "figures").is_dir() else []
    if pngs:
        order = list(CAPTIONS)
        pngs.sort(key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.name))
        return [
            (_draw_png(p), CAPTIONS.get(p.stem, f"Figure {p.name} from the run's figures directory.")) for p in pngs
        ]
    if not run.metrics:
        return []  # interrupted before the first step: nothing to draw
    stems = ["error", "divergence"][: 1 + (len(run.arms) > 1)] + ["training"] * bool(
        _fin(run.col(run.ref, "loss")).size
    )
    return [(_draw_panels(run, k), CAPTIONS[k]) for k in stems]


_POLICIES = {
    "fixed": "the same plan every step",
    "shuffle": "the plan re-ranked by a fresh random permutation every step",
    "arrival": "a sequential fold in the order the workers' messages arrive (latency model), new every step",
    "atomic": "every element a sequential fold in its own random order, new every step",
    "random_tree": "a random tree shape and leaf order every step",
}


def _methods(doc: Doc, run: _Run) -> None:
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
    n = min(int(run.summary.get("workers") or 8), 8)
    for order in dict.fromkeys(str(a.get("order")) for a in run.arms):
        policy, _, plan = order.partition(":")
        doc.text(
            f"{order}: {_POLICIES.get(policy, 'unknown order policy')}"
            + (f"; drawn for n = {n} workers:" if plan else "."),
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


def _cell(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else "null" if v is None else str(v)


def _appendix(doc: Doc, run: _Run) -> None:
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
    doc.table(["field", *(a["name"] for a in run.arms)], [[k, *(_cell(a.get(k)) for a in run.arms)] for k in keys])
    hists = [(a["name"], a["ulp_hist"]) for a in run.arms if isinstance(a.get("ulp_hist"), dict)]
    if hists:
        doc.heading("ulp distance to the reference arm: counts, bin i is edges[i] <= d < edges[i+1]", 11)
        counts = [list(h.get("counts", [])) for _, h in hists]
        doc.table(
            ["d from", *(name for name, _ in hists)],
            [[e, *(c[i] if i < len(c) else "" for c in counts)] for i, e in enumerate(hists[0][1].get("edges", []))],
        )


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the PDF report of a run directory (default ``RUN/report.pdf``, atomically).

    Raises:
        InvalidArgument: the directory, its summary.json or metrics.csv is missing, or they are
            not a fpreduce run's (the one-line message names what is missing).

    >>> write_report("no/such/run")
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: no/such/run: no such run directory
    """
    run = _load(run_dir)
    s = run.summary

    def body(doc: Doc) -> None:
        doc.new_page()
        if (b := _status(run)) is not None:
            doc.banner(b)
        doc.heading(f"fpreduce report: {s.get('name', run.dir.name)}", 18)
        doc.text(QUESTION, size=11)
        doc.heading("Run", 11)
        date = next((str(s[k]) for k in ("date", "created", "started", "finished") if s.get(k)), "n/a")
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
                ["reference arm", run.ref],
            ],
            size=9,
        )
        doc.heading("Arms", 11)
        cols = ["order", "input", "accumulate", "output", "rounding", "algorithm", "average"]
        doc.table(["arm", *cols], [[a["name"], *(a.get(c) or "" for c in cols)] for a in run.arms], size=8)
        doc.new_page()
        doc.heading("Findings")
        for f in _findings(run):
            doc.text("- " + f)
            doc.y += 0.06
        for draw, caption in _figures(run):
            doc.figure_page(draw, caption)
        _methods(doc, run)
        _appendix(doc, run)

    name = s.get("name", run.dir.name)
    return render(Path(out) if out is not None else run.dir / "report.pdf", f"fpreduce report {name}", body)


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
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such sweep directory")
    if not (d / "sweep.csv").is_file():
        raise InvalidArgument(f"{d}: sweep.csv is missing; is this a fpreduce sweep directory?")
    rows = _read_csv(d / "sweep.csv", "workers")
    miss = [c for c in (*_SWEEP_NUM, "plan", "input", "accumulate", "arm") if rows and c not in rows[0]]
    if not rows or miss:
        raise InvalidArgument(f"{d / 'sweep.csv'}: no rows or missing columns {miss}")
    series: dict[str, dict[str, NDArray[np.float64]]] = {}
    several = len({r.get("dist", "") for r in rows}) > 1  # name the data only when it varies
    for r in sorted(rows, key=lambda r: _num(r["workers"])):
        data = f" {r['dist']}" if several else ""
        m = series.setdefault(f"{r['arm']}: {r['plan']}{data} {r['input']}->{r['accumulate']}", {})
        for c in _SWEEP_NUM:
            m[c] = np.append(m.get(c, np.array([])), _num(r[c]))
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
        doc.table(head, [[_cell(_num(r[h])) if h in _SWEEP_NUM[1:] else r[h] for h in head] for r in rows])

    return render(Path(out) if out is not None else d / "report.pdf", f"fpreduce sweep {d.name}", body)

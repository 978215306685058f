"""Figures of a run directory and of a sweep table: pure functions of their files.

``plot_run(RUN)`` reads ``RUN/metrics.csv`` and ``RUN/summary.json`` (docs/run-format.md)
and writes ``RUN/figures/{error,divergence,ulp_hist[,training]}.{png,pdf}``: per-step
normwise and backward error against the exact sum, bitwise divergence of each arm from
its ``compare_to`` arm (legend "B vs A") and on relaunch, the histogram of ulp distances
per pair, and in training runs loss and parameter distance per pair. ``plot_sweep(SWEEP)``
draws ``SWEEP/sweep.csv`` against the number of workers N.

Fractions sit on linear 0-100% axes. Every series has its own colour and marker (70
distinct). Zeros on log axes (an exact arm) sit on a labelled dotted line one decade
below the smallest positive value; NaN (not applicable) and ±Inf leave a gap
(non-finite sums are counted in the legend). Figures ignore the caller's
matplotlib configuration and the clock: the same files give byte-identical PNG, PDF and
SVG. matplotlib is imported only when drawing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.report._figure import (
    FIGSIZE,
    Series,
    check_formats,
    legend,
    log_lines,
    new_figure,
    note,
    percent_axis,
    positive,
    save_figures,
    series_style,
)
from fpreduce.report._sweep_plot import fig_sweep
from fpreduce.run.rundir import METRICS_CSV, SWEEP_CSV, load_run, point_dirs, read_summary, read_sweep

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FIGSIZE", "arm_label", "pair_label", "plot_run", "plot_sweep"]


def arm_label(arm: Mapping[str, Any], *, reference: str | None = None) -> str:
    """One-line description of an arm from its summary.json entry.

    >>> arm_label({"name": "A", "order": "fixed:sequential", "input": "bf16", "accumulate": "bf16"},
    ...           reference="A")
    'A: fixed:sequential bf16→bf16 (reference)'
    """
    name = str(arm.get("name", "?"))
    text = f"{name}: {arm.get('order', '?')} {arm.get('input', '?')}→{arm.get('accumulate', '?')}"
    if arm.get("output") not in (None, arm.get("accumulate")):
        text += f"→{arm['output']}"
    extras = [
        str(arm[k])
        for k, plain in (("algorithm", "plain"), ("rounding", "nearest_even"))
        if arm.get(k) not in (None, plain)
    ]
    if arm.get("average") not in (None, "none"):
        extras.append(f"average={arm['average']}")
    if extras:
        text += f" [{', '.join(extras)}]"
    return text + (" (reference)" if name == reference else "")


def pair_label(arm: Mapping[str, Any], other: Mapping[str, Any] | None) -> str:
    """``B vs A``, with the format of the comparison when the two output formats differ.

    >>> pair_label({"name": "F", "output": "fp32", "compared_in": "fp32"}, {"name": "A", "output": "bf16"})
    'F vs A (in fp32)'
    """
    if other is None:
        return str(arm.get("name", "?"))
    text = f"{arm.get('name', '?')} vs {other.get('name', '?')}"
    oa, ob = arm.get("output") or arm.get("accumulate"), other.get("output") or other.get("accumulate")
    if oa != ob:
        text += f" (in {arm.get('compared_in') or oa})"
    return text


# ----------------------------------------------------------------------------- run model


@dataclass(frozen=True)
class _Run:
    name: str
    subtitle: str
    reference: str
    arms: tuple[str, ...]
    info: dict[str, dict[str, Any]]
    metrics: dict[str, dict[str, NDArray[Any]]]

    def color(self, arm: str) -> str:
        return str(series_style(self.arms.index(arm))["color"])

    def partner(self, arm: str) -> str:
        """The arm ``arm`` is compared with (the reference for runs before compare_to)."""
        return str(self.info.get(arm, {}).get("compare_to") or self.reference)

    def pairs(self) -> tuple[str, ...]:
        """The arms compared with another arm (not with themselves)."""
        return tuple(a for a in self.arms if self.partner(a) != a)

    def pair(self, arm: str) -> str:
        if self.partner(arm) == arm:
            return arm
        return pair_label(
            self.info.get(arm, {"name": arm}), self.info.get(self.partner(arm), {"name": self.partner(arm)})
        )

    def style(self, arm: str, ls: str = "-") -> dict[str, Any]:
        """Colour and marker of the arm; the first arm thick, pale and underneath, so identical curves stay visible."""
        ref = arm == self.reference
        many = max((m["step"].size for m in self.metrics.values()), default=0) > 40
        return {
            **series_style(self.arms.index(arm)),
            **({"markevery": 0.08, "markersize": 4} if many else {}),
            "ls": ls,
            "lw": 2.8 if ref else 1.3,
            "alpha": 0.55 if ref else 0.95,
            "zorder": 2 if ref else 3,
        }

    def col(self, arm: str, name: str) -> tuple[NDArray[Any], NDArray[Any]]:
        m = self.metrics.get(arm, {})
        steps = m.get("step", np.zeros(0, dtype=np.int64))
        return steps, m.get(name, np.full(steps.shape, np.nan))

    def label(self, arm: str) -> str:
        return arm_label(self.info.get(arm, {"name": arm}), reference=self.reference)

    def series(self, *cols: tuple[str, str], arms: Sequence[str] | None = None) -> list[Series]:
        """(x, y, style) for every arm (or those given) and every (column, line style)."""
        return [(*self.col(arm, c), self.style(arm, ls)) for arm in (arms or self.arms) for c, ls in cols]

    def legend(
        self,
        fig: Figure,
        cols: Sequence[str],
        suffix: Mapping[str, str] | None = None,
        *,
        extra: Sequence[tuple[str, str]] = (),
        arms: Sequence[str] | None = None,
        pairs: bool = False,
    ) -> None:
        """Arms (or pairs "B vs A: ..."; flagging one whose curves equal an earlier arm's: drawn over it),
        then (line style, meaning)."""
        from matplotlib.lines import Line2D

        entries = []
        shown = list(arms or self.arms)
        for i, a in enumerate(shown):
            same = [
                b
                for b in shown[:i]
                if all(
                    np.array_equal(self.col(a, c)[0], self.col(b, c)[0])
                    and np.array_equal(self.col(a, c)[1], self.col(b, c)[1], equal_nan=True)
                    for c in cols
                )
            ]
            whose = ", ".join(f"{b}'s" for b in same)
            note = f"; on these axes its curves coincide with {whose} at every step (drawn over them)" if same else ""
            if not any(np.isfinite(self.col(a, c)[1]).any() for c in cols):
                note = "; no values (NaN: not applicable)"
            text = self.label(a).replace(f"{a}:", f"{self.pair(a)}:", 1) if pairs else self.label(a)
            entries.append((Line2D([], [], **self.style(a)), text + (suffix or {}).get(a, "") + note))
        entries += [(Line2D([], [], color="0.25", lw=1.3, ls=ls), text) for ls, text in extra]
        legend(fig, entries)


def _read_run(run_dir: str | Path) -> _Run:
    res = load_run(run_dir, config_required=False)
    metrics, summary = res.metrics, res.summary
    if not metrics:
        raise InvalidArgument(f"{res.dir / METRICS_CSV}: no complete step recorded yet; nothing to plot")
    info = {str(a["name"]): a for a in res.arms}
    arms = tuple(dict.fromkeys([*info, *metrics]))
    done = max(int(m["step"][-1]) + 1 for m in metrics.values())
    steps = summary.get("steps")
    parts = [
        f"N = {summary.get('workers', '?')} workers",
        f"{summary.get('elements', '?')} elements",
        f"{summary.get('source', '?')} source",
        f"{done} of {steps} steps" if steps not in (None, done) else f"{done} step{'s' * (done != 1)}",
    ]
    if not summary.get("complete", True):
        parts.append("INCOMPLETE run")
    return _Run(str(summary.get("name") or res.dir.name), ", ".join(parts), res.reference, arms, info, metrics)


def _step_axes(run: _Run, *axes: Axes) -> bool:
    """Label step axes (integer ticks); True when there are few enough steps to mark points."""
    from matplotlib.ticker import MaxNLocator

    steps = np.concatenate([m["step"] for m in run.metrics.values()])
    for ax in axes:
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if steps.min() == steps.max():
            ax.set_xlim(steps.min() - 0.5, steps.max() + 0.5)
            ax.set_xticks([steps.min()])
    return max(m["step"].size for m in run.metrics.values()) <= 40


# ----------------------------------------------------------------------------- run figures


def _fig_error(run: _Run) -> Figure:
    fig, (a1, a2) = new_figure(
        f"{run.name}: error of each arm's sum against the exact sum, per step", run.subtitle, ncols=2
    )
    markers = _step_axes(run, a1, a2)
    log_lines(a1, run.series(("err_norm", "-")), markers=markers)
    a1.set(title=r"normwise error $\|y - s\|_2 / \|s\|_2$", ylabel="normwise error")
    log_lines(a2, run.series(("err_backward", "-")), markers=markers)
    a2.set(title=r"backward error $\max_j |y_j - s_j| \,/\, \sum_i |x_{ij}|$", ylabel="backward error")
    nonfinite = {a: int(np.sum(np.nan_to_num(run.col(a, "nonfinite")[1]) > 0)) for a in run.arms}
    run.legend(
        fig,
        ("err_norm", "err_backward"),
        {a: f"; NaN/Inf results at {k} step(s)" for a, k in nonfinite.items() if k},
    )
    return fig


def _fraction_lines(ax: Axes, series: Sequence[Series], *, markers: bool, label: str) -> None:
    """Fractions on a linear 0-100% axis (NaN: gaps)."""
    mk: dict[str, Any] = {"marker": "o", "markersize": 3.5} if markers else {}
    for x, y, kw in series:
        ax.plot(x, y, **{**mk, **kw})
    percent_axis(ax, label)


def _fig_divergence(run: _Run) -> Figure:
    fig, (a1, a2) = new_figure(
        f"{run.name}: bitwise divergence per step, from the compare_to arm and on relaunch", run.subtitle, ncols=2
    )
    markers = _step_axes(run, a1, a2)
    pairs = run.pairs()
    moving = [a for a in run.arms if not str(run.info.get(a, {}).get("order", "")).startswith("fixed:")]
    if pairs:
        _fraction_lines(a1, run.series(("diff_frac", "-"), arms=pairs), markers=markers, label="elements differing")
    else:
        note(a1, "every arm is compared with itself")
    if (alone := [a for a in run.arms if a not in pairs]) and pairs:
        note(a1, f"not drawn: {', '.join(alone)} (each compared with itself)", corner=True)
    a1.set(title="bits differ from the compare_to arm (pairs: legend)")
    if moving:
        _fraction_lines(
            a2, run.series(("rerun_diff_frac", "-"), arms=moving), markers=markers, label="elements changed"
        )
    else:
        note(a2, "every arm has a fixed order: a relaunch repeats its bits")
    if (fixed := [a for a in run.arms if a not in moving]) and moving:
        note(a2, f"not drawn: {', '.join(fixed)} (fixed order: 0 by construction)", corner=True)
    a2.set(title="bits changed by a relaunch (order not fixed)")
    shown = [a for a in run.arms if a in pairs or a in moving]
    run.legend(fig, ("diff_frac", "rerun_diff_frac"), arms=shown, pairs=True)
    return fig


def _bin_label(lo: int, hi: int | None) -> str:
    def num(n: int) -> str:  # large edges as the nearest power of two: 65537 -> 2^16
        return str(n) if n < 10_000 else f"$2^{{{round(math.log2(n))}}}$"

    return f"≥{num(lo)}" if hi is None else num(lo) if hi <= lo else f"{num(lo)}–{num(hi)}"


def _share(v: float) -> str:
    """A bar's share in words: 100%, 38%, 7.1%, 0.0041% (empty for 0)."""
    return "" if v <= 0 else f"{100 * v:.0f}%" if v >= 0.1 else f"{100 * v:.2g}%"


_HATCHES = ("", "//", "..", "xx")  # bars have no markers: from the 11th pair on, a hatch tells them apart


def _fig_ulp_hist(run: _Run) -> Figure:
    from matplotlib.patches import Patch

    fig, (ax,) = new_figure(
        f"{run.name}: distribution of ulp distances between each arm and its compare_to arm, all steps",
        run.subtitle,
    )
    hists: dict[str, tuple[NDArray[Any], NDArray[Any]]] = {}
    for arm in run.pairs():
        h = run.info.get(arm, {}).get("ulp_hist")
        h = h if isinstance(h, dict) else {}
        counts = np.asarray(h.get("counts") or [], dtype=np.float64)
        if counts.sum() > 0:
            edges = np.asarray(h.get("edges") or [], dtype=np.int64)[: counts.size]
            edges = edges if edges.size == counts.size else np.arange(counts.size)
            hists[arm] = (edges, counts / counts.sum())
    if not hists:
        ax.set(xticks=[], yticks=[])
        note(ax, "no arm is compared with another arm" if not run.pairs() else "summary.json holds no ulp histograms")
        return fig
    edges = max((e for e, _ in hists.values()), key=len)
    nbins = min(max(max(int(np.flatnonzero(f > 0).max()) for _, f in hists.values()) + 1, 4), edges.size)
    width = 0.8 / len(hists)
    for i, (arm, (_, frac)) in enumerate(hists.items()):
        f = np.zeros(nbins)
        f[: min(nbins, frac.size)] = frac[:nbins]
        x = np.arange(nbins) - 0.4 + width * (i + 0.5)
        k = run.arms.index(arm)
        bars = ax.bar(x, f, width=width, color=run.color(arm), hatch=_HATCHES[k // 10 % 4], edgecolor="white", lw=0.4)
        if len(hists) * nbins <= 48:  # the share of every non-empty bin in words: small bins stay readable
            ax.bar_label(bars, [_share(v) for v in f], fontsize=6, rotation=90, padding=2, color=run.color(arm))
    percent_axis(ax, "share of elements")
    ax.set_ylim(0, 1.12)
    labels = [_bin_label(int(edges[i]), int(edges[i + 1]) - 1 if i + 1 < edges.size else None) for i in range(nbins)]
    ax.set_xticks(np.arange(nbins), labels, rotation=35 if nbins > 8 else 0, ha="right" if nbins > 8 else "center")
    ax.set_xlim(-0.6, nbins - 0.4)
    ax.grid(False, axis="x")
    ax.set_xlabel("ulp distance to the compare_to arm (ulps of the wider output format of the pair; log-spaced bins)")
    if missing := [a for a in run.pairs() if a not in hists]:
        note(ax, "no histogram for: " + ", ".join(missing), corner=True)
    legend(
        fig,
        [
            (
                Patch(facecolor=run.color(a), hatch=_HATCHES[run.arms.index(a) // 10 % 4], edgecolor="white"),
                run.label(a).replace(f"{a}:", f"{run.pair(a)}:", 1),
            )
            for a in hists
        ],
    )
    return fig


def _fig_training(run: _Run) -> Figure:
    fig, (a1, a2) = new_figure(
        f"{run.name}: training, each arm's replica updated with its own gradient sum", run.subtitle, ncols=2
    )
    markers = _step_axes(run, a1, a2)
    losses = run.series(("loss", "-"))
    pos, finite = positive(y for _, y, _ in losses), sum(int(np.isfinite(y).sum()) for _, y, _ in losses)
    if pos.size == finite and pos.max() > 100 * pos.min():
        log_lines(a1, losses, markers=markers)
    else:
        mk: dict[str, Any] = {"marker": "o", "markersize": 3.5} if markers else {}
        for x, y, kw in losses:
            a1.plot(x, y, **{**mk, **kw})
    a1.set(title="training loss (before each update)", ylabel="loss")
    if run.pairs():
        log_lines(a2, run.series(("param_dist", "-"), arms=run.pairs()), markers=markers)
    else:
        note(a2, "every arm is compared with itself")
    a2.set(
        title=r"distance to compare_to: $\|\theta - \theta_{ref}\| \,/\, \|\theta_{ref}\|$",
        ylabel="relative parameter distance",
    )
    suffix, marked, xmax = {}, 0, max(int(m["step"][-1]) for m in run.metrics.values())
    for arm in run.pairs():
        first = run.info.get(arm, {}).get("first_param_divergence_step")
        if first is None:
            suffix[arm] = f"; weights bitwise equal to {run.partner(arm)}'s at every step (distance 0)"
            continue
        suffix[arm] = f"; weights first differ at step {first}"
        if not 0 <= first <= xmax:
            continue
        a2.axvline(first, color=run.color(arm), ls="--", lw=1.0, zorder=1)
        right = first > 0.65 * xmax
        a2.annotate(
            f"{run.pair(arm)}: step {first}",
            xy=(first, 0.97 - 0.07 * marked),
            xycoords=("data", "axes fraction"),
            xytext=(-4 if right else 4, 0),
            textcoords="offset points",
            ha="right" if right else "left",
            va="top",
            fontsize=8,
            color=run.color(arm),
            bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1},
            in_layout=False,
        )
        marked += 1
    final = {a: y[np.isfinite(y)][-1] for a in run.arms if np.isfinite(y := run.col(a, "loss")[1]).any()}
    suffix = {a: (f"; final loss {final[a]:.5g}" if a in final else "") + suffix.get(a, "") for a in run.arms}
    run.legend(
        fig,
        ("loss", "param_dist"),
        suffix,
        extra=[("--", "first step whose weights differ bitwise from the compare_to arm's")] if marked else [],
        pairs=True,
    )
    return fig


# ----------------------------------------------------------------------------- saving


def plot_run(run_dir: str | Path, *, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Draw the figures of a run directory into ``RUN/figures/``; return the paths written.

    Writes ``error``, ``divergence``, ``ulp_hist`` and, when some arm has a finite
    loss (training runs), ``training``, each in every format of ``formats``
    (``png``, ``pdf``, ``svg``). Partial (interrupted) runs are drawn as far as
    they go and say so in the subtitle. NaN metrics leave gaps, zeros sit on a
    labelled floor line of log axes, non-finite sums are counted in the legend.
    Raises InvalidArgument when ``run_dir`` is not a run directory (missing
    metrics.csv or summary.json) or records no step.
    """
    fmts = check_formats(formats)
    run = _read_run(run_dir)
    builders = {
        "error": lambda: _fig_error(run),
        "divergence": lambda: _fig_divergence(run),
        "ulp_hist": lambda: _fig_ulp_hist(run),
    }
    if any(np.isfinite(run.col(arm, "loss")[1]).any() for arm in run.arms):
        builders["training"] = lambda: _fig_training(run)
    return save_figures(Path(run_dir) / "figures", builders, fmts)


# ----------------------------------------------------------------------------- sweep


def plot_sweep(sweep_dir: str | Path, *, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Draw ``SWEEP/sweep.csv`` into ``SWEEP/figures/sweep.*``; return the paths written.

    Four panels against the number of workers N (log N axis): the normwise error
    (log, with √N and N reference slopes from the top line's first positive point;
    the mean relative error for older sweeps), the max ulp distance to the compare_to
    arm (log), and on linear 0-100% axes the fraction of elements differing from the
    compare_to arm and the fraction changed by a relaunch. One colour and marker per
    (plan, data distribution when several, input→accumulate), one line style per arm.
    Zeros sit on a floor line of log axes. Several rows for the same line and N are
    averaged (NaN ignored). Raises InvalidArgument for a missing sweep.csv or column.
    """
    fmts = check_formats(formats)
    d = Path(sweep_dir)
    rows = read_sweep(d)
    if not rows:
        raise InvalidArgument(f"{d / SWEEP_CSV}: no rows; nothing to plot")
    about = ""
    for p in point_dirs(d)[:1]:  # the settings every point shares
        try:
            s = read_summary(p)
            about = f"{s['source']} source, {s['elements']} elements, {s['steps']} steps per point; "
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return save_figures(d / "figures", {"sweep": lambda: fig_sweep(rows, d.resolve().name, about)}, fmts)

"""Figures of a run directory and of a sweep table: pure functions of their files.

``plot_run(RUN)`` reads ``RUN/metrics.csv`` and ``RUN/summary.json`` (docs/run-format.md)
and writes ``RUN/figures/{error,divergence,ulp_hist[,training]}.{png,pdf}``: per-step
error against the exact sum, bitwise divergence from the reference arm, the histogram
of ulp distances, and in training runs loss and parameter distance. ``plot_sweep(SWEEP)``
draws ``SWEEP/sweep.csv`` against the number of workers N.

Zeros on log axes (an exact arm; the reference compared with itself) sit on a labelled
dotted line one decade below the smallest positive value; NaN (not applicable) and ±Inf
leave a gap (non-finite sums are counted in the legend). Figures ignore the caller's
matplotlib configuration and the clock: the same files give byte-identical PNG, PDF and
SVG. matplotlib is imported only when drawing.
"""

from __future__ import annotations

import io
import json
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.run.rundir import _read_csv, atomic_write, load_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FIGSIZE", "arm_label", "load_metrics", "load_summary", "load_sweep", "plot_run", "plot_sweep"]

FIGSIZE = (9.0, 5.4)  # inches, every figure
DPI = 150
_FORMATS = ("png", "pdf", "svg")
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_STYLE: dict[str, Any] = {
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "figure.titlesize": 11.5,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "pdf.fonttype": 42,
    "svg.fonttype": "path",
    "svg.hashsalt": "fpreduce",
    "savefig.dpi": DPI,
    "legend.frameon": False,
}
SWEEP_COLUMNS = (
    "workers",
    "plan",
    "input",
    "accumulate",
    "arm",
    "mean_err_rel",
    "max_err_rel",
    "mean_diff_frac",
    "max_ulp",
)

Series = tuple[NDArray[Any], NDArray[Any], dict[str, Any]]


# ----------------------------------------------------------------------------- reading


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    """Read ``RUN/summary.json``; InvalidArgument if missing, not JSON or without ``arms``."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise InvalidArgument(f"{path} not found: is {Path(run_dir)} a fpreduce run directory?")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgument(f"{path}: not a readable JSON file ({e})") from None
    arms = summary.get("arms") if isinstance(summary, dict) else None
    if not isinstance(arms, list) or not all(isinstance(a, dict) and "name" in a for a in arms):
        raise InvalidArgument(f"{path}: no 'arms' list of named arms; is it a fpreduce summary.json?")
    return summary  # type: ignore[no-any-return]


def load_sweep(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of ``SWEEP/sweep.csv`` (``workers`` int, measures float, ``dist`` "" if absent).

    A truncated last row is ignored.
    """
    measures = SWEEP_COLUMNS[SWEEP_COLUMNS.index("arm") + 1 :]
    required = [c for c in SWEEP_COLUMNS if c != "dist"]  # sweeps before the data dimension had no dist
    return _read_csv(
        Path(sweep_dir) / "sweep.csv",
        "sweep",
        required,
        lambda r: {"dist": "", **r, "workers": int(r["workers"]), **{c: float(r[c]) for c in measures}},
    )[1]


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
        return _COLORS[self.arms.index(arm) % len(_COLORS)]

    def style(self, arm: str, ls: str = "-") -> dict[str, Any]:
        """The reference arm thick, pale and underneath, so identical curves stay visible."""
        ref = arm == self.reference
        return {
            "color": self.color(arm),
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

    def series(self, *cols: tuple[str, str]) -> list[Series]:
        """(x, y, style) for every arm and every (column, line style)."""
        return [(*self.col(arm, c), self.style(arm, ls)) for arm in self.arms for c, ls in cols]

    def legend(
        self,
        fig: Figure,
        cols: Sequence[str],
        suffix: Mapping[str, str] | None = None,
        *,
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Arms (flagging one whose curves equal an earlier arm's: drawn over it), then (line style, meaning)."""
        from matplotlib.lines import Line2D

        entries = []
        for i, a in enumerate(self.arms):
            same = [
                b
                for b in self.arms[:i]
                if all(
                    np.array_equal(self.col(a, c)[0], self.col(b, c)[0])
                    and np.array_equal(self.col(a, c)[1], self.col(b, c)[1], equal_nan=True)
                    for c in cols
                )
            ]
            note = f"; same values as {', '.join(same)} (drawn over it)" if same else ""
            if not any(np.isfinite(self.col(a, c)[1]).any() for c in cols):
                note = "; no values (NaN: not applicable)"
            entries.append((Line2D([], [], **self.style(a)), self.label(a) + (suffix or {}).get(a, "") + note))
        entries += [(Line2D([], [], color="0.25", lw=1.3, ls=ls), text) for ls, text in extra]
        _legend(fig, entries)


def _read_run(run_dir: str | Path) -> _Run:
    d = Path(run_dir)
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such run directory")
    metrics = load_metrics(d)  # checks metrics.csv first: the file that makes a run
    summary = load_summary(d)
    if not metrics:
        raise InvalidArgument(f"{d / 'metrics.csv'}: no complete step recorded yet; nothing to plot")
    info = {str(a["name"]): a for a in summary["arms"]}
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
    return _Run(
        str(summary.get("name") or d.name),
        ", ".join(parts),
        str(summary.get("reference") or arms[0]),
        arms,
        info,
        metrics,
    )


# ----------------------------------------------------------------------------- drawing helpers


def _new_figure(title: str, subtitle: str, nrows: int = 1, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout=ConstrainedLayoutEngine(h_pad=0.06, w_pad=0.06))
    axes = list(fig.subplots(nrows, ncols, squeeze=False).ravel())
    fig.suptitle(textwrap.fill(title, 95) + "\n" + textwrap.fill(subtitle, 105))
    return fig, axes


def _legend(fig: Figure, entries: Sequence[tuple[Any, str]]) -> None:
    """One legend for the whole figure, below the panels (never over the data)."""
    if entries:
        longest = max(len(label) for _, label in entries)
        ncols = min(len(entries), 1 if longest > 60 else 2 if longest > 30 else 3)
        fig.legend(*zip(*entries, strict=True), loc="outside lower center", ncols=ncols)


def _note(ax: Axes, text: str, *, corner: bool = False) -> None:
    ax.text(
        0.99 if corner else 0.5,
        0.97 if corner else 0.5,
        text,
        transform=ax.transAxes,
        color="0.3",
        ha="right" if corner else "center",
        va="top" if corner else "center",
        fontsize=8 if corner else 10,
    )


def _positive(values: Iterable[NDArray[Any]]) -> NDArray[Any]:
    allv = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values] or [np.zeros(0)])
    return allv[np.isfinite(allv) & (allv > 0)]


def _log_lines(ax: Axes, series: Sequence[Series], *, markers: bool) -> None:
    """Draw y against x on a log y axis; zeros on a labelled floor line, NaN as gaps."""
    pos = _positive(y for _, y, _ in series)
    mk: dict[str, Any] = {"marker": "o", "markersize": 3.5} if markers else {}
    if not any(np.isfinite(y).any() for _, y, _ in series):
        ax.set_yticks([])
        return _note(ax, "no data (not applicable: all values are NaN)")
    if pos.size == 0:  # nothing positive: a linear axis showing the zeros
        for x, y, kw in series:
            ax.plot(x, y, **{**mk, **kw})
        ax.set_ylim(-0.05, 1.0)
        return _note(ax, "all values are exactly 0")
    lo, hi = float(pos.min()), float(pos.max())
    has_zero = any(bool(np.any(y <= 0)) for _, y, _ in series)
    floor = 10.0 ** (math.floor(math.log10(lo)) - 1) if has_zero else lo
    span = max(math.log10(hi / floor), 1.0)
    ax.set_yscale("log")
    ax.set_ylim(floor / 10 ** (0.16 * span), hi * 10 ** (0.06 * span))
    for x, y, kw in series:
        ax.plot(x, np.where(y <= 0, floor, y), **{**mk, **kw})
    if has_zero:
        from matplotlib.transforms import blended_transform_factory

        ax.axhline(floor, color="0.45", lw=0.9, ls=":", zorder=1)
        ax.annotate(
            "values equal to 0 are drawn on this dotted line",
            (0.01, floor),
            xytext=(0, -2.5),
            xycoords=blended_transform_factory(ax.transAxes, ax.transData),
            textcoords="offset points",
            ha="left",
            va="top",
            fontsize=7.5,
            color="0.35",
            bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.5},
        )


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
    fig, (ax,) = _new_figure(
        f"{run.name}: relative error of each arm's sum against the exact sum, per step", run.subtitle
    )
    _log_lines(ax, run.series(("err_max_rel", "-"), ("err_mean_rel", "--")), markers=_step_axes(run, ax))
    ax.set_ylabel("relative error |y − s| / |s|")
    nonfinite = {a: int(np.sum(np.nan_to_num(run.col(a, "nonfinite")[1]) > 0)) for a in run.arms}
    ax.set_title("solid: max over elements, dashed: mean over elements")
    run.legend(
        fig,
        ("err_max_rel", "err_mean_rel"),
        {a: f"; NaN/Inf results at {k} step(s)" for a, k in nonfinite.items() if k},
    )
    return fig


def _fig_divergence(run: _Run) -> Figure:
    fig, (a1, a2) = _new_figure(
        f"{run.name}: bitwise divergence from the reference arm {run.reference}, per step", run.subtitle, ncols=2
    )
    markers = _step_axes(run, a1, a2)
    _log_lines(a1, run.series(("diff_frac", "-")), markers=markers)
    a1.set(title="elements whose bits differ from the reference", ylabel="fraction of elements")
    _log_lines(a2, run.series(("ulp_max", "-"), ("ulp_mean", "--")), markers=markers)
    a2.set(title="ulp distance to it: max (solid), mean (dashed)", ylabel="ulps of output format (the wider)")
    run.legend(fig, ("diff_frac", "ulp_max", "ulp_mean"))
    return fig


def _bin_label(lo: int, hi: int | None) -> str:
    def num(n: int) -> str:  # large edges as the nearest power of two: 65537 -> 2^16
        return str(n) if n < 10_000 else f"$2^{{{round(math.log2(n))}}}$"

    return f"≥{num(lo)}" if hi is None else num(lo) if hi <= lo else f"{num(lo)}–{num(hi)}"


def _fig_ulp_hist(run: _Run) -> Figure:
    from matplotlib.patches import Patch

    fig, (ax,) = _new_figure(
        f"{run.name}: distribution of ulp distances to the reference arm {run.reference}, all steps", run.subtitle
    )
    hists: dict[str, tuple[NDArray[Any], NDArray[Any]]] = {}
    for arm in run.arms:
        h = run.info.get(arm, {}).get("ulp_hist")
        h = h if isinstance(h, dict) else {}
        counts = np.asarray(h.get("counts") or [], dtype=np.float64)
        if counts.sum() > 0:
            edges = np.asarray(h.get("edges") or [], dtype=np.int64)[: counts.size]
            edges = edges if edges.size == counts.size else np.arange(counts.size)
            hists[arm] = (edges, counts / counts.sum())
    if not hists:
        ax.set(xticks=[], yticks=[])
        _note(ax, "summary.json holds no ulp histograms")
        return fig
    edges = max((e for e, _ in hists.values()), key=len)
    nbins = min(max(max(int(np.flatnonzero(f > 0).max()) for _, f in hists.values()) + 1, 4), edges.size)
    bottom = 10.0 ** (math.floor(math.log10(float(_positive(f[:nbins] for _, f in hists.values()).min()))) - 0.5)
    width = 0.8 / len(hists)
    for i, (arm, (_, frac)) in enumerate(hists.items()):
        f = np.zeros(nbins)
        f[: min(nbins, frac.size)] = frac[:nbins]
        x = np.arange(nbins) - 0.4 + width * (i + 0.5)
        ax.bar(
            x[f > 0],
            f[f > 0] - bottom,
            width=width,
            bottom=bottom,
            color=run.color(arm),
            alpha=0.6 if arm == run.reference else 0.9,
            edgecolor="white",
            linewidth=0.4,
        )
    ax.set_yscale("log")
    ax.set_ylim(bottom, 1.6)
    labels = [_bin_label(int(edges[i]), int(edges[i + 1]) - 1 if i + 1 < edges.size else None) for i in range(nbins)]
    ax.set_xticks(np.arange(nbins), labels, rotation=35 if nbins > 8 else 0, ha="right" if nbins > 8 else "center")
    ax.set_xlim(-0.6, nbins - 0.4)
    ax.grid(False, axis="x")
    ax.set(
        xlabel="ulp distance to the reference (ulps of output format, the wider of the two; log-spaced bins)",
        ylabel="fraction of elements",
    )
    if missing := [a for a in run.arms if a not in hists]:
        _note(ax, "no histogram for: " + ", ".join(missing), corner=True)
    _legend(fig, [(Patch(color=run.color(a), alpha=0.6 if a == run.reference else 0.9), run.label(a)) for a in hists])
    return fig


def _fig_training(run: _Run) -> Figure:
    fig, (a1, a2) = _new_figure(
        f"{run.name}: training, each arm's replica updated with its own gradient sum", run.subtitle, ncols=2
    )
    markers = _step_axes(run, a1, a2)
    losses = run.series(("loss", "-"))
    pos, finite = _positive(y for _, y, _ in losses), sum(int(np.isfinite(y).sum()) for _, y, _ in losses)
    if pos.size == finite and pos.max() > 100 * pos.min():
        _log_lines(a1, losses, markers=markers)
    else:
        mk: dict[str, Any] = {"marker": "o", "markersize": 3.5} if markers else {}
        for x, y, kw in losses:
            a1.plot(x, y, **mk, **kw)
    a1.set(title="training loss (before each update)", ylabel="loss")
    _log_lines(a2, run.series(("param_dist", "-")), markers=markers)
    a2.set(
        title=rf"parameter distance to {run.reference}: $\|\theta - \theta_{{ref}}\|_2\,/\,\|\theta_{{ref}}\|_2$",
        ylabel="relative parameter distance",
    )
    suffix, marked, xmax = {}, 0, max(int(m["step"][-1]) for m in run.metrics.values())
    for arm in run.arms:
        first = run.info.get(arm, {}).get("first_param_divergence_step")
        if arm == run.reference:
            continue
        if first is None:
            suffix[arm] = "; weights bitwise equal to the reference"
            continue
        suffix[arm] = f"; weights first differ at step {first}"
        if not 0 <= first <= xmax:
            continue
        a2.axvline(first, color=run.color(arm), ls="--", lw=1.0, zorder=1)
        right = first > 0.65 * xmax
        a2.annotate(
            f"{arm}: step {first}",
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
        extra=[("--", "first step whose weights differ bitwise from the reference")] if marked else [],
    )
    return fig


# ----------------------------------------------------------------------------- saving


def _check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    if not formats or any(f not in _FORMATS for f in formats):
        raise InvalidArgument(f"figure formats must be among {', '.join(_FORMATS)}; got {list(formats)}")
    return tuple(dict.fromkeys(formats))


def _render(out_dir: Path, builders: Mapping[str, Callable[[], Figure]], formats: tuple[str, ...]) -> list[Path]:
    """Build each figure under a fixed style (not the caller's matplotlibrc) and write it atomically."""
    import matplotlib.style

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgument(f"{out_dir}: cannot create the figures directory ({e.strerror})") from None
    paths: list[Path] = []
    with matplotlib.style.context(["default", _STYLE]):
        for stem, build in builders.items():
            fig, title = build(), f"fpreduce {stem}"
            metadata: dict[str, dict[str, Any]] = {  # no dates: same inputs => same bytes
                "png": {"Title": title},
                "svg": {"Title": title, "Date": None},
                "pdf": {"Title": title, "Creator": "fpreduce", "CreationDate": None},
            }
            for fmt in formats:
                buf = io.BytesIO()
                fig.savefig(buf, format=fmt, dpi=DPI, metadata=metadata[fmt])
                paths.append(out_dir / f"{stem}.{fmt}")
                atomic_write(paths[-1], buf.getvalue())
    return paths


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
    fmts = _check_formats(formats)
    run = _read_run(run_dir)
    builders = {
        "error": lambda: _fig_error(run),
        "divergence": lambda: _fig_divergence(run),
        "ulp_hist": lambda: _fig_ulp_hist(run),
    }
    if any(np.isfinite(run.col(arm, "loss")[1]).any() for arm in run.arms):
        builders["training"] = lambda: _fig_training(run)
    return _render(Path(run_dir) / "figures", builders, fmts)


# ----------------------------------------------------------------------------- sweep


def _fig_sweep(rows: list[dict[str, Any]], name: str, about: str) -> Figure:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    workers = sorted({r["workers"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    several = len({r["dist"] for r in rows}) > 1  # name the data only when it varies

    def group(r: dict[str, Any]) -> tuple[str, str, str]:
        return (f"{r['plan']} {r['dist']}" if several else r["plan"], r["input"], r["accumulate"])

    groups = list(dict.fromkeys(group(r) for r in rows))
    lines: dict[tuple[str, ...], dict[int, list[dict[str, Any]]]] = {}
    for r in rows:
        lines.setdefault((*group(r), r["arm"]), {}).setdefault(r["workers"], []).append(r)
    fig, axes = _new_figure(
        f"{name}: error and divergence against the number of workers N",
        f"{about}{len(groups)} plan/format combination(s), {len(arms)} arm(s), N = {', '.join(map(str, workers))}",
        nrows=2,
        ncols=2,
    )
    err = "relative error |y − s| / |s|"
    panels = [
        ("mean_err_rel", "mean relative error vs exact", err),
        ("max_err_rel", "max relative error vs exact", err),
        ("mean_diff_frac", "elements whose bits differ from the reference arm", "fraction of elements"),
        ("max_ulp", "max ulp distance to the reference arm", "ulps of output format"),
    ]
    styles = ("-", "--", ":", "-.")
    slope_ls = {0.5: (0, (4, 3)), 1.0: (0, (1.5, 2))}
    for ax, (col, title, ylabel) in zip(axes, panels, strict=True):
        series: list[Series] = []
        for (plan, inp, acc, arm), by_n in lines.items():
            ys = []
            for n in sorted(by_n):
                v = np.array([r[col] for r in by_n[n]])
                ys.append(float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else np.nan)
            series.append(
                (
                    np.array(sorted(by_n), dtype=np.float64),
                    np.array(ys),
                    {
                        "color": _COLORS[groups.index((plan, inp, acc)) % len(_COLORS)],
                        "ls": styles[arms.index(arm) % len(styles)],
                        "lw": 1.4,
                    },
                )
            )
        pos = _positive(y for _, y, _ in series)
        if col != "mean_diff_frac" and pos.size and len(workers) > 1:  # a fraction saturates at 1: no slopes
            # anchored at the highest line's value at the smallest N where some line is positive
            n0 = min(n for x, y, _ in series for n, v in zip(x, y, strict=True) if np.isfinite(v) and v > 0)
            y0 = float(_positive(y[x == n0] for x, y, _ in series).max())
            xs = np.array([n for n in workers if n >= n0], dtype=np.float64)
            series += [
                (xs, y0 * (xs / n0) ** power, {"color": "0.5", "ls": ls, "lw": 1.0, "marker": "none"})
                for power, ls in slope_ls.items()
            ]
        _log_lines(ax, series, markers=True)
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers, [str(n) for n in workers])
        ax.xaxis.set_minor_locator(NullLocator())
        if len(workers) == 1:
            ax.set_xlim(workers[0] / 1.5, workers[0] * 1.5)
        ax.set(title=title, ylabel=ylabel, xlabel="workers N")
    entries: list[tuple[Any, str]] = [
        (Line2D([], [], color=_COLORS[i % len(_COLORS)], lw=1.4, marker="o", markersize=3.5), f"{p} {i_}→{a}")
        for i, (p, i_, a) in enumerate(groups)
    ]
    if len(arms) > 1:
        entries += [
            (Line2D([], [], color="0.25", ls=styles[i % len(styles)], lw=1.4), f"arm {a}") for i, a in enumerate(arms)
        ]
    if len(workers) > 1:
        entries += [
            (Line2D([], [], color="0.5", ls=slope_ls[0.5]), "reference slope ∝ √N"),
            (Line2D([], [], color="0.5", ls=slope_ls[1.0]), "reference slope ∝ N"),
        ]
    _legend(fig, entries)
    return fig


def plot_sweep(sweep_dir: str | Path, *, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Draw ``SWEEP/sweep.csv`` into ``SWEEP/figures/sweep.*``; return the paths written.

    Four log-log panels against the number of workers N (mean and max relative
    error, fraction of differing elements, max ulp distance), one colour per
    (plan, data distribution when several, input→accumulate), one line style per arm, with √N and N reference
    slopes from the top line's first positive point. Zeros sit on a floor line. Several rows for the same line and N are
    averaged (NaN ignored). Raises InvalidArgument for a missing sweep.csv or column.
    """
    fmts = _check_formats(formats)
    d = Path(sweep_dir)
    rows = load_sweep(d)
    if not rows:
        raise InvalidArgument(f"{d / 'sweep.csv'}: no rows; nothing to plot")
    about = ""
    for p in sorted(d.glob("points/*/summary.json"))[:1]:  # the settings every point shares
        try:
            s = json.loads(p.read_text(encoding="utf-8"))
            about = f"{s['source']} source, {s['elements']} elements, {s['steps']} steps per point; "
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return _render(d / "figures", {"sweep": lambda: _fig_sweep(rows, d.resolve().name, about)}, fmts)

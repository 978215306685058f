"""The sweep figure of :func:`fpreduce.report.plots.plot_sweep`: error and divergence against N."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fpreduce.report._figure import Series, legend, log_lines, new_figure, percent_axis, positive, series_style

if TYPE_CHECKING:
    from matplotlib.figure import Figure


_STYLES = ("-", "--", ":", "-.")  # sweep figure: one line style per arm
_SLOPES = {0.5: (0, (4, 3)), 1.0: (0, (1.5, 2))}  # reference slope N**power -> its line style


def _sweep_series(
    lines: dict[tuple[str, ...], dict[int, list[dict[str, Any]]]],
    col: str,
    groups: list[tuple[str, str, str]],
    arms: list[str],
) -> list[Series]:
    """One panel of the sweep figure: column ``col`` against N per (group, arm) line."""
    series: list[Series] = []
    for (plan, inp, acc, arm), by_n in lines.items():
        ys = []
        for n in sorted(by_n):
            v = np.array([r[col] for r in by_n[n]], dtype=np.float64)
            ys.append(float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else np.nan)
        style = {**series_style(groups.index((plan, inp, acc))), "ls": _STYLES[arms.index(arm) % len(_STYLES)]}
        series.append((np.array(sorted(by_n), dtype=np.float64), np.array(ys), {**style, "lw": 1.4}))
    return series


def _slopes(series: list[Series], workers: list[int]) -> list[Series]:
    """Reference slopes sqrt(N) and N, anchored at the highest line's value at the smallest N with a positive
    value (relative errors only: a slope has no meaning on a fraction or a distance axis)."""
    pos = positive(y for _, y, _ in series)
    if not pos.size or len(workers) < 2:
        return []
    n0 = min(n for x, y, _ in series for n, v in zip(x, y, strict=True) if np.isfinite(v) and v > 0)
    y0 = float(positive(y[x == n0] for x, y, _ in series).max())
    xs = np.array([n for n in workers if n >= n0], dtype=np.float64)
    return [
        (xs, y0 * (xs / n0) ** power, {"color": "0.5", "ls": ls, "lw": 1.0, "marker": "none"})
        for power, ls in _SLOPES.items()
    ]


def fig_sweep(rows: list[dict[str, Any]], name: str, about: str) -> Figure:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    workers = sorted({r["workers"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    several = len({r.get("dist", "") for r in rows}) > 1  # name the data only when it varies

    def group(r: dict[str, Any]) -> tuple[str, str, str]:
        return (f"{r['plan']} {r['dist']}" if several else r["plan"], r["input"], r["accumulate"])

    groups = list(dict.fromkeys(group(r) for r in rows))
    lines: dict[tuple[str, ...], dict[int, list[dict[str, Any]]]] = {}
    pairs: dict[tuple[str, ...], dict[int, list[dict[str, Any]]]] = {}  # arms compared with another arm
    for r in rows:
        lines.setdefault((*group(r), r["arm"]), {}).setdefault(r["workers"], []).append(r)
        if r.get("compare_to", "") != r["arm"]:  # older sweeps have no compare_to: every arm
            pairs.setdefault((*group(r), r["arm"]), {}).setdefault(r["workers"], []).append(r)
    units = list(dict.fromkeys(str(r["accumulate"]) for r in rows))  # an ulp of bf16 is not an ulp of fp32
    cols = -(-(3 + len(units)) // 2)
    fig, axes = new_figure(
        f"{name}: error and divergence against the number of workers N",
        f"{about}{len(groups)} plan/format combination(s), {len(arms)} arm(s), N = {', '.join(map(str, workers))}",
        nrows=2,
        ncols=cols,
    )
    norm = any(np.isfinite(r.get("mean_err_norm", np.nan)) for r in rows)  # older sweeps: per-element error
    err = (
        ("mean_err_norm", "normwise error vs exact", "||y − s|| / ||s||")
        if norm
        else ("mean_err_rel", "mean relative error vs exact", "relative error |y − s| / |s|")
    )
    panels = [
        (*err, "log", None),
        *(("max_ulp", f"max ulp distance, {u} sums", f"ulps of {u} to compare_to", "log", u) for u in units),
        ("mean_diff_frac", "differing from compare_to", "elements differing", "percent", None),
        ("mean_rerun_diff_frac", "changed by a relaunch", "elements changed", "percent", None),
    ]
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, (col, title, ylabel, scale, unit) in zip(axes, panels, strict=False):
        src = pairs if col in ("max_ulp", "mean_diff_frac") else lines
        if unit is not None:  # one accumulator format: one unit on the axis
            src = {k: v for k, v in src.items() if k[2] == unit}
        series = _sweep_series(src, col, groups, arms)
        if scale == "log":
            log_lines(ax, series + (_slopes(series, workers) if col == err[0] else []), markers=True)
            ax.set_ylabel(ylabel)
        else:
            for x, y, kw in series:
                ax.plot(x, y, markersize=4, **kw)
            percent_axis(ax, ylabel)
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers, [str(n) for n in workers])
        ax.xaxis.set_minor_locator(NullLocator())
        if len(workers) == 1:
            ax.set_xlim(workers[0] / 1.5, workers[0] * 1.5)
        ax.set(title=title, xlabel="workers N")
    entries: list[tuple[Any, str]] = [
        (Line2D([], [], lw=1.4, markersize=4, **series_style(i)), f"{p} {i_}→{a}")
        for i, (p, i_, a) in enumerate(groups)
    ]
    if len(arms) > 1:
        entries += [
            (Line2D([], [], color="0.25", ls=_STYLES[i % len(_STYLES)], lw=1.4), f"arm {a}") for i, a in enumerate(arms)
        ]
    if len(workers) > 1:
        entries += [
            (Line2D([], [], color="0.5", ls=_SLOPES[0.5]), "reference slope ∝ √N (error panel)"),
            (Line2D([], [], color="0.5", ls=_SLOPES[1.0]), "reference slope ∝ N (error panel)"),
        ]
    legend(fig, entries)
    return fig

"""What every figure of :mod:`fpreduce.report.plots` shares: size, style, colours, log axes, saving.

Figures are drawn under a fixed style (not the caller's matplotlib configuration)
and saved with fixed metadata (no dates), so the same data gives the same bytes.
matplotlib is imported only when drawing.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.run.rundir import atomic_write

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIGSIZE = (9.0, 5.4)  # inches, every figure
DPI = 150
FORMATS = ("png", "pdf", "svg")
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
#: one marker per series beside its colour: 10 colours x 7 markers (coprime) tell 70 series apart
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def series_style(i: int) -> dict[str, Any]:
    """Colour and marker of the ``i``-th series: distinct for the first 70 (colour i mod 10, marker i mod 7)."""
    return {"color": COLORS[i % len(COLORS)], "marker": MARKERS[i % len(MARKERS)]}


def percent_axis(ax: Axes, label: str) -> None:
    """A linear 0-100% y axis for fractions (the data stay fractions 0..1)."""
    from matplotlib.ticker import PercentFormatter

    ax.set_ylim(-0.03, 1.03)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel(label)


STYLE: dict[str, Any] = {
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

Series = tuple[NDArray[Any], NDArray[Any], dict[str, Any]]


def new_figure(title: str, subtitle: str, nrows: int = 1, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout=ConstrainedLayoutEngine(h_pad=0.06, w_pad=0.06))
    axes = list(fig.subplots(nrows, ncols, squeeze=False).ravel())
    fig.suptitle(textwrap.fill(title, 95) + "\n" + textwrap.fill(subtitle, 105))
    return fig, axes


def legend(fig: Figure, entries: Sequence[tuple[Any, str]]) -> None:
    """One legend for the whole figure, below the panels (never over the data)."""
    if entries:
        longest = max(len(label) for _, label in entries)
        ncols = min(len(entries), 1 if longest > 60 else 2 if longest > 30 else 3)
        labels = [textwrap.fill(label, 110, subsequent_indent="    ") for _, label in entries]  # within the figure
        fig.legend([h for h, _ in entries], labels, loc="outside lower center", ncols=ncols)


def note(ax: Axes, text: str, *, corner: bool = False) -> None:
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


def positive(values: Iterable[NDArray[Any]]) -> NDArray[Any]:
    allv = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values] or [np.zeros(0)])
    return allv[np.isfinite(allv) & (allv > 0)]


def log_lines(ax: Axes, series: Sequence[Series], *, markers: bool) -> None:
    """Draw y against x on a log y axis; zeros on a labelled floor line, NaN as gaps."""
    pos = positive(y for _, y, _ in series)
    mk: dict[str, Any] = {"marker": "o", "markersize": 3.5} if markers else {}
    if not any(np.isfinite(y).any() for _, y, _ in series):
        ax.set_yticks([])
        return note(ax, "no data (not applicable: all values are NaN)")
    if pos.size == 0:  # nothing positive: a linear axis showing the zeros
        for x, y, kw in series:
            ax.plot(x, y, **{**mk, **kw})
        ax.set_ylim(-0.05, 1.0)
        return note(ax, "all values are exactly 0")
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
            "0 is drawn on this dotted line",
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


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    if not formats or any(f not in FORMATS for f in formats):
        raise InvalidArgument(f"figure formats must be among {', '.join(FORMATS)}; got {list(formats)}")
    return tuple(dict.fromkeys(formats))


def save_figures(out_dir: Path, builders: Mapping[str, Callable[[], Figure]], formats: tuple[str, ...]) -> list[Path]:
    """Build each figure under a fixed style (not the caller's matplotlibrc) and write it atomically."""
    import matplotlib.style

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgument(f"{out_dir}: cannot create the figures directory ({e.strerror})") from None
    paths: list[Path] = []
    with matplotlib.style.context(["default", STYLE]):
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

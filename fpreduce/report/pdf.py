"""Paged A4 text, tables and figures for the PDF reports (matplotlib's PDF backend).

Pages fill top to bottom; a paragraph or a table row that does not fit starts a new
page; too-wide tables split into column groups. ``render`` writes the document
atomically with fixed metadata and matplotlib's default style, so the same content
gives the same bytes.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matplotlib import rc_context, rcdefaults, rcParams
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from matplotlib.image import imread

from fpreduce._version import __version__
from fpreduce.run.rundir import atomic_write

_W, _H, _M = 8.27, 11.69, 0.7  # A4 portrait and its margin, inches
Rect = tuple[float, float, float, float]
Draw = Callable[[Figure, Rect], float]  # draws into rect, returns its lowest point (inches from top)


def _num(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        return math.nan


def cell(v: object) -> str:
    """A table cell: a float to 4 significant digits, None as ``null``, anything else as ``str``."""
    return f"{v:.4g}" if isinstance(v, float) else "null" if v is None else str(v)


class Doc:
    """Pages of wrapped text and tables flowing top to bottom; a new page when one is full."""

    def __init__(self, pdf: PdfPages, footer: str) -> None:
        self.pdf, self.footer, self.page, self.y = pdf, footer, 0, 0.0
        self.fig: Figure | None = None

    def new_page(self) -> Figure:
        self.flush()
        self.page += 1
        self.fig, self.y = Figure(figsize=(_W, _H)), _M
        self.fig.text(
            0.5,
            0.4 / _H,
            f"{textwrap.shorten(self.footer, 90)} - page {self.page}",
            ha="center",
            fontsize=7,
            color="0.4",
            parse_math=False,
        )
        return self.fig

    def flush(self) -> None:
        if self.fig is not None:
            self.pdf.savefig(self.fig)
            self.fig = None

    def _line(self, s: str, size: float, dy: float, x: float = _M, **kw: Any) -> None:
        if self.fig is None or self.y + dy > _H - _M:
            self.new_page()
        assert self.fig is not None
        self.fig.text(x / _W, 1 - self.y / _H, s, fontsize=size, va="top", parse_math=False, **kw)
        self.y += dy

    def text(self, s: str, *, size: float = 10, mono: bool = False, indent: float = 0.0, **kw: Any) -> None:
        """Wrapped to the page width (mono: hard-wrapped at the character width)."""
        width = int((_W - 2 * _M - indent) * 72 / (size * (0.61 if mono else 0.555)))
        for para in s.split("\n"):
            lines = (
                [para[i : i + width] for i in range(0, max(len(para), 1), width)]
                if mono
                else textwrap.wrap(
                    para, width, break_long_words=False, subsequent_indent="  " if para.startswith("- ") else ""
                )
                or [""]
            )
            dy = size * 1.4 / 72
            if not mono and self.fig is not None and self.y + len(lines) * dy > _H - _M:
                self.new_page()  # keep a paragraph on one page
            for ln in lines:
                self._line(ln, size, dy, x=_M + indent, family="monospace" if mono else "sans-serif", **kw)

    def heading(self, s: str, size: float = 14) -> None:
        if self.fig is not None and self.y + 1.0 > _H - _M:
            self.new_page()  # never a heading alone at the bottom of a page
        self.y += 0.1 if self.y > _M else 0
        for ln in textwrap.wrap(s, int((_W - 2 * _M) * 72 / (size * 0.6))):
            self._line(ln, size, size * 1.5 / 72, weight="bold")
        self.y += size * 0.3 / 72

    def table(self, header: Sequence[str], rows: Sequence[Sequence[object]], size: float = 7.5, keys: int = 1) -> None:
        """Monospace; too wide: split into column groups, the first ``keys`` columns (the row labels) repeated in
        each; too long: continued on the next page under a repeated header; a too-wide cell is wrapped."""
        fit = int((_W - 2 * _M) * 72 / (size * 0.61))
        cells = [[str(c) for c in header]]
        for r in rows:
            parts = [textwrap.wrap(str(c), fit // 2) or [""] for c in r]
            cells += [[p[i] if i < len(p) else "" for p in parts] for i in range(max(map(len, parts)))]
        w = [max(len(r[j]) for r in cells) for j in range(len(header))]
        right = [all(_num(r[j]) == _num(r[j]) or r[j] in ("", "nan") for r in cells[1:]) for j in range(len(w))]
        label = list(range(max(1, min(keys, len(header) - 1))))
        groups: list[list[int]] = [list(label)]
        for j in range(len(label), len(header)):
            if sum(w[k] + 2 for k in groups[-1]) + w[j] > fit and len(groups[-1]) > len(label):
                groups.append(list(label))
            groups[-1].append(j)
        dy = size * 1.35 / 72
        for g in groups:

            def fmt(r: list[str], g: list[int] = g) -> str:
                return "  ".join(r[k].rjust(w[k]) if right[k] else r[k].ljust(w[k]) for k in g).rstrip()

            for i, r in enumerate(cells[1:]):
                if i == 0 or self.fig is None or self.y + dy > _H - _M:
                    if self.fig is None or self.y + 3 * dy > _H - _M:
                        self.new_page()
                    for h in (fmt(cells[0]), "-" * sum(w[k] + 2 for k in g)) if any(cells[0]) else ():
                        self._line(h, size, dy, family="monospace", weight="bold")
                self._line(fmt(r), size, dy, family="monospace")
            self.y += dy

    def banner(self, s: str) -> None:
        assert self.fig is not None
        self.fig.text(
            0.5,
            1 - (self.y + 0.35) / _H,
            s,
            ha="center",
            va="center",
            fontsize=20,
            weight="bold",
            color="white",
            bbox={"facecolor": "#c0392b", "edgecolor": "none", "pad": 10},
            parse_math=False,
        )
        self.y += 0.85

    def figure(self, draw: Draw, caption: str, height: float = 0.36) -> None:
        """A figure at the current position, its caption below; a new page when ``height`` (a fraction of the
        page) and a caption do not fit: two landscape figures share a page."""
        if self.fig is None or self.y + height * _H + 0.6 > _H - _M:
            self.new_page()
        assert self.fig is not None
        w, top = _W - 2 * _M, self.y
        self.y = draw(self.fig, (_M / _W, 1 - (top + height * _H) / _H, w / _W, height)) + 0.2
        self.text(caption, size=9)
        self.y += 0.25

    def figure_page(self, draw: Draw, caption: str) -> None:
        """A figure at the top of a new page, its caption right below it."""
        fig, w = self.new_page(), _W - 2 * _M
        self.y = draw(fig, (_M / _W, 1 - (_M + 0.62 * _H) / _H, w / _W, 0.62)) + 0.3
        self.text(caption)


def render(out: Path, title: str, body: Callable[[Doc], None]) -> Path:
    buf = io.BytesIO()
    meta = {"Title": title, "Creator": f"fpreduce {__version__}", "CreationDate": None, "ModDate": None}
    with rc_context():  # the caller's rcParams (a notebook style) must not change the bytes
        rcdefaults()
        rcParams.update({"pdf.fonttype": 42, "font.family": "DejaVu Sans", "font.monospace": ["DejaVu Sans Mono"]})
        with PdfPages(buf, metadata=meta) as pdf:
            doc = Doc(pdf, title)
            body(doc)
            doc.flush()
    atomic_write(out, buf.getvalue())
    return out


def draw_png(path: Path) -> Draw:
    """Draw a PNG into a rect at its own aspect, top aligned, without resampling."""

    def draw(fig: Figure, rect: Rect) -> float:
        img = imread(path)
        h = min(rect[3], rect[2] * _W * img.shape[0] / img.shape[1] / _H)  # keep the aspect, top aligned
        ax = fig.add_axes((rect[0], rect[1] + rect[3] - h, rect[2], h))
        ax.imshow(img, interpolation="none")  # embedded as is, no resampling
        ax.set_axis_off()
        return (1 - rect[1] - rect[3] + h) * _H

    return draw

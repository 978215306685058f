"""The one plain-text table of the command line: columns aligned by display width.

Every command that prints a table (``run``/``show``'s summary, ``sum``, ``scale``,
``price``, ``list``, ``compare``, ``replay``, ``calibrate``) renders it here, so the
columns line up whatever a cell holds: a long explicit tree (``((0,1),(2,3))``),
non-ASCII text, East Asian wide characters (two terminal columns each) or combining
marks (none). Cells are turned into text with ``str``; a column is padded to its widest
cell, left-aligned (``"l"``) or right-aligned (``"r"``).

>>> print(table(["plan", "ulp"], [["sequential", 0.5], ["((0,1),(2,3))", 12]], align="lr"))
plan           ulp
------------------
sequential     0.5
((0,1),(2,3))   12
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

__all__ = ["table", "width"]


def width(text: str) -> int:
    """The columns ``text`` takes in a terminal: wide (East Asian) characters 2, combining marks 0."""
    w = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        w += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return w


def _pad(text: str, n: int, how: str) -> str:
    fill = " " * max(0, n - width(text))
    return text + fill if how == "l" else fill + text


def table(
    header: Sequence[object] | None,
    rows: Sequence[Sequence[object]],
    *,
    align: str = "",
    gap: int = 2,
    rule: bool = True,
    indent: str = "",
) -> str:
    """``rows`` (and ``header``) as aligned lines.

    Args:
        header: the column titles, or None for a table without a header.
        rows: the cells, row by row (any objects: ``str`` of each); short rows are padded with "".
        align: one ``"l"`` or ``"r"`` per column; columns beyond it: the first left, the others right.
        gap: spaces between columns.
        rule: a line of dashes under the header.
        indent: put before every line.

    Raises:
        ValueError: ``align`` holds a letter other than l or r.
    """
    if set(align) - {"l", "r"}:
        raise ValueError(f"align: one 'l' or 'r' per column, got {align!r}")
    cells = [[str(c) for c in r] for r in ([header] if header is not None else []) + list(rows)]
    ncol = max((len(r) for r in cells), default=0)
    cells = [r + [""] * (ncol - len(r)) for r in cells]
    how = [align[j] if j < len(align) else ("l" if j == 0 else "r") for j in range(ncol)]
    w = [max(width(r[j]) for r in cells) for j in range(ncol)]
    sep = " " * gap
    lines = [indent + sep.join(_pad(c, w[j], how[j]) for j, c in enumerate(r)).rstrip() for r in cells]
    if header is not None and rule:
        lines.insert(1, indent + "-" * (sum(w) + gap * max(0, ncol - 1)))
    return "\n".join(lines)

"""What the replication scripts share: the command line, a table printer, the exact reference of a prefix."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np


def parse(doc: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """``--full`` (the larger sizes) and ``--seed``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="run the larger sizes (see the module docstring)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows under a header, columns aligned."""
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    say("", title, "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for c in cells:
        say("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def say(*lines: str) -> None:
    """Write lines to standard output (the scripts' one output)."""
    sys.stdout.write("".join(line + "\n" for line in lines))


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):.8g}"
    return str(v)


def log_sizes(lo: int, hi: int, per_decade: int = 2) -> list[int]:
    """Sizes from 2**lo to 2**hi, ``per_decade`` per factor of 8 (powers of two)."""
    step = max(1, 3 // per_decade)
    return [2**k for k in range(lo, hi + 1, step)]


class Clock:
    """Seconds since creation, for the footer of every script."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __str__(self) -> str:
        return f"{time.perf_counter() - self.t0:.1f} s"

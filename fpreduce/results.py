"""The run directory: atomic writes and reading back (format in docs/run-format.md).

Every file is written to a temporary file in the same directory and renamed over
the target, so a reader (or a crash) sees either the old or the new file, never
half of one. ``metrics.csv`` is rewritten whole after every step (runs are at most
thousands of rows), so an interrupted run is always readable and resumable.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce._errors import InvalidArgument

__all__ = ["COLUMNS", "Results", "atomic_write", "load_run", "read_rows"]

COLUMNS = (
    "step", "arm", "elements", "nonfinite", "err_max_rel", "err_mean_rel", "err_median_rel",
    "err_max_ulp", "frac_correct", "diff_frac", "ulp_max", "ulp_mean", "rel_l2", "loss",
    "param_dist", "param_diff_frac", "underflow",
)


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename (mode 0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        return repr(float(v))
    return str(v)


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_fmt(r.get(c, float("nan"))) for c in COLUMNS])
    return buf.getvalue()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.csv as dicts (numbers parsed; a truncated last row dropped)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InvalidArgument(f"{path}: cannot read ({e.strerror}); is it a fpreduce run directory?") from None
    lines = text.splitlines()
    if not lines or lines[0].split(",")[:2] != ["step", "arm"]:
        raise InvalidArgument(f"{path}: not a fpreduce metrics.csv (no step,arm header)")
    header = lines[0].split(",")
    out = []
    for rec in csv.reader(lines[1:]):
        if len(rec) != len(header):
            break  # truncated (a crash mid-write of an older, non-atomic writer)
        row: dict[str, Any] = {}
        for k, v in zip(header, rec, strict=True):
            row[k] = v if k == "arm" else (int(v) if k in ("step", "elements", "nonfinite", "underflow")
                                           and v not in ("nan", "") else float(v))
        out.append(row)
    return out


@dataclass
class Results:
    """A run read back: its directory, summary, resolved config text and metrics.

    ``metrics[arm][column]`` is a numpy array over steps.
    """

    dir: Path
    summary: dict[str, Any]
    config_text: str
    metrics: dict[str, dict[str, np.ndarray]]

    @property
    def complete(self) -> bool:
        return bool(self.summary.get("complete"))

    def arm(self, name: str) -> dict[str, Any]:
        for a in self.summary["arms"]:
            if a["name"] == name:
                return a  # type: ignore[no-any-return]
        raise InvalidArgument(f"no arm {name!r} in {self.dir}")


def columns(rows: list[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault(r["arm"], []).append(r)
    return {a: {c: np.array([r[c] for r in rs]) for c in COLUMNS if c != "arm"} for a, rs in arms.items()}


def load_run(run_dir: str | Path) -> Results:
    """Read a run directory written by :func:`fpreduce.run_experiment`."""
    d = Path(run_dir)
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such run directory")
    for name in ("summary.json", "metrics.csv", "config.toml"):
        if not (d / name).is_file():
            raise InvalidArgument(f"{d / name} not found: is {d} a fpreduce run directory?")
    try:
        summary = json.loads((d / "summary.json").read_text())
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{d / 'summary.json'}: not valid JSON ({e.msg})") from None
    return Results(d, summary, (d / "config.toml").read_text(), columns(read_rows(d / "metrics.csv")))

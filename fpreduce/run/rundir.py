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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument

__all__ = ["COLUMNS", "Results", "atomic_write", "load_metrics", "load_run", "read_rows"]

COLUMNS = (
    "step",
    "arm",
    "elements",
    "nonfinite",
    "err_max_rel",
    "err_mean_rel",
    "err_median_rel",
    "err_max_ulp",
    "frac_correct",
    "diff_frac",
    "ulp_max",
    "ulp_mean",
    "rel_l2",
    "loss",
    "param_dist",
    "param_diff_frac",
    "underflow",
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
            row[k] = (
                v
                if k == "arm"
                else (
                    int(v) if k in ("step", "elements", "nonfinite", "underflow") and v not in ("nan", "") else float(v)
                )
            )
        out.append(row)
    return out


T = TypeVar("T")


def _read_csv(
    path: Path, what: str, required: Sequence[str], parse: Callable[[dict[str, str]], T]
) -> tuple[list[str], list[T]]:
    """Header and parsed rows of a CSV; a truncated last row (interrupted writer) is dropped."""
    if not path.is_file():
        raise InvalidArgument(f"{path} not found: is {path.parent} a fpreduce {what} directory?")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{path}: cannot read ({e})") from None
    lines = text.splitlines()
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the writer stopped mid-row
    records = list(csv.reader(lines))
    header, out = (records[0] if records else []), []
    if missing := [c for c in required if c not in header]:
        raise InvalidArgument(f"{path}: not a fpreduce {path.name} (missing column(s) {', '.join(missing)})")
    for i, rec in enumerate(records[1:], start=2):
        try:
            if len(rec) != len(header):
                raise ValueError(f"{len(rec)} fields, expected {len(header)}")
            out.append(parse(dict(zip(header, rec, strict=True))))
        except ValueError as e:
            if i == len(records):
                break  # truncated last row
            raise InvalidArgument(f"{path}, line {i}: malformed row ({e})") from None
    return header, out


def load_metrics(source: str | Path) -> dict[str, dict[str, NDArray[Any]]]:
    """Read a run's ``metrics.csv`` as ``arm -> column -> array`` over steps.

    ``source`` is a run directory or the CSV file itself. Arms keep their order of
    first appearance (config order, the reference first); within an arm rows are
    sorted by step and a step written twice keeps its last row. ``step`` is int64,
    every other column float64 (``nan`` stays NaN, ``inf`` stays ±Inf). A truncated
    final row (an interrupted writer: no final newline, too few fields or an
    unparsable number) is ignored; a malformed row elsewhere raises InvalidArgument.
    """
    path = Path(source)
    path = path / "metrics.csv" if path.is_dir() else path
    header, records = _read_csv(
        path,
        "run",
        ("step", "arm"),
        lambda r: (r["arm"], int(r["step"]), [float(v) for k, v in r.items() if k not in ("step", "arm")]),
    )
    rows: dict[str, dict[int, list[float]]] = {}
    for arm, step, values in records:
        rows.setdefault(arm, {})[step] = values
    names = [c for c in header if c not in ("step", "arm")]
    out: dict[str, dict[str, NDArray[Any]]] = {}
    for arm, by_step in rows.items():
        steps = sorted(by_step)
        table = np.array([by_step[s] for s in steps], dtype=np.float64).reshape(len(steps), len(names))
        out[arm] = {"step": np.array(steps, dtype=np.int64), **{c: table[:, j].copy() for j, c in enumerate(names)}}
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
    return Results(d, summary, (d / "config.toml").read_text(), load_metrics(d / "metrics.csv"))

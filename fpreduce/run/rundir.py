"""The run directory: its files' schema, and the only code that reads or writes them.

A run directory (docs/run-format.md) holds ``config.toml``, ``metrics.csv``,
``summary.json``, ``state.npz`` (training), ``real.csv`` (``--backend mpi``), figures
and the report; a sweep directory holds ``sweep.csv`` and one run directory per point.
Every file is written to a temporary file in the same directory and renamed over
the target, so a reader (or a crash) sees either the old or the new file, never
half of one. ``metrics.csv`` is rewritten whole after every step (runs are at most
thousands of rows), so an interrupted run is always readable and resumable.

Every CSV is read by one parser: the header names the columns, a truncated last row
(an interrupted writer) is dropped and a malformed row elsewhere is an
InvalidArgument naming the file and line.
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
from fpreduce.core.formats import get_format

__all__ = [
    "COLUMNS",
    "CONFIG_TOML",
    "METRICS_CSV",
    "POINTS_DIR",
    "REAL_COLUMNS",
    "REAL_CSV",
    "STATE_NPZ",
    "SUMMARY_JSON",
    "SWEEP_CSV",
    "STUDIES",
    "SWEEP_COLUMNS",
    "Results",
    "atomic_write",
    "load_run",
    "point_dir",
    "point_dirs",
    "read_config",
    "read_metrics",
    "read_real",
    "read_rows",
    "read_state",
    "read_study",
    "read_summary",
    "read_sweep",
    "remove_outputs",
    "write_config",
    "write_metrics",
    "write_real",
    "write_study",
    "write_state",
    "write_summary",
    "write_sweep",
]

CONFIG_TOML, METRICS_CSV, SUMMARY_JSON, STATE_NPZ, REAL_CSV, SWEEP_CSV, POINTS_DIR = (
    "config.toml",
    "metrics.csv",
    "summary.json",
    "state.npz",
    "real.csv",
    "sweep.csv",
    "points",  # a sweep's directory of run directories, one per grid point
)
#: the columns of metrics.csv, one row per step and arm (meanings in docs/run-format.md)
COLUMNS = (
    "step",
    "arm",
    "elements",
    "nonfinite",
    "err_norm",
    "err_backward",
    "err_max_rel",
    "err_mean_rel",
    "err_median_rel",
    "err_max_ulp",
    "frac_correct",
    "diff_frac",
    "ulp_max",
    "ulp_mean",
    "rel_l2",
    "rerun_diff_frac",
    "rerun_ulp_max",
    "loss",
    "param_dist",
    "param_diff_frac",
    "underflow",
)
_INT_COLUMNS = ("step", "elements", "nonfinite", "underflow")
#: the columns of sweep.csv, one row per grid point and arm (per arm: its summary.json aggregates;
#: the diff fraction and ulps against its compare_to arm)
SWEEP_COLUMNS = (
    "workers",
    "plan",
    "dist",
    "input",
    "accumulate",
    "arm",
    "compare_to",
    "mean_err_norm",
    "mean_err_rel",
    "max_err_rel",
    "mean_diff_frac",
    "max_ulp",
    "mean_rerun_diff_frac",
)
_SWEEP_MEASURES = SWEEP_COLUMNS[SWEEP_COLUMNS.index("compare_to") + 1 :]
#: columns older sweep.csv files lack (no data dimension; before normwise errors and re-runs): NaN when read
_SWEEP_OPTIONAL = ("dist", "compare_to", "mean_err_norm", "mean_rerun_diff_frac")
#: the columns of real.csv (``--backend mpi``), one row per step and arm
REAL_COLUMNS = ("step", "arm", "real_agree", "ranks_agree")


# ----------------------------------------------------------------------------- writing


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


def write_config(run_dir: Path, text: str) -> None:
    """Write the resolved ``config.toml`` (``fpreduce.run.config.to_toml``)."""
    atomic_write(run_dir / CONFIG_TOML, text)


def write_metrics(run_dir: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``metrics.csv``: :data:`COLUMNS`, floats by ``repr`` (round-trip exact), ``nan`` for a missing value."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_fmt(r.get(c, float("nan"))) for c in COLUMNS])
    atomic_write(run_dir / METRICS_CSV, buf.getvalue())


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write ``summary.json`` (indented by 2, a final newline)."""
    atomic_write(run_dir / SUMMARY_JSON, json.dumps(summary, indent=2) + "\n")


def write_state(run_dir: Path, arrays: dict[str, NDArray[Any]]) -> None:
    """Write ``state.npz``: a training run's parameters and optimizer state, for resuming."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    atomic_write(run_dir / STATE_NPZ, buf.getvalue())


def remove_outputs(run_dir: Path) -> None:
    """Delete what a previous run left that a new one rewrites (metrics, state, report)."""
    for stale in (METRICS_CSV, STATE_NPZ, "report.pdf"):
        (run_dir / stale).unlink(missing_ok=True)


def write_sweep(sweep_dir: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``sweep.csv`` (:data:`SWEEP_COLUMNS`; floats by ``repr``, None as an empty field); its path."""
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=SWEEP_COLUMNS, lineterminator="\n")
    wr.writeheader()
    wr.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    atomic_write(sweep_dir / SWEEP_CSV, buf.getvalue())
    return sweep_dir / SWEEP_CSV


def write_real(run_dir: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``real.csv`` (:data:`REAL_COLUMNS`; the agreements by ``repr``)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(REAL_COLUMNS)
    for r in rows:
        w.writerow([r["step"], r["arm"], repr(float(r["real_agree"])), repr(float(r["ranks_agree"]))])
    atomic_write(run_dir / REAL_CSV, buf.getvalue())


STUDIES = ("price", "scale")  # studies without steps or arms: one JSON document each


def write_study(out_dir: Path, kind: str, doc: dict[str, Any]) -> Path:
    """Write a study's document ``<kind>.json`` (``price``: fpreduce price, ``scale``: fpreduce scale)."""
    if kind not in STUDIES:
        raise InvalidArgument(f"unknown study kind {kind!r} (choices: {', '.join(STUDIES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / f"{kind}.json", json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return out_dir / f"{kind}.json"


# ----------------------------------------------------------------------------- reading

T = TypeVar("T")


def _require(path: Path, what: str) -> None:
    if not path.is_file():
        raise InvalidArgument(
            f"{path} not found: is {path.parent} a fpreduce {what} directory? ({path.name} is missing)"
        )


def _read_csv(
    path: Path, what: str, required: Sequence[str], parse: Callable[[dict[str, str]], T]
) -> tuple[list[str], list[T]]:
    """Header and parsed rows of a CSV; a truncated last row (interrupted writer) is dropped."""
    _require(path, what)
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


def _metrics_path(source: str | Path) -> Path:
    path = Path(source)
    return path / METRICS_CSV if path.is_dir() else path


def read_rows(source: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.csv as dicts, in file order (the runner's own rows, for resuming).

    ``source`` is a run directory or the CSV file. ``step``, ``elements``, ``nonfinite``
    and ``underflow`` are ints (floats when ``nan``), ``arm`` a string, the rest floats.
    """

    def parse(r: dict[str, str]) -> dict[str, Any]:
        return {
            k: v if k == "arm" else int(v) if k in _INT_COLUMNS and v not in ("nan", "") else float(v)
            for k, v in r.items()
        }

    return _read_csv(_metrics_path(source), "run", ("step", "arm"), parse)[1]


def read_metrics(source: str | Path) -> dict[str, dict[str, NDArray[Any]]]:
    """Read a run's ``metrics.csv`` as ``arm -> column -> array`` over steps.

    ``source`` is a run directory or the CSV file itself. Arms keep their order of
    first appearance (config order, the reference first); within an arm rows are
    sorted by step and a step written twice keeps its last row. ``step`` is int64,
    every other column float64 (``nan`` stays NaN, ``inf`` stays ±Inf). A truncated
    final row (an interrupted writer: no final newline, too few fields or an
    unparsable number) is ignored; a malformed row elsewhere raises InvalidArgument.
    """
    header, records = _read_csv(
        _metrics_path(source),
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


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """Read ``RUN/summary.json``, checked: a non-empty ``arms`` list, each arm with a
    ``name``, ``order``, ``input`` and ``accumulate`` (strings) and known formats.

    Raises:
        InvalidArgument: the file is missing, not JSON, or not a fpreduce run summary.
    """
    path = Path(run_dir) / SUMMARY_JSON
    _require(path, "run")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{path}: not a readable JSON file (not valid JSON: {e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{path}: not a readable JSON file ({e})") from None
    arms = summary.get("arms") if isinstance(summary, dict) else None
    if not isinstance(arms, list) or not arms or not all(isinstance(a, dict) for a in arms):
        raise InvalidArgument(f"{path}: not a fpreduce run summary (no 'arms' list of named arms)")
    for i, a in enumerate(arms):
        for key in ("name", "order", "input", "accumulate"):
            if not isinstance(a.get(key), str):
                raise InvalidArgument(f"{path}: arms[{i}] has no {key!r}; not a fpreduce run summary")
        for key in ("input", "accumulate", "output"):
            try:
                get_format(a.get(key) or "fp32")
            except InvalidArgument as e:
                raise InvalidArgument(f"{path}: arms[{i}].{key}: {e}") from None
    return summary  # type: ignore[no-any-return]


def read_config(run_dir: str | Path) -> str | None:
    """The text of ``RUN/config.toml``, or None if there is none."""
    path = Path(run_dir) / CONFIG_TOML
    return path.read_text() if path.is_file() else None


def read_state(run_dir: Path) -> dict[str, NDArray[Any]]:
    """The arrays of ``RUN/state.npz`` (copies; the file is closed)."""
    with np.load(run_dir / STATE_NPZ, allow_pickle=False) as z:
        return {k: z[k].copy() for k in z.files}


def read_real(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``RUN/real.csv`` (empty if the run has none): step, arm, real_agree, ranks_agree."""
    path = Path(run_dir) / REAL_CSV
    if not path.is_file():
        return []
    return _read_csv(
        path,
        "run",
        REAL_COLUMNS,
        lambda r: {
            "step": int(r["step"]),
            "arm": r["arm"],
            "real_agree": float(r["real_agree"]),
            "ranks_agree": float(r["ranks_agree"]),
        },
    )[1]


def _number(v: str) -> float:
    """A sweep measure: NaN for an empty field (None written by :func:`write_sweep`)."""
    return float(v) if v != "" else float("nan")


def read_sweep(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of ``SWEEP/sweep.csv``, keys in the file's column order: ``workers`` int, the
    measures float (NaN for an empty field or a measure older files lack), the rest strings
    (``dist`` and ``compare_to`` only if the file has them).

    A truncated last row is ignored.

    Raises:
        InvalidArgument: no such directory, no sweep.csv, a missing column or a malformed row.
    """
    d = Path(sweep_dir)
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such sweep directory")
    required = [c for c in SWEEP_COLUMNS if c not in _SWEEP_OPTIONAL]
    return _read_csv(
        d / SWEEP_CSV,
        "sweep",
        required,
        lambda r: {**r, "workers": int(r["workers"]), **{c: _number(r.get(c, "")) for c in _SWEEP_MEASURES}},
    )[1]


def read_study(study_dir: str | Path, kind: str) -> dict[str, Any]:
    """The document of a study directory (see :func:`write_study`).

    Raises:
        InvalidArgument: no such file, not JSON, or not an object with ``rows``.
    """
    path = Path(study_dir) / f"{kind}.json"
    _require(path, f"{kind} study")
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgument(f"{path}: not a readable {kind} study ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InvalidArgument(f"{path}: not a {kind} study (an object with 'rows' expected)")
    return doc


def point_dir(sweep_dir: Path, name: str) -> Path:
    """The run directory of the sweep point ``name``."""
    return sweep_dir / POINTS_DIR / name


def point_dirs(sweep_dir: Path) -> list[Path]:
    """The run directories of a sweep's points that have a summary.json, in name order."""
    return sorted(p.parent for p in sweep_dir.glob(f"{POINTS_DIR}/*/{SUMMARY_JSON}"))


# ----------------------------------------------------------------------------- a whole run


@dataclass
class Results:
    """A run read back: its directory, summary, resolved config text and metrics.

    ``metrics[arm][column]`` is a numpy array over steps (:func:`read_metrics`);
    ``config_text`` is None only for a run loaded without its config.toml.
    """

    dir: Path
    summary: dict[str, Any]
    config_text: str | None
    metrics: dict[str, dict[str, np.ndarray]]

    @property
    def complete(self) -> bool:
        return bool(self.summary.get("complete"))

    @property
    def arms(self) -> list[dict[str, Any]]:
        """The summary's per-arm entries, in config order (the reference first)."""
        return list(self.summary["arms"])

    @property
    def reference(self) -> str:
        """The reference arm's name."""
        return str(self.summary.get("reference") or self.arms[0]["name"])

    def arm(self, name: str) -> dict[str, Any]:
        for a in self.summary["arms"]:
            if a["name"] == name:
                return a  # type: ignore[no-any-return]
        raise InvalidArgument(f"no arm {name!r} in {self.dir}")

    def column(self, arm: str, name: str) -> NDArray[Any]:
        """One metrics column of one arm over its steps (empty if the run has none)."""
        return self.metrics.get(arm, {}).get(name, np.array([]))


def columns(rows: list[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """The runner's rows as ``arm -> column -> array`` (in row order)."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault(r["arm"], []).append(r)
    return {a: {c: np.array([r[c] for r in rs]) for c in COLUMNS if c != "arm"} for a, rs in arms.items()}


def load_run(run_dir: str | Path, *, config_required: bool = True) -> Results:
    """Read a run directory written by :func:`fpreduce.run_experiment`.

    Args:
        run_dir: the run directory.
        config_required: without it (figures, reports) a missing config.toml gives
            ``config_text = None`` instead of an error.

    Raises:
        InvalidArgument: no such directory, a missing file, or a file that is not a
            fpreduce run's (:func:`read_summary`, :func:`read_metrics`).

    >>> load_run("no/such/run")
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: no/such/run: no such run directory
    """
    d = Path(run_dir)
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such run directory")
    for name in (METRICS_CSV, SUMMARY_JSON, CONFIG_TOML)[: 3 if config_required else 2]:
        _require(d / name, "run")
    summary = read_summary(d)
    return Results(d, summary, read_config(d), read_metrics(d))

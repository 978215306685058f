"""The run directory: its files' schema, and the only code that reads or writes them.

A run directory (docs/run-format.md) holds ``config.toml``, ``metrics.csv``,
``summary.json``, ``state.npz`` (the resume checkpoint), ``real.csv`` (``--backend
mpi``), figures and the report; a sweep directory holds ``sweep.csv`` and one run
directory per point. Every file is written to a temporary file in the same directory
and renamed over the target (:mod:`fpreduce.run._files`), so a reader (or a crash)
sees either the old or the new file, never half of one. ``metrics.csv`` is rewritten
whole after every step (runs are at most thousands of rows), so an interrupted run is
always readable and resumable. A run holds the directory's lock (:func:`lock`) for
its lifetime; :func:`inspect_run_dir` says what a directory holds before anything is
written, :func:`clear_run` removes a previous run's files and nothing else.

Every CSV is read by one parser: the header names the columns, a truncated last row
(an interrupted writer) is dropped and a malformed row elsewhere is an
InvalidArgument naming the file and line.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import get_format
from fpreduce.run import _files, schema
from fpreduce.run._files import (
    FIGURES_DIR,
    REPORT_PDF,
    DirLock,
    atomic_write,
    check_report_target,
    file_target,
    is_report,
)
from fpreduce.run._studies import (
    REAL_COLUMNS,
    REAL_CSV,
    REPLAY_JSON,
    REPLAY_VARIANTS,
    STUDIES,
    check_replay,
    check_study,
    read_real,
    read_replay,
    read_study,
    write_real,
    write_replay,
)
from fpreduce.run.schema import check_name

__all__ = [
    "COLUMNS",
    "CONFIG_TOML",
    "DirState",
    "FIGURES_DIR",
    "Kind",
    "METRICS_CSV",
    "POINTS_DIR",
    "REAL_COLUMNS",
    "REAL_CSV",
    "REPLAY_JSON",
    "REPLAY_VARIANTS",
    "REPORT_PDF",
    "Results",
    "STATE_NPZ",
    "STUDIES",
    "SUMMARY_JSON",
    "SWEEP_COLUMNS",
    "SWEEP_CSV",
    "SWEEP_MEASURES",
    "atomic_write",
    "check_name",
    "check_replay",
    "check_study",
    "drawn_in",
    "check_report_target",
    "check_summary",
    "claim",
    "clear_run",
    "clear_sweep",
    "file_target",
    "holds",
    "inspect_run_dir",
    "inspect_sweep_dir",
    "is_report",
    "is_sweep_dir",
    "load_run",
    "lock",
    "out_dir",
    "point_dir",
    "point_dirs",
    "read_config",
    "read_metrics",
    "read_real",
    "read_replay",
    "read_rows",
    "read_state",
    "read_study",
    "read_summary",
    "read_sweep",
    "write_config",
    "write_metrics",
    "write_real",
    "write_replay",
    "write_state",
    "write_study",
    "write_summary",
    "write_sweep",
]

CONFIG_TOML, METRICS_CSV, SUMMARY_JSON, STATE_NPZ, SWEEP_CSV, POINTS_DIR = (
    "config.toml",
    "metrics.csv",
    "summary.json",
    "state.npz",
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
    "digest",
)
_INT_COLUMNS = ("step", "elements", "nonfinite", "underflow", "digest")
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
SWEEP_MEASURES = SWEEP_COLUMNS[SWEEP_COLUMNS.index("compare_to") + 1 :]
#: columns older sweep.csv files lack (no data dimension; before normwise errors and re-runs): NaN when read
_SWEEP_OPTIONAL = ("dist", "compare_to", "mean_err_norm", "mean_rerun_diff_frac")
#: the columns of real.csv (``--backend mpi``), one row per step and arm


# ----------------------------------------------------------------------------- writing


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        return repr(float(v))
    return str(v)


def _write(d: Path, name: str, data: str | bytes) -> None:
    """``atomic_write(d / name)`` under ``d``'s lock: the command's (:func:`claim`, :func:`lock`), or its own."""
    with lock(d):
        atomic_write(d / name, data)


def write_config(run_dir: Path, text: str) -> None:
    """Write the resolved ``config.toml`` (``fpreduce.run.config.to_toml``)."""
    _write(run_dir, CONFIG_TOML, text)


def write_metrics(run_dir: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``metrics.csv``: :data:`COLUMNS`, floats by ``repr`` (round-trip exact), ``nan`` for a missing value."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_fmt(r.get(c, float("nan"))) for c in COLUMNS])
    _write(run_dir, METRICS_CSV, buf.getvalue())


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write ``summary.json`` (indented by 2, a final newline; standard JSON: :mod:`fpreduce.base.jsonfile`)."""
    _write(run_dir, SUMMARY_JSON, jsonfile.dumps(summary, indent=2) + "\n")


def write_state(run_dir: Path, arrays: dict[str, NDArray[Any]]) -> None:
    """Write ``state.npz``, the resume checkpoint (its arrays: :mod:`fpreduce.run.resume`)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    _write(run_dir, STATE_NPZ, buf.getvalue())


# ----------------------------------------------------------------------------- the directory a command writes

#: everything a run writes into its directory (a directory holding anything else is not a run's)
RUN_FILES = (CONFIG_TOML, METRICS_CSV, SUMMARY_JSON, STATE_NPZ, REAL_CSV, REPLAY_JSON, REPORT_PDF, FIGURES_DIR)
#: what a command leaves in its directory: a run (run, replay), a sweep, a study (price, scale)
Kind = Literal["run", "sweep", "price", "scale"]
#: per kind: the names its directory may hold, and those of which one says a directory is of that kind
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "run": (RUN_FILES, (CONFIG_TOML, SUMMARY_JSON)),
    "sweep": ((SWEEP_CSV, POINTS_DIR, REPORT_PDF, FIGURES_DIR), (SWEEP_CSV, POINTS_DIR)),
    **{k: ((f"{k}.json", REPORT_PDF, FIGURES_DIR), (f"{k}.json",)) for k in STUDIES},
}
#: a kind in words
WHAT = {"run": "run", "sweep": "sweep", "price": "price study", "scale": "scale study"}
assert set(KINDS) == set(WHAT) == set(get_args(Kind))


def out_dir(out: str | Path | None, name: object, key: str) -> Path:
    """The directory a command writes: ``--out`` as given, else ``runs/<name>``.

    Raises:
        InvalidArgument: ``name`` (the config's ``key``) is not a plain name (:func:`check_name`).
    """
    check_name(key, name)
    return Path(out) if out is not None else Path("runs") / str(name)


def holds(d: Path, kind: Kind, *, hint: str = "choose another --out") -> bool:
    """Whether ``d`` holds a fpreduce ``kind`` (False: missing or empty); reads, never writes.

    Raises:
        InvalidArgument: ``d`` is a file, another kind's directory, or holds anything that
            is not a ``kind``'s (a lone report.pdf included: nothing says fpreduce wrote it);
            the message ends with ``hint``.
    """
    names = _files.entries(d)
    if not names:
        return False
    allowed, marks = KINDS[kind]
    if not set(marks) & set(names):
        for other, (_, theirs) in KINDS.items():
            if set(theirs) & set(names):
                raise InvalidArgument(f"{d} is a fpreduce {WHAT[other]} directory, not a {WHAT[kind]}'s; {hint}")
        allowed = ()  # nothing says it is ours: every name is foreign
    _files.check_only(d, names, allowed, WHAT[kind], hint)
    return True


def drawn_in(d: str | Path) -> Kind:
    """The kind of directory ``d`` whose figures or report ``plot`` and ``report`` draw: a run, a sweep, a price
    or a scale study, by the files that mark it; one holding anything else (another kind's document, a file no
    fpreduce command wrote) is refused, as every writer refuses it. A directory marked by nothing is taken for a
    run (its reader then says what is missing).

    Raises:
        InvalidArgument: ``d`` is a file, or holds files that are not its kind's (names them).
    """
    d = Path(d)
    names = set(_files.entries(d))
    hint = "fpreduce draws only in a directory of its own"
    kinds = [k for k in get_args(Kind) if set(KINDS[k][1]) & names]
    if len(kinds) > 1:
        marks = sorted(n for k in kinds for n in KINDS[k][1] if n in names)
        what = " and a ".join(WHAT[k] for k in kinds)
        raise InvalidArgument(f"{d} holds {', '.join(marks)}: the files of a {what}; {hint}")
    if kinds:
        holds(d, kinds[0], hint=hint)
    return kinds[0] if kinds else "run"  # type: ignore[no-any-return]


@contextlib.contextmanager
def claim(d: Path, kind: Kind, *, force: bool = False, resume: bool = False) -> Iterator[Path]:
    """``with claim(d, kind, force=...):`` ``d`` checked (:func:`holds`) and locked for a command writing a ``kind``.

    Checked before the directory is created and again under its exclusive lock (no other
    fpreduce process changes it then); an earlier ``kind`` there (for a run: one with
    steps done) is refused unless ``force`` (the command replaces it) or ``resume`` (the
    command continues it). A command that fails leaves no directory it created. Every
    write of the command happens inside (the writers' own locks are then no-ops).
    """

    def check() -> None:
        earlier = inspect_run_dir(d).steps_done > 0 if kind == "run" else holds(d, kind)
        if earlier and not (force or resume):
            verb = "continue it with --resume, replace it" if kind == "sweep" else "replace it"
            raise InvalidArgument(f"{d} holds a {WHAT[kind]}: {verb} with --force, or choose another --out")

    _files.check_free(d)
    check()
    with lock(d):
        check()
        yield d


@dataclass(frozen=True)
class DirState:
    """What a run directory holds (:func:`inspect_run_dir`).

    ``holds``: ``nothing`` (missing or empty), ``started`` (a config.toml and no summary:
    a run stopped before its first checkpoint), ``incomplete`` or ``complete`` (per its
    summary.json, whose ``steps_done`` and ``steps`` are copied).
    """

    holds: Literal["nothing", "started", "incomplete", "complete"]
    steps_done: int = 0
    steps: int = 0


def inspect_run_dir(d: Path) -> DirState:
    """What ``d`` holds, for a run about to write into it; reads, never writes.

    Raises:
        InvalidArgument: ``d`` is a file, a sweep directory, holds files that are not a
            run's, or a summary.json that is unreadable or not a run's (names it).
    """
    if not holds(d, "run"):
        return DirState("nothing")
    if not (d / SUMMARY_JSON).exists():
        return DirState("started")
    try:
        s = read_summary(d)
        done, steps = s.get("steps_done"), s.get("steps")
        if not (isinstance(done, int) and isinstance(steps, int)):
            raise InvalidArgument(f"{d / SUMMARY_JSON}: no steps_done and steps")
    except InvalidArgument as e:
        raise InvalidArgument(f"{e}; not writing into {d}: choose another --out") from None
    return DirState("complete" if s.get("complete") is True else "incomplete", done, steps)


def clear_run(d: Path) -> None:
    """Delete what a previous run wrote into ``d`` (never anything else), summary.json first.

    The summary goes first, so an interruption half-way leaves a directory that no
    longer claims to hold the old run (``started``), never a complete-looking mix.
    """
    for name in (SUMMARY_JSON, METRICS_CSV, STATE_NPZ, REAL_CSV, REPLAY_JSON, REPORT_PDF, CONFIG_TOML):
        (d / name).unlink(missing_ok=True)
    _files.clear_figures(d)
    _files.remove_leftovers(d, RUN_FILES)


def lock(d: str | Path, *, shared: bool = False) -> DirLock:
    """``with lock(d):`` the directory's advisory lock (:class:`fpreduce.run._files.DirLock`)."""
    return DirLock(Path(d), shared=shared)


def write_study(out_dir: Path, kind: Literal["price", "scale"], doc: dict[str, Any]) -> Path:
    """Write a study's document ``<kind>.json`` (``price``: fpreduce price, ``scale``: fpreduce scale); its path.

    ``out_dir`` is missing, empty or a study of that kind (:func:`holds`), whose figures and
    report (drawn from the document replaced) go first; it is written under the
    directory's lock (the command's, from :func:`claim`, or its own).
    """
    if kind not in STUDIES:
        raise InvalidArgument(f"unknown study kind {kind!r} (choices: {', '.join(STUDIES)})")
    holds(out_dir, kind)  # a foreign directory: refused before anything is written
    with lock(out_dir):
        holds(out_dir, kind)
        (out_dir / REPORT_PDF).unlink(missing_ok=True)
        _files.clear_figures(out_dir)
        atomic_write(out_dir / f"{kind}.json", jsonfile.dumps(doc, indent=1) + "\n")
    return out_dir / f"{kind}.json"


def write_sweep(sweep_dir: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``sweep.csv`` (:data:`SWEEP_COLUMNS`; floats by ``repr``, None as an empty field); its path."""
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=SWEEP_COLUMNS, lineterminator="\n")
    wr.writeheader()
    wr.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    _write(sweep_dir, SWEEP_CSV, buf.getvalue())
    return sweep_dir / SWEEP_CSV


# ----------------------------------------------------------------------------- reading


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

    return _files.read_csv(_metrics_path(source), "run", ("step", "arm"), parse)[1]


def read_metrics(source: str | Path) -> dict[str, dict[str, NDArray[Any]]]:
    """Read a run's ``metrics.csv`` as ``arm -> column -> array`` over steps.

    ``source`` is a run directory or the CSV file itself. Arms keep their order of
    first appearance (config order, the reference first); within an arm rows are
    sorted by step and a step written twice keeps its last row. ``step`` is int64,
    every other column float64 (``nan`` stays NaN, ``inf`` stays ±Inf). A truncated
    final row (an interrupted writer: no final newline, too few fields or an
    unparsable number) is ignored; a malformed row elsewhere raises InvalidArgument.
    """
    header, records = _files.read_csv(
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
    """Read ``RUN/summary.json``, checked against its schema (:func:`check_summary`) before anyone reads it.

    Raises:
        InvalidArgument: the file is missing, not JSON, or not a fpreduce run summary: one line naming
            the file and the key.
    """
    path = Path(run_dir) / SUMMARY_JSON
    _files.require(path, "run")
    try:
        summary = jsonfile.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # (json.JSONDecodeError, or nested too deeply)
        raise InvalidArgument(f"{path}: not a readable JSON file (not valid JSON: {e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{path}: not a readable JSON file ({e})") from None
    try:
        check_summary(summary)
    except InvalidArgument as e:
        raise InvalidArgument(f"{path}: not a fpreduce run summary: {e}") from None
    except RecursionError:
        raise InvalidArgument(f"{path}: not a fpreduce run summary: nested too deeply") from None
    return summary  # type: ignore[no-any-return]


#: summary.json's aggregates of an arm (a number, ``null`` when no step gave one; NaN and Inf restored) -> lowest
_ARM_STATS = {
    **dict.fromkeys(("mean_diff_frac", "median_diff_frac", "mean_rerun_diff_frac", "mean_frac_correct"), 0.0),
    **dict.fromkeys(("max_ulp", "max_rerun_ulp", "mean_err_norm", "max_err_norm", "max_err_backward"), 0.0),
    **dict.fromkeys(("max_err_ulp", "mean_err_rel", "max_err_rel", "final_param_dist"), 0.0),
    "final_loss": -math.inf,
}
_TOP_COUNTS = {"format": 1, "steps": 1, "workers": 1, "elements": 1, "seed": 0}


def check_summary(s: object) -> None:
    """summary.json's schema (what :func:`fpreduce.run.runner.run_experiment` writes; keys an older run lacks
    are optional, keys a newer one adds are left alone): a non-empty ``arms`` list of tables, each with a
    ``name``, ``order``, ``input`` and ``accumulate``; known formats; integers that are integers (``steps_done``
    in 0..``steps``); aggregates that are numbers or ``null``; ``reference`` and ``compare_to`` naming arms.

    Raises:
        InvalidArgument: one line naming the key (``arms[0].max_ulp``, ``steps_done``).
    """
    s = schema.table("summary", s, ("arms",))
    arms = schema.array("arms", s["arms"], nonempty=True)
    for key, lo in _TOP_COUNTS.items():
        if s.get(key) is not None:  # (elements: null in a run that has not read its source yet)
            schema.integer(key, s[key], lo)
    if "steps_done" in s:
        schema.integer("steps_done", s["steps_done"], 0, s.get("steps"))
    if "complete" in s:
        schema.typed("complete", s["complete"], "bool")
    for key in [k for k in s if k.endswith("_time_s")]:
        schema.number(key, s[key], 0.0, null=True)
    for key in ("name", "source"):
        if key in s:
            schema.string(key, s[key])
    names = tuple(
        schema.string(f"arms[{i}].name", schema.table(f"arms[{i}]", a).get("name")) for i, a in enumerate(arms)
    )
    if "reference" in s:
        schema.string("reference", s["reference"], names)
    for i, a in enumerate(arms):
        _check_arm(f"arms[{i}]", a, names)


def _check_arm(key: str, a: dict[str, Any], names: tuple[str, ...]) -> None:
    for k in ("order", "input", "accumulate"):
        schema.string(f"{key}.{k}", a.get(k))
    for k in ("output", "rounding", "algorithm", "average", "compared_in"):
        if k in a:
            schema.string(f"{key}.{k}", a[k])
    for k in ("input", "accumulate", "output", "compared_in"):
        if a.get(k):
            with schema.named(f"{key}.{k}"):
                get_format(a[k])
    if "compare_to" in a:
        schema.string(f"{key}.compare_to", a["compare_to"], names)
    if a.get("reproducible") is not None:
        schema.typed(f"{key}.reproducible", a["reproducible"], "bool")
    for k in ("first_divergence_step", "first_param_divergence_step"):
        if a.get(k) is not None:
            schema.integer(f"{key}.{k}", a[k], 0)
    for k, lo in _ARM_STATS.items():
        v = a.get(k)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            schema.check(schema.is_number(v) and v >= lo, f"{key}.{k}", f"a number >= {lo} or null", v)
    if a.get("ulp_hist") is not None:
        h = schema.table(f"{key}.ulp_hist", a["ulp_hist"], ("edges", "counts"))
        edges = schema.typed(f"{key}.ulp_hist.edges", h["edges"], "tuple[float, ...]")
        schema.array(f"{key}.ulp_hist.counts", h["counts"], len(edges))
        for j, c in enumerate(h["counts"]):
            schema.integer(f"{key}.ulp_hist.counts[{j}]", c, 0)


def read_config(run_dir: str | Path) -> str | None:
    """The text of ``RUN/config.toml``, or None if there is none.

    Raises:
        InvalidArgument: the file cannot be read or is not UTF-8 (names it).
    """
    path = Path(run_dir) / CONFIG_TOML
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{path}: cannot read ({e})") from None


def read_state(run_dir: Path) -> dict[str, NDArray[Any]]:
    """The arrays of ``RUN/state.npz`` (copies; the file is closed); empty if it is missing.

    Raises:
        InvalidArgument: the file is not a readable .npz (names it).
    """
    path = run_dir / STATE_NPZ
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k].copy() for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidArgument(f"{path}: not a readable state file ({e})") from None


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
    return _files.read_csv(
        d / SWEEP_CSV,
        "sweep",
        required,
        lambda r: {**r, "workers": int(r["workers"]), **{c: _number(r.get(c, "")) for c in SWEEP_MEASURES}},
    )[1]


def point_dir(sweep_dir: Path, name: str) -> Path:
    """The run directory of the sweep point ``name``."""
    return sweep_dir / POINTS_DIR / name


def point_dirs(sweep_dir: Path) -> list[Path]:
    """The run directories of a sweep's points that have a summary.json, in name order."""
    return sorted(p.parent for p in sweep_dir.glob(f"{POINTS_DIR}/*/{SUMMARY_JSON}"))


def is_sweep_dir(d: str | Path) -> bool:
    """Whether ``d`` is a sweep directory (it has a sweep.csv)."""
    return (Path(d) / SWEEP_CSV).is_file()


def inspect_sweep_dir(d: Path) -> bool:
    """True if ``d`` holds a sweep (sweep.csv or points/), False if it is missing or empty (:func:`holds`).

    Raises:
        InvalidArgument: ``d`` is a file or holds anything else (a run included).
    """
    return holds(d, "sweep")


def clear_sweep(d: Path) -> None:
    """Delete a previous sweep's table (first), report and figures from ``d`` (its points stay: runs replace them)."""
    for name in (SWEEP_CSV, REPORT_PDF):
        (d / name).unlink(missing_ok=True)
    _files.clear_figures(d)
    _files.remove_leftovers(d, (SWEEP_CSV, REPORT_PDF))


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
        _files.require(d / name, "run")
    summary = read_summary(d)
    return Results(d, summary, read_config(d), read_metrics(d))

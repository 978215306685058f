"""Documents beside a run's own files: ``real.csv`` (``--backend mpi``), ``replay.json``
(``fpreduce replay``: the recorded all-reduce's emulation and the per-parameter table) and the reader
of the study directories of ``fpreduce price`` and ``fpreduce scale`` (one JSON document each,
written by :func:`fpreduce.run.rundir.write_study`).

Part of :mod:`fpreduce.run.rundir`, which re-exports these names: the only reader and
writer of what fpreduce leaves on disk.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.run import _files
from fpreduce.run._files import DirLock, atomic_write

__all__ = [
    "REAL_COLUMNS",
    "REAL_CSV",
    "REPLAY_JSON",
    "STUDIES",
    "read_real",
    "read_replay",
    "read_study",
    "write_real",
    "write_replay",
]

REAL_CSV = "real.csv"
REAL_COLUMNS = ("step", "arm", "real_agree", "ranks_agree")

REPLAY_JSON = "replay.json"
STUDIES = ("price", "scale")  # studies without steps or arms: one JSON document each


def read_study(study_dir: str | Path, kind: str) -> dict[str, Any]:
    """The document of a study directory (see :func:`write_study`).

    Raises:
        InvalidArgument: no such file, not JSON, or not an object with ``rows``.
    """
    path = Path(study_dir) / f"{kind}.json"
    _files.require(path, f"{kind} study")
    return _read_rows_doc(path, f"{kind} study")


def _read_rows_doc(path: Path, what: str) -> dict[str, Any]:
    """A JSON object with a list ``rows``; InvalidArgument naming ``path`` and ``what`` otherwise."""
    try:
        doc = jsonfile.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidArgument(f"{path}: not a readable {what} ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InvalidArgument(f"{path}: not a {what} (an object with 'rows' expected)")
    return doc


def write_real(run_dir: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``real.csv`` (:data:`REAL_COLUMNS`; the agreements by ``repr``)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(REAL_COLUMNS)
    for r in rows:
        w.writerow([r["step"], r["arm"], repr(float(r["real_agree"])), repr(float(r["ranks_agree"]))])
    with DirLock(run_dir):  # the run's (a no-op), or its own
        atomic_write(run_dir / REAL_CSV, buf.getvalue())


def read_real(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``RUN/real.csv`` (empty if the run has none): step, arm, real_agree, ranks_agree."""
    path = Path(run_dir) / REAL_CSV
    if not path.is_file():
        return []
    return _files.read_csv(
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


def write_replay(run_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``RUN/replay.json``: a replay's document (``rows``: one per parameter; see
    :mod:`fpreduce.backends.replay`) beside the run of the recording's gradients, under the
    run directory's lock (held by ``fpreduce replay`` across the run and this document, so two
    replays into one directory never mix)."""
    if not isinstance(doc.get("rows"), list):
        raise InvalidArgument("a replay document needs 'rows' (one per parameter)")
    with DirLock(run_dir):
        atomic_write(run_dir / REPLAY_JSON, jsonfile.dumps(doc, indent=1) + "\n")
    return run_dir / REPLAY_JSON


def read_replay(run_dir: str | Path) -> dict[str, Any] | None:
    """The replay document of a run (None: the run is not a replay's).

    Raises:
        InvalidArgument: the file is there but not JSON, or not an object with ``rows``.
    """
    path = Path(run_dir) / REPLAY_JSON
    return _read_rows_doc(path, "replay document") if path.is_file() else None

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
import math
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, NamedTuple

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.timing import Profile
from fpreduce.run import _files, schema
from fpreduce.run._files import DirLock, atomic_write
from fpreduce.run.clock import ComputeModel
from fpreduce.run.cluster import cluster_profile
from fpreduce.run.model import ModelSpec
from fpreduce.run.price_config import PriceSpec, price_config_from_dict

__all__ = [
    "REAL_COLUMNS",
    "REAL_CSV",
    "REPLAY_JSON",
    "REPLAY_VARIANTS",
    "STUDIES",
    "check_replay",
    "check_study",
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
    """The document of a study directory (see :func:`write_study`), checked by :func:`check_study`.

    Raises:
        InvalidArgument: no such file, not JSON, or not a study of that kind: one line naming the file
            and the key.
    """
    if kind not in STUDIES:
        raise InvalidArgument(f"unknown study kind {kind!r} (choices: {', '.join(STUDIES)})")
    path = Path(study_dir) / f"{kind}.json"
    _files.require(path, f"{kind} study")
    doc = _read_rows_doc(path, f"{kind} study")
    with schema.document(path):
        check_study(doc, kind)
    return doc


class _Key(NamedTuple):
    """A key of a study's row: its type, range (``gt``: above ``lo``), whether NaN and the infinities in range are
    allowed (``nonfinite``), whether ``null`` is (an older writer's bare non-finite number, read by the report as
    such), whether it must be given."""

    typ: str
    lo: float | None = None
    hi: float | None = None
    gt: bool = False
    nonfinite: bool = False
    null: bool = False
    required: bool = True


_SCALE_ROW = {
    "plan": _Key("str"),
    "workers": _Key("int", 1),
    **{k: _Key("float", 0.0) for k in ("compute_s", "comm_s", "step_s", "speedup", "efficiency")},
    "algbw": _Key("float", 0.0, nonfinite=True, null=True),  # (inf for N = 1)
    "busbw": _Key("float", 0.0, nonfinite=True, null=True),
    "busbw_bound": _Key("float", 0.0, nonfinite=True, null=True, required=False),  # (absent before the bound)
    "nbytes": _Key("float", 0.0, nonfinite=True, required=False),  # (absent before message-size sweeps; NaN then)
    "model": _Key("str", required=False),  # "closed form" or "timeline" (absent before issue 26)
}
_PRICE_ROW = {
    "mode": _Key("str"),
    "step_s": _Key("float", 0.0, gt=True),  # (the reference's speed is divided by it)
    "time_to_target_s": _Key("float", 0.0, nonfinite=True, null=True),  # NaN: never
    "final_loss": _Key("float", nonfinite=True),  # (a diverged mode: NaN or Inf)
    "distance_vs_reference": _Key("float", 0.0, nonfinite=True),
    "staleness_mean": _Key("float", 0.0),
    "staleness_max": _Key("int", 0),
    "idle_fraction": _Key("float", 0.0, 1.0, required=False),  # (absent before issue 25)
    "weights_differ_ref": _Key("float", 0.0, 1.0),
    "weights_differ_rerun": _Key("float", 0.0, 1.0),
}
#: the keys of the tables a study writes (asdict of its config's dataclasses): each read by its report as written
_WRITTEN = {
    "price": tuple(f.name for f in fields(PriceSpec)),
    "source": tuple(f.name for f in fields(ModelSpec)),
    "compute": tuple(f.name for f in fields(ComputeModel)),
    "cluster": tuple(f.name for f in fields(Profile) if f.name != "nics_per_node"),  # (nics: absent in older studies)
}
#: price.json's metric names before issue 25 (read as today's by the report)
_PRICE_OLD = {"bits_vs_reference": "weights_differ_ref", "rerun_bits": "weights_differ_rerun"}


def check_study(doc: object, kind: str) -> None:
    """A study's document against its schema: what ``fpreduce scale`` / ``fpreduce price`` write and their
    reports read. scale.json: ``name``, ``compute_s`` > 0, ``nbytes`` (a size or sizes >= 0), ``profile``
    (a ``[cluster]`` table, :mod:`fpreduce.run.cluster`), ``rows``; price.json: ``config`` (the price config,
    checked by the rules it was read with: :mod:`fpreduce.run.price_config`), ``target_loss``, ``rows`` and
    one trace per row's mode. Rows hold their keys only, each of its type and range (non-finite numbers only
    where a study writes them: an infinite bandwidth, a target never reached, a diverged loss).

    Raises:
        InvalidArgument: one line naming the key (``rows[2].workers``, ``traces.sync.time``).
    """
    if kind == "scale":
        d = schema.table("", doc, ("name", "compute_s", "nbytes", "profile", "rows"))
        schema.string("name", d["name"])
        schema.in_range("compute_s", d["compute_s"], 0, gt=True)
        if isinstance(d["nbytes"], list):
            for i, b in enumerate(schema.array("nbytes", d["nbytes"], nonempty=True)):
                schema.in_range(f"nbytes[{i}]", b, 0)
        else:
            schema.in_range("nbytes", d["nbytes"], 0)
        cluster_profile(schema.table("profile", d["profile"], _WRITTEN["cluster"]), "profile")
        _rows(d["rows"], _SCALE_ROW)
        return
    d = schema.table("", doc, ("config", "target_loss", "rows", "traces"))
    cfg = schema.table("config", d["config"], tuple(_WRITTEN))
    for table, keys in _WRITTEN.items():  # (every key written: the report reads them as written)
        schema.table(f"config.{table}", cfg[table], keys)
    with schema.named("config"):
        price_config_from_dict(cfg)
    schema.check(schema.is_number(d["target_loss"]), "target_loss", "a number", d["target_loss"])
    modes = _rows(d["rows"], _PRICE_ROW, _PRICE_OLD)
    traces = schema.table("traces", d["traces"])
    if list(traces) != modes:
        raise InvalidArgument(f"traces: modes {list(traces)}, expected the rows' modes {modes}")
    for m, t in traces.items():
        _trace(f"traces.{m}", t)


def _rows(v: object, spec: dict[str, _Key], old: dict[str, str] | None = None) -> list[Any]:
    """Check a study's ``rows`` (names of an older study read as ``old`` says); each row's plan or mode, in order."""
    old = old or {}
    rows = schema.array("rows", v, nonempty=True)
    for i, r in enumerate(rows):
        key = f"rows[{i}]"
        r = {old.get(k, k): x for k, x in schema.table(key, r).items()}
        for k in r:
            if k not in spec:
                raise InvalidArgument(f"{key}.{k}: {unknown_name('key', k, tuple(spec))}")
        for k, want in spec.items():
            if k not in r:
                schema.check(not want.required, f"{key}.{k}", "given", None)
            elif want.typ == "str":
                schema.string(f"{key}.{k}", r[k])
            elif want.typ == "int":
                schema.integer(f"{key}.{k}", r[k], int(want.lo or 0))
            elif not (want.null and r[k] is None):
                _number(f"{key}.{k}", r[k], want.lo, want.hi, nonfinite=want.nonfinite, gt=want.gt)
    return [r.get("plan", r.get("mode")) for r in rows]


def _number(key: str, x: object, lo: float | None, hi: float | None, *, nonfinite: bool, gt: bool = False) -> None:
    """A number in [lo, hi] (None: unbounded; ``gt``: above lo); NaN or an infinity in range too when
    ``nonfinite``."""
    ok = schema.is_number(x) if nonfinite else schema.is_finite(x)
    if ok and not math.isnan(x):  # type: ignore[arg-type]
        ok = (lo is None or (lo < x if gt else lo <= x)) and (hi is None or x <= hi)  # type: ignore[operator]
    bounds = [f"{'>' if gt else '>='} {lo}"] * (lo is not None) + [f"<= {hi}"] * (hi is not None)
    what = ("a number" if nonfinite else "finite") + "".join(f" {b}" for b in bounds[:1])
    what += "".join(f" and {b}" for b in bounds[1:]) + (" (or NaN)" if nonfinite else "")
    schema.check(ok, key, what, x)


def _trace(key: str, t: object) -> None:
    """One mode's trace: ``time`` (>= 0, not empty), ``loss`` (a number per time: NaN or Inf when it diverged),
    ``staleness`` (integers >= 0), ``computing`` (workers computing per bin, >= 0)."""
    t = schema.table(key, t, ("time", "loss", "computing"))
    n = len(schema.array(f"{key}.time", t["time"], nonempty=True))
    for i, x in enumerate(t["time"]):
        schema.in_range(f"{key}.time[{i}]", x, 0)
    for i, x in enumerate(schema.array(f"{key}.loss", t["loss"], n)):
        schema.check(schema.is_number(x), f"{key}.loss[{i}]", "a number", x)
    for i, x in enumerate(schema.array(f"{key}.staleness", t.get("staleness", []))):
        schema.integer(f"{key}.staleness[{i}]", x, 0)
    for i, x in enumerate(schema.array(f"{key}.computing", t["computing"], nonempty=True)):
        schema.in_range(f"{key}.computing[{i}]", x, 0)


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
    """The replay document of a run (None: the run is not a replay's), checked by :func:`check_replay`.

    Raises:
        InvalidArgument: the file is there but not JSON, or not a replay document: one line naming the
            file and the key.
    """
    path = Path(run_dir) / REPLAY_JSON
    if not path.is_file():
        return None
    doc = _read_rows_doc(path, "replay document")
    with schema.document(path):
        check_replay(doc)
    return doc


#: the what-ifs of a replay document (``variants``; per row ``differ_<v>``, ``ulp_max_<v>``, ``diff_frac_<v>``)
REPLAY_VARIANTS = ("order", "relaunch", "world", "wide")
_REPLAY_TEXT = ("recording", "backend", "plan", "dtype", "average", "torch")


def check_replay(doc: object) -> None:
    """replay.json against its schema (what ``fpreduce replay`` writes and a report reads): the recording's
    names (strings), ``verified``, ``world_size`` >= 1, ``steps``, ``elements`` and ``differ`` <= elements,
    ``real_match`` in [0, 1], ``per_step`` (step, elements, differ, match), ``contrast`` (plan -> elements),
    ``variants`` (one sentence per what-if) and ``rows`` (one per parameter: name, layer, shape, elements and
    per what-if the elements that differ, their largest ulp distance and their share).

    Raises:
        InvalidArgument: one line naming the key (``per_step[1].match``, ``rows[0].differ_world``).
    """
    need = (*_REPLAY_TEXT, "verified", "world_size", "steps", "elements", "differ", "real_match", "per_step")
    d = schema.table("", doc, (*need, "variants", "rows"))
    for k in _REPLAY_TEXT:
        schema.string(k, d[k])
    schema.typed("verified", d["verified"], "bool")
    schema.integer("world_size", d["world_size"], 1)
    schema.integer("steps", d["steps"], 0)
    _counted("", d, 1.0, "real_match")
    for i, st in enumerate(schema.array("per_step", d["per_step"])):
        schema.integer(f"per_step[{i}].step", schema.table(f"per_step[{i}]", st, ("step",))["step"], 0)
        _counted(f"per_step[{i}].", st, 1.0, "match")
    for plan, n in schema.table("contrast", d.get("contrast", {})).items():
        schema.integer(f"contrast.{plan}", n, 0)
    variants = schema.table("variants", d["variants"], REPLAY_VARIANTS)
    for v in REPLAY_VARIANTS:
        schema.string(f"variants.{v}", variants[v])
    for i, r in enumerate(schema.array("rows", d["rows"])):
        key = f"rows[{i}]"
        r = schema.table(key, r, ("param", "layer", "shape", "elements"))
        schema.string(f"{key}.param", r["param"])
        schema.string(f"{key}.layer", r["layer"])
        for j, n in enumerate(schema.array(f"{key}.shape", r["shape"])):
            schema.integer(f"{key}.shape[{j}]", n, 0)
        for v in ("emulated", *REPLAY_VARIANTS):
            _counted(f"{key}.", r, 1.0, f"diff_frac_{v}", f"differ_{v}")
            _number(f"{key}.ulp_max_{v}", r.get(f"ulp_max_{v}"), 0.0, None, nonfinite=True)


def _counted(key: str, d: dict[str, Any], top: float, share: str, differ: str = "differ") -> None:
    """``elements`` >= 0, ``differ`` in [0, elements] and the share ``share`` in [0, ``top``] of table ``d``."""
    n = schema.integer(f"{key}elements", d.get("elements"), 0)
    schema.integer(f"{key}{differ}", d.get(differ), 0, n)
    _number(f"{key}{share}", d.get(share), 0.0, top, nonfinite=False)

"""A sweep: one small A-vs-B experiment per point of a grid (workers x plan x data x formats).

The sweep file is an experiment config plus a ``[sweep]`` table::

    [sweep]
    workers = [4, 8, 16, 32, 64]
    plans = ["sequential", "ring:nccl", "pairwise"]
    dists = ["normal", "lognormal"]          # synthetic data (default: the source's dist)
    formats = ["bf16:bf16", "bf16:fp32"]     # input:accumulate
    order = "shuffle"                         # B's policy: shuffle (re-rank the plan) or arrival

Each point runs arm A = ``fixed:<plan>`` and arm B = ``<order>:<plan>`` (``arrival``
ignores the plan) with the point's formats, on the config's source (its ``dist``
replaced by the point's) and steps, into ``SWEEP/points/<id>/`` (a normal run
directory). ``SWEEP/sweep.csv`` has one row per point and arm: workers, plan, dist
(the synthetic distribution, or the source kind), input, accumulate, arm,
mean_err_rel, max_err_rel, mean_diff_frac, max_ulp. Does the error of a ring in bf16 grow like sqrt(N)? The
sweep figure answers with the sqrt(N) and N slopes drawn beside the data.
"""

from __future__ import annotations

import itertools
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.run import _files, rundir
from fpreduce.run.config import ArmSpec, Config, _set, from_dict, read_toml
from fpreduce.run.runner import check_run, run_experiment
from fpreduce.run.schema import build, choice, document, in_range
from fpreduce.run.sources import DISTS, SyntheticSpec

__all__ = ["load_sweep_config", "run_sweep", "sweep_dir"]

#: ``progress(done, total, point, how, seconds)``: a point finished (how: ran, resumed, done)
SweepProgress = Callable[[int, int, str, str, float], None]


@dataclass(frozen=True)
class SweepSpec:
    """The ``[sweep]`` table: the grid (each key optional; an empty array is an error).

    Attributes:
        workers: the N of the points (default: ``experiment.workers``).
        plans: the plans of arms A (fixed) and B (re-ranked every step, or arrival).
        dists: synthetic distributions (default: the source's own).
        formats: ``input:accumulate`` pairs (default: the first arm's).
        order: B's order: ``shuffle`` (the plan re-ranked) or ``arrival``.
    """

    workers: tuple[int, ...] = ()
    plans: tuple[str, ...] = ("sequential",)
    dists: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    order: str = "shuffle"


def load_sweep_config(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Config, list[Config]]:
    """The base config and one config per grid point, from a sweep file (a config with a ``[sweep]`` table).

    ``overrides``: ``--set KEY=VALUE`` as ``run --set`` takes them (``experiment.steps=10``,
    ``source.elements=4096``), and ``sweep.KEY=VALUE`` for the grid (``sweep.workers=[2,4]``).
    """
    p = Path(path)
    d = read_toml(p, "sweep config")
    with document(p):  # every error names the file
        return _points(p, d, overrides)


def _points(p: Path, d: dict[str, Any], overrides: Sequence[str]) -> tuple[Config, list[Config]]:
    for o in overrides:
        key, _, raw = o.partition("=")
        if key.strip().startswith("arms."):
            raise InvalidArgument(f"--set {key.strip()}: a sweep's arms are its grid's A and B; set sweep.* instead")
        if key.strip().startswith("sweep.") and "=" in o:
            sw = d.setdefault("sweep", {})
            if not isinstance(sw, dict):
                raise InvalidArgument(f"{p}: [sweep] must be a table")
            try:
                sw[key.strip()[len("sweep.") :]] = tomllib.loads(f"v = {raw}")["v"]
            except tomllib.TOMLDecodeError:
                raise InvalidArgument(f"--set {key.strip()}: {raw!r} is not a TOML value, e.g. [2, 4, 8]") from None
        else:
            _set(d, o)
    sw = d.pop("sweep", None)
    if not isinstance(sw, dict):
        raise InvalidArgument(f"{p}: a sweep needs a [sweep] table (workers, plans, formats)")
    grid = build(SweepSpec, "sweep", sw)
    for key in ("workers", "plans", "dists", "formats"):
        if key in sw and not getattr(grid, key):
            raise InvalidArgument(f"sweep.{key}: empty, expected at least one entry")
    for i, w in enumerate(grid.workers):
        in_range(f"sweep.workers[{i}]", w, 1, integer=True)
    choice("sweep.order", grid.order, ("shuffle", "arrival"))
    base = from_dict(d)  # (without [[arms]]: the default's; point i replaces them by its A and B)
    workers = list(grid.workers) or [base.experiment.workers]
    plans = list(grid.plans)
    formats = list(grid.formats) or [f"{base.arms[0].input}:{base.arms[0].accumulate}"]
    order = grid.order
    sources = _sources(base, list(grid.dists) if "dists" in sw else None)
    points = []
    for w, plan, (dist, source), fm in itertools.product(workers, plans, sources, formats):
        inp, _, acc = str(fm).partition(":")
        if not acc:
            raise InvalidArgument(f"sweep.formats entries are input:accumulate, got {fm!r}")
        b_order = "arrival" if order == "arrival" else f"shuffle:{plan}"
        arms = (
            ArmSpec(name="A", order=f"fixed:{plan}", input=inp, accumulate=acc),
            ArmSpec(name="B", order=b_order, input=inp, accumulate=acc),
        )
        name = f"n{w}-{plan.replace(':', '_')}-{inp}-{acc}" + (f"-{dist}" if "dists" in sw else "")
        exp = replace(base.experiment, workers=w, name=name)
        points.append(Config(exp, source, base.arrival, arms))
    return base, points


def _sources(base: Config, dists: object) -> list[tuple[str, Any]]:
    """(dist label, source spec) per data point of the grid."""
    src = base.source
    if dists is None:
        return [(src.dist if isinstance(src, SyntheticSpec) else src.kind, src)]
    if not isinstance(src, SyntheticSpec):
        raise InvalidArgument(f"sweep.dists needs a synthetic source, but source.kind = {src.kind!r}")
    if not (isinstance(dists, list) and dists and all(isinstance(x, str) for x in dists)):
        raise InvalidArgument(f"sweep.dists must be a non-empty list of distribution names, got {dists!r}")
    out = []
    for x in dists:
        if x not in DISTS:
            raise unknown_name("sweep.dists entry", x, DISTS)
        out.append((x, replace(src, dist=x)))
    return out


def _one(args: tuple[Config, str, bool, bool]) -> tuple[list[dict[str, Any]], str, float]:
    """Run one point (``resume``: continue or reuse a run already in its directory); its rows, what was
    done (``ran``, ``resumed`` or ``done``: complete already) and the seconds it took."""
    cfg, out, force, resume = args
    t0 = time.perf_counter()
    held = rundir.inspect_run_dir(Path(out)).holds if resume else "nothing"
    res = run_experiment(cfg, out, force=force and held == "nothing", resume=held != "nothing")
    how = {"nothing": "ran", "complete": "done"}.get(held, "resumed")
    return _rows(cfg, res.summary), how, time.perf_counter() - t0


def _rows(cfg: Config, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A point's rows of sweep.csv, from its summary.json."""
    plan = cfg.arms[0].policy.plan
    src = cfg.source
    dist = src.dist if isinstance(src, SyntheticSpec) else src.kind
    rows = []
    for a in summary["arms"]:
        rows.append(
            {
                "workers": cfg.experiment.workers,
                "plan": plan,
                "dist": dist,
                "input": a["input"],
                "accumulate": a["accumulate"],
                "arm": a["name"],
                "compare_to": a["compare_to"],
                "mean_err_norm": a["mean_err_norm"],
                "mean_err_rel": a["mean_err_rel"],
                "max_err_rel": a["max_err_rel"],
                "mean_diff_frac": a["mean_diff_frac"] or 0.0,
                "max_ulp": a["max_ulp"] or 0.0,
                "mean_rerun_diff_frac": a["mean_rerun_diff_frac"],
            }
        )
    return rows


def sweep_dir(base: Config, out: str | Path | None) -> Path:
    """The sweep's directory: ``out``, or ``runs/<experiment.name>`` of the sweep file (:func:`rundir.out_dir`)."""
    return rundir.out_dir(out, base.experiment.name, "experiment.name")


def run_sweep(
    path: str | Path,
    out: str | Path | None = None,
    *,
    jobs: int = 1,
    force: bool = False,
    resume: bool = False,
    executor: Executor | None = None,
    progress: SweepProgress | None = None,
    overrides: Sequence[str] = (),
) -> Path:
    """Run every grid point (``jobs`` processes, or on ``executor``) and write ``sweep.csv``; returns its path.

    Everything is checked before ``out`` (default ``runs/<experiment.name>``) is touched:
    the grid, every point's source and memory. ``out`` must be missing, empty or a sweep
    directory; an earlier sweep there is replaced only with ``force`` (its table goes
    first; points no longer in the grid are removed), or continued with ``resume``: a
    point whose run is complete is read back, not run again; an interrupted one is
    resumed from its checkpoint (its config must be the point's). The sweep holds
    ``out``'s lock. ``executor``: any ``concurrent.futures.Executor`` (e.g. mpi4py's
    ``MPIPoolExecutor``; its workers must import fpreduce); the rows are the same
    whichever runs them. ``progress(done, total, point, how, seconds)`` is called as
    each point finishes (``how``: ran, resumed, done). ``overrides``: as :func:`load_sweep_config`.
    """
    if force and resume:
        raise InvalidArgument("--resume continues the sweep in --out and --force replaces it: give one of them")
    base, points = load_sweep_config(path, overrides)
    d = sweep_dir(base, out)
    for c in points:
        check_run(c)
    with rundir.claim(d, "sweep", force=force, resume=resume):
        if rundir.holds(d, "sweep") and force:
            _clear(d, points)
        work = [(c, str(rundir.point_dir(d, c.experiment.name)), force, resume) for c in points]
        own = executor is None and jobs > 1
        ex = ProcessPoolExecutor(max_workers=jobs) if own else executor
        try:
            results = _map(ex, work, progress)
        finally:
            if own and ex is not None:
                ex.shutdown()
        return rundir.write_sweep(d, [r for rows in results for r in rows])


def _clear(d: Path, points: list[Config]) -> None:
    """Replace a sweep: its table, and the points no longer in the grid."""
    rundir.clear_sweep(d)
    keep = {rundir.point_dir(d, c.experiment.name) for c in points}
    for p in rundir.point_dirs(d):
        if p not in keep and rundir.inspect_run_dir(p).holds != "nothing":
            with rundir.lock(p):
                rundir.clear_run(p)
            _files.remove_if_empty(p)


def _map(
    ex: Executor | None, work: list[tuple[Config, str, bool, bool]], progress: SweepProgress | None
) -> list[list[dict[str, Any]]]:
    """Every point's rows, in grid order; ``progress`` as each finishes."""
    out: list[list[dict[str, Any]] | None] = [None] * len(work)

    def done(i: int, result: tuple[list[dict[str, Any]], str, float]) -> None:
        out[i] = result[0]
        if progress is not None:
            progress(sum(r is not None for r in out), len(work), work[i][0].experiment.name, *result[1:])

    if ex is None:
        for i, w in enumerate(work):
            done(i, _one(w))
    else:
        futures = {ex.submit(_one, w): i for i, w in enumerate(work)}
        for f in as_completed(futures):
            done(futures[f], f.result())
    return [r for r in out if r is not None]

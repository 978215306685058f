"""The experiment runner: arms (A, B, ...) reduce the same gradients step after step.

Every step, each arm gets its plan from its order policy (:mod:`fpreduce.run.policies`),
reduces the workers' gradients with :func:`fpreduce.reduce`, and is measured against
the exact sum of the same inputs, against the arm it names in ``compare_to`` (by default
its fixed-order twin), and against itself re-run with an independently seeded order
policy (another launch of the same job: the ``rerun_*`` columns). In
training mode (``[source] kind = "model"``) every arm trains its own replica of the
model from the same initialization on the same batches, so only the reduction differs.
The run directory is written through :mod:`fpreduce.run.rundir`; a run is bitwise
reproducible from its config and seed.
"""

from __future__ import annotations

import copy
import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce._version import __version__
from fpreduce.base import threads
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.engine import reduce
from fpreduce.core.exact import exact_sum_scan
from fpreduce.core.formats import get_format
from fpreduce.core.rounding import round_to
from fpreduce.run import resume as resume_
from fpreduce.run import rundir
from fpreduce.run._summary import arm_summary
from fpreduce.run._summary import wider as _wider
from fpreduce.run.config import ArmSpec, Config, load_config
from fpreduce.run.digest import digest
from fpreduce.run.policies import plan_for
from fpreduce.run.rundir import Results, columns, load_run
from fpreduce.run.sources import Source, check_memory, memory_needed, open_source
from fpreduce.run.stepmetrics import ULP_EDGES, CompareStats, ErrorStats

__all__ = ["check_run", "run_experiment"]

Progress = Callable[[int, int, float], None]
#: ``on_step(step, arm, y)``: called with every arm's result, right after its reduction (hook, e.g. a real backend)
OnStep = Callable[[int, ArmSpec, np.ndarray], None]
#: returns extra top-level entries merged into summary.json at every write (hook, e.g. ``{"backend": "mpi"}``)
SummaryExtra = Callable[[], dict[str, Any]]
#: ``step_fn(cfg, source, arms, step, rows, times, on_step)``: runs one step and appends its rows (hook: a split run)
StepFn = Callable[..., None]


class _Arm:
    """One arm's mutable state during a run."""

    def __init__(self, spec: ArmSpec, params: np.ndarray | None, state: dict[str, np.ndarray]) -> None:
        self.spec = spec
        self.params = params
        self.state = state
        self.first_div: int | None = None
        self.first_param_div: int | None = None
        self.hist = np.zeros(len(ULP_EDGES), dtype=np.int64)


def _reduce(Xin: np.ndarray, plan: Any, arm: ArmSpec, seed: Any, lo: int = 0, total: int | None = None) -> np.ndarray:
    return reduce(
        Xin,
        plan,
        input=arm.input,
        accumulate=arm.accumulate,
        rounding=arm.rounding,
        seed=seed,
        algorithm=arm.algorithm,
        output=arm.output or None,
        average=arm.average,
        offset=lo,
        total=total,
    )


def _seed(arm: ArmSpec, key: list[int]) -> np.random.Generator | None:
    """The stochastic-rounding generator of one arm, step and chunk (None: the arm does not draw)."""
    return np.random.default_rng(key) if arm.rounding == "stochastic" else None


def chunk_width(workers: int) -> int:
    """Elements per chunk of a step: about 16 MiB of float32 inputs (a multiple of 2**15)."""
    return max(1 << 15, ((1 << 22) // workers) >> 15 << 15)


class _Inputs:
    """One chunk's inputs in one input format: rounded, their exact sums, underflow count."""

    def __init__(self, Xr: np.ndarray, X: np.ndarray) -> None:
        """``Xr``: ``X`` rounded to the input format."""
        self.exact, zeros, absum = exact_sum_scan(Xr)  # the compiled scan counts zeros, sums |x| on the way
        if zeros is None:
            zeros = int(np.count_nonzero(Xr == 0))
        self.underflow = zeros - int(np.count_nonzero(X == 0)) if zeros else 0  # zeros stay zeros
        self._rounded: dict[tuple[str, bool], np.ndarray] = {}
        if absum is None:  # the backward error's scale: sum_i |x_i| in float64, in row order (the scan's bits)
            absum = np.zeros(Xr.shape[1])
            with np.errstate(over="ignore"):  # (fp64 inputs near the top)
                for row in Xr:
                    absum += np.abs(row)
        self.absum = absum

    def correctly_rounded(self, arm: ArmSpec, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(hi, lo, exact rounded once to the arm's output, sum |x|): of the sum, or of the mean, of the inputs."""
        ex = self.exact
        hi, lo = np.asarray(ex.hi, dtype=np.float64), np.asarray(ex.lo, dtype=np.float64)
        mean = arm.average != "none"
        absum = self.absum / n if mean else self.absum
        if mean:  # the exact mean hi/N + lo/N (to float64 accuracy; exact for N a power of two)
            hi, lo = hi / n, lo / n
        key = (arm.out_format, mean)
        if key not in self._rounded:
            if mean:
                ex = copy.copy(ex)
                ex.hi, ex.lo = hi, lo
            self._rounded[key] = ex.round(arm.out_format)
        return hi, lo, self._rounded[key], absum


def run_experiment(
    config: Config | str | Path | None = None,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    force: bool = False,
    progress: Progress | None = None,
    on_step: OnStep | None = None,
    summary_extra: SummaryExtra | None = None,
    step_fn: StepFn | None = None,
    share: int | None = None,
) -> Results:
    """Run an experiment and write its run directory; returns the results read back.

    Nothing is written before everything is checked: the config, the source (a file
    readable, with enough steps), the memory the run needs against this machine's
    (:func:`fpreduce.run.sources.check_memory`), and what ``out`` holds. The run holds
    ``out``'s lock (:func:`fpreduce.run.rundir.lock`) for its lifetime, so a second
    run into the same directory stops with an InvalidArgument instead of mixing files.
    After every step ``metrics.csv``, ``summary.json`` and ``state.npz`` (the resume
    checkpoint, written last) are replaced atomically: a run killed at any point
    resumes bit-identically from its last checkpoint.

    Args:
        config: a Config, a TOML path, or None for the embedded default.
        out: the run directory (default ``runs/<name>``): missing, empty, or a run. A
            run there with steps done is replaced only with ``force``; a directory
            holding anything else is refused, whatever ``force`` says.
        resume: continue the interrupted run in ``out``, whose config.toml must equal
            ``config``; a complete run is returned as it is.
        force: replace a complete or incomplete run in ``out``.
        progress: called as ``progress(steps_done, steps, eta_seconds)``.
        on_step: called as ``on_step(step, arm, y)`` with each arm's result (in config
            order, before the step is checkpointed); used by the MPI backend.
        summary_extra: returns entries added to summary.json at every write.
        step_fn: runs one step in place of the runner's own (``fpreduce.backends.distributed``),
            whose process holds ``share`` elements (its memory is checked for them).
    """
    cfg = config if isinstance(config, Config) else load_config(config)
    e = cfg.experiment
    d = rundir.out_dir(out, e.name, "experiment.name")
    source = check_run(cfg, share)
    resume_.plan(d, cfg, resume=resume, force=force)  # refuse before the directory is touched
    with rundir.lock(d):
        todo = resume_.plan(d, cfg, resume=resume, force=force, locked=True)  # again: no other run changes it now
        if todo == "done":
            return load_run(d)
        rows, start, saved = resume_.open_dir(d, cfg, resume=resume)
        training = source.kind == "model"
        arms = _init_arms(cfg, source, saved, training)
        for i, a in enumerate(arms):
            _restore(a, i, rows, saved)
        t0 = time.perf_counter()
        times = {"engine": 0.0, "source": 0.0, "exact": 0.0, "metrics": 0.0}
        if start == 0:  # a readable (incomplete) run from the start
            _checkpoint(d, cfg, rows, arms, 0, training, (0.0, times), summary_extra)
        for step in range(start, e.steps):
            (step_fn or _run_step)(cfg, source, arms, step, rows, times, on_step)
            wall = time.perf_counter() - t0
            _checkpoint(d, cfg, rows, arms, step + 1, training, (wall, times), summary_extra)
            if progress is not None:
                done = step + 1 - start
                progress(step + 1, e.steps, wall / done * (e.steps - step - 1))
        with resume_.writing(d):
            _write_summary(
                d,
                cfg,
                rows,
                arms,
                e.steps,
                complete=True,
                times=(time.perf_counter() - t0, times),
                extra=summary_extra,
            )
        return load_run(d)


def check_run(cfg: Config, share: int | None = None) -> Source:
    """The run's source, opened: InvalidArgument for an unreadable file, too few steps in it, or a
    run needing more memory than this machine has available (checked before anything is written;
    ``share``: the elements this process holds, a split run's range)."""
    e = cfg.experiment
    source = open_source(cfg.source, workers=e.workers, seed=e.seed)
    if source.max_steps is not None and source.max_steps < e.steps:
        raise InvalidArgument(f"the gradient file has {source.max_steps} steps but experiment.steps = {e.steps}")
    width = source.elements if source.kind == "model" else chunk_width(e.workers)
    inputs = len({a.input for a in cfg.arms})
    need = memory_needed(source, arms=len(cfg.arms), inputs=inputs, width=width, elements=share)
    check_memory(need, f"this run ({e.workers} workers x {source.elements} elements, {len(cfg.arms)} arms)")
    return source


def _measure(
    specs: list[ArmSpec],
    inputs: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
    keys: list[tuple[str, int]],
    ys: list[np.ndarray],
    reruns: list[np.ndarray | None],
    n: int,
    st: _Step,
    times: dict[str, float],
) -> None:
    """One chunk's exact sums, and every arm's metrics against them, against its ``compare_to`` arm and its rerun
    (``reruns[i]``; None: the result itself).

    The arms' metrics run on the thread pool when this process may use more than one core (one task per arm:
    each arm's statistics are its own, added chunk after chunk in order, so the values do not depend on it).
    On 64 x 2**20 bf16, 3 arms, 3 steps, the wall time fell 2.60-2.81 -> 2.36-2.53 s in one set of alternating
    runs and did not move beyond the noise (about 10%) in others."""
    t0 = time.perf_counter()
    sums = {k: _Inputs(Xr, X) for k, (Xr, X) in inputs.items()}
    t1 = time.perf_counter()
    exact = []
    for i, spec in enumerate(specs):
        inp = sums[keys[i]]
        st.underflow[i] += inp.underflow
        exact.append(inp.correctly_rounded(spec, n))

    def arm(i: int) -> None:
        spec, j = specs[i], st.partner[i]
        hi, lo, cr, absum = exact[i]
        st.err[i].add(ys[i], hi, lo, cr, get_format(spec.out_format), absum)
        st.cmp[i].add(ys[i], ys[j], get_format(_wider(spec.out_format, specs[j].out_format)))
        y2 = reruns[i]
        st.rerun[i].add(ys[i] if y2 is None else y2, ys[i], get_format(spec.out_format))  # None: y2 is y

    if threads.available() > 1:
        threads.run(arm, [(i,) for i in range(len(specs))])
    else:
        for i in range(len(specs)):
            arm(i)
    t2 = time.perf_counter()
    times["exact"] += t1 - t0
    times["metrics"] += t2 - t1


@dataclass
class _Step:
    """One step in progress: every arm's plan (and re-seeded plan), results and metrics, filled chunk by chunk."""

    index: int
    plans: list[Any]
    reruns: list[Any]  # the plans of another launch of the same job; None: a fixed order (the same plan)
    partner: list[int]  # the index of each arm's compare_to arm
    ys: list[np.ndarray]
    err: list[ErrorStats]
    cmp: list[CompareStats]
    rerun: list[CompareStats]
    underflow: list[int]
    base: int = 0  # ys[i][j] is element base + j (a split run holds only its element range)
    given: list[tuple[np.ndarray, np.ndarray] | None] | None = None  # per arm (y, rerun y) reduced elsewhere
    digests: list[int] | None = None  # per arm, the result's digest when ys does not hold it all (a merged split)


def _run_step(
    cfg: Config,
    source: Source,
    arms: list[_Arm],
    step: int,
    rows: list[dict[str, Any]],
    times: dict[str, float],
    on_step: OnStep | None,
) -> None:
    """Every arm reduces the step's gradients (:func:`_compute_step`); appends one row per arm."""
    _record(cfg, source, arms, _compute_step(cfg, source, arms, step, times), rows, on_step)


def _compute_step(
    cfg: Config,
    source: Source,
    arms: list[_Arm],
    step: int,
    times: dict[str, float],
    span: tuple[int, int] | None = None,
    after_chunk: Callable[[_Step], None] | None = None,
    given: list[tuple[np.ndarray, np.ndarray] | None] | None = None,
) -> _Step:
    """Every arm reduces the step's gradients, chunk after chunk of elements, and is measured.

    Per chunk: the inputs are rounded once per input format (the cast ``fr.reduce``
    would do, shared by the arms: counted as engine time), reduced by every arm (and
    again with a re-seeded order policy, unless the order is fixed), summed exactly and
    measured. Only O(elements) results are kept across chunks.
    (The oracle on a second thread saved only ~5% of the wall time on 2 cores: the GIL serialises
    it; it runs in line. Synthetic and file gradients are drawn two chunks ahead on two threads:
    numpy's generators and arithmetic release the GIL, and only those threads call such a source;
    the source time counted is the time waited for them.)
    ``span``: only the chunks of elements lo..hi-1 (lo a multiple of the chunk width: a
    split run's share); ``after_chunk(st)`` is called after each chunk's metrics; ``given``: per arm,
    None or its (result, re-run result) over all elements, reduced elsewhere (a model's one chunk).
    """
    e = cfg.experiment
    m = source.elements
    width = m if source.kind == "model" else chunk_width(e.workers)  # a model's gradient is small: one chunk
    s_lo, s_hi = span or (0, m)
    specs = [a.spec for a in arms]
    names = [s.name for s in specs]
    st = _Step(
        step,
        [plan_for(cfg, s, step) for s in specs],
        [None if s.policy.kind == "fixed" else plan_for(cfg, s, step, salt=1) for s in specs],
        [names.index(s.compare_to or s.name) for s in specs],
        [np.empty(s_hi - s_lo, dtype=get_format(s.out_format).value_dtype) for s in specs],
        [ErrorStats() for _ in arms],
        [CompareStats() for _ in arms],
        [CompareStats() for _ in arms],
        [0] * len(arms),
        s_lo,
        given,
    )
    chunks, ahead = range(s_lo // width, -(-s_hi // width)), {}
    with ThreadPoolExecutor(2) as pool:  # the next two chunks' gradients are drawn while this one is reduced
        for c in chunks:
            lo, hi, shared = c * width, min(m, (c + 1) * width), None
            for k in range(c, min(c + 3, chunks.stop) if source.kind != "model" else c):
                if k not in ahead:
                    ahead[k] = pool.submit(source.gradients, step, lo=k * width, hi=min(m, (k + 1) * width))
            if c in ahead:
                t1 = time.perf_counter()
                shared = ahead.pop(c).result()
                times["source"] += time.perf_counter() - t1  # the time waited for them
            inputs, keys, reruns = _reduce_chunk(cfg, source, arms, st, c, (lo, hi), shared, times)
            ys = [y[lo - s_lo : hi - s_lo] for y in st.ys]
            _measure(specs, inputs, keys, ys, reruns, e.workers, st, times)
            if after_chunk is not None:
                after_chunk(st)
    return st


def _reduce_chunk(
    cfg: Config,
    source: Source,
    arms: list[_Arm],
    st: _Step,
    c: int,
    span: tuple[int, int],
    shared: np.ndarray | None,
    times: dict[str, float],
) -> tuple[dict[tuple[str, int], tuple[np.ndarray, np.ndarray]], list[tuple[str, int]], list[np.ndarray | None]]:
    """Every arm reduces elements lo..hi-1 (chunk ``c``, ``span``) of the step into ``st.ys``, and again
    with its re-seeded order policy (compared by :func:`_measure`, not kept). ``shared``: the
    chunk's gradients (None: a model's, drawn here from each arm's replica).

    Returns the chunk's inputs, ``(input format, id of the array) -> (rounded, as
    drawn)``, each arm's key into them (arms sharing inputs share their rounding
    and exact sum), and each arm's rerun result (None: a fixed order, the result itself).
    """
    e, m, step = cfg.experiment, source.elements, st.index
    lo, hi = span
    inputs: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    keys = []
    reruns: list[np.ndarray | None] = []
    for i, a in enumerate(arms):
        spec = a.spec
        t1 = time.perf_counter()
        X = shared if shared is not None else source.gradients(step, a.params)
        times["source"] += time.perf_counter() - t1
        key = (spec.input, id(X))
        keys.append(key)
        if key not in inputs:
            t1 = time.perf_counter()
            inputs[key] = (round_to(X, spec.input), X)
            times["engine"] += time.perf_counter() - t1
        Xr = inputs[key][0]
        t1 = time.perf_counter()
        if st.given and st.given[i] is not None:  # reduced elsewhere (a split training run's ranks)
            y, y2 = st.given[i]  # type: ignore[misc]
        else:
            sk = [e.seed, step, i, c]  # another launch of the same job: the same inputs and rounding seed (a
            y = _reduce(Xr, st.plans[i], spec, _seed(spec, sk), lo, m)  # fresh generator), another order
            y2 = y if st.reruns[i] is None else _reduce(Xr, st.reruns[i], spec, _seed(spec, sk), lo, m)
        times["engine"] += time.perf_counter() - t1
        st.ys[i][lo - st.base : hi - st.base] = y
        reruns.append(None if y2 is y else y2)
    return inputs, keys, reruns


def _record(
    cfg: Config, source: Source, arms: list[_Arm], st: _Step, rows: list[dict[str, Any]], on_step: OnStep | None
) -> None:
    """Append the step's row of every arm to ``rows``; in training, every arm updates its replica."""
    training = source.kind == "model"
    n, step = cfg.experiment.workers, st.index
    for i, a in enumerate(arms):
        spec = a.spec
        if on_step is not None:
            on_step(step, spec, st.ys[i])
        loss = source.loss(step, a.params) if training else float("nan")  # type: ignore[attr-defined]
        rerun = st.rerun[i].row()
        row: dict[str, Any] = {
            "step": step,
            "arm": spec.name,
            "elements": source.elements,
            "loss": loss,
            "underflow": st.underflow[i],
            **st.err[i].row(),
            **st.cmp[i].row(),
            "rerun_diff_frac": rerun["diff_frac"],
            "rerun_ulp_max": rerun["ulp_max"],
            "digest": st.digests[i] if st.digests is not None else digest(st.ys[i], st.base),
        }
        a.hist += st.cmp[i].hist
        if row["diff_frac"] > 0 and a.first_div is None:
            a.first_div = step
        if training:
            g = st.ys[i].astype(np.float64) * (n if spec.average != "none" else 1)
            a.params = source.update(a.params, g, a.state)  # type: ignore[attr-defined]
        rows.append(row)
    for i, (a, row) in enumerate(zip(arms, rows[-len(arms) :], strict=True)):
        _param_divergence(a, arms[st.partner[i]], row, step, training=training)


def _param_divergence(a: _Arm, ref: _Arm, row: dict[str, Any], step: int, *, training: bool) -> None:
    """The row's distance of ``a``'s parameters to its ``compare_to`` arm's after the update (NaN if not training)."""
    if not training:
        row["param_dist"] = row["param_diff_frac"] = float("nan")
        return
    assert a.params is not None
    assert ref.params is not None
    pa, pr = a.params.astype(np.float64), ref.params.astype(np.float64)
    nr = float(np.linalg.norm(pr))
    row["param_dist"] = float(np.linalg.norm(pa - pr)) / nr if nr > 0 else float("nan")
    row["param_diff_frac"] = float(np.mean(a.params.view(np.uint32) != ref.params.view(np.uint32)))
    if row["param_diff_frac"] > 0 and a.first_param_div is None:
        a.first_param_div = step


def _init_arms(cfg: Config, source: Source, saved: dict[str, np.ndarray], training: bool) -> list[_Arm]:
    if not training:
        return [_Arm(a, None, {}) for a in cfg.arms]
    if saved:
        return [
            _Arm(
                a,
                saved[f"params/{i}"],
                {k.split("/", 2)[2]: v for k, v in saved.items() if k.startswith(f"state/{i}/")},
            )
            for i, a in enumerate(cfg.arms)
        ]
    p0 = source.init_params()  # type: ignore[attr-defined]
    return [_Arm(a, p0.copy(), source.init_state()) for a in cfg.arms]  # type: ignore[attr-defined]


def _restore(a: _Arm, i: int, rows: list[dict[str, Any]], saved: dict[str, np.ndarray]) -> None:
    """Arm ``i``'s divergence steps and ulp histogram from the steps already done (resume).

    (``reproducible`` needs nothing: it derives from the rows' ``rerun_diff_frac``.)"""
    for r in rows:
        if r["arm"] != a.spec.name:
            continue
        if r["diff_frac"] > 0 and a.first_div is None:
            a.first_div = r["step"]
        if r["param_diff_frac"] > 0 and a.first_param_div is None:
            a.first_param_div = r["step"]
    if rows:
        a.hist = saved[f"hist/{i}"].astype(np.int64)


def _checkpoint(
    d: Path,
    cfg: Config,
    rows: list[dict[str, Any]],
    arms: list[_Arm],
    steps_done: int,
    training: bool,
    times: tuple[float, dict[str, float]],
    extra: SummaryExtra | None = None,
) -> None:
    """metrics.csv, summary.json, then state.npz (the commit point of the step: see :func:`fpreduce.run.resume`)."""
    with resume_.writing(d):
        rundir.write_metrics(d, rows)
        _write_summary(d, cfg, rows, arms, steps_done, complete=False, times=times, extra=extra)
        rundir.write_state(d, resume_.checkpoint_arrays(arms, steps_done, training))


def _write_summary(
    d: Path,
    cfg: Config,
    rows: list[dict[str, Any]],
    arms: list[_Arm],
    steps_done: int,
    *,
    complete: bool,
    times: tuple[float, dict[str, float]],
    extra: SummaryExtra | None = None,
) -> None:
    cols = columns(rows)
    e = cfg.experiment
    summary = {
        "format": 1,
        "name": e.name,
        "complete": complete,
        "steps": e.steps,
        "steps_done": steps_done,
        "workers": e.workers,
        "elements": int(rows[-1]["elements"]) if rows else None,
        "source": cfg.source.kind,
        "seed": e.seed,
        "reference": cfg.arms[0].name,
        "wall_time_s": round(times[0], 3),
        "engine_time_s": round(times[1]["engine"], 3),
        "source_time_s": round(times[1]["source"], 3),
        "exact_time_s": round(times[1]["exact"], 3),
        "metrics_time_s": round(times[1]["metrics"], 3),
        "versions": {"fpreduce": __version__, "numpy": np.__version__, "python": platform.python_version()},
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),  # when this summary was written
        "arms": [
            arm_summary(a.spec, cfg, cols.get(a.spec.name, {}), a.hist, (a.first_div, a.first_param_div)) for a in arms
        ],
    }
    if extra is not None:
        summary.update(extra())
    rundir.write_summary(d, summary)

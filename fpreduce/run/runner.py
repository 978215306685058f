"""The experiment runner: arms (A, B, ...) reduce the same gradients step after step.

Every step, each arm gets its plan from its order policy, reduces the workers'
gradients with :func:`fpreduce.reduce`, and is measured against the exact sum of
the same inputs and against the reference arm (the first). In training mode
(``[source] kind = "model"``) every arm trains its own replica of the model from
the same initialization on the same batches, so only the reduction differs.

Randomness: the order policies draw from ``default_rng([seed, step, crc32(order),
salt])``, so two arms with the same policy see the same orders (they differ only in
what the config says), and a run is bitwise reproducible from its config and seed.
"""

from __future__ import annotations

import copy
import json
import platform
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce import plans
from fpreduce._version import __version__
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.engine import reduce
from fpreduce.core.exact import _exact_sum
from fpreduce.core.formats import get_format
from fpreduce.core.rounding import round_to
from fpreduce.run.config import ArmSpec, Config, load_config, to_toml
from fpreduce.run.rundir import Results, atomic_write, columns, load_run, read_rows, rows_to_csv
from fpreduce.run.sources import Source, open_source
from fpreduce.run.stepmetrics import ULP_EDGES, CompareStats, ErrorStats

__all__ = ["plan_for", "run_experiment", "shuffle_permutation"]

Progress = Callable[[int, int, float], None]
#: ``on_step(step, arm, y)``: called with every arm's result, right after its reduction (hook, e.g. a real backend)
OnStep = Callable[[int, ArmSpec, np.ndarray], None]
#: returns extra top-level entries merged into summary.json at every write (hook, e.g. ``{"backend": "mpi"}``)
SummaryExtra = Callable[[], dict[str, Any]]


def _rng(cfg: Config, step: int, order: str, salt: int) -> np.random.Generator:
    return np.random.default_rng([cfg.experiment.seed, step, zlib.crc32(order.encode()), salt])


def arrival_means(cfg: Config) -> np.ndarray:
    """Per-worker mean extra latency, drawn once per run (the slow and the fast workers)."""
    rng = np.random.default_rng([cfg.experiment.seed, 0xA771])
    return rng.uniform(0.0, cfg.arrival.spread, cfg.experiment.workers)


def plan_for(cfg: Config, arm: ArmSpec, step: int, *, salt: int = 0) -> Any:
    """The plan ``arm`` uses at ``step`` (``salt`` re-seeds the policy: another run)."""
    n = cfg.experiment.workers
    policy, _, rest = arm.order.partition(":")
    if policy == "fixed":
        return plans.parse(rest, n)
    rng = _rng(cfg, step, arm.order, salt)
    if policy == "shuffle":
        return plans.parse(rest, n).relabel(rng.permutation(n))  # = shuffle_permutation(...)
    if policy == "arrival":
        a = cfg.arrival
        jitter = {
            "exponential": lambda: rng.exponential(a.scale, n),
            "normal": lambda: rng.normal(0.0, a.scale, n),
            "lognormal": lambda: rng.lognormal(0.0, a.scale, n),
        }[a.jitter]()
        t = a.base + arrival_means(cfg) + jitter
        return plans.sequential(n, np.argsort(t, kind="stable"))
    if policy == "atomic":
        return plans.parse("atomic", n, seed=int(rng.integers(0, 2**31)))
    return plans.random_tree(n, rng)


def shuffle_permutation(cfg: Config, arm: ArmSpec, step: int, *, salt: int = 0) -> np.ndarray:
    """The permutation a ``shuffle:<plan>`` arm relabels its plan with at ``step`` (see :func:`plan_for`)."""
    return _rng(cfg, step, arm.order, salt).permutation(cfg.experiment.workers)


def _wider(a: str, b: str) -> str:
    fa, fb = get_format(a), get_format(b)
    return a if (fa.precision, fa.emax) >= (fb.precision, fb.emax) else b


class _Arm:
    """One arm's mutable state during a run."""

    def __init__(self, spec: ArmSpec, params: np.ndarray | None, state: dict[str, np.ndarray]) -> None:
        self.spec = spec
        self.params = params
        self.state = state
        self.first_div: int | None = None
        self.first_param_div: int | None = None
        self.hist = np.zeros(len(ULP_EDGES), dtype=np.int64)
        self.reproducible: bool | None = None  # None: no step was re-run in this process


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
        self.exact, zeros = _exact_sum(Xr)  # the compiled scan counts the zero terms on the way
        if zeros is None:
            zeros = int(np.count_nonzero(Xr == 0))
        self.underflow = zeros - int(np.count_nonzero(X == 0)) if zeros else 0  # zeros stay zeros
        self._rounded: dict[tuple[str, bool], np.ndarray] = {}

    def correctly_rounded(self, arm: ArmSpec, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hi, lo, exact rounded once to the arm's output): the exact sum, or mean, of the inputs."""
        ex = self.exact
        hi, lo = np.asarray(ex.hi, dtype=np.float64), np.asarray(ex.lo, dtype=np.float64)
        mean = arm.average != "none"
        if mean:  # the exact mean hi/N + lo/N (to float64 accuracy; exact for N a power of two)
            hi, lo = hi / n, lo / n
        key = (arm.out_format, mean)
        if key not in self._rounded:
            if mean:
                ex = copy.copy(ex)
                ex.hi, ex.lo = hi, lo
            self._rounded[key] = ex.round(arm.out_format)
        return hi, lo, self._rounded[key]


def run_experiment(
    config: Config | str | Path | None = None,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    progress: Progress | None = None,
    on_step: OnStep | None = None,
    summary_extra: SummaryExtra | None = None,
) -> Results:
    """Run an experiment and write its run directory; returns the results read back.

    Args:
        config: a Config, a TOML path, or None for the embedded default.
        out: the run directory (default ``runs/<name>``). An existing complete run
            there is replaced; an incomplete one needs ``resume=True``.
        resume: continue an interrupted run from its last complete step.
        progress: called as ``progress(steps_done, steps, eta_seconds)``.
        on_step: called as ``on_step(step, arm, y)`` with each arm's result (in config
            order, before the step is checkpointed); used by the MPI backend.
        summary_extra: returns entries added to summary.json at every write.
    """
    cfg = config if isinstance(config, Config) else load_config(config)
    e = cfg.experiment
    d = Path(out) if out is not None else Path("runs") / e.name
    rows, start = _open_dir(d, cfg, resume=resume)
    n = e.workers
    source = open_source(cfg.source, workers=n, seed=e.seed)
    if source.max_steps is not None and source.max_steps < e.steps:
        raise InvalidArgument(f"the gradient file has {source.max_steps} steps but experiment.steps = {e.steps}")
    training = source.kind == "model"
    arms = _init_arms(cfg, source, d, start, training)
    old = json.loads((d / "summary.json").read_text()) if start > 0 else {}
    for a in arms:
        _restore(a, rows, old)
    t0 = time.perf_counter()
    times = {"engine": 0.0, "source": 0.0, "exact": 0.0, "metrics": 0.0}
    for step in range(start, e.steps):
        _run_step(cfg, source, arms, step, rows, times, on_step)
        wall = time.perf_counter() - t0
        _checkpoint(d, cfg, rows, arms, step + 1, training, (wall, times), summary_extra)
        if progress is not None:
            done = step + 1 - start
            progress(step + 1, e.steps, wall / done * (e.steps - step - 1))
    repro = {a.spec.name: a.reproducible for a in arms}
    _write_summary(
        d,
        cfg,
        rows,
        arms,
        e.steps,
        complete=True,
        times=(time.perf_counter() - t0, times),
        repro=repro,
        extra=summary_extra,
    )
    return load_run(d)


def _measure(
    specs: list[ArmSpec],
    inputs: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
    keys: list[tuple[str, int]],
    ys: list[np.ndarray],
    n: int,
    err: list[ErrorStats],
    cmp: list[CompareStats],
    underflow: list[int],
    times: dict[str, float],
) -> None:
    """One chunk's exact sums, and every arm's metrics against them and against the reference arm."""
    t0 = time.perf_counter()
    sums = {k: _Inputs(Xr, X) for k, (Xr, X) in inputs.items()}
    t1 = time.perf_counter()
    ref_fmt = specs[0].out_format
    for i, spec in enumerate(specs):
        inp = sums[keys[i]]
        underflow[i] += inp.underflow
        err[i].add(ys[i], *inp.correctly_rounded(spec, n), get_format(spec.out_format))
        cmp[i].add(ys[i], ys[0], get_format(_wider(spec.out_format, ref_fmt)))
    t2 = time.perf_counter()
    times["exact"] += t1 - t0
    times["metrics"] += t2 - t1


def _run_step(
    cfg: Config,
    source: Source,
    arms: list[_Arm],
    step: int,
    rows: list[dict[str, Any]],
    times: dict[str, float],
    on_step: OnStep | None,
) -> None:
    """Every arm reduces the step's gradients, chunk after chunk of elements; appends one row per arm.

    Per chunk: the inputs are rounded once per input format (the cast ``fr.reduce``
    would do, shared by the arms: counted as engine time), reduced by every arm,
    summed exactly and measured. Only O(elements) results are kept across chunks.
    (Running the oracle on a second thread beside the reductions saved only ~5% of
    the wall time on a 2-core machine: the GIL, taken by every small numpy call of
    both, serialises most of it; so it runs here, in line, and its time is honest.)
    """
    e = cfg.experiment
    n, m = e.workers, source.elements
    training = source.kind == "model"
    width = m if training else chunk_width(n)  # a model's gradient is small: one chunk
    ref = arms[0]
    specs = [a.spec for a in arms]
    plan = [plan_for(cfg, s, step) for s in specs]
    check = [plan_for(cfg, s, step, salt=1) for s in specs] if step < e.check_steps else None
    err = [ErrorStats() for _ in arms]
    cmp = [CompareStats() for _ in arms]
    underflow = [0] * len(arms)
    ys = [np.empty(m, dtype=get_format(s.out_format).value_dtype) for s in specs]
    for c, lo in enumerate(range(0, m, width)):
        hi = min(m, lo + width)
        t1 = time.perf_counter()
        shared = None if training else source.gradients(step, lo=lo, hi=hi)
        times["source"] += time.perf_counter() - t1
        inputs: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        keys = []
        for i, a in enumerate(arms):
            spec = a.spec
            t1 = time.perf_counter()
            X = shared if shared is not None else source.gradients(step, a.params)
            times["source"] += time.perf_counter() - t1
            key = (spec.input, id(X))
            keys.append(key)
            if key not in inputs:  # arms sharing inputs share their rounding and exact sum
                t1 = time.perf_counter()
                inputs[key] = (round_to(X, spec.input), X)
                times["engine"] += time.perf_counter() - t1
            Xr = inputs[key][0]
            t1 = time.perf_counter()
            y = _reduce(Xr, plan[i], spec, _seed(spec, [e.seed, step, i, c]), lo, m)
            times["engine"] += time.perf_counter() - t1
            ys[i][lo:hi] = y
            if check is not None:  # another run of the same job: re-seeded orders, same bits?
                y2 = _reduce(Xr, check[i], spec, _seed(spec, [e.seed + 7, step, i, c]), lo, m)
                a.reproducible = a.reproducible is not False and np.array_equal(y.view(np.uint8), y2.view(np.uint8))
        _measure(specs, inputs, keys, [y[lo:hi] for y in ys], n, err, cmp, underflow, times)
    for i, a in enumerate(arms):
        spec = a.spec
        if on_step is not None:
            on_step(step, spec, ys[i])
        loss = source.loss(step, a.params) if training else float("nan")  # type: ignore[attr-defined]
        row: dict[str, Any] = {
            "step": step,
            "arm": spec.name,
            "elements": m,
            "loss": loss,
            "underflow": underflow[i],
            **err[i].row(),
            **cmp[i].row(),
        }
        a.hist += cmp[i].hist
        if row["diff_frac"] > 0 and a.first_div is None:
            a.first_div = step
        if training:
            g = ys[i].astype(np.float64) * (n if spec.average != "none" else 1)
            a.params = source.update(a.params, g, a.state)  # type: ignore[attr-defined]
        rows.append(row)
    for a, row in zip(arms, rows[-len(arms) :], strict=True):
        if training:
            assert a.params is not None
            assert ref.params is not None
            pa, pr = a.params.astype(np.float64), ref.params.astype(np.float64)
            nr = float(np.linalg.norm(pr))
            row["param_dist"] = float(np.linalg.norm(pa - pr)) / nr if nr > 0 else float("nan")
            row["param_diff_frac"] = float(np.mean(a.params.view(np.uint32) != ref.params.view(np.uint32)))
            if row["param_diff_frac"] > 0 and a.first_param_div is None:
                a.first_param_div = step
        else:
            row["param_dist"] = row["param_diff_frac"] = float("nan")


def _open_dir(d: Path, cfg: Config, *, resume: bool) -> tuple[list[dict[str, Any]], int]:
    summary = d / "summary.json"
    if d.exists() and not d.is_dir():
        raise InvalidArgument(f"{d} exists and is not a directory")
    if d.is_dir() and any(d.iterdir()) and not summary.is_file():
        raise InvalidArgument(f"{d} is not empty and not a fpreduce run directory; choose another --out")
    if resume:
        if not summary.is_file():
            raise InvalidArgument(f"nothing to resume in {d}: no summary.json")
        old = (d / "config.toml").read_text()
        if old != to_toml(cfg):
            raise InvalidArgument(f"{d}/config.toml differs from this config; resume with the same config")
        rows = read_rows(d / "metrics.csv")
        k = len(cfg.arms)
        steps = len(rows) // k
        return rows[: steps * k], steps
    if summary.is_file() and not json.loads(summary.read_text()).get("complete"):
        raise InvalidArgument(f"{d} holds an incomplete run: continue it with --resume or choose another --out")
    try:
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "config.toml", to_toml(cfg))
    except OSError as err:
        raise InvalidArgument(f"cannot write to {d}: {err.strerror}") from None
    for stale in ("metrics.csv", "state.npz", "report.pdf"):
        (d / stale).unlink(missing_ok=True)
    return [], 0


def _init_arms(cfg: Config, source: Source, d: Path, start: int, training: bool) -> list[_Arm]:
    if not training:
        return [_Arm(a, None, {}) for a in cfg.arms]
    if start > 0:
        with np.load(d / "state.npz", allow_pickle=False) as z:
            return [
                _Arm(
                    a,
                    z[f"params/{a.name}"].copy(),
                    {k.split("/")[2]: z[k].copy() for k in z.files if k.startswith(f"state/{a.name}/")},
                )
                for a in cfg.arms
            ]
    p0 = source.init_params()  # type: ignore[attr-defined]
    return [_Arm(a, p0.copy(), source.init_state()) for a in cfg.arms]  # type: ignore[attr-defined]


def _restore(a: _Arm, rows: list[dict[str, Any]], old: dict[str, Any]) -> None:
    """Divergence steps and ulp histogram of the steps already done (resume)."""
    for r in rows:
        if r["arm"] != a.spec.name:
            continue
        if r["diff_frac"] > 0 and a.first_div is None:
            a.first_div = r["step"]
        if r["param_diff_frac"] > 0 and a.first_param_div is None:
            a.first_param_div = r["step"]
    for s in old.get("arms", []):
        if s["name"] == a.spec.name and rows:
            a.hist = np.array(s["ulp_hist"]["counts"], dtype=np.int64)


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
    try:
        atomic_write(d / "metrics.csv", rows_to_csv(rows))
        if training:
            import io

            buf = io.BytesIO()
            arrays = {f"params/{a.spec.name}": a.params for a in arms}
            arrays.update({f"state/{a.spec.name}/{k}": v for a in arms for k, v in a.state.items()})
            np.savez(buf, **arrays)  # type: ignore[arg-type]
            atomic_write(d / "state.npz", buf.getvalue())
        _write_summary(d, cfg, rows, arms, steps_done, complete=False, times=times, repro={}, extra=extra)
    except OSError as err:
        raise InvalidArgument(f"cannot write to {d}: {err.strerror}") from None


def _write_summary(
    d: Path,
    cfg: Config,
    rows: list[dict[str, Any]],
    arms: list[_Arm],
    steps_done: int,
    *,
    complete: bool,
    times: tuple[float, dict[str, float]],
    repro: dict[str, bool | None],
    extra: SummaryExtra | None = None,
) -> None:
    cols = columns(rows)
    out_arms = []
    for a in arms:
        c = cols.get(a.spec.name, {})

        def stat(name: str, fn: Callable[[np.ndarray], Any], c: dict[str, np.ndarray] = c) -> Any:
            v = c.get(name)
            if v is None or v.size == 0 or np.all(np.isnan(v)):
                return None
            return float(fn(v[~np.isnan(v)]))

        out_arms.append(
            {
                "name": a.spec.name,
                "order": a.spec.order,
                "input": a.spec.input,
                "accumulate": a.spec.accumulate,
                "output": a.spec.out_format,
                "rounding": a.spec.rounding,
                "algorithm": a.spec.algorithm,
                "average": a.spec.average,
                "reproducible": repro.get(a.spec.name),
                "first_divergence_step": a.first_div,
                "first_param_divergence_step": a.first_param_div,
                "mean_diff_frac": stat("diff_frac", np.mean),
                "median_diff_frac": stat("diff_frac", np.median),
                "max_ulp": stat("ulp_max", np.max),
                "mean_err_rel": stat("err_mean_rel", np.mean),
                "max_err_rel": stat("err_max_rel", np.max),
                "mean_frac_correct": stat("frac_correct", np.mean),
                "final_loss": stat("loss", lambda v: v[-1]),
                "final_param_dist": stat("param_dist", lambda v: v[-1]),
                "ulp_hist": {"edges": ULP_EDGES, "counts": [int(x) for x in a.hist]},
            }
        )
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
        "arms": out_arms,
    }
    if extra is not None:
        summary.update(extra())
    atomic_write(d / "summary.json", json.dumps(summary, indent=2) + "\n")

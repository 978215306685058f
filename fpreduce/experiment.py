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
from fpreduce._errors import InvalidArgument
from fpreduce._version import __version__
from fpreduce.config import ArmSpec, Config, load_config, to_toml
from fpreduce.engine import reduce
from fpreduce.exact import exact_sum
from fpreduce.formats import get_format
from fpreduce.metrics import bits_equal
from fpreduce.results import Results, atomic_write, columns, load_run, read_rows, rows_to_csv
from fpreduce.rounding import _quantum_bits, round_to
from fpreduce.sources import Source, open_source

__all__ = ["plan_for", "run_experiment", "shuffle_permutation"]

ULP_EDGES = [0, 1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025, 4097, 65537, 1 << 20]
Progress = Callable[[int, int, float], None]
#: ``on_step(step, arm, y)``: called with every arm's result, right after its reduction (hook, e.g. a real backend)
OnStep = Callable[[int, ArmSpec, np.ndarray], None]
#: returns extra top-level entries merged into summary.json at every write (hook, e.g. ``{"backend": "mpi"}``)
SummaryExtra = Callable[[], dict[str, Any]]


def _rng(cfg: Config, step: int, order: str, salt: int) -> np.random.Generator:
    return np.random.default_rng([cfg.experiment.seed, step, zlib.crc32(order.encode()), salt])


def _random_tree(n: int, rng: np.random.Generator) -> plans.Plan:
    nodes: list[plans.Tree] = [int(i) for i in rng.permutation(n)]
    while len(nodes) > 1:
        i = int(rng.integers(0, len(nodes) - 1))
        nodes[i : i + 2] = [(nodes[i], nodes[i + 1])]
    return plans.Plan("random_tree", n, nodes[0])


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
        jitter = {"exponential": lambda: rng.exponential(a.scale, n),
                  "normal": lambda: rng.normal(0.0, a.scale, n),
                  "lognormal": lambda: rng.lognormal(0.0, a.scale, n)}[a.jitter]()
        t = a.base + arrival_means(cfg) + jitter
        return plans.sequential(n, np.argsort(t, kind="stable"))
    if policy == "atomic":
        return plans.parse("atomic", n, seed=int(rng.integers(0, 2**31)))
    return _random_tree(n, rng)


def shuffle_permutation(cfg: Config, arm: ArmSpec, step: int, *, salt: int = 0) -> np.ndarray:
    """The permutation a ``shuffle:<plan>`` arm relabels its plan with at ``step`` (see :func:`plan_for`)."""
    return _rng(cfg, step, arm.order, salt).permutation(cfg.experiment.workers)


def _error_metrics(y: np.ndarray, ex: Any, arm: ArmSpec, n: int) -> dict[str, float]:
    out_fmt = get_format(arm.out_format)
    hi, lo = np.asarray(ex.hi, dtype=np.float64), np.asarray(ex.lo, dtype=np.float64)
    if arm.average != "none":
        hi, lo = hi / n, lo / n  # the exact mean, to float64 accuracy (exact for N a power of 2)
    y64 = y.astype(np.float64)
    ok = np.isfinite(y64) & np.isfinite(hi) & (hi != 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        err = np.abs((y64 - hi) - lo)
        rel = err[ok] / np.abs(hi[ok])
        ulps = err[ok] / _quantum_bits(hi[ok], out_fmt).view(np.float64)  # ulp of |s| in the format
    if arm.average != "none":  # the mean hi/N + lo/N (exact for N a power of two)
        ex = copy.copy(ex)
        ex.hi, ex.lo = hi, lo
    cr = ex.round(arm.out_format).astype(np.float64)
    same = (y64 == cr) | (np.isnan(y64) & np.isnan(cr))
    return {
        "nonfinite": int(np.count_nonzero(~np.isfinite(y64))),
        "err_max_rel": float(rel.max()) if rel.size else float("nan"),
        "err_mean_rel": float(rel.mean()) if rel.size else float("nan"),
        "err_median_rel": float(np.median(rel)) if rel.size else float("nan"),
        "err_max_ulp": float(ulps.max()) if ulps.size else float("nan"),
        "frac_correct": float(np.mean(same)),
    }


def _wider(a: str, b: str) -> str:
    fa, fb = get_format(a), get_format(b)
    return a if (fa.precision, fa.emax) >= (fb.precision, fb.emax) else b


def _compare(y: np.ndarray, yref: np.ndarray, fmt: str) -> tuple[dict[str, float], np.ndarray]:
    """Bits that differ, and the distance in ulps of the larger magnitude (in ``fmt``).

    ``|y - y_ref| / ulp(max(|y|, |y_ref|))``: the step count between two values of one
    binade, and a fair size for differences across binades or zero (the ordered-bit
    count between +tiny and -tiny would be the number of floats between them).
    NaN or Inf on one side only counts as the largest distance.
    """
    f = get_format(fmt)
    eq = bits_equal(y, yref, fmt)
    a, b = y.astype(np.float64), yref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        big = np.maximum(np.abs(a), np.abs(b))
        d = np.abs(a - b) / _quantum_bits(np.where(np.isfinite(big), big, 0.0), f).view(np.float64)
        d = np.where(eq | ((a == b) & np.isfinite(a)), 0.0, d)
        d = np.where(np.isfinite(d), d, float(ULP_EDGES[-1]))
        den = float(np.sqrt(np.sum(b * b)))
        rel_l2 = float(np.sqrt(np.sum((a - b) ** 2))) / den if den > 0 else float("nan")
    return ({"diff_frac": float(np.mean(~eq)), "ulp_max": float(d.max()), "ulp_mean": float(d.mean()),
             "rel_l2": rel_l2}, d)


class _Arm:
    """One arm's mutable state during a run."""

    def __init__(self, spec: ArmSpec, params: np.ndarray | None, state: dict[str, np.ndarray]) -> None:
        self.spec = spec
        self.params = params
        self.state = state
        self.first_div: int | None = None
        self.first_param_div: int | None = None
        self.hist = np.zeros(len(ULP_EDGES), dtype=np.int64)
        self.check_inputs: dict[int, np.ndarray] = {}
        self.check_outputs: dict[int, np.ndarray] = {}


def _reduce(Xin: np.ndarray, plan: Any, arm: ArmSpec, seed: int) -> np.ndarray:
    return reduce(Xin, plan, input=arm.input, accumulate=arm.accumulate, rounding=arm.rounding,
                  seed=seed, algorithm=arm.algorithm, output=arm.output or None, average=arm.average)


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
    engine_time = source_time = 0.0
    ref_name = cfg.arms[0].name
    for step in range(start, e.steps):
        t1 = time.perf_counter()
        shared = None if training else source.gradients(step)
        source_time += time.perf_counter() - t1
        exact_cache: dict[tuple[str, int], Any] = {}
        ys: dict[str, np.ndarray] = {}
        for i, a in enumerate(arms):
            spec = a.spec
            t1 = time.perf_counter()
            X = shared if shared is not None else source.gradients(step, a.params)
            source_time += time.perf_counter() - t1
            loss = source.loss(step, a.params) if training else float("nan")  # type: ignore[attr-defined]
            key = (spec.input, id(X))
            if key not in exact_cache:  # arms sharing inputs share their rounding and exact sum
                Xr = round_to(X, spec.input)
                exact_cache[key] = (Xr, exact_sum(Xr), int(np.count_nonzero((X != 0) & (Xr == 0))))
            Xin, ex, underflow = exact_cache[key]
            plan = plan_for(cfg, spec, step)
            t1 = time.perf_counter()
            y = _reduce(Xin, plan, spec, seed=e.seed * 1_000_003 + step * 131 + i)
            engine_time += time.perf_counter() - t1
            ys[spec.name] = y
            if on_step is not None:
                on_step(step, spec, y)
            if step < e.check_steps:
                a.check_inputs[step], a.check_outputs[step] = Xin, y
            row: dict[str, Any] = {"step": step, "arm": spec.name, "elements": int(y.size), "loss": loss,
                                   "underflow": underflow}
            row.update(_error_metrics(y, ex, spec, n))
            if training:
                g = y.astype(np.float64) * (n if spec.average != "none" else 1)
                a.params = source.update(a.params, g, a.state)  # type: ignore[attr-defined]
            rows.append(row)
        ref = arms[0]
        for a, row in zip(arms, rows[-len(arms):], strict=True):
            fmt = _wider(a.spec.out_format, ref.spec.out_format)
            cmp, dist = _compare(ys[a.spec.name], ys[ref_name], fmt)
            row.update(cmp)
            bins = np.searchsorted(ULP_EDGES, np.ceil(dist), side="right") - 1
            a.hist += np.bincount(bins, minlength=len(ULP_EDGES))
            if cmp["diff_frac"] > 0 and a.first_div is None:
                a.first_div = step
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
        times = (time.perf_counter() - t0, engine_time, source_time)
        _checkpoint(d, cfg, rows, arms, step + 1, training, times, summary_extra)
        if progress is not None:
            done = step + 1 - start
            eta = (time.perf_counter() - t0) / done * (e.steps - step - 1)
            progress(step + 1, e.steps, eta)
    repro = {a.spec.name: _reproducible(cfg, a) for a in arms}
    _write_summary(d, cfg, rows, arms, e.steps, complete=True,
                   times=(time.perf_counter() - t0, engine_time, source_time), repro=repro, extra=summary_extra)
    return load_run(d)


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
            return [_Arm(a, z[f"params/{a.name}"].copy(),
                         {k.split("/")[2]: z[k].copy() for k in z.files if k.startswith(f"state/{a.name}/")})
                    for a in cfg.arms]
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


def _reproducible(cfg: Config, a: _Arm) -> bool | None:
    """Re-run the first steps with the order policy re-seeded (another run of the same job)."""
    if not a.check_inputs:
        return None
    for step, Xin in a.check_inputs.items():
        y = _reduce(Xin, plan_for(cfg, a.spec, step, salt=1), a.spec, seed=cfg.experiment.seed + 7)
        if not np.array_equal(y.view(np.uint8), a.check_outputs[step].view(np.uint8)):
            return False
    return True


def _checkpoint(d: Path, cfg: Config, rows: list[dict[str, Any]], arms: list[_Arm], steps_done: int,
                training: bool, times: tuple[float, float, float], extra: SummaryExtra | None = None) -> None:
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


def _write_summary(d: Path, cfg: Config, rows: list[dict[str, Any]], arms: list[_Arm], steps_done: int, *,
                   complete: bool, times: tuple[float, float, float], repro: dict[str, bool | None],
                   extra: SummaryExtra | None = None) -> None:
    cols = columns(rows)
    out_arms = []
    for a in arms:
        c = cols.get(a.spec.name, {})

        def stat(name: str, fn: Callable[[np.ndarray], Any], c: dict[str, np.ndarray] = c) -> Any:
            v = c.get(name)
            if v is None or v.size == 0 or np.all(np.isnan(v)):
                return None
            return float(fn(v[~np.isnan(v)]))

        out_arms.append({
            "name": a.spec.name, "order": a.spec.order, "input": a.spec.input,
            "accumulate": a.spec.accumulate, "output": a.spec.out_format, "rounding": a.spec.rounding,
            "algorithm": a.spec.algorithm, "average": a.spec.average,
            "reproducible": repro.get(a.spec.name),
            "first_divergence_step": a.first_div, "first_param_divergence_step": a.first_param_div,
            "mean_diff_frac": stat("diff_frac", np.mean), "median_diff_frac": stat("diff_frac", np.median),
            "max_ulp": stat("ulp_max", np.max), "mean_err_rel": stat("err_mean_rel", np.mean),
            "max_err_rel": stat("err_max_rel", np.max), "mean_frac_correct": stat("frac_correct", np.mean),
            "final_loss": stat("loss", lambda v: v[-1]), "final_param_dist": stat("param_dist", lambda v: v[-1]),
            "ulp_hist": {"edges": ULP_EDGES, "counts": [int(x) for x in a.hist]},
        })
    e = cfg.experiment
    summary = {
        "format": 1, "name": e.name, "complete": complete, "steps": e.steps, "steps_done": steps_done,
        "workers": e.workers, "elements": int(rows[-1]["elements"]) if rows else None,
        "source": cfg.source.kind, "seed": e.seed, "reference": cfg.arms[0].name,
        "wall_time_s": round(times[0], 3), "engine_time_s": round(times[1], 3),
        "source_time_s": round(times[2], 3),
        "versions": {"fpreduce": __version__, "numpy": np.__version__, "python": platform.python_version()},
        "arms": out_arms,
    }
    if extra is not None:
        summary.update(extra())
    atomic_write(d / "summary.json", json.dumps(summary, indent=2) + "\n")

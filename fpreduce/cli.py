"""The ``fpreduce`` command: parses arguments, calls the library, prints.

Bad input (unknown names, unreadable files, bad values) prints one line
``fpreduce: error: ...`` and exits with status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fpreduce._version import __version__
from fpreduce.base.errors import FpreduceWarning, InvalidArgument

if TYPE_CHECKING:
    from fpreduce.run.config import Config
    from fpreduce.run.rundir import Results


def _progress(done: int, total: int, eta: float) -> None:
    if done == 1 and eta > 60:
        sys.stderr.write(
            f"fpreduce: estimated time {eta / 60:.1f} min for {total} steps (Ctrl-C stops; --resume continues)\n"
        )
    width = 30
    fill = int(width * done / total)
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] step {done}/{total}  ETA {eta:5.1f} s")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _artifacts(run_dir: Path) -> list[Path]:
    """Figures and the PDF report of a finished (or interrupted) run."""
    from fpreduce.report import plots, report

    files = [p for p in plots.plot_run(run_dir) if p.suffix == ".png"]
    files.append(report.write_report(run_dir))
    return files


def _summary_table(results: Results) -> str:
    from fpreduce.report.tables import summary_table

    return summary_table(results)


def _run_config(args: argparse.Namespace) -> Config:
    """The config of ``fpreduce run``: CONFIG (or the embedded default) with --set and --steps.

    ``--resume`` without CONFIG continues from the run's own config.toml (every override
    is stored in it): ``fpreduce run --out RUN --resume`` is the whole command.
    """
    from fpreduce.run.config import default_config, load_config, with_steps
    from fpreduce.run.rundir import CONFIG_TOML, inspect_run_dir

    if args.resume and args.force:
        raise InvalidArgument("--resume continues the run in --out and --force replaces it: give one of them")
    path = args.config
    if args.resume and path is None:
        d = Path(args.out) if args.out else Path("runs") / default_config().experiment.name
        path = d / CONFIG_TOML
        if not path.is_file():
            inspect_run_dir(d)  # a foreign directory says so
            raise InvalidArgument(f"nothing to resume in {d}: no {CONFIG_TOML}" + ("" if args.out else " (give --out)"))
    cfg = load_config(path, args.set or [])
    if args.steps is not None:
        if args.steps < 1:
            raise InvalidArgument("--steps must be >= 1")
        cfg = with_steps(cfg, args.steps)
    return cfg


def _cmd_run(args: argparse.Namespace) -> int:
    from fpreduce.run.rundir import SUMMARY_JSON, lock
    from fpreduce.run.runner import run_experiment

    cfg = _run_config(args)
    for w in cfg.warnings():
        print(f"fpreduce: warning: {w}", file=sys.stderr)
    runner, root = run_experiment, True
    if args.backend == "mpi":  # one rank of `mpirun -np N python -m fpreduce.cli run ... --backend mpi`
        from fpreduce.backends.mpi_run import MpiRunner, describe, require_real

        mr = MpiRunner(cfg, algorithm=args.mpi_algorithm)
        runner, root = mr.run, mr.root  # type: ignore[assignment]
        modes = list(mr.modes.values())
        if root:  # say, per arm, whether the real library runs it
            for line in describe(modes, mr.algorithm):
                print(f"fpreduce: --backend mpi: {line}", file=sys.stderr)
        require_real(modes, allow_emulated=args.allow_emulated)  # on every rank alike
    e = cfg.experiment
    out = Path(args.out) if args.out else Path("runs") / e.name
    if root:
        print(
            f"fpreduce {__version__}: experiment {e.name!r}: {len(cfg.arms)} arms, {e.workers} workers, "
            f"{e.steps} steps, source {cfg.source.kind} -> {out}"
        )
    try:
        res = runner(
            cfg, out, resume=args.resume, force=args.force, progress=None if args.quiet or not root else _progress
        )
    except KeyboardInterrupt:
        if not (out / SUMMARY_JSON).is_file():
            print("\nfpreduce: interrupted before the first step", file=sys.stderr)
            return 130
        again = f"`fpreduce run --out {shlex.quote(str(out))} --resume`"
        if args.backend == "mpi":
            again = f"the same mpirun command, with `run --out {shlex.quote(str(out))} --resume --backend mpi`"
        print(
            f"\nfpreduce: interrupted; the partial run in {out} is readable and marked incomplete: "
            f"continue it with {again}",
            file=sys.stderr,
        )
        return 130
    if res is None:  # an MPI rank other than 0: rank 0 writes the run
        return 0
    print(_summary_table(res))
    with lock(out, shared=True):  # no other run replaces it while its figures and report are drawn
        files = [] if args.no_report else _artifacts(out)
    print(f"wrote {out}/config.toml, metrics.csv, summary.json" + "".join(f", {p.relative_to(out)}" for p in files))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from fpreduce.report import plots
    from fpreduce.run.rundir import is_sweep_dir, load_run, lock

    d = Path(args.run)
    with lock(d, shared=True):  # not while a run writes there
        if is_sweep_dir(d):
            files = plots.plot_sweep(d)
        else:
            load_run(d)  # a clear error for a missing or foreign directory
            files = plots.plot_run(d)
    for p in files:
        print(p)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fpreduce.report import plots, report
    from fpreduce.run.rundir import lock
    from fpreduce.run.sweep import load_sweep_config, run_sweep, sweep_dir

    base, points = load_sweep_config(args.config)
    if args.jobs < 1:
        raise InvalidArgument("--jobs must be >= 1")
    out = sweep_dir(base, args.out)
    print(f"fpreduce sweep: {len(points)} points (A vs B each), {args.jobs} process(es) -> {out}")
    table = run_sweep(args.config, out, jobs=args.jobs, force=args.force)
    with lock(out, shared=True):
        files = [table, *plots.plot_sweep(out), report.write_sweep_report(out)]
    print("wrote " + ", ".join(str(p) for p in files))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from fpreduce.backends import BackendError, verify

    try:
        r = verify(args.backend, args.np, args.algorithm, args.dtype, args.elements, args.seed, timeout=args.timeout)
    except BackendError as e:
        print(f"fpreduce: error: {e}", file=sys.stderr)
        return 1
    print(r.summary())
    return 0 if r.ok else 1


def _cmd_report(args: argparse.Namespace) -> int:
    from fpreduce.report import report
    from fpreduce.run.rundir import REPORT_PDF, check_report_target, is_sweep_dir, lock

    d = Path(args.run)
    target = check_report_target(args.output if args.output is not None else d / REPORT_PDF)
    with lock(d, shared=True):  # not while a run writes there
        print(report.write_sweep_report(d, target) if is_sweep_dir(d) else report.write_report(d, target))
    return 0


def _load_values(spec: str) -> np.ndarray:
    if spec.endswith(".npy"):
        try:
            with open(spec, "rb") as fh:
                a = np.load(fh, allow_pickle=False)
                if not isinstance(a, np.ndarray):
                    a.close()
                    raise InvalidArgument(f"{spec}: not a .npy array (an .npz archive?)")
        except OSError as e:
            raise InvalidArgument(f"cannot read {spec}: {e.strerror or e}") from None
        except (ValueError, EOFError, zipfile.BadZipFile) as e:
            if isinstance(e, InvalidArgument):
                raise
            raise InvalidArgument(f"cannot read {spec}: {e} (pickled object arrays are refused)") from None
        if a.dtype.kind != "f" or a.ndim not in (1, 2) or 0 in a.shape:
            raise InvalidArgument(
                f"{spec}: need a non-empty float array of shape (N,) or (N, d), got {a.dtype} {a.shape}"
            )
        return a.astype(np.float64)
    try:
        return np.array([float(v) for v in spec.split(",")])
    except ValueError:
        raise InvalidArgument(f"values must be comma-separated numbers or a .npy file: {spec!r}") from None


def _split_top(text: str) -> list[str]:
    """Split a plan list on commas outside parentheses: ``sequential,((0,1),2)``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*out, cur.strip()] if p]


def _cmd_sum(args: argparse.Namespace) -> int:
    from fpreduce import plans
    from fpreduce.analysis.outcomes import order_outcomes
    from fpreduce.core.engine import reduce
    from fpreduce.core.exact import exact_sum
    from fpreduce.core.metrics import apriori_bound, backward_bounds, ulp_error
    from fpreduce.core.rounding import round_to

    x = _load_values(args.values)
    X = x if x.ndim == 2 else x[:, None]
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise InvalidArgument(f"value [{i}{'' if x.ndim == 1 else f', {j}'}] is {X[i, j]}: NaN/Inf are not allowed")
    Xi = round_to(X, args.input)
    ex = exact_sum(Xi)
    s = ex.to_float64()
    n, d = X.shape
    out_fmt = args.output or args.accumulate
    print(
        f"{n} values{'' if d == 1 else f' x {d} columns'}, {args.input} -> {args.accumulate}"
        + (f" -> {args.output}" if args.output else "")
        + f", {args.rounding}, algorithm {args.algorithm}"
    )
    if d == 1:
        print(
            f"exact sum of the {args.input} inputs: {float(s[0])!r} ({float(s[0]).hex()})"
            + ("" if ex.lo[0] == 0 else " (rounded to float64)")
        )
    for name in _split_top(args.plans):
        p = plans.parse(name, n, seed=args.seed)
        y = reduce(
            Xi,
            p,
            input=args.input,
            accumulate=args.accumulate,
            rounding=args.rounding,
            seed=args.seed,
            algorithm=args.algorithm,
            output=args.output,
        )
        ue = ulp_error(y, ex, out_fmt)
        bound = apriori_bound(Xi, p, args.accumulate)
        informative = backward_bounds(int(np.max(p.depths())), args.accumulate)["deterministic"] is not None
        if d == 1:
            print(
                f"{name:>14}: {float(y[0])!r:<24} {float(y[0]).hex():<24} error {float(ue[0]):6.2f} ulp   "
                + (f"bound {float(bound[0]):.3g}" if informative else "bound not informative (d u >= 1)")
            )
        else:
            cr = np.mean(y.astype(np.float64) == ex.round(out_fmt).astype(np.float64))
            print(f"{name:>14}: max error {float(np.nanmax(ue)):.2f} ulp, {100 * cr:.1f}% correctly rounded")
    if args.orders:
        if d != 1:
            raise InvalidArgument("--orders needs a single sum: N values, not an (N, d) array")
        oc = order_outcomes(
            X[:, 0],
            args.family,
            samples=args.orders,
            input=args.input,
            accumulate=args.accumulate,
            rounding=args.rounding,
            seed=args.seed,
            algorithm=args.algorithm,
            output=args.output,
        )
        print(oc.summary())
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from fpreduce.analysis.scaling import ScaleConfig, format_table, load_scale_config, rows_as_dicts, scaling
    from fpreduce.run import rundir

    cfg = load_scale_config(args.config) if args.config else ScaleConfig()
    rows = scaling(cfg.workers, cfg.plans, compute=cfg.compute, nbytes=cfg.nbytes, profile=cfg.profile)
    doc = {"name": cfg.name, "compute_s": cfg.compute, "nbytes": cfg.nbytes, "profile": asdict(cfg.profile)}
    doc["rows"] = rows_as_dicts(rows)
    print(json.dumps(doc) if args.json else format_table(rows))
    if not args.no_report:
        from fpreduce.report.scaling import write_scale_report

        out = Path(args.out) if args.out else Path("runs") / cfg.name
        files = [rundir.write_study(out, "scale", doc), *write_scale_report(out)]
        if not args.json:
            print("wrote " + ", ".join(str(f) for f in files if f.suffix != ".pdf" or f.name == "report.pdf"))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from fpreduce.backends.calibrate import PLANS, calibrate
    from fpreduce.run.rundir import atomic_write

    algorithms = tuple(a.strip() for a in args.algorithms.split(",")) if args.algorithms else tuple(PLANS)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else tuple(4**k for k in range(12))
    cal = calibrate(args.np, algorithms=algorithms, sizes=sizes, reps=args.reps)
    for f in cal.fits:
        print(
            f"{f.algorithm:<20} {len(f.nbytes)} sizes  {f.measured[0] * 1e6:9.1f} us .. {f.measured[-1] * 1e3:8.3f} ms"
            f"  prediction error {f.error:6.1%} (own fit {f.own_error:6.1%})"
        )
    text = cal.to_toml()
    if args.out:
        atomic_write(Path(args.out), text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


def _cmd_price(args: argparse.Namespace) -> int:
    import json

    from fpreduce.run.price import PriceConfig, load_price_config, price, save_price

    cfg = load_price_config(args.config) if args.config else PriceConfig()
    out = Path(args.out) if args.out else Path("runs") / cfg.spec.name
    doc = save_price(out, cfg, *price(cfg))
    from fpreduce.report.price import findings, table, write_price_report

    if args.json:
        print(json.dumps({"name": cfg.spec.name, "target_loss": doc["target_loss"], "rows": doc["rows"]}))
    else:
        print(table(doc["rows"]))
        print("\n".join(findings(doc["rows"], doc["target_loss"])))
    if not args.no_report:
        files = write_price_report(out)
        if not args.json:
            print(
                f"wrote {out / 'price.json'}, "
                + ", ".join(str(f) for f in files if f.suffix == ".png" or f.name == "report.pdf")
            )
    return 0


def _add_timing_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sc = sub.add_parser("scale", help="speed-up curves: compute split N ways + the all-reduce of each plan")
    sc.add_argument("config", nargs="?", default=None, help="TOML with [scale] and [cluster] (examples/scaling.toml)")
    sc.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    sc.add_argument("--out", default=None, help="directory for scale.json, figures and report.pdf (runs/<name>)")
    sc.add_argument("--no-report", action="store_true", help="print only; write no files")
    sc.set_defaults(func=_cmd_scale)
    pr = sub.add_parser("price", help="the price of determinism: sync vs arrival-order vs async training on one clock")
    pr.add_argument("config", nargs="?", default=None, help="TOML with [price], [source], [compute], [cluster]")
    pr.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    pr.add_argument("--out", default=None, help="directory for price.json, figures and report.pdf (runs/<name>)")
    pr.add_argument("--no-report", action="store_true", help="write price.json only: no figures, no PDF")
    pr.set_defaults(func=_cmd_price)
    ca = sub.add_parser("calibrate", help="time Open MPI's allreduce algorithms and fit alpha, beta, gamma")
    ca.add_argument("--backend", choices=("mpi",), default="mpi")
    ca.add_argument("--np", type=int, default=2, help="local ranks (default 2)")
    ca.add_argument("--algorithms", default=None, help="comma-separated: ring,recursive_doubling,rabenseifner,...")
    ca.add_argument("--sizes", default=None, help="comma-separated element counts (default 1, 4, ..., 4^11)")
    ca.add_argument("--reps", type=int, default=5, help="timed repetitions per size (median)")
    ca.add_argument("--out", default=None, help="write the [cluster] profile here (TOML)")
    ca.set_defaults(func=_cmd_calibrate)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fpreduce", description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="version", version=__version__)
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="run an experiment (default: the embedded A-vs-B config)")
    r.add_argument("config", nargs="?", default=None, help="TOML config (default: the embedded one)")
    r.add_argument("--out", default=None, help="run directory (default: runs/<experiment name>)")
    r.add_argument("--steps", type=int, default=None, help="override experiment.steps")
    r.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config key, e.g. experiment.workers=32 or arms.B.accumulate=fp32",
    )
    r.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out; its config.toml holds every setting, so "
        "`fpreduce run --out RUN --resume` is the whole command",
    )
    r.add_argument("--force", action="store_true", help="replace a run (complete or not) already in --out")
    r.add_argument("--no-report", action="store_true", help="skip figures and the PDF report")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument(
        "--backend",
        choices=("emulate", "mpi"),
        default="emulate",
        help="mpi: run under `mpirun -np N` (N = experiment.workers); real MPI_Allreduce for the arms "
        "Open MPI can do, RUN/real.csv compares its bits (docs/verification.md)",
    )
    r.add_argument(
        "--allow-emulated",
        action="store_true",
        help="with --backend mpi: run even when no arm can run on the real library (else an error)",
    )
    r.add_argument(
        "--mpi-algorithm",
        default=None,
        help="with --backend mpi: the allreduce forced for this launch: ring:ompi, rd, rabenseifner, "
        "linear (or an Open MPI name); default: the first real-capable arm's",
    )
    r.set_defaults(func=_cmd_run)
    pl = sub.add_parser("plot", help="regenerate a run's (or a sweep's) figures from its results")
    pl.add_argument("run", help="run or sweep directory")
    pl.set_defaults(func=_cmd_plot)
    sw = sub.add_parser("sweep", help="run A vs B over a grid of workers, plans and formats")
    sw.add_argument("config", help="TOML config with a [sweep] table (see examples/sweep-ring.toml)")
    sw.add_argument("--out", default=None, help="sweep directory (default: runs/<experiment.name>)")
    sw.add_argument("--force", action="store_true", help="replace a sweep already in --out")
    sw.add_argument("--jobs", type=int, default=1, help="worker processes")
    sw.set_defaults(func=_cmd_sweep)
    v = sub.add_parser("verify", help="run a real all-reduce (Open MPI or gloo) and compare its bits with the plan")
    v.add_argument("--backend", required=True, choices=("mpi", "gloo"))
    v.add_argument("--np", type=int, required=True, help="number of local processes (ranks)")
    v.add_argument(
        "--algorithm",
        default=None,
        help="ring (default), recursive_doubling, rabenseifner, segmented_ring, basic_linear, ...",
    )
    v.add_argument("--dtype", default="fp32", help="fp32 or fp64 (mpi); fp32, fp16, bf16, fp64 (gloo)")
    v.add_argument("--elements", type=int, default=1000)
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--timeout", type=float, default=120.0, help="seconds before a hung run is aborted")
    v.set_defaults(func=_cmd_verify)
    rp = sub.add_parser("report", help="write a run's (or a sweep's) PDF report")
    rp.add_argument("run", help="run or sweep directory")
    rp.add_argument(
        "-o", "--output", default=None, help="PDF path (default RUN/report.pdf); never overwrites a file but a report"
    )
    rp.set_defaults(func=_cmd_report)
    s = sub.add_parser("sum", help="sum N values along several plans against the exact sum")
    s.add_argument("values", help="comma-separated values or a .npy file of shape (N,) or (N, d)")
    s.add_argument("--input", default="fp32")
    s.add_argument("--accumulate", default="fp32")
    s.add_argument("--rounding", default="nearest_even")
    s.add_argument("--output", default=None, help="round the sum once to this format at the end")
    s.add_argument("--algorithm", default="plain", help="plain, kahan, neumaier, binned or exact")
    s.add_argument(
        "--plans",
        default="sequential,reverse,pairwise",
        help="comma-separated plans: sequential, pairwise, kary:4, ring:nccl, rd, atomic, ((0,1),2) ...",
    )
    s.add_argument("--orders", type=int, default=0, help="also sample K random orders of --family")
    s.add_argument("--family", default="sequential", help="plan family for --orders (or random_tree)")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_cmd_sum)
    _add_timing_commands(sub)
    return ap


def _warn(message: Warning | str, *_: object, **__: object) -> None:
    print(f"fpreduce: warning: {message}", file=sys.stderr)


def _os_error(e: OSError) -> str:
    what = e.strerror or str(e)
    return f"{what}: {e.filename}" if e.filename is not None else what


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd is None:
        args = ap.parse_args(["run", *(argv or [])])
    with warnings.catch_warnings():
        warnings.showwarning = _warn  # one line each, like the errors
        warnings.simplefilter("default", FpreduceWarning)  # shown, whatever filters the caller set
        try:
            return int(args.func(args))
        except InvalidArgument as e:
            print(f"fpreduce: error: {e}", file=sys.stderr)
        except BrokenPipeError:  # stdout closed early (`fpreduce ... | head`): the reader has what it wanted
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 0
        except OSError as e:
            print(f"fpreduce: error: {_os_error(e)}", file=sys.stderr)
        except UnicodeDecodeError as e:
            print(f"fpreduce: error: a file is not UTF-8 text ({e})", file=sys.stderr)
        except MemoryError:
            print("fpreduce: error: out of memory; lower source.elements or experiment.workers", file=sys.stderr)
        except KeyboardInterrupt:
            print("fpreduce: interrupted", file=sys.stderr)
            return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())

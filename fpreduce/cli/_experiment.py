"""The commands of a run directory: ``run``, ``sweep``, ``plot`` and ``report``."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fpreduce._version import __version__
from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.cli._progress import Bar

if TYPE_CHECKING:
    from fpreduce.run.config import Config
    from fpreduce.run.rundir import Results


def _progress_line(done: int, total: int, eta: float) -> None:
    _ESTIMATE(done, total)
    _BAR(done, total, eta)


class _Estimate:
    """Says once, also in a log, how long a long run will take, and how to stop and go on.

    Timed over steps 2 and 3: the first step pays for compiling the kernels, so an
    estimate from it alone is several times too long.
    """

    def __init__(self) -> None:
        self.start = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 1:
            self.start = now
        elif done == 3 and total > 3:
            eta = (now - self.start) / 2 * (total - 3)
            if eta > 60:
                sys.stderr.write(
                    f"fpreduce: about {eta / 60:.1f} min more for {total - 3} steps (Ctrl-C stops, --resume goes on)\n"
                )


_ESTIMATE = _Estimate()
_BAR = Bar("step")
_progress = _progress_line  # the runner's callback (tests replace it)


def _artifacts(run_dir: Path) -> list[Path]:
    """Figures and the PDF report of a finished (or interrupted) run."""
    from fpreduce.report import plots, report

    bar = Bar("file", desc="figures and report")
    bar(1, 3)
    files = [p for p in plots.plot_run(run_dir) if p.suffix == ".png"]
    bar(2, 3)
    files.append(report.write_report(run_dir))
    bar(3, 3)
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
    from fpreduce.run.rundir import CONFIG_TOML, inspect_run_dir, out_dir

    if args.resume and args.force:
        raise InvalidArgument("--resume continues the run in --out and --force replaces it: give one of them")
    path = args.config
    if args.resume and path is None:
        d = out_dir(args.out, default_config().experiment.name, "experiment.name")
        path = d / CONFIG_TOML
        if not path.is_file():
            inspect_run_dir(d)  # a foreign directory says so
            raise InvalidArgument(f"nothing to resume in {d}: no {CONFIG_TOML}" + ("" if args.out else " (give --out)"))
    if args.source is not None and args.resume:
        raise InvalidArgument("--resume takes the source from the run's config.toml: leave out --source")
    cfg = load_config(path, _overrides(args), source=args.source)
    if args.steps is not None:
        if args.steps < 1:
            raise InvalidArgument("--steps must be >= 1")
        cfg = with_steps(cfg, args.steps)
    if cfg.source.kind != "file" and not args.distributed and args.backend != "mpi":  # (those check their shares)
        from fpreduce.run.runner import check_run
        from fpreduce.run.schema import document

        where = " + ".join([*([str(path)] if path is not None else []), *(["--set"] if _overrides(args) else [])])
        with document(where or None):  # the memory the run needs, up front: one line naming the config and its keys
            check_run(cfg)
    return cfg


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set KEY=VALUE`` of run and sweep, and ``--seed N`` as ``--set experiment.seed=N``."""
    if args.seed is not None and args.seed < 0:
        raise InvalidArgument(f"--seed must be >= 0, got {args.seed}")
    return [*(args.set or []), *([] if args.seed is None else [f"experiment.seed={args.seed}"])]


def _cmd_run(args: argparse.Namespace) -> int:
    from fpreduce.run.rundir import SUMMARY_JSON, lock, out_dir
    from fpreduce.run.runner import run_experiment

    cfg = _run_config(args)
    for w in cfg.warnings():
        print(f"fpreduce: warning: {w}", file=sys.stderr)
    if args.distributed and args.backend == "mpi":
        raise InvalidArgument(
            "--distributed splits the elements over ranks, --backend mpi makes ranks workers: give one"
        )
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
    if args.distributed:  # one rank of `mpirun -np K python -m fpreduce.cli run ... --distributed`
        from fpreduce.backends.distributed import DistributedRun

        dr = DistributedRun(cfg)
        runner, root = dr.run, dr.root  # type: ignore[assignment]
    e = cfg.experiment
    out = out_dir(args.out, e.name, "experiment.name")
    if root and not args.json:
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
        if args.backend == "mpi" or args.distributed:
            flag = "--distributed" if args.distributed else "--backend mpi"
            again = f"the same mpirun command, with `run --out {shlex.quote(str(out))} --resume {flag}`"
        print(
            f"\nfpreduce: interrupted; the partial run in {out} is readable and marked incomplete: "
            f"continue it with {again}",
            file=sys.stderr,
        )
        return 130
    if res is None:  # an MPI rank other than 0: rank 0 writes the run
        return 0
    if not args.json:
        print(_summary_table(res))
    with lock(out, shared=True):  # no other run replaces it while its figures and report are drawn
        files = [] if args.no_report else _artifacts(out)
    written = [out / n for n in ("config.toml", "metrics.csv", "summary.json")] + files
    if args.json:
        print(jsonfile.dumps({"run": str(out), "summary": res.summary, "files": [str(p) for p in written]}))
    else:
        print(f"wrote {out}/config.toml, metrics.csv, summary.json" + "".join(f", {p.relative_to(out)}" for p in files))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from fpreduce.report import plots
    from fpreduce.run.rundir import STUDIES, drawn_in, load_run, lock, read_replay

    d = Path(args.run)
    with lock(d, shared=True):  # not while a run writes there
        kind = drawn_in(d)  # (a directory holding files of another kind or no fpreduce command's: refused)
        if kind in STUDIES:
            raise InvalidArgument(
                f"{d} is a {kind} study: its figures are redrawn with its report, fpreduce report {d}"
            )
        if kind == "sweep":
            files = plots.plot_sweep(d)
        else:
            load_run(d)  # a clear error for a missing or foreign directory
            read_replay(d)  # (checked before a figure is drawn)
            files = plots.plot_run(d)
    for p in files:
        print(p)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fpreduce.report import plots, report
    from fpreduce.run.rundir import lock
    from fpreduce.run.sweep import load_sweep_config, run_sweep, sweep_dir

    base, points = load_sweep_config(args.config, _overrides(args))
    if args.jobs < 1:
        raise InvalidArgument("--jobs must be >= 1")
    out = sweep_dir(base, args.out)
    executor = None
    if args.executor == "mpi":  # `mpirun -np K python -m mpi4py.futures -m fpreduce.cli sweep ... --executor mpi`
        from fpreduce.backends.distributed import mpi_pool

        executor = mpi_pool(args.jobs)
    where = "MPI workers" if executor else f"{args.jobs} process(es)"
    print(f"fpreduce sweep: {len(points)} points (A vs B each), {where} -> {out}", flush=True)

    bar = Bar("point", desc="sweep")

    def point_done(done: int, total: int, name: str, how: str, seconds: float) -> None:
        if not args.quiet:
            print(f"[{done}/{total}] {name}: {how} ({seconds:.1f} s)", file=sys.stderr, flush=True)
        bar(done, total)

    try:
        table = run_sweep(
            args.config,
            out,
            jobs=args.jobs,
            force=args.force,
            resume=args.resume,
            executor=executor,
            progress=point_done,
            overrides=_overrides(args),
        )
    finally:
        if executor is not None:
            executor.shutdown()
    with lock(out, shared=True):
        files = [table] if args.no_report else [table, *plots.plot_sweep(out), report.write_sweep_report(out)]
    print("wrote " + ", ".join(str(p) for p in files))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from fpreduce.report import report
    from fpreduce.run.rundir import REPORT_PDF, check_report_target, drawn_in, lock, read_replay

    d = Path(args.run)
    target = check_report_target(args.output if args.output is not None else d / REPORT_PDF)
    with lock(d, shared=True):  # not while a run writes there
        kind = drawn_in(d)  # (a directory holding files of another kind or no fpreduce command's: refused)
        if kind == "run":
            read_replay(d)  # (checked before a page is drawn: the replay's pages come last)
        if kind in ("scale", "price"):
            print(_study_report(d, kind, target))
        else:
            print(report.write_sweep_report(d, target) if kind == "sweep" else report.write_report(d, target))
    return 0


def _study_report(d: Path, kind: str, target: Path) -> Path:
    """Redraw a price or scale study's figures and report.pdf from its document (read through its schema)."""
    if target != d / "report.pdf":
        raise InvalidArgument(
            f"-o: a {kind} study's report is drawn in its directory ({d / 'report.pdf'}): leave -o out"
        )
    if kind == "scale":
        from fpreduce.report.scaling import write_scale_report

        files = write_scale_report(d)
    else:
        from fpreduce.report.price import write_price_report

        files = write_price_report(d)
    return next(f for f in files if f.name == "report.pdf")


_SEED = (
    "seed of the gradients, the orders and stochastic rounding (overrides experiment.seed; default: the "
    "config's, else 0)"
)


def _add_sweep(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``sweep``'s parser."""
    sw = sub.add_parser("sweep", help="run A vs B over a grid of workers, plans and formats")
    sw.add_argument("config", help="TOML config with a [sweep] table (see examples/sweep-ring.toml)")
    sw.add_argument("--out", default=None, help="sweep directory (default: runs/<experiment.name>)")
    sw.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config key as `run --set` does, e.g. experiment.steps=10 or source.elements=4096; "
        "sweep.KEY for the grid, e.g. sweep.workers=[2,4]",
    )
    sw.add_argument("--force", action="store_true", help="replace a sweep already in --out")
    sw.add_argument("--jobs", type=int, default=1, help="local worker processes running points in parallel (default 1)")
    sw.add_argument("--seed", type=int, default=None, help=_SEED)
    sw.add_argument(
        "--resume", action="store_true", help="continue the sweep in --out: points already done are not run again"
    )
    sw.add_argument(
        "--executor",
        choices=("local", "mpi"),
        default="local",
        help="mpi: run the points on MPI ranks: `mpirun -np K python -m mpi4py.futures -m fpreduce.cli sweep "
        "CONFIG --executor mpi` (docs/distributed.md)",
    )
    sw.add_argument(
        "-q", "--quiet", action="store_true", help="no line per finished point, no progress, no compile note"
    )
    sw.add_argument("--no-report", action="store_true", help="skip figures and the PDF report")
    sw.set_defaults(func=_cmd_sweep)


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``run``, ``plot``, ``sweep`` and ``report``."""
    r = sub.add_parser(
        "run",
        help="run an experiment: arms A (fixed order) vs B (order changes every step); results, figures, PDF",
        description="Run an experiment: every arm sums the same workers' gradients every step in its own "
        "order, format and rounding; the run directory gets metrics.csv, summary.json, figures and report.pdf. "
        "Without CONFIG: the embedded default (bf16, 16 workers, A vs B). `--source PATH` analyses gradients "
        "you recorded (see `fpreduce.torch.Recorder` or the file layout in docs/run-format.md).",
    )
    r.add_argument("config", nargs="?", default=None, help="TOML config (default: the embedded A-vs-B experiment)")
    r.add_argument(
        "--source",
        default=None,
        metavar="PATH",
        help="your own gradients: a .npy/.npz (steps, workers, elements) or a directory of per-step .npy "
        "(workers, elements); workers and steps are read from it, the arms are the default ones",
    )
    r.add_argument("--out", default=None, help="run directory (default: runs/<experiment name>)")
    r.add_argument("--steps", type=int, default=None, help="number of steps (overrides experiment.steps)")
    r.add_argument("--seed", type=int, default=None, help=_SEED)
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
    r.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (a bar on a terminal, else a line every ~15 s on stderr), no compile note",
    )
    r.add_argument(
        "--json", action="store_true", help="print one JSON object (run directory, summary, files) and nothing else"
    )
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
    r.add_argument(
        "--distributed",
        action="store_true",
        help="under `mpirun -np K`: each rank takes a range of the elements, rank 0 merges and writes the "
        "run (the same metrics.csv as one process; docs/distributed.md)",
    )
    r.set_defaults(func=_cmd_run)
    pl = sub.add_parser("plot", help="redraw a run's (or a sweep's) figures from its files, without re-running")
    pl.add_argument("run", help="run or sweep directory")
    pl.set_defaults(func=_cmd_plot)
    _add_sweep(sub)
    rp = sub.add_parser("report", help="write a run's (or a sweep's) PDF report")
    rp.add_argument("run", help="run or sweep directory")
    rp.add_argument(
        "-o",
        dest="output",
        default=None,
        metavar="FILE.pdf",
        help="PDF path (default RUN/report.pdf); never overwrites a file but a report",
    )
    rp.set_defaults(func=_cmd_report)

"""The timing commands: ``scale``, ``price`` and ``calibrate``."""

from __future__ import annotations

import argparse
import contextlib
import sys

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.texttable import table


def _int(text: str, option: str) -> int:
    """``text`` as an integer; a one-line error naming ``option`` otherwise."""
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(f"{option}: {text.strip()!r} is not an integer") from None


def _cmd_scale(args: argparse.Namespace) -> int:
    from dataclasses import asdict, replace

    from fpreduce.analysis.scaling import ScaleConfig, format_table, model_note, rows_as_dicts, scaling
    from fpreduce.run import rundir
    from fpreduce.run.scale import load_scale_config

    cfg = load_scale_config(args.config) if args.config else ScaleConfig()
    if args.bytes is not None:
        cfg = replace(cfg, nbytes=_sizes(args.bytes))
    out = rundir.out_dir(args.out, cfg.name, "scale.name")
    with contextlib.nullcontext() if args.print_only else rundir.claim(out, "scale", force=args.force):
        from fpreduce.cli._progress import Bar

        bar = Bar("point", desc="scale")
        rows = scaling(
            cfg.workers, cfg.plans, compute=cfg.compute, nbytes=cfg.nbytes, profile=cfg.profile, progress=bar
        )
        nbytes = list(cfg.nbytes) if isinstance(cfg.nbytes, tuple) else cfg.nbytes
        doc = {"name": cfg.name, "compute_s": cfg.compute, "nbytes": nbytes, "profile": asdict(cfg.profile)}
        doc["rows"] = rows_as_dicts(rows)
        files = []
        if not args.print_only:
            files.append(rundir.write_study(out, "scale", doc))
        if not (args.print_only or args.no_report):
            from fpreduce.report.scaling import write_scale_report

            files += write_scale_report(out)
        print(jsonfile.dumps(doc) if args.json else format_table(rows) + "\n" + model_note(rows))
        if files and not args.json:
            print("wrote " + ", ".join(str(f) for f in files if f.suffix != ".pdf" or f.name == "report.pdf"))
    return 0


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def _sizes(text: str) -> tuple[float, ...]:
    """``--bytes 1M,16M,256M`` (nccl-tests' sizes: K, M, G are powers of 2**10; plain numbers are bytes)."""
    out = []
    for part in text.split(","):
        t = part.strip().upper().removesuffix("B")
        unit = t[-1:] if t[-1:] in _UNITS else ""
        try:
            v = float(t[: len(t) - len(unit)]) * _UNITS[unit]
        except ValueError:
            raise InvalidArgument(f"--bytes: {part.strip()!r} is not a size such as 1M, 256K, 1G or 4096") from None
        if not 0 <= v < float("inf"):
            raise InvalidArgument(f"--bytes: {part.strip()!r} must be a finite size >= 0")
        out.append(v)
    return tuple(out)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from fpreduce.backends.calibrate import PLANS, calibrate, is_calibration, misses
    from fpreduce.run.rundir import atomic_write, file_target

    algorithms = tuple(a.strip() for a in args.algorithms.split(",")) if args.algorithms else tuple(PLANS)
    sizes = tuple(_int(s, "--sizes") for s in args.sizes.split(",")) if args.sizes else tuple(4**k for k in range(12))
    if args.reps < 1:
        raise InvalidArgument(f"--reps must be >= 1, got {args.reps}")
    if args.out:  # before the minutes of timing
        file_target(args.out, "calibration", "-o", is_calibration, "cluster.toml")
    from fpreduce.cli._progress import Bar

    bar = Bar("timing", desc="calibrate")
    cal = calibrate(args.np, algorithms=algorithms, sizes=sizes, reps=args.reps, progress=bar)
    head = ["algorithm", "sizes", "smallest us", "largest ms", "prediction error", "own fit"]
    body = [
        [f.algorithm, len(f.nbytes), f"{f.measured[0] * 1e6:.1f}", f"{f.measured[-1] * 1e3:.3f}"]
        + [f"{f.error:.1%}", f"{f.own_error:.1%}"]
        for f in cal.fits
    ]
    print(table(head, body, align="l"))
    for w in misses(cal):
        print(f"fpreduce: warning: {w}", file=sys.stderr)
    text = cal.to_toml()
    if args.out:
        atomic_write(file_target(args.out, "calibration", "-o", is_calibration, "cluster.toml"), text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


def _cmd_price(args: argparse.Namespace) -> int:

    from fpreduce.run import rundir
    from fpreduce.run.price import PriceConfig, load_price_config, price, save_price

    cfg = load_price_config(args.config) if args.config else PriceConfig()
    if args.seed is not None:  # (checked as price.seed is)
        from dataclasses import replace

        if args.seed < 0:
            raise InvalidArgument(f"--seed must be >= 0, got {args.seed}")
        cfg = replace(cfg, spec=replace(cfg.spec, seed=args.seed))
    out = rundir.out_dir(args.out, cfg.spec.name, "price.name")
    with rundir.claim(out, "price", force=args.force):
        from fpreduce.cli._progress import Bar

        doc = save_price(out, cfg, *price(cfg, progress=Bar("gradient", desc="price")))
        from fpreduce.report.price import findings, table, write_price_report

        if args.json:
            print(jsonfile.dumps({"name": cfg.spec.name, "target_loss": doc["target_loss"], "rows": doc["rows"]}))
        else:
            print(table(doc["rows"]))
            print("\n".join(findings(doc["rows"], doc["target_loss"], given=cfg.spec.target_loss > 0)))
        if not args.no_report:
            files = write_price_report(out)
            if not args.json:
                print(
                    f"wrote {out / 'price.json'}, "
                    + ", ".join(str(f) for f in files if f.suffix == ".png" or f.name == "report.pdf")
                )
    return 0


_QUIET = "no progress (a bar on a terminal, else a line every ~15 s on stderr), no compile note"


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``scale``, ``price`` and ``calibrate``."""
    sc = sub.add_parser("scale", help="speed-up curves: compute split N ways + the all-reduce of each plan")
    sc.add_argument("config", nargs="?", default=None, help="TOML with [scale] and [cluster] (examples/scaling.toml)")
    sc.add_argument("--json", action="store_true", help="print one JSON object (the table's rows) and nothing else")
    sc.add_argument("--out", default=None, help="directory for scale.json, figures and report.pdf (runs/<name>)")
    sc.add_argument(
        "--bytes",
        default=None,
        metavar="SIZES",
        help="message sizes as nccl-tests writes them, comma-separated: 1M,16M,256M (K, M, G: powers of 1024; "
        "else bytes); one curve per plan and size (overrides scale.bytes)",
    )
    sc.add_argument("--no-report", action="store_true", help="skip figures and the PDF report (scale.json is written)")
    sc.add_argument("--print-only", action="store_true", help="print the table; write no files at all")
    sc.add_argument("--force", action="store_true", help="replace a scale study already in --out")
    sc.add_argument("-q", "--quiet", action="store_true", help=_QUIET)
    sc.set_defaults(func=_cmd_scale)
    pr = sub.add_parser("price", help="the price of determinism: sync vs arrival-order vs async training on one clock")
    pr.add_argument("config", nargs="?", default=None, help="TOML with [price], [source], [compute], [cluster]")
    pr.add_argument("--json", action="store_true", help="print one JSON object (the table's rows) and nothing else")
    pr.add_argument("--out", default=None, help="directory for price.json, figures and report.pdf (runs/<name>)")
    pr.add_argument("--no-report", action="store_true", help="skip figures and the PDF report (price.json is written)")
    pr.add_argument("--force", action="store_true", help="replace a price study already in --out")
    pr.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the model, the data and the timing (overrides price.seed; default: the config's, else 0)",
    )
    pr.add_argument("-q", "--quiet", action="store_true", help=_QUIET)
    pr.set_defaults(func=_cmd_price)
    ca = sub.add_parser("calibrate", help="time Open MPI's allreduce algorithms and fit alpha, beta, gamma")
    ca.add_argument("--backend", choices=("mpi",), default="mpi", help="only mpi: Open MPI through mpirun")
    ca.add_argument("--np", type=int, default=2, help="local ranks (default 2)")
    ca.add_argument("--algorithms", default=None, help="comma-separated: ring,recursive_doubling,rabenseifner,...")
    ca.add_argument("--sizes", default=None, help="comma-separated element counts (default 1, 4, ..., 4^11)")
    ca.add_argument("--reps", type=int, default=5, help="timed repetitions per size (median)")
    ca.add_argument(
        "-o",
        dest="out",
        metavar="FILE.toml",
        default=None,
        help="write the [cluster] profile to this file (its directory must exist; replaces only an earlier "
        "calibration); one file, as report -o: --out names a directory in every command",
    )
    ca.add_argument("-q", "--quiet", action="store_true", help=_QUIET)
    ca.set_defaults(func=_cmd_calibrate)

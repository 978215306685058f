"""The ``fpreduce`` command: parses arguments, calls the library, prints.

Bad input (unknown names, unreadable files, bad values) prints one line
``fpreduce: error: ...`` and exits with status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fpreduce._errors import InvalidArgument
from fpreduce._version import __version__


def _cmd_run(args: argparse.Namespace) -> int:
    from fpreduce.demo import DemoConfig, run_demo

    cfg = DemoConfig(workers=args.workers, elements=args.elements, steps=args.steps,
                     input=args.input, accumulate=args.accumulate, plan=args.plan, seed=args.seed)
    if cfg.workers < 1 or cfg.elements < 1 or cfg.steps < 1:
        raise InvalidArgument("--workers, --elements and --steps must be positive")
    from fpreduce.formats import get_format
    from fpreduce.plans import parse

    parse(cfg.plan, cfg.workers)
    get_format(cfg.input)
    get_format(cfg.accumulate)
    out = Path(args.out)
    print(f"fpreduce {__version__}: A (plan {cfg.plan}, fixed ranks) vs B (ranks shuffled each step), "
          f"{cfg.workers} workers x {cfg.elements} elements, {cfg.steps} steps, "
          f"{cfg.input} -> {cfg.accumulate}")
    s = run_demo(cfg, out)
    print(f"steps where A and B differ bitwise: {s['steps_with_any_difference']}/{cfg.steps}")
    print(f"median fraction of elements differing per step: {s['median_frac_bits_differ']:.3f}")
    print(f"worst ulp distance between A and B: {s['worst_ulp_distance']}")
    print(f"wrote {out}/metrics.csv, {out}/summary.json, {out}/figures/ab.png, {out}/report.pdf")
    return 0


def _load_values(spec: str) -> np.ndarray:
    if spec.endswith(".npy"):
        try:
            a = np.load(spec, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"cannot read {spec}: {e}") from None
        if a.dtype.kind != "f" or a.ndim not in (1, 2):
            raise InvalidArgument(f"{spec}: need a float array of shape (N,) or (N, d), "
                                  f"got {a.dtype} {a.shape}")
        return a.astype(np.float64)
    try:
        return np.array([float(v) for v in spec.split(",")])
    except ValueError:
        raise InvalidArgument(f"values must be comma-separated numbers or a .npy file: {spec!r}") from None


def _cmd_sum(args: argparse.Namespace) -> int:
    from fpreduce import plans
    from fpreduce.engine import reduce
    from fpreduce.exact import exact_sum
    from fpreduce.rounding import round_to

    x = _load_values(args.values)
    X = x if x.ndim == 2 else x[:, None]
    if np.any(~np.isfinite(X)):
        raise InvalidArgument("values contain NaN or Inf")
    Xi = round_to(X, args.input)
    ex = exact_sum(Xi)
    s = ex.to_float64()
    print(f"exact sum (of the {args.input} inputs): {float(s[0])!r} = {float(s[0]).hex()}")
    for name in args.plans.split(","):
        p = plans.parse(name, X.shape[0])
        y = reduce(Xi, p, input=args.input, accumulate=args.accumulate, rounding=args.rounding)
        err = ex.error_of(y)
        print(f"{name:>12}: {float(y[0])!r:<24} error {float(err[0]):+.3e}  tree {p.draw()[:60]}")
    if args.orders:
        rng = np.random.default_rng(args.seed)
        res = [float(reduce(Xi, plans.sequential(X.shape[0], rng.permutation(X.shape[0])),
                            input=args.input, accumulate=args.accumulate,
                            rounding=args.rounding)[0]) for _ in range(args.orders)]
        vals, counts = np.unique(res, return_counts=True)
        print(f"{args.orders} random sequential orders gave {len(vals)} distinct results:")
        for v, c in zip(vals, counts, strict=True):
            print(f"  {float(v)!r:<24} x{c}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fpreduce", description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="version", version=__version__)
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="run the A-vs-B demo experiment and write a run directory")
    r.add_argument("--out", default="runs/default")
    r.add_argument("--workers", type=int, default=16)
    r.add_argument("--elements", type=int, default=4096)
    r.add_argument("--steps", type=int, default=20)
    r.add_argument("--input", default="bf16")
    r.add_argument("--accumulate", default="bf16")
    r.add_argument("--plan", default="sequential", help="sequential, pairwise, ring:nccl, ...")
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=_cmd_run)
    s = sub.add_parser("sum", help="sum N values along several plans against the exact sum")
    s.add_argument("values", help="comma-separated values or a .npy file of shape (N,) or (N, d)")
    s.add_argument("--input", default="fp32")
    s.add_argument("--accumulate", default="fp32")
    s.add_argument("--rounding", default="nearest_even")
    s.add_argument("--plans", default="sequential,reverse,pairwise")
    s.add_argument("--orders", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_cmd_sum)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd is None:
        args = ap.parse_args(["run", *(argv or [])])
    try:
        return int(args.func(args))
    except InvalidArgument as e:
        print(f"fpreduce: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"fpreduce: error: {e.strerror}: {e.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fpreduce: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The commands on values and libraries: ``sum`` and ``verify``."""

from __future__ import annotations

import argparse
import sys
import zipfile

import numpy as np

from fpreduce.base.errors import InvalidArgument


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


def _cmd_verify(args: argparse.Namespace) -> int:
    from fpreduce.backends import BackendError, verify

    try:
        r = verify(args.backend, args.np, args.algorithm, args.dtype, args.elements, args.seed, timeout=args.timeout)
    except BackendError as e:
        print(f"fpreduce: error: {e}", file=sys.stderr)
        return 1
    print(r.summary())
    return 0 if r.ok else 1


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``sum`` and ``verify``."""
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

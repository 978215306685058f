"""The commands on values and libraries: ``sum`` and ``verify``."""

from __future__ import annotations

import argparse
import sys
import zipfile
from typing import Any

import numpy as np

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.texttable import table, width


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


#: bounded work: the most orders ``sum --orders`` samples, and orders x values it adds up
MAX_ORDERS, MAX_ORDER_VALUES = 10**6, 1 << 28


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


def _sum_options(args: argparse.Namespace, n: int, d: int) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Every option of ``sum`` checked (and its names made canonical) before anything is printed; the plans
    over ``n`` workers (``ompi:default``: chosen for ``d`` elements of the input format)."""
    from fpreduce import plans
    from fpreduce.base.errors import unknown_name
    from fpreduce.core.formats import format_name, get_format
    from fpreduce.core.options import ALGORITHMS
    from fpreduce.core.rounding import MODES

    opts: dict[str, Any] = {k: format_name(getattr(args, k)) for k in ("input", "accumulate")}
    opts["output"] = format_name(args.output) if args.output else None
    if args.rounding not in MODES:
        raise unknown_name("rounding mode", args.rounding, MODES)
    if args.algorithm not in ALGORITHMS:
        raise unknown_name("algorithm", args.algorithm, ALGORITHMS)
    opts.update(rounding=args.rounding, seed=args.seed, algorithm=args.algorithm)
    if args.orders < 0:
        raise InvalidArgument("--orders must be >= 0")
    if args.orders > MAX_ORDERS or args.orders * n > MAX_ORDER_VALUES:
        raise InvalidArgument(
            f"--orders {args.orders} x {n} values is too much work: at most {MAX_ORDERS} orders "
            f"and {MAX_ORDER_VALUES} order x value additions"
        )
    if args.seed < 0:
        raise InvalidArgument(f"--seed must be >= 0, got {args.seed}")
    item = get_format(opts["input"]).bits // 8
    return opts, [
        (name, plans.parse(name, n, seed=args.seed, elements=d, item_bytes=item)) for name in _split_top(args.plans)
    ]


def _cmd_sum(args: argparse.Namespace) -> int:
    from fpreduce.analysis.outcomes import order_outcomes
    from fpreduce.core.engine import explain, reduce
    from fpreduce.core.exact import exact_sum
    from fpreduce.core.metrics import apriori_bound, backward_bounds, ulp_error
    from fpreduce.core.rounding import round_to

    x = _load_values(args.values)
    X = x if x.ndim == 2 else x[:, None]
    n, d = X.shape
    opts, plan_list = _sum_options(args, n, d)
    if args.orders and d != 1:
        raise InvalidArgument("--orders needs a single sum: N values, not an (N, d) array")
    Xi = round_to(X, opts["input"])  # rounded to their format before any check
    overflow = _input_overflow(x, X, Xi, opts["input"])
    ex = exact_sum(Xi)
    s = ex.to_float64()
    out_fmt = opts["output"] or opts["accumulate"]
    doc: dict[str, Any] = {"values": n, "columns": d, **opts, "plans": []}
    if overflow is not None:
        doc["input_overflow"] = overflow
        if np.isnan(s).any():
            raise InvalidArgument(
                f"{overflow['text']}; the exact sum of the rounded {opts['input']} inputs is undefined (inf - inf): "
                "use a wider --input"
            )
    if d == 1:
        doc.update(exact=float(s[0]), exact_hex=float(s[0]).hex(), exact_is_rounded=bool(ex.lo[0] != 0))
    for name, p in plan_list:
        y = reduce(Xi, p, **opts)
        ue = ulp_error(y, ex, out_fmt)
        informative = backward_bounds(int(np.max(p.depths())), opts["accumulate"])["deterministic"] is not None
        bound = apriori_bound(Xi, p, opts["accumulate"]) if informative else None
        row: dict[str, Any] = {"plan": name}
        if args.explain:
            row["route"] = explain(Xi, p, **opts).to_dict()
        if d == 1:
            row.update(value=float(y[0]), hex=float(y[0]).hex(), error_ulp=float(ue[0]))
            row["abs_error_bound"] = None if bound is None else float(bound[0])
        else:
            cr = np.mean(y.astype(np.float64) == ex.round(out_fmt).astype(np.float64))
            row.update(max_error_ulp=float(np.nanmax(ue)), correctly_rounded=float(cr))
        doc["plans"].append(row)
    oc = None
    if args.orders:
        oc = order_outcomes(X[:, 0], args.family, samples=args.orders, **opts)
        doc["orders"] = {
            "family": args.family,
            "samples": args.orders,
            "distinct": [float(v) for v in oc.distinct],
            "counts": [int(c) for c in oc.counts],
        }
    if args.json:
        print(jsonfile.dumps(doc))
    else:
        print(_sum_text(doc))
        if oc is not None:
            print(oc.summary())
    return 0


def _input_overflow(x: np.ndarray, X: np.ndarray, Xi: np.ndarray, fmt: str) -> dict[str, Any] | None:
    """The inputs that overflow ``fmt`` when rounded to it (None if none); NaN/Inf given as values are refused."""
    from fpreduce.core.formats import get_format

    bad = ~np.isfinite(Xi)
    if not bad.any():
        return None
    given = bad & ~np.isfinite(X)
    at = np.argwhere(given if given.any() else bad)[0]
    i, j = int(at[0]), int(at[1])
    where = f"value [{i}{'' if x.ndim == 1 else f', {j}'}]"
    if given.any():
        raise InvalidArgument(f"{where} is {X[i, j]}: NaN/Inf are not allowed")
    top = get_format(fmt).max_finite
    count = int(bad.sum())
    text = (
        f"{count} input{'s' if count > 1 else ''} overflow{'' if count > 1 else 's'} {fmt} "
        f"(largest finite {top:.8g}): {where} = {X[i, j]:.17g} rounds to {Xi[i, j]}"
    )
    return {"format": fmt, "count": count, "first": [i, j] if x.ndim == 2 else i, "max_finite": top, "text": text}


def _sum_text(doc: dict[str, Any]) -> str:
    """The human-readable form of ``sum``'s result document."""
    from fpreduce.core.routes import render

    cols = "" if doc["columns"] == 1 else f" x {doc['columns']} columns"
    out = f" -> {doc['output']}" if doc["output"] else ""
    lines = [
        f"{doc['values']} values{cols}, {doc['input']} -> {doc['accumulate']}{out}, "
        f"{doc['rounding']}, algorithm {doc['algorithm']}"
    ]
    if "input_overflow" in doc:
        lines.append("overflow: " + doc["input_overflow"]["text"])
    if "exact" in doc:
        lines.append(
            f"exact sum of the {doc['input']} inputs: {doc['exact']!r} ({doc['exact_hex']})"
            + (" (rounded to float64)" if doc["exact_is_rounded"] else "")
        )
    body = []
    for r in doc["plans"]:
        if "value" in r:
            b = r["abs_error_bound"]
            bound = "not informative (d u >= 1)" if b is None else f"<= {b:.3g}"
            body.append([r["plan"], repr(r["value"]), r["hex"], f"{r['error_ulp']:.2f}", bound])
        else:
            body.append([r["plan"], f"{r['max_error_ulp']:.2f}", f"{100 * r['correctly_rounded']:.1f}%"])
    if "exact" in doc:
        head = ["plan", "value", "hex", "error ulp", "a-priori |error|"]
        lines.append(table(head, body, align="lllrl"))
    else:
        lines.append(table(["plan", "max error ulp", "correctly rounded"], body, align="lrr"))
    for r in doc["plans"]:
        if "route" in r:
            lines.append(f"{r['plan']}: " + render(r["route"], " " * (width(r["plan"]) + 2)).lstrip())
    return "\n".join(lines)


def _cmd_verify(args: argparse.Namespace) -> int:
    from fpreduce.backends import BackendError, verify
    from fpreduce.cli._progress import Bar

    try:
        bar = Bar("task", desc="verify")
        r = verify(
            args.backend,
            args.np,
            args.algorithm,
            args.dtype,
            args.elements,
            args.seed,
            timeout=args.timeout,
            progress=bar,
        )
    except BackendError as e:
        print(f"fpreduce: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        from dataclasses import asdict

        print(jsonfile.dumps({**asdict(r), "ok": r.ok}))
    else:
        print(r.summary())
    return 0 if r.ok else 1


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``sum`` and ``verify``."""
    s = sub.add_parser("sum", help="sum N values along several plans against the exact sum")
    s.add_argument("values", help="comma-separated values or a .npy file of shape (N,) or (N, d)")
    s.add_argument("--input", default="fp32", help="format the values are rounded to first (fp32, bf16, bfloat16, ...)")
    s.add_argument("--accumulate", default="fp32", help="format of the running sum (default fp32)")
    s.add_argument(
        "--rounding", default="nearest_even", help="nearest_even (default), toward_zero, up, down or stochastic"
    )
    s.add_argument("--output", default=None, help="round the sum once to this format at the end")
    s.add_argument("--algorithm", default="plain", help="plain, kahan, neumaier, binned or exact")
    s.add_argument(
        "--plans",
        default="sequential,reverse,pairwise",
        help="comma-separated plans: sequential, pairwise, kary:4, ring:nccl, rd, atomic, ompi:default, ((0,1),2) ...",
    )
    s.add_argument(
        "--orders", type=int, default=0, help="also sample K random orders of --family and count the distinct results"
    )
    s.add_argument("--family", default="sequential", help="plan family for --orders (or random_tree)")
    s.add_argument("--seed", type=int, default=0, help="seed of random orders and stochastic rounding (default 0)")
    s.add_argument("--explain", action="store_true", help="also say which route (kernel) sums each plan, and why")
    s.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    s.add_argument(
        "-q", "--quiet", action="store_true", help="no compile note (the kernels' first use; sum shows no progress)"
    )
    s.set_defaults(func=_cmd_sum)
    v = sub.add_parser("verify", help="run a real all-reduce (Open MPI or gloo) and compare its bits with the plan")
    v.add_argument("--backend", required=True, choices=("mpi", "gloo"), help="Open MPI (mpirun) or gloo (torch)")
    v.add_argument("--np", type=int, required=True, help="number of local processes (ranks)")
    v.add_argument(
        "--algorithm",
        default=None,
        help="mpi: default (nothing forced: Open MPI's own choice, plan ompi:default), ring, recursive_doubling, "
        "rabenseifner, segmented_ring, basic_linear, nonoverlapping; gloo: ring",
    )
    v.add_argument("--dtype", default="fp32", help="fp32 or fp64 (mpi); fp32, fp16, bf16, fp64 (gloo)")
    v.add_argument("--elements", type=int, default=1000, help="elements of the all-reduced vector (default 1000)")
    v.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    v.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    v.add_argument("--timeout", type=float, default=120.0, help="seconds before a hung run is aborted")
    v.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (ranks started and done, plans emulated: a bar on a terminal, else a line every "
        "~15 s on stderr), no compile note",
    )
    v.set_defaults(func=_cmd_verify)

"""``fpreduce reveal``: a black box's summation tree (built-in targets or MODULE:FUNCTION), verified."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from functools import lru_cache
from typing import Any

import numpy as np

from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.base.texttable import table

#: Built-in targets: what each sums (a 1-D array of the format's storage dtype -> a scalar).
TARGETS = {
    "numpy.sum": "np.sum(x)",
    "numpy.dot": "np.dot(x, ones): the dot product with a vector of ones (BLAS for fp32/fp64)",
    "torch.sum": "torch.sum of the CPU tensor of x (torch 2.x)",
    "numpy.matmul": "(A @ B)[0, 0]: A's row 0 is x (--batch rows, the others fixed random), B ones (n x 4)",
    "torch.matmul": "the same with CPU tensors",
    "gloo": "torch.distributed all_reduce(SUM) on --np local ranks (gloo, 127.0.0.1): --n elements per rank",
    "mpi:ALGORITHM": "Open MPI's MPI_Allreduce(SUM) with ALGORITHM forced (mpi alone: Open MPI's own choice), "
    "on --np local ranks: --n elements",
}

_DRAWN = 32  # trees of at most this many leaves are drawn


def _numpy_sum(x: Any) -> Any:
    return np.sum(x)


@lru_cache(maxsize=8)
def _ones(n: int, dtype: np.dtype) -> Any:
    return np.ones(n, dtype=dtype)


def _numpy_dot(x: Any) -> Any:
    return np.dot(x, _ones(x.size, x.dtype))


def _tensor(x: Any) -> Any:
    import torch

    if x.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: the same bits, seen by torch
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    if x.dtype not in (np.float16, np.float32, np.float64):
        raise InvalidArgument(f"torch: no torch dtype for {x.dtype.name} here")
    return torch.from_numpy(x)


def _torch_sum(x: Any) -> Any:
    return _tensor(x).sum()


@lru_cache(maxsize=8)
def _others(batch: int, n: int, dtype: np.dtype) -> Any:
    """The fixed rows 1..batch-1 of a matmul's left matrix (values of x's format, seeded)."""
    return np.random.default_rng(0).standard_normal((batch - 1, n)).astype(dtype)


def _matmul(batch: int, torch: bool) -> Callable[[Any], Any]:
    """(A @ B)[0, 0] with A = [x; fixed rows] (batch x n) and B ones (n x 4): the reduction over K = n."""

    def fn(x: Any) -> Any:
        a = np.concatenate([x[None, :], _others(batch, x.size, x.dtype)])
        b = _ones(x.size * 4, x.dtype).reshape(x.size, 4)
        return (_tensor(a) @ _tensor(b))[0, 0] if torch else (a @ b)[0, 0]

    return fn


def target(name: str, batch: int = 1) -> Callable[[Any], Any]:
    """A built-in target, or ``MODULE:FUNCTION`` (e.g. ``math:fsum``, ``mypkg.ops:my_sum``) imported.

    ``batch``: the rows of the matmuls' left matrix (x is row 0).
    """
    if batch < 1:
        raise InvalidArgument(f"--batch must be at least 1, got {batch}")
    builtin = {
        "numpy.sum": _numpy_sum,
        "numpy.dot": _numpy_dot,
        "torch.sum": _torch_sum,
        "numpy.matmul": _matmul(batch, torch=False),
        "torch.matmul": _matmul(batch, torch=True),
    }
    if name in builtin:
        return builtin[name]
    if ":" not in name:
        raise unknown_name("reveal target", name, [*TARGETS, "MODULE:FUNCTION"])
    module, _, attr = name.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise InvalidArgument(f"reveal target {name!r}: cannot import {module!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InvalidArgument(f"reveal target {name!r}: {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidArgument(f"reveal target {name!r} is not a function")
    return obj  # type: ignore[no-any-return]


def _collective(args: argparse.Namespace) -> int:
    """``gloo`` / ``mpi:ALGORITHM``: a live group of --np ranks, its per-chunk trees revealed and verified."""
    from fpreduce.analysis.reveal import tree_text
    from fpreduce.analysis.reveal_collective import collective_revelation
    from fpreduce.backends.live import LiveAllReduce

    backend, _, algorithm = args.target.partition(":")
    if args.sweep is not None:
        return _collective_sweep(args, backend, algorithm)
    if args.np is None:
        raise InvalidArgument(f"reveal {args.target} takes --np K (ranks) and --n E (elements; default max(K^2, 1024))")
    elements = max(args.np**2, 1024) if args.n is None else args.n
    if elements < 1:
        raise InvalidArgument(f"--n must be a positive number of elements per rank, got {elements}")
    verify = 10_000 if args.verify is None else args.verify
    with LiveAllReduce(backend, args.np, algorithm=algorithm or None, dtype=args.format) as fn:
        found = collective_revelation(
            fn,
            args.np,
            elements,
            format=args.format,
            accumulate=args.accumulate,
            verify=verify,
            seed=args.seed,
            progress=_bar("element", "reveal"),
        )
        agree = fn.disagreeing == 0
        library, started = fn.library, fn.start_seconds
    _report(args, found)
    text, expr = _reuse(found.families if found.plan is not None else (), found.ranks)
    if args.json:
        doc = {k: getattr(found, k) for k in found.__dataclass_fields__ if k not in ("plan", "runs")}
        runs = [{"start": r.start, "stop": r.stop, "tree": tree_text(r.plan)} for r in found.runs]
        reuse = {"plan": text, "plan_code": expr}
        print(jsonfile.dumps({"target": args.target, "library": library, **doc, "runs": runs, **reuse}))
        return 0 if found.plan is not None and agree else 1
    how = f"{found.calls} calls, {found.probe_seconds:.2f} s; unit {found.unit:g}, mask {found.big:g}"
    print(
        f"{args.target} ({library}), {found.ranks} ranks x {found.elements} elements, {found.format}: "
        f"{found.verdict} ({how})"
    )
    same = "every rank got the same bits" if agree else "ranks DISAGREE on some elements"
    print(f"ranks: {same} (the {found.ranks} ranks started in {started:.1f} s)")
    if found.plan is None:
        print(f"evidence: {found.evidence}")
        return 1
    print(
        f"{'verified' if found.verdict == 'tree' else 'evidence'}: {found.evidence} "
        f"({found.verify_calls} calls, {found.verify_seconds:.2f} s)"
    )
    print(f"family: {', '.join(found.families) if found.families else 'none of the project plans'}")
    print(f"trees: {len(found.runs)} run(s) of elements")
    for r in found.runs[:16]:
        shown = r.plan.draw() if found.ranks <= _DRAWN else f"{found.ranks} leaves"
        print(f"  elements {r.start}..{r.stop - 1}: {shown}")
    if len(found.runs) > 16:
        print(f"  ... and {len(found.runs) - 16} more")
    if text is None:
        print(f"plan: {found.plan.name} (no plan text: fr.reveal_collective returns it)")
        return 0 if agree else 1
    print(f"plan: {text}")
    acc = f", output={found.format!r}" if found.accumulate != found.format else ""
    print(
        f"reuse: fr.reduce(X, {expr}, input={found.format!r}, accumulate={found.accumulate!r}{acc})"
        f" on ({found.ranks}, E) arrays; chunks as the library cuts them"
    )
    return 0 if agree else 1


def _reuse(families: Sequence[str], ranks: int) -> tuple[str | None, str]:
    """(the plan's name, the Python expression that gives it to fr.reduce) of a collective's families: a plan
    text (``'ring:gloo'``), else gloo's ring sized for 2-byte elements (``fr.plans.ring(N, 'gloo', item_bytes=2)``:
    gloo cuts its segments by bytes, and no plan text carries the element size)."""
    texts = [t for t in families if "(" not in t]
    if texts:
        return texts[0], repr(texts[0])
    for t in families:
        if t.startswith("ring:gloo (item_bytes="):
            k = int(t.partition("=")[2].rstrip(")"))
            return t, f"fr.plans.ring({ranks}, 'gloo', item_bytes={k})"
    return (families[0], repr(families[0])) if families else (None, "")


def _report(args: argparse.Namespace, found: Any = None, regions: Any = None, swept: str = "n") -> None:
    """``--report FILE.pdf``: the reveal report of this target (fpreduce.report.reveal)."""
    if args.report is None:
        return
    from fpreduce.report.reveal import write_reveal_report
    from fpreduce.run.rundir import check_report_target

    out = write_reveal_report(
        check_report_target(args.report),
        [] if found is None else [(args.target, found)],
        sweeps=[] if regions is None else [(args.target, regions)],
        title=f"fpreduce reveal {args.target}",
        swept=swept,
    )
    print(f"report: {out}", file=sys.stderr if args.json else sys.stdout)


def _collective_sweep(args: argparse.Namespace, backend: str, algorithm: str) -> int:
    """``gloo`` / ``mpi:ALGORITHM --sweep [elements=]FIRST:LAST``: the hazard map over the element count (one
    live group of --np ranks); ``--sweep ranks=2:8``: over the number of ranks (a live group each, --n elements)."""
    from fpreduce.analysis.reveal_collective import hazard_map, ranks_map
    from fpreduce.backends.live import LiveAllReduce

    axis, values = _parse_sweep(args.sweep, args.target, collective=True)
    verify = 1000 if args.verify is None else args.verify
    if axis == "ranks":
        if args.np is not None:
            raise InvalidArgument("--sweep ranks=... sets the number of ranks: leave out --np")
        if values[0] < 2 or values[-1] > 64:
            raise InvalidArgument(f"--sweep ranks=... must be numbers of ranks in 2..64, got {args.sweep!r}")
        elements = max(values[-1] ** 2, 1024) if args.n is None else args.n
        if elements < 1:
            raise InvalidArgument(f"--n must be a positive number of elements per rank, got {elements}")

        def open_at(ranks: int) -> LiveAllReduce:
            return LiveAllReduce(backend, ranks, algorithm=algorithm or None, dtype=args.format)

        regions = ranks_map(
            open_at,
            values,
            elements,
            format=args.format,
            verify=verify,
            seed=args.seed,
            progress=_bar("rank count"),
            region_verify=args.region_verify,
        )
        return _print_regions(args, regions, max(verify, args.region_verify), "ranks", at=elements)
    if args.np is None:
        raise InvalidArgument(f"reveal {args.target} --sweep {args.sweep} takes --np K (ranks)")
    if args.n is not None:
        raise InvalidArgument("reveal takes --n E or --sweep FIRST:LAST[:STEP], one of them")
    with LiveAllReduce(backend, args.np, algorithm=algorithm or None, dtype=args.format) as fn:
        regions = hazard_map(
            fn,
            args.np,
            values,
            format=args.format,
            verify=verify,
            seed=args.seed,
            progress=_bar(),
            region_verify=args.region_verify,
        )
    return _print_regions(args, regions, verify, "elements", at=args.np)


def _cmd_reveal(args: argparse.Namespace) -> int:
    from fpreduce.analysis.reveal import REGION_VERIFY, match_family, revelation, tree_text
    from fpreduce.core.formats import format_name

    args.format = format_name(args.format)  # as people write it (torch.bfloat16, ...): its name in every line
    args.accumulate = None if args.accumulate is None else format_name(args.accumulate)
    if args.report is not None:
        from fpreduce.run.rundir import check_report_target

        check_report_target(args.report)  # before any probe
    if args.region_verify is not None and (args.sweep is None or args.region_verify < 0):
        raise InvalidArgument(f"--region-verify is a number >= 0 of inputs for --sweep, got {args.region_verify}")
    args.region_verify = REGION_VERIFY if args.region_verify is None else args.region_verify
    if args.target == "gloo" or args.target.partition(":")[0] == "mpi":
        return _collective(args)
    if args.np is not None:
        raise InvalidArgument(f"--np is for the collective targets (gloo, mpi:ALGORITHM), not {args.target}")
    fn = target(args.target, args.batch)
    if args.sweep is not None:
        return _sweep(fn, args)
    if args.n is None:
        raise InvalidArgument("reveal takes --n N or --sweep FIRST:LAST[:STEP], one of them")
    verify = 10_000 if args.verify is None else args.verify
    found = revelation(
        fn,
        args.n,
        format=args.format,
        accumulate=args.accumulate,
        method=args.method,
        verify=verify,
        seed=args.seed,
        progress=_bar("input", "reveal"),
    )
    _report(args, found)
    families = match_family(found.plan) if found.plan is not None else []
    text = None if found.plan is None else (families[0] if families else tree_text(found.plan))
    if args.json:
        doc = {k: getattr(found, k) for k in found.__dataclass_fields__ if k != "plan"}
        print(jsonfile.dumps({"target": args.target, **doc, "families": families, "plan": text}))
        return 0 if found.plan is not None else 1
    how = f"{found.method}: {found.calls} calls, {found.probe_seconds:.2f} s; unit {found.unit:g}, mask {found.big:g}"
    print(f"{args.target}, n={found.n}, {found.format}: {found.verdict} ({how})")
    if found.plan is None:
        print(f"evidence: {found.evidence}")
        return 1
    print(f"{'verified' if found.verdict == 'tree' else 'evidence'}: {found.evidence} ({found.verify_seconds:.2f} s)")
    print(f"family: {', '.join(families) if families else 'none of the project plans (an explicit tree)'}")
    if found.n <= _DRAWN:
        print(f"tree: {found.plan.draw()}")
    else:
        depth = found.plan.depths()
        figure = f"figure: --report {args.report}" if args.report else "its figure: --report FILE.pdf"
        print(f"tree: {found.n} leaves, {int(depth.min())}..{int(depth.max())} additions on a leaf's path ({figure})")
    print(f"plan: {text}")
    shown, fmt = (repr(text) if families else "PLAN"), repr(found.format)
    formats = f"input={fmt}, accumulate={found.accumulate!r}" + (
        f", output={fmt}" if found.accumulate != found.format else ""
    )
    print(f"reuse: fr.reduce(X, {shown}, {formats}), or plan = {shown} in a run")
    return 0


#: What ``--sweep AXIS=VALUES`` varies, by kind of target (the first is ``--sweep FIRST:LAST``'s).
AXES = {"sum": ("n", "threads", "batch", "stride"), "collective": ("elements", "ranks")}


def _parse_sweep(text: str, name: str, *, collective: bool) -> tuple[str, Sequence[int]]:
    """``--sweep [AXIS=]VALUES`` as (axis, ascending values): VALUES is FIRST:LAST[:STEP] or a list 1,2,4."""
    axes = AXES["collective" if collective else "sum"]
    axis, eq, values = text.partition("=")
    axis = axis.strip() if eq else axes[0]
    axis = "elements" if collective and axis == "n" else axis  # (--n is the elements of a collective)
    if axis not in axes:
        raise unknown_name(f"--sweep axis of {name}", axis, axes)
    if ":" in values or not eq:
        return axis, _sizes(values if eq else text)
    try:
        listed = [int(v) for v in values.split(",")]
    except ValueError:
        listed = []
    if not listed or listed[0] < 1 or listed != sorted(set(listed)):
        raise InvalidArgument(
            f"--sweep {axis}=... takes FIRST:LAST[:STEP] or ascending numbers >= 1 (1,2,4), got {text!r}"
        )
    return axis, listed


def _sizes(text: str) -> range:
    try:
        parts = [int(v) for v in text.split(":")]
    except ValueError:
        parts = []
    if len(parts) not in (2, 3) or parts[0] < 1 or parts[1] < parts[0] or (len(parts) == 3 and parts[2] < 1):
        raise InvalidArgument(f"--sweep must be FIRST:LAST[:STEP] with 1 <= FIRST <= LAST, e.g. 1:300, got {text!r}")
    return range(parts[0], parts[1] + 1, parts[2] if len(parts) == 3 else 1)


def _sweep(fn: Callable[[Any], Any], args: argparse.Namespace) -> int:
    """The hazard map over n (where the verdict, the accumulator or the plan family changes), or over a knob
    at one n (``threads=1,2,4``: torch's threads; ``batch=1,8,64``: a matmul's rows): where the tree changes."""
    from fpreduce.analysis.reveal import hazard_map, knob_map

    axis, values = _parse_sweep(args.sweep, args.target, collective=False)
    verify = 1000 if args.verify is None else args.verify
    if axis == "n":
        if args.n is not None:
            raise InvalidArgument("reveal takes --n N or --sweep FIRST:LAST[:STEP], one of them")
        regions = hazard_map(
            fn,
            values,
            format=args.format,
            verify=verify,
            seed=args.seed,
            progress=_bar(),
            region_verify=args.region_verify,
        )
        return _print_regions(args, regions, verify, "n")
    if args.n is None:
        raise InvalidArgument(f"--sweep {axis}=... reveals one size at every value: it takes --n N")
    fn_at = _knob(args.target, axis, args.batch)
    with _torch_threads_kept(axis):
        regions = knob_map(
            fn_at,
            values,
            args.n,
            format=args.format,
            verify=verify,
            seed=args.seed,
            progress=_bar(f"{axis} value"),
            region_verify=args.region_verify,
        )
    return _print_regions(args, regions, verify, axis, at=args.n)


@contextlib.contextmanager
def _torch_threads_kept(axis: str) -> Iterator[None]:
    """torch's own thread count back after a sweep over ``threads`` (which sets it)."""
    if axis != "threads":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _knob(name: str, axis: str, batch: int) -> Callable[[int], Callable[[Any], Any]]:
    """The target at each value of ``axis``: ``batch`` rows of a matmul, ``threads`` of torch, or the ``stride``
    of the vector it is given."""
    if axis == "batch":
        if name not in ("numpy.matmul", "torch.matmul"):
            raise InvalidArgument(f"--sweep batch=... is for numpy.matmul and torch.matmul (their rows), not {name}")
        return lambda rows: target(name, rows)
    if axis == "stride":
        if name in ("numpy.matmul", "torch.matmul"):
            raise InvalidArgument(f"--sweep stride=... gives a 1-D target a strided view; {name} takes a matrix row")
        fn = target(name, batch)
        return lambda stride: _strided(fn, stride)
    if name.startswith("numpy."):
        raise InvalidArgument(
            f"--sweep threads=... sets torch.set_num_threads (torch.sum, torch.matmul, MODULE:FUNCTION): {name} "
            "has no thread knob here"
        )
    fn = target(name, batch)
    return lambda threads: _on_threads(fn, threads)


def _strided(fn: Callable[[Any], Any], stride: int) -> Callable[[Any], Any]:
    """``fn`` given a view of x with ``stride`` elements between its values (x copied into every stride-th
    element of a zero buffer of its dtype): a library may sum a strided vector along another tree."""

    def run(x: Any) -> Any:
        buf = np.zeros(x.size * stride, dtype=x.dtype)
        buf[::stride] = x
        return fn(buf[::stride])

    return run


def _on_threads(fn: Callable[[Any], Any], threads: int) -> Callable[[Any], Any]:
    """``fn`` run with ``torch.set_num_threads(threads)`` (set when another count is on: a new count every call
    rebuilt torch's thread team every call; ``_sweep`` restores torch's own count at the end)."""
    try:
        import torch
    except ImportError:
        raise InvalidArgument("--sweep threads=... needs torch (torch.set_num_threads)") from None

    def run(x: Any) -> Any:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return fn(x)

    return run


def _bar(unit: str = "size", desc: str = "reveal --sweep") -> Callable[[int, int], None]:
    """The progress of a hazard map, by sizes (or values) revealed, or of one reveal, by inputs verified (a bar
    on a terminal, else a line every ~15 s; ``-q``: none)."""
    from fpreduce.cli._progress import Bar

    return Bar(unit, desc=desc)


def _print_regions(args: argparse.Namespace, regions: Any, verify: int, what: str, at: int | None = None) -> int:
    """The hazard map over ``what`` (n, elements, threads, batch, ranks; ``at``: the n or elements each value
    was revealed at) as a table (or JSON), and its report: per region, the random inputs its trees were verified
    on in all and how many differed."""
    size = "" if at is None else f" at {at} {({'ranks': 'elements', 'elements': 'ranks'}).get(what, 'summands')}"
    _report(args, regions=regions, swept=what + size)
    if args.json:
        doc = {"target": args.target, "format": args.format, "verify": verify, "region_verify": args.region_verify}
        print(jsonfile.dumps({**doc, "sizes": what, "at": at, "regions": [asdict(r) for r in regions]}))
        return 0
    kind = "elements" if what in ("elements", "ranks") else "inputs"
    swept = args.sweep.partition("=")[2] or args.sweep
    print(f"{args.target}, {args.format}, {what} = {swept}{size}: {len(regions)} region(s)")
    body = [
        [
            str(r.first) if r.first == r.last else f"{r.first}..{r.last}",
            r.verdict,
            r.accumulate,
            r.family or "-",
            str(r.checked),
            str(r.differing),
        ]
        for r in regions
    ]
    print(table([what, "verdict", "accumulate", "plan family", "verified", "differing"], body, align="llllrr"))
    if what in ("threads", "batch", "stride"):
        print(f"a region: consecutive {what} values with one tree ('tree k': a tree no plan family names)")
    else:
        print(
            f"a region: consecutive {what} with one verdict, accumulator and family ('-': an explicit tree per "
            f"{what}, or none)"
        )
    print(_verified_note(regions, verify, what, kind, args.region_verify))
    return 0


def _verified_note(regions: Any, verify: int, what: str, kind: str, target: int) -> str:
    """What 'verified' counts: each value's own check, then the regions topped up at their first and last values
    (how many, and the least and most any region with a tree got, from the regions' own counts)."""
    topped = [r for r in regions if r.extra]
    more = (
        f"then {len(topped)} region(s) on {sum(r.extra for r in topped)} more at their first and last {what}"
        if topped
        else "no region topped up"
    )
    trees = [r.checked for r in regions if r.verdict in ("tree", "wider accumulator")]
    span = (
        f"{min(trees)}" if trees and min(trees) == max(trees) else f"{min(trees, default=0)}..{max(trees, default=0)}"
    )
    each = f"the {len(trees)} region(s) with a tree: {span} each (target {target})" if trees else "no tree"
    bad = sum(r.differing for r in regions)
    return (
        f"verified: the revealed trees run by fpreduce against the target on random {kind} (normal, heavy-tailed, "
        f"cancelling): >= {verify} at each value of {what}, {more}; {each}; "
        + (f"{bad} differing" if bad else "0 differing in any bit")
    )


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``reveal``."""
    r = sub.add_parser(
        "reveal",
        help="reveal the summation tree of a black box (numpy.sum, numpy.dot, torch.sum, MODULE:FUNCTION) "
        "by masked probes, as a plan verified bit for bit (exit 0 a tree, 1 none)",
    )
    r.add_argument(
        "target",
        help="numpy.sum, numpy.dot, numpy.matmul, torch.sum, torch.matmul, MODULE:FUNCTION (1-D array -> scalar), "
        "or a collective: gloo, mpi (Open MPI's own choice), mpi:ALGORITHM (ring, recursive_doubling, "
        "rabenseifner, ...) with --np",
    )
    r.add_argument("--n", type=int, default=None, help="number of summands (gloo, mpi: elements per rank)")
    r.add_argument("--np", type=int, default=None, help="ranks of the collective targets gloo and mpi:ALGORITHM")
    r.add_argument(
        "--sweep",
        default=None,
        help="[AXIS=]FIRST:LAST[:STEP] or AXIS=V1,V2,...: reveal at every value and print where the tree changes; "
        "AXIS n (default; collectives: elements), threads (torch.set_num_threads, with --n), batch (the matmuls' "
        "rows, with --n), stride (a strided view of the summands, with --n) or ranks (gloo, mpi: a live group per "
        "value, --n elements)",
    )
    r.add_argument("--batch", type=int, default=1, help="rows of the matmul targets' left matrix (default 1)")
    r.add_argument("--format", default="fp32", help="format of the inputs and every partial sum (default fp32)")
    r.add_argument(
        "--accumulate",
        default=None,
        help="format of the partial sums (default: --format, then fp32 and fp64 if cancellation is exact)",
    )
    r.add_argument("--method", default="fast", help="fast (pivots, default) or basic (all n(n-1)/2 pairs)")
    r.add_argument(
        "--verify",
        type=int,
        default=None,
        help="random inputs to verify on (default 10000; with --sweep 1000 at each value, then each region "
        "topped up at its first and last values to >= 10000 in all)",
    )
    r.add_argument(
        "--region-verify",
        type=int,
        default=None,
        metavar="K",
        help="with --sweep: random inputs each region's trees are verified on in all, its values' own --verify "
        "first, then its first and last values on the rest (ranks=...: every N on K while its group is open; "
        "default 10000)",
    )
    r.add_argument("--seed", type=int, default=0, help="seed of the pivots and the random inputs (default 0)")
    r.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    r.add_argument(
        "--report", default=None, metavar="FILE.pdf", help="also write a PDF: the table, evidence, plan and figures"
    )
    r.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (a bar on a terminal, else a line every ~15 s on stderr), no compile note",
    )
    r.set_defaults(func=_cmd_reveal)


__all__ = ["TARGETS", "add_commands", "target"]

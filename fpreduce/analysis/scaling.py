"""Speed-up curves of data-parallel training: compute split N ways plus one all-reduce per step.

A step on N workers takes ``compute / N`` (the global batch's gradient, split evenly) plus
the time of the all-reduce of the gradient (:func:`fpreduce.core.timing.cost`), with no
overlap of the two (the pessimistic case; DDP overlaps part of the all-reduce with the
backward pass). Speed-up is ``step(1) / step(N)``, efficiency ``speed-up / N``.

Why "8 workers gave nearly 8x, 16 only 10x": with 8 GPUs in one node the ring runs over
NVLink and costs little next to the compute; at 16 it crosses the slower network between
nodes, and its ``2 (N-1)/N n beta`` no longer shrinks as N grows while the compute does.
``examples/scaling.toml`` states a profile that shows it, and its topology (GPUs and NICs
per node: the flows that leave a node at once share its NICs, :mod:`fpreduce.core.timing`).
Each row carries the bus bandwidth the plan's links allow beside the one it reaches.

>>> from fpreduce.core.timing import Profile
>>> pr = Profile(alpha=5e-6, beta=1 / 12.5e9, gamma=0.0, alpha_intra=1e-6, beta_intra=1 / 150e9, gpus_per_node=8)
>>> rows = scaling([1, 8, 16], ["ring"], compute=0.4, nbytes=1e8, profile=pr)
>>> [round(r.speedup, 1) for r in rows]
[1.0, 7.8, 10.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.timing import Profile, bus_bandwidth, busbw_bound, cost
from fpreduce.plans import FAMILIES, parse

__all__ = [
    "ScaleConfig",
    "ScaleRow",
    "format_table",
    "rows_as_dicts",
    "scaling",
    "size_text",
]


@dataclass(frozen=True)
class ScaleRow:
    """One point of a speed-up curve.

    Attributes:
        plan: the all-reduce's plan text.
        workers: N.
        compute_s: compute time per step on each worker (``compute / N``).
        comm_s: the all-reduce's time.
        step_s: ``compute_s + comm_s``.
        speedup: ``step(1) / step(N)``.
        efficiency: ``speedup / N``.
        algbw: nccl-tests' algorithm bandwidth of the all-reduce (B/s; inf for N = 1).
        busbw: its bus bandwidth ``algbw * 2 (N-1) / N``.
        busbw_bound: the most bus bandwidth the links the plan crosses allow
            (:func:`fpreduce.core.timing.busbw_bound`; inf for N = 1).
    """

    plan: str
    workers: int
    compute_s: float
    comm_s: float
    step_s: float
    speedup: float
    efficiency: float
    algbw: float
    busbw: float
    busbw_bound: float = math.inf  # absent from studies written before the bound
    nbytes: float = math.nan  # the message's bytes; absent from studies written before message-size sweeps


def _supported(plan: str, n: int) -> bool:
    try:
        parse(plan, n)
    except InvalidArgument:
        return False
    return True


#: the most workers a scaling curve simulates: the collectives' event timelines grow with N^2
MAX_WORKERS = 4096


def scaling(
    workers: Sequence[int],
    plans: Sequence[str],
    *,
    compute: float,
    nbytes: float | Sequence[float],
    profile: Profile | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[ScaleRow]:
    """The speed-up curve of each plan over ``workers``; points a plan cannot run (G not dividing N) are left out.

    Args:
        workers: the N to evaluate (each >= 1).
        plans: plan texts (``ring``, ``rd``, ``hier:8``, ...).
        compute: seconds to compute the gradient of the whole global batch on one worker.
        nbytes: the gradient's size in bytes, or several sizes (nccl-tests' message-size sweep: the rows of
            each size after the other's).
        profile: the cluster.
        progress: ``progress(done, total)`` after each (size, plan, N) point (the event timelines of
            thousands of workers take seconds); never printed here.

    Raises:
        InvalidArgument: non-positive compute time, a negative or infinite size, N < 1, an unknown plan.
    """
    if isinstance(compute, bool) or not isinstance(compute, int | float) or not compute > 0 or math.isinf(compute):
        raise InvalidArgument(f"compute must be a positive number of seconds, got {compute!r}")
    sizes: list[Any] = list(nbytes) if isinstance(nbytes, list | tuple) else [nbytes]
    for b in sizes:
        if isinstance(b, bool) or not isinstance(b, int | float) or not 0 <= b < math.inf:
            raise InvalidArgument(f"bytes (elements x bytes_per_element) must be a finite number >= 0, got {b!r}")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in workers):
        raise InvalidArgument(f"workers must be integers >= 1, got {list(workers)!r}")
    if max(workers, default=1) > MAX_WORKERS:
        raise InvalidArgument(f"workers: at most {MAX_WORKERS} (simulation grows with N^2), got {max(workers)}")
    for p in plans:
        if not isinstance(p, str) or p.strip().startswith("("):
            raise InvalidArgument(f"scale plans are plan names such as 'ring' or 'hier:8', got {p!r}")
        family = p.split(":")[0]
        if family not in FAMILIES:
            raise unknown_name("plan", p, FAMILIES)
    points = [(size, plan, n) for size in sizes for plan in plans for n in sorted(set(workers))]
    out = []
    for i, (size, plan, n) in enumerate(points, 1):
        if _supported(plan, n):
            out.append(_row(plan, n, size, compute, profile))
        if progress is not None:
            progress(i, len(points))
    return out


def _row(plan: str, n: int, size: float, compute: float, profile: Profile | None) -> ScaleRow:
    """The point of ``plan`` on ``n`` workers for a message of ``size`` bytes."""
    comm = cost(plan, n, size, profile)
    step = compute / n + comm
    alg, bus = bus_bandwidth(size, comm, n)
    speed = compute / step
    bound = busbw_bound(plan, n, profile)
    return ScaleRow(plan, n, compute / n, comm, step, speed, speed / n, alg, bus, bound, float(size))


@dataclass(frozen=True)
class ScaleConfig:
    """What ``fpreduce scale`` computes: the curves' inputs (read from its file by :mod:`fpreduce.run.scale`).

    Attributes:
        workers: the N to evaluate.
        plans: the plans to compare.
        compute: seconds per step for the whole global batch on one worker.
        nbytes: the gradient's size in bytes (or ``elements`` x ``bytes_per_element``).
        profile: the cluster.
        name: a label.
    """

    workers: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    plans: tuple[str, ...] = ("ring", "rd", "rabenseifner", "linear")
    compute: float = 0.4
    nbytes: float | tuple[float, ...] = 1e8
    profile: Profile = field(default_factory=Profile)
    name: str = "scaling"


def format_table(rows: Sequence[ScaleRow]) -> str:
    """The rows as an aligned text table (times in ms, bandwidths in GB/s as nccl-tests prints them: algbw =
    bytes / time, busbw = algbw * 2 (N-1) / N; ``bound``: the busbw the links allow; ``bytes``: the message)."""
    from fpreduce.base.texttable import table

    head = ["plan", "N", "bytes", "compute ms", "comm ms", "step ms", "speed-up", "effic."]
    head += ["algbw GB/s", "busbw GB/s", "bound"]
    body = []
    for r in rows:
        alg, bus, bound = ("-" if math.isinf(v) else f"{v / 1e9:.1f}" for v in (r.algbw, r.busbw, r.busbw_bound))
        body.append(
            [r.plan, r.workers, size_text(r.nbytes), f"{r.compute_s * 1e3:.2f}", f"{r.comm_s * 1e3:.2f}"]
            + [f"{r.step_s * 1e3:.2f}", f"{r.speedup:.2f}", f"{r.efficiency:.0%}", alg, bus, bound]
        )
    return table(head, body, align="l")


def size_text(n: float) -> str:
    """A message size as nccl-tests' sizes are written: 1M = 2**20 bytes, 256K, 1G; else the bytes ("-": unknown)."""
    if math.isnan(n):
        return "-"
    for unit, k in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 2**k and n % 2**k == 0:
            return f"{int(n) >> k}{unit}"
    return f"{n:g}"


def rows_as_dicts(rows: Sequence[ScaleRow]) -> list[dict[str, Any]]:
    """The rows as dicts (an infinite bandwidth stays ``inf``; :mod:`fpreduce.base.jsonfile` writes null + why)."""
    return [asdict(r) for r in rows]

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

Bounded work: a point never builds its plan on N workers (a ring's or Rabenseifner's plan
grows with N^2: 4096 workers took 4.5 s and 0.45 GB, 75 s and 1.6 GB). The time model reads
only the plan's name and N, so each point takes :func:`~fpreduce.core.timing.cost` its
closed form, O(log N) whatever N, and says so (``model``: ``closed form``). The points
without one (``tree:nccl:G``; ``rd`` and Rabenseifner over nodes of several workers where the
steps are not uniform) run the event timeline (``model``: ``timeline``), whose messages are
counted up front and capped at :data:`MAX_EVENTS`. tests/test_scaling.py proves the closed
form equal to the timeline over every family on the sizes where both run (N <= 64) and
which model a point takes.

>>> from fpreduce.core.timing import Profile
>>> pr = Profile(alpha=5e-6, beta=1 / 12.5e9, gamma=0.0, alpha_intra=1e-6, beta_intra=1 / 150e9, gpus_per_node=8)
>>> rows = scaling([1, 8, 16], ["ring"], compute=0.4, nbytes=1e8, profile=pr)
>>> [round(r.speedup, 1) for r in rows]
[1.0, 7.8, 10.0]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.timing import Profile, bus_bandwidth, busbw_bound, cost
from fpreduce.plans import FAMILIES, parse

if TYPE_CHECKING:
    from fpreduce.plans import AnyPlan

__all__ = [
    "ScaleConfig",
    "ScaleRow",
    "check_work",
    "format_table",
    "model_note",
    "rows_as_dicts",
    "scaling",
    "size_text",
]


CLOSED = "closed form"
TIMELINE = "timeline"
#: the most workers a point may have: the closed forms cost O(log N) for any N; beyond 2^30 is no cluster
MAX_WORKERS = 1 << 30
#: the most messages one point's event timeline may simulate (2^20: tree:nccl:8 on 262144 workers, 6.5 s and 0.3 GB)
MAX_EVENTS = 1 << 20
#: the largest G of ``hier:G`` and ``tree:nccl:G``: the plan of one node of G is built to check the name
#: (hier:512 takes 0.45 s, hier:1024 4.6 s, hier:4096 150 s and 1.6 GB here)
MAX_NODE = 512
_NODE_FAMILIES = ("hier", "tree")
#: the largest N at which tests/test_scaling.py checks every closed form against the event timeline
TESTED_N = 64


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
    model: str = CLOSED  # how comm_s was found: CLOSED or TIMELINE (absent from studies before issue 26)


@dataclass(frozen=True)
class PlanShape:
    """What :mod:`fpreduce.core.timing` reads of a plan: its name and N (not its trees: they grow with N^2)."""

    name: str
    n: int


def _node_param(plan: str) -> int | None:
    """G of ``hier:G`` / ``tree:nccl:G``; None for the other families or a G that is not an integer."""
    if plan.split(":")[0] not in _NODE_FAMILIES:
        return None
    try:
        return int(plan.rsplit(":", 1)[1])
    except (ValueError, IndexError):
        return None


@functools.lru_cache(maxsize=256)
def _name_on(plan: str, m: int) -> str | None:
    try:
        return parse(plan, m).name
    except InvalidArgument:
        return None


def shape(plan: str, n: int) -> PlanShape | None:
    """``plan`` on ``n`` workers as the time model reads it, without building it on ``n``; None where it cannot run.

    The builders' one rule that depends on N is that G divides N (``hier:G``, ``tree:nccl:G``):
    the plan built on ``gcd(N, G)`` workers (on one worker for the other families) passes or
    fails exactly as on N, with the same name. tests/test_scaling.py checks it against
    :func:`fpreduce.plans.parse` on N itself.
    """
    g = _node_param(plan)
    m = math.gcd(n, g) if g is not None and g >= 1 else 1
    name = _name_on(plan, m)
    return None if name is None else PlanShape(name, n)


def model(s: PlanShape, profile: Profile | None = None) -> str:
    """:data:`CLOSED` where :func:`~fpreduce.core.timing.cost` has a closed form for the point, else
    :data:`TIMELINE`."""
    pr = profile or Profile()
    n, g = s.n, pr.node_size(s.name)
    if n == 1:
        return CLOSED
    if s.name.startswith("tree:nccl"):
        return TIMELINE
    if s.name.split(":")[0] in ("rd", "rabenseifner") and not (g == 1 or n <= g):
        uniform = n & (n - 1) == 0 and g & (g - 1) == 0 and n % g == 0
        return CLOSED if uniform else TIMELINE
    return CLOSED


def events(s: PlanShape) -> int:
    """The messages :func:`~fpreduce.core.timing.timeline` simulates for the point (0 for one worker)."""
    n = s.n
    P = 1 << (n.bit_length() - 1)
    L = P.bit_length() - 1
    fam = s.name.split(":")[0]
    if n == 1:
        return 0
    if s.name.startswith("tree:nccl"):
        return 4 * (n - 1)  # two trees, each edge up and down
    if fam == "rd":
        return P * L + 2 * (n - P)
    if fam == "rabenseifner":
        return 2 * P * L + 2 * (n - P)
    if fam == "ring":
        return 2 * (n - 1) * n
    if fam == "hier":
        g = int(s.name.split(":")[1])
        return 2 * (g - 1) * n + (events(PlanShape("rd", n // g)) * g if n // g > 1 else 0)
    return 2 * (n - 1)  # a server: gathers and broadcasts


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
        raise InvalidArgument(f"workers: at most {MAX_WORKERS} (2^30), got {max(workers)}")
    for p in plans:
        if not isinstance(p, str) or p.strip().startswith("("):
            raise InvalidArgument(f"scale plans are plan names such as 'ring' or 'hier:8', got {p!r}")
        family = p.split(":")[0]
        if family not in FAMILIES:
            raise unknown_name("plan", p, FAMILIES)
        if (_node_param(p) or 0) > MAX_NODE:
            raise InvalidArgument(
                f"plan {p!r}: G (workers per node) at most {MAX_NODE}: one node's plan is built to check it "
                "and grows faster than G^2 (hier:1024 takes ~5 s)"
            )
    points = _points(sizes, plans, sorted(set(workers)), profile)
    out = []
    for i, (size, p, s) in enumerate(points, 1):
        if s is not None:
            out.append(_row(p, s, size, compute, profile))
        if progress is not None:
            progress(i, len(points))
    return out


def check_work(workers: Sequence[int], plans: Sequence[str], profile: Profile | None = None) -> None:
    """Refuse, before any point runs, a point whose event timeline would simulate over :data:`MAX_EVENTS` messages.

    Raises:
        InvalidArgument: naming the plan, N, the messages and what to do instead.
    """
    for s in (shape(p, n) for p in plans for n in sorted(set(workers))):
        if s is not None and model(s, profile) == TIMELINE and events(s) > MAX_EVENTS:
            raise InvalidArgument(
                f"{s.name} on {s.n} workers has no closed form here and its event timeline would simulate "
                f"{events(s):,} messages (at most {MAX_EVENTS:,} a point); ask for fewer workers "
                "or a plan with a closed form (ring, hier:G, the server folds; rd and rabenseifner on powers of 2)"
            )


def _points(
    sizes: Sequence[float], plans: Sequence[str], workers: Sequence[int], profile: Profile | None
) -> list[tuple[float, str, PlanShape | None]]:
    """Every (size, plan on N) point, None where the plan cannot run on N; the timelines' work checked first."""
    try:
        check_work(workers, plans, profile)
    except InvalidArgument as e:
        raise InvalidArgument(f"workers: {e}") from None
    shapes = [(p, shape(p, n)) for p in plans for n in workers]
    return [(size, p, s) for size in sizes for p, s in shapes]


def _row(text: str, s: PlanShape, size: float, compute: float, profile: Profile | None) -> ScaleRow:
    """The point of plan ``text`` on N workers (``s``) for a message of ``size`` bytes."""
    plan = cast("AnyPlan", s)  # the time model reads only .name and .n (tests/test_scaling.py)
    n = s.n
    comm = cost(plan, n, size, profile)
    step = compute / n + comm
    alg, bus = bus_bandwidth(size, comm, n)
    speed = compute / step
    bound = busbw_bound(plan, n, profile)
    how = model(s, profile)
    return ScaleRow(text, n, compute / n, comm, step, speed, speed / n, alg, bus, bound, float(size), how)


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
    head += ["algbw GB/s", "busbw GB/s", "bound", "model"]  # model: closed (form) or timeline
    body = []
    for r in rows:
        alg, bus, bound = ("-" if math.isinf(v) else f"{v / 1e9:.1f}" for v in (r.algbw, r.busbw, r.busbw_bound))
        body.append(
            [r.plan, r.workers, size_text(r.nbytes), f"{r.compute_s * 1e3:.2f}", f"{r.comm_s * 1e3:.2f}"]
            + [f"{r.step_s * 1e3:.2f}", f"{r.speedup:.2f}", f"{r.efficiency:.0%}", alg, bus, bound, r.model.split()[0]]
        )
    return table(head, body, align="l")


def model_note(rows: Sequence[ScaleRow]) -> str:
    """One line: how many points' comm times are closed forms, what backs them, and which ran the timeline."""
    closed = sum(r.model == CLOSED for r in rows)
    timed = sorted({r.plan for r in rows if r.model == TIMELINE})
    s = f"comm: closed form for {closed} of {len(rows)} points"
    if closed:
        s += f" (the event timeline equals it at N <= {TESTED_N} on every family, tested)"
    if timed:
        s += f"; event timeline (no closed form) for {', '.join(timed)}"
    return s


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

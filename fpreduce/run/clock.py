"""Synchronous and asynchronous data-parallel training on one simulated clock.

Every mode trains the teacher-student MLP of :mod:`fpreduce.run.model` from the same
initial fp32 weights on the same batches; what differs is when each gradient is
computed, on which weights, and in which order the sums are formed. Time comes from a
:class:`ComputeModel` (per-worker speed, jitter, stragglers) and the cost model of
:mod:`fpreduce.core.timing`; order comes from the same times.

Modes (text as in a config):

* ``sync``: a barrier every step; the workers' gradients are all-reduced with ``plan``
  in a fixed order (bitwise reproducible); the step ends when the timeline of that
  all-reduce, started from the workers' compute ends, ends.
* ``sync:arrival``: a barrier, but a parameter server adds the gradients in the order
  they arrive (rank 0 first, then whoever finished computing first): the order changes
  with the timing.
* ``async``: a parameter server applies each worker's gradient as it arrives, as
  ``1/N`` of a step; the worker computed it on the weights it read when it started
  (staleness = updates applied in between), then reads the new weights and goes on.
  The master weights' update order is itself a reduction over time, rounded to
  ``master`` after every update.
* ``local:H``: Local-SGD: each worker takes H SGD steps on its own replica, then the
  replicas' deltas are all-reduced with ``plan`` and averaged (a barrier every H steps).
* ``local_async:H``: Async Local-SGD (Liu et al. 2024): each worker takes H SGD steps
  from the weights it last read and sends its delta to a server, which adds ``delta / N``
  to the global weights on arrival (no barrier; staleness counts the deltas applied
  in between); the worker then reads the new weights and goes on.
* ``m_sync:M``: each step takes the first M of N gradients to arrive (the others are
  dropped) and averages them: a barrier that waits for M workers only.

All modes compute the same number of worker gradients per "step" (N), so their loss
curves can be drawn against simulated time and against steps on one axis.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from fpreduce import plans
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.engine import reduce
from fpreduce.core.formats import get_format
from fpreduce.core.rounding import round_to
from fpreduce.core.timing import Profile, cost, timeline
from fpreduce.run.model import ModelSource, loss_and_grad
from fpreduce.run.schema import Table, in_range, rule

__all__ = ["ComputeModel", "Mode", "Trace", "parse_mode", "simulate"]

ModeKind = Literal["sync", "sync:arrival", "async", "local", "local_async", "m_sync"]
_KINDS = ("sync", "sync:arrival", "async", "local", "local_async", "m_sync")
EVAL_STEP = 1 << 30  # the fixed evaluation batch (a step index no training step uses)
_JITTERS = ("none", "exponential", "normal", "lognormal")


@dataclass(frozen=True)
class Mode:
    """A training mode: ``kind`` and its parameter (H for ``local``, M for ``m_sync``)."""

    kind: ModeKind
    param: int = 0

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.param}" if self.kind in ("local", "local_async", "m_sync") else self.kind


def parse_mode(text: str, workers: int) -> Mode:
    """``sync``, ``sync:arrival``, ``async``, ``local:H``, ``local_async:H`` (H >= 1) or ``m_sync:M`` (1 <= M <= N)."""
    s = str(text).strip()
    kind, _, arg = s.partition(":")
    if s in ("sync", "sync:arrival", "async"):
        if s == "async" and workers < 2:
            raise InvalidArgument("mode 'async' needs at least 2 workers (with one it is plain SGD)")
        return Mode(s)  # type: ignore[arg-type]
    if kind not in ("local", "local_async", "m_sync"):
        choices = ("sync", "sync:arrival", "async", "local:H", "local_async:H", "m_sync:M")
        raise unknown_name("training mode", s, choices)
    try:
        k = int(arg)
    except ValueError:
        raise InvalidArgument(f"mode {s!r}: write {kind}:<integer>, e.g. {kind}:4") from None
    if kind == "local_async" and workers < 2:
        raise InvalidArgument("mode 'local_async' needs at least 2 workers")
    if k < 1 or (kind == "m_sync" and k > workers):
        raise InvalidArgument(f"mode {s!r}: {'M must be in 1..' + str(workers) if kind == 'm_sync' else 'H >= 1'}")
    return Mode(kind, k)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ComputeModel(Table):
    """How long each worker takes to compute its gradient (seconds).

    Worker w's k-th gradient takes ``step * speed[w] * jitter`` (jitter drawn per worker
    and k, mean 1), times ``straggler_factor`` with probability ``straggler_prob``.
    ``speed[w]`` is drawn once per run, uniform in ``[1, 1 + spread)``.

    Attributes:
        step: seconds per gradient on the fastest worker.
        spread: heterogeneity of the workers' speeds (0: all equal).
        jitter: ``none``, ``exponential`` (1 + Exp(scale) - scale), ``normal``
            (max(0.05, 1 + N(0, scale))) or ``lognormal`` (LogN(-scale^2/2, scale)).
        scale: the jitter's scale.
        straggler_prob: probability that one gradient is slow.
        straggler_factor: how slow (>= 1).
    """

    table: ClassVar[str] = "compute"
    step: float = rule(0.1, lo=0, gt=True)
    spread: float = rule(0.2, lo=0)
    jitter: str = rule("exponential", choices=_JITTERS)
    scale: float = rule(0.1, lo=0)
    straggler_prob: float = rule(0.0, lo=0, top=1)
    straggler_factor: float = rule(5.0, lo=1)

    def times(self, n: int, k: int, seed: int) -> NDArray[np.float64]:
        """Seconds each of ``n`` workers needs for its ``k``-th gradient (a function of seed, k only)."""
        speed = 1.0 + self.spread * np.random.default_rng([seed, 0xC0]).random(n)
        rng = np.random.default_rng([seed, k, 0xC1])
        s = self.scale
        jit = {
            "none": lambda: np.ones(n),
            "exponential": lambda: 1.0 + rng.exponential(s, n) - s,
            "normal": lambda: np.maximum(0.05, 1.0 + rng.normal(0.0, s, n)),
            "lognormal": lambda: rng.lognormal(-s * s / 2, s, n) if s > 0 else np.ones(n),
        }[self.jitter]()
        slow = np.where(rng.random(n) < self.straggler_prob, self.straggler_factor, 1.0)
        return self.step * speed * jit * slow


@dataclass
class Trace:
    """What one mode did: per step-equivalent (N gradients) its end time and loss, and its staleness.

    Attributes:
        mode: the mode's text.
        time: simulated seconds at the end of each step-equivalent.
        loss: loss of the weights then, on the fixed evaluation batch.
        staleness: per applied gradient, updates applied between its read and its use.
        params: the final fp32 (or master-format) weights.
        orders_changed: number of steps whose reduction order differed from rank order.
        computing: the workers' compute intervals ``(start, end)`` in simulated seconds (``m_sync``: a dropped
            gradient's until its step ends); outside them a worker waits (barrier, network, server).
    """

    mode: str
    time: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    params: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))
    orders_changed: int = 0
    computing: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class _Setup:
    source: ModelSource
    plan: str
    input: str
    accumulate: str
    master: str
    compute: ComputeModel
    profile: Profile
    seed: int
    tick: Callable[[], None] | None = None  # called once per gradient computed: the caller's progress

    @property
    def n(self) -> int:
        return self.source.workers

    @property
    def nbytes(self) -> float:
        return self.source.elements * get_format(self.input).bits / 8

    def grad(self, k: int, w: int, params: NDArray[np.float32]) -> NDArray[np.float32]:
        """Worker w's fp32 gradient on its shard of step k's batch, at ``params``."""
        if self.tick is not None:
            self.tick()
        x, y = self.source.batch(k)
        sp = self.source.spec
        with np.errstate(all="ignore"):
            g = loss_and_grad(params.astype(np.float64), x[w], y[w], *self.source.dims, sp.activation)[1]  # type: ignore[arg-type]
            return (g * sp.loss_scale).astype(np.float32)

    def apply(self, params: NDArray[np.float32], g_sum: NDArray[np.floating], count: int) -> NDArray[np.float32]:
        """SGD with the mean of ``count`` gradients, rounded to the master format."""
        new = self.source.update(params, np.asarray(g_sum, np.float64) * (self.n / count), {})
        return new if self.master == "fp32" else round_to(new, self.master)

    def reduce(self, G: NDArray[np.float32], plan: plans.AnyPlan) -> NDArray[np.floating]:
        return reduce(round_to(G, self.input), plan, input=self.input, accumulate=self.accumulate)

    def init_params(self) -> NDArray[np.float32]:
        """The source's initial weights in the master format (every mode starts from the same)."""
        p = self.source.init_params()
        return p if self.master == "fp32" else round_to(p, self.master)

    def loss(self, params: NDArray[np.float32]) -> float:
        return self.source.loss(EVAL_STEP, params)


def _sync(s: _Setup, steps: int, arrival: bool, tr: Trace) -> NDArray[np.float32]:
    params, t = s.init_params(), 0.0
    fixed = plans.parse(s.plan, s.n)
    for k in range(steps):
        ready = t + s.compute.times(s.n, k, s.seed)
        tr.computing += [(t, float(r)) for r in ready]
        G = np.stack([s.grad(k, w, params) for w in range(s.n)])
        if arrival:
            tl = timeline("sequential", s.n, s.nbytes, s.profile, ready=ready, order="arrival")
            plan: plans.AnyPlan = plans.sequential(s.n, tl.order)
            tr.orders_changed += int(not np.array_equal(tl.order, np.arange(s.n)))
        else:
            tl = timeline(fixed, s.n, s.nbytes, s.profile, ready=ready)
            plan = fixed
        params = s.apply(params, s.reduce(G, plan), s.n)
        t = tl.end
        tr.time.append(t)
        tr.loss.append(s.loss(params))
        tr.staleness += [0] * s.n
    return params


def _async(s: _Setup, steps: int, tr: Trace) -> NDArray[np.float32]:
    """Parameter server: apply each gradient on arrival; the worker then reads the new weights."""
    params = s.init_params()
    msg = s.profile.alpha + s.nbytes * s.profile.beta  # one gradient or one weight vector over the network
    apply_cost = s.nbytes * s.profile.gamma
    c0 = s.compute.times(s.n, 0, s.seed)
    events = [(float(c0[w] + msg), w, 0, 0, params) for w in range(s.n)]  # (arrival, worker, k, version, weights)
    tr.computing += [(0.0, float(c)) for c in c0]
    heapq.heapify(events)
    server, version, done = 0.0, 0, 0
    while done < steps * s.n:
        arrive, w, k, read, seen = heapq.heappop(events)
        server = max(server, arrive) + apply_cost
        params = s.apply(params, s.grad(k, w, seen), s.n)  # 1/N of a step: the same learning rate per sample
        tr.staleness.append(version - read)
        version += 1
        done += 1
        if done % s.n == 0:
            tr.time.append(server)
            tr.loss.append(s.loss(params))
        start = server + msg  # the worker has the new weights
        busy = float(s.compute.times(s.n, k + 1, s.seed)[w])
        tr.computing.append((start, start + busy))
        nxt = float(start + busy + msg)
        heapq.heappush(events, (nxt, w, k + 1, version, params))
    return params


def _local(s: _Setup, steps: int, h: int, tr: Trace) -> NDArray[np.float32]:
    params, t = s.init_params(), 0.0
    plan = plans.parse(s.plan, s.n)
    for r in range(-(-steps // h)):
        ks = range(r * h, min((r + 1) * h, steps))
        busy = np.sum([s.compute.times(s.n, k, s.seed) for k in ks], axis=0)
        deltas = []
        for w in range(s.n):
            local = params.copy()
            for k in ks:
                local = s.apply(local, s.grad(k, w, local), 1)  # the worker's own full SGD step
            deltas.append(local.astype(np.float64) - params.astype(np.float64))
        D = np.stack(deltas).astype(np.float32)  # each delta rounded once to fp32
        total = np.asarray(s.reduce(D, plan), np.float64)  # the all-reduced sum of the N deltas
        params = (params.astype(np.float64) + total / s.n).astype(np.float32)  # plus their mean
        if s.master != "fp32":
            params = round_to(params, s.master)
        tr.computing += [(t, t + float(b)) for b in busy]
        t = timeline(plan, s.n, s.nbytes, s.profile, ready=t + busy).end
        for _ in ks:  # one point per step-equivalent, all at the round's end
            tr.time.append(t)
            tr.loss.append(s.loss(params))
        tr.staleness += [0] * (s.n * len(ks))
    return params


def _local_async(s: _Setup, steps: int, h: int, tr: Trace) -> NDArray[np.float32]:
    """Async Local-SGD: H local steps from the weights last read, then the delta applied on arrival."""
    params = s.init_params()
    msg = s.profile.alpha + s.nbytes * s.profile.beta
    apply_cost = s.nbytes * s.profile.gamma

    def work(w: int, k0: int, start: float, weights: NDArray[np.float32]) -> tuple[float, NDArray[np.float64]]:
        local, busy = weights.copy(), 0.0
        for k in range(k0, k0 + h):
            local = s.apply(local, s.grad(k, w, local), 1)  # the worker's own full SGD step
            busy += float(s.compute.times(s.n, k, s.seed)[w])
        tr.computing.append((start, start + busy))
        return start + busy + msg, local.astype(np.float64) - weights.astype(np.float64)

    events = []
    for w in range(s.n):
        arrive, delta = work(w, 0, 0.0, params)
        events.append((arrive, w, 0, 0, delta))
    heapq.heapify(events)
    server, version, done = 0.0, 0, 0
    while done < steps * s.n:
        arrive, w, k, read, delta = heapq.heappop(events)
        server = max(server, arrive) + apply_cost
        with np.errstate(all="ignore"):  # a diverging run: inf - inf is NaN, said by the report
            new = params.astype(np.float64) + delta.astype(np.float32).astype(np.float64) / s.n
            params = new.astype(np.float32) if s.master == "fp32" else round_to(new.astype(np.float32), s.master)
        tr.staleness.append(version - read)
        version += 1
        for _ in range(h):  # one delta = H gradients of this worker
            done += 1
            if done % s.n == 0 and len(tr.time) < steps:
                tr.time.append(server)
                tr.loss.append(s.loss(params))
        nxt, d2 = work(w, k + h, server + msg, params)
        heapq.heappush(events, (nxt, w, k + h, version, d2))
    return params


def _m_sync(s: _Setup, steps: int, m: int, tr: Trace) -> NDArray[np.float32]:
    params, t = s.init_params(), 0.0
    for k in range(steps):
        ready = t + s.compute.times(s.n, k, s.seed)
        first = np.argsort(ready, kind="stable")[:m]
        G = np.stack([s.grad(k, int(w), params) for w in first])
        params = s.apply(params, s.reduce(G, plans.sequential(m)), m)  # added in arrival order
        t0, t = t, float(ready[first[-1]]) + cost("ring" if m > 1 else "sequential", m, s.nbytes, s.profile)
        tr.computing += [(t0, min(float(r), t)) for r in ready]  # a dropped gradient: until the step ends
        tr.orders_changed += int(not np.array_equal(np.sort(first), first))
        tr.time.append(t)
        tr.loss.append(s.loss(params))
        tr.staleness += [0] * m
    return params


def simulate(
    source: ModelSource,
    mode: Mode,
    *,
    steps: int,
    plan: str = "ring",
    input: str = "bf16",
    accumulate: str = "fp32",
    master: str = "fp32",
    compute: ComputeModel | None = None,
    profile: Profile | None = None,
    seed: int = 0,
    tick: Callable[[], None] | None = None,
) -> Trace:
    """Train ``steps`` step-equivalents (N gradients each) in ``mode``; a seeded, deterministic :class:`Trace`.

    ``seed`` seeds the timing only (the model, data and initial weights come from the
    source's seed): another ``seed`` is a relaunch of the same job. ``tick()`` is called
    for every gradient computed (``steps`` x N in all, fewer for ``m_sync``): progress.
    """
    in_range("steps", steps, 1, integer=True)
    for f in (input, accumulate, master):
        get_format(f)
    plans.parse(plan, source.workers)
    s = _Setup(source, plan, input, accumulate, master, compute or ComputeModel(), profile or Profile(), seed, tick)
    tr = Trace(mode.text)
    if mode.kind == "async":
        tr.params = _async(s, steps, tr)
    elif mode.kind == "local":
        tr.params = _local(s, steps, mode.param, tr)
    elif mode.kind == "local_async":
        tr.params = _local_async(s, steps, mode.param, tr)
    elif mode.kind == "m_sync":
        tr.params = _m_sync(s, steps, mode.param, tr)
    else:
        tr.params = _sync(s, steps, mode.kind == "sync:arrival", tr)
    return tr

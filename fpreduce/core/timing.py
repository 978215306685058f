"""What a reduction costs in time: the alpha-beta-gamma model and an event timeline of its messages.

One all-reduce of ``nbytes`` over N workers is a schedule of messages. Each message of
``b`` bytes costs ``alpha + b * beta`` (latency, transfer); when the receiver adds it to its
own data it costs ``b * gamma`` more (reduction). A :class:`Profile` holds these constants,
for links between nodes and within a node, and the topology: ``gpus_per_node`` workers
per node (worker ``i`` is on node ``i // gpus_per_node``; ``hier:G`` and ``tree:nccl:G``
take G from the plan) and ``nics_per_node`` NICs, each of ``1 / beta`` bytes per second.

The links a message crosses: between two workers of one node, the intra-node constants
(every pair has its own link, NVLink/NVSwitch); between nodes, the inter-node ones, and the
node's NICs are shared. ``k`` flows that leave (or enter) a node at once share its ``c``
NICs: each moves at ``min(1, c / k)`` of one NIC's bandwidth, the tighter of its two ends
(a flow uses one NIC; no flow is faster than one NIC). So the 8 shards that ``hier:8``
sends across the network at once from a node of 8 GPUs with one NIC take 8 times as long
as one shard alone: a model never beats the links it crosses.

Two ways to the time of a plan, and the tests prove them equal when every worker starts
together:

* :func:`cost`: the closed forms of Thakur, Rabenseifner & Gropp (2005), for N workers
  and ``n`` bytes, ``L = floor(log2 N)``, ``P = 2**L``, on one kind of link:

  - ring (every convention): ``2(N-1) alpha + 2 (N-1)/N n beta + (N-1)/N n gamma``;
  - recursive doubling ``rd``: ``L (alpha + n beta + n gamma)`` for N a power of two,
    else ``(L+2) alpha + (L+2) n beta + (L+1) n gamma`` (the N - P extra ranks first hand
    their vector to a partner and get the result back at the end);
  - Rabenseifner (reduce-scatter by recursive halving, allgather by recursive doubling):
    ``2L alpha + 2 (P-1)/P n beta + (P-1)/P n gamma``, plus ``2 alpha + 2 n beta + n gamma``
    when N is not a power of two (the same extra steps);
  - ``linear`` (Open MPI basic_linear: reduce to rank 0, then broadcast), and every plan
    that is a fold in one place (``sequential``, ``reverse``, ``pairwise``, ``kary``,
    ``blocked``, ``numpy``, an explicit tree, ``atomic``: a parameter server that receives
    every gradient, adds them in its tree and sends the sum back):
    ``2(N-1) alpha + 2(N-1) n beta + (N-1) n gamma``;
  - ``hier:G`` (Horovod: ring reduce-scatter in each node of G, recursive doubling of the
    n/G shards across the N/G nodes, ring allgather in the node): the intra-node ring
    terms with the intra-node constants plus the ``rd`` form on ``n/G`` bytes, its
    ``beta`` times ``max(1, G / c)``: the G shards of a node cross its c NICs at once;
  - ``tree:nccl:G`` has no closed form here: its cost is the timeline's with equal starts.

  Across nodes of several workers each step takes its slowest link: the ring's step is
  the slower of its intra- and inter-node messages (each node has one flow out and one
  in); a step of ``rd`` or Rabenseifner whose partners are ``d >= G`` apart sends all G
  workers of a node across at once (``beta`` times ``max(1, G / c)``), one ``d < G`` apart
  stays inside the node; the server's ``G - 1`` node mates use the intra-node link. Where
  the steps are not uniform (``rd`` and Rabenseifner when N or G is not a power of two or
  G does not divide N, over nodes of several workers), :func:`cost` is the timeline's.

* :func:`timeline`: a discrete-event simulation of the same messages, each worker starting
  when its compute ends (``ready[i]``). A message can start when both its sender and its
  receiver are free (``max`` of their clocks); a worker sends and receives at once (full
  duplex) but receives one message at a time. The messages of one step of a collective
  share the NICs as above; messages sent one by one (the server, NCCL's trees) each hold
  one NIC of either node while they move, and wait for one to be free. With unequal
  starts it shows what waiting for the slowest costs, and for the parameter-server plans
  with ``order="arrival"`` the server adds the gradients in the order they arrive: the
  order and the time come from the same model.

What is not modelled: NCCL's pipelining of chunks through the tree and its channels (the
tree time here is unpipelined: an upper bound), contention inside the network beyond the
NICs (a non-blocking switch is assumed), and the size-dependent algorithm switches of the
libraries.

Bandwidths as nccl-tests reports them (``PERFORMANCE.md``): ``algbw = nbytes / t`` and, for
an all-reduce, ``busbw = algbw * 2 (N-1) / N``. :func:`busbw_bound` is the most the links a
plan crosses allow (the all-reduce lower bound ``2 (p-1)/p n beta`` of Patarasuk & Yuan
2009 and Chan et al. 2007, for the workers and for the nodes).

>>> p = Profile(alpha=1e-5, beta=1e-9, gamma=1e-10)
>>> round(cost("ring", 8, 1_000_000, p), 9)  # 14 alpha + 1.75 ms + 0.0875 ms
0.0019775
>>> round(cost("rd", 8, 1_000_000, p), 9)  # 3 (alpha + n beta + n gamma)
0.00333
>>> tl = timeline("sequential", 3, 0, p, ready=[0.0, 2e-5, 1e-5], order="arrival")
>>> tl.order.tolist()  # the server adds worker 2 (ready first) before worker 1
[0, 2, 1]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans import AnyPlan, parse
from fpreduce.plans.collectives import dtree_children as _dtree_children

__all__ = ["FOLDS", "Profile", "Timeline", "bus_bandwidth", "busbw_bound", "cost", "terms", "timeline"]

# Plans that are a fold in one place: gathered by a server, added there, sent back.
FOLDS = ("linear", "sequential", "reverse", "pairwise", "kary", "blocked", "numpy", "tree", "atomic")
Order = Literal["rank", "arrival"]


@dataclass(frozen=True)
class Profile:
    """The constants of a cluster: seconds per message, per byte moved, per byte added.

    The defaults are a plausible GPU cluster: 5 us and one 100 Gb/s NIC (12.5 GB/s)
    between nodes, 1 us and 150 GB/s within a node, reductions at 100 GB/s, one worker
    per node. Worker ``i`` is on node ``i // gpus_per_node``; a message between two
    workers of a node takes the intra-node constants, one between nodes the inter-node
    ones, and the flows that leave or enter a node at once share its NICs (module
    docstring).

    Attributes:
        alpha: latency of one message between nodes (s).
        beta: transfer time per byte through one NIC (s/B): 1 / the NIC's bandwidth.
        gamma: reduction time per byte (s/B).
        alpha_intra: latency within a node (s).
        beta_intra: transfer time per byte within a node (s/B), per pair of workers.
        gpus_per_node: workers per node, for the flat plans (``hier:G`` and
            ``tree:nccl:G`` take G from the plan).
        nics_per_node: NICs per node, each of ``1 / beta`` B/s; concurrent flows
            between nodes share them.
        name: a label.
    """

    alpha: float = 5e-6
    beta: float = 1 / 12.5e9
    gamma: float = 1 / 100e9
    alpha_intra: float = 1e-6
    beta_intra: float = 1 / 150e9
    gpus_per_node: int = 1
    nics_per_node: int = 1
    name: str = "default"

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "name":
                continue
            if f.name in ("gpus_per_node", "nics_per_node"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise InvalidArgument(f"cluster.{f.name} must be an integer >= 1, got {v!r}")
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise InvalidArgument(f"cluster.{f.name} must be a finite number >= 0 seconds, got {v!r}")
        if self.beta <= 0 or self.beta_intra <= 0:
            raise InvalidArgument("cluster.beta and cluster.beta_intra must be > 0 (1 / bandwidth in s/B)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        """A profile from a ``[cluster]`` TOML table; unknown keys are errors with a hint.

        Bandwidths may be given instead of per-byte times: ``bandwidth`` (B/s of one NIC)
        for ``beta``, ``bandwidth_intra`` for ``beta_intra``, ``reduce_bandwidth`` for ``gamma``.
        """
        names = {f.name for f in fields(cls)}
        alias = {"bandwidth": "beta", "bandwidth_intra": "beta_intra", "reduce_bandwidth": "gamma"}
        kw: dict[str, Any] = {}
        for k, v in d.items():
            if k in alias:
                if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or not math.isfinite(v):
                    raise InvalidArgument(f"cluster.{k} must be a positive number of bytes per second, got {v!r}")
                kw[alias[k]] = 1.0 / v
            elif k in names:
                kw[k] = v
            else:
                raise unknown_name("cluster key", k, sorted(names | set(alias)))
        return cls(**kw)

    def node_size(self, plan: AnyPlan | str) -> int:
        """Workers per node under ``plan``: G of ``hier:G`` and ``tree:nccl:G``, else ``gpus_per_node``."""
        name = plan if isinstance(plan, str) else plan.name
        if name.startswith(("hier:", "tree:nccl:")):
            return int(name.split(":")[-1])
        return self.gpus_per_node


@dataclass(frozen=True)
class _Net:
    """The links of one plan: nodes of ``g`` workers with ``nics`` NICs, intra- and inter-node constants."""

    g: int
    nics: int
    alpha: float
    beta: float
    alpha_intra: float
    beta_intra: float

    @classmethod
    def of(cls, pr: Profile, g: int) -> _Net:
        return cls(g, pr.nics_per_node, pr.alpha, pr.beta, pr.alpha_intra, pr.beta_intra)

    def cross(self, s: int, d: int) -> bool:
        """Whether a message from worker ``s`` to ``d`` leaves its node."""
        return s // self.g != d // self.g

    def share(self, flows: int) -> float:
        """How many times longer a byte takes when ``flows`` flows share the node's NICs (>= 1)."""
        return max(1.0, flows / self.nics)

    def link(self, s: int, d: int, share: float = 1.0) -> tuple[float, float]:
        """``(alpha, beta)`` of a message from ``s`` to ``d``, its NIC shared ``share`` ways if it leaves the node."""
        if self.cross(s, d):
            return self.alpha, self.beta * share
        return self.alpha_intra, self.beta_intra


def _plan(plan: AnyPlan | str, n: int) -> AnyPlan:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidArgument(f"number of workers must be a positive int, got {n!r}")
    p = parse(plan, int(n)) if isinstance(plan, str) else plan
    if p.n != n:
        raise InvalidArgument(f"plan {p.name!r} is for {p.n} workers, not {n}")
    return p


def _family(p: AnyPlan) -> str:
    """The cost family of a plan: ``nccl_tree`` for ``tree:nccl:G``, else the plan name's first part."""
    return "nccl_tree" if p.name.startswith("tree:nccl") else p.name.split(":")[0]


def _check_bytes(nbytes: float) -> float:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | float | np.integer | np.floating) or not nbytes >= 0:
        raise InvalidArgument(f"nbytes must be a number >= 0, got {nbytes!r}")
    return float(nbytes)


Terms = tuple[float, float, float]  # (messages, bytes moved, bytes added) on the critical path


def _ring_terms(n: int, b: float) -> Terms:
    return 2 * (n - 1), 2 * (n - 1) / n * b, (n - 1) / n * b


def _rd_terms(n: int, b: float) -> Terms:
    L = n.bit_length() - 1
    if n == 1 << L:
        return L, L * b, L * b
    return L + 2, (L + 2) * b, (L + 1) * b


def _rabenseifner_terms(n: int, b: float) -> Terms:
    L = n.bit_length() - 1
    P = 1 << L
    a, m, g = 2 * L, 2 * (P - 1) / P * b, (P - 1) / P * b
    return (a, m, g) if n == P else (a + 2, m + 2 * b, g + b)


def _server_terms(n: int, b: float) -> Terms:
    return 2 * (n - 1), 2 * (n - 1) * b, (n - 1) * b


_FLAT_TERMS = {"ring": _ring_terms, "rd": _rd_terms, "rabenseifner": _rabenseifner_terms}


def terms(plan: AnyPlan | str, n_workers: int, nbytes: float) -> Terms:
    """The closed form's coefficients ``(a, m, g)``: ``cost = a alpha + m beta + g gamma`` on one kind of link.

    For the flat plans (ring, rd, Rabenseifner and the parameter-server folds); what
    :mod:`fpreduce.backends.calibrate` fits measured times with.

    Raises:
        InvalidArgument: a hierarchical or tree plan (two kinds of link, or no closed form).
    """
    p = _plan(plan, n_workers)
    b = _check_bytes(nbytes)
    fam = _family(p)
    if p.n == 1:
        return 0.0, 0.0, 0.0
    if fam in _FLAT_TERMS:
        return _FLAT_TERMS[fam](p.n, b)
    if fam in FOLDS:
        return _server_terms(p.n, b)
    raise InvalidArgument(f"plan {p.name!r} has no one-link closed form (hierarchical or tree)")


def _dot(t: Terms, a: float, beta: float, gamma: float) -> float:
    return t[0] * a + t[1] * beta + t[2] * gamma


def _ring(n: int, b: float, a: float, beta: float, gamma: float) -> float:
    return _dot(_ring_terms(n, b), a, beta, gamma)


def _rd(n: int, b: float, a: float, beta: float, gamma: float) -> float:
    return _dot(_rd_terms(n, b), a, beta, gamma)


def _pow2(x: int) -> bool:
    return x & (x - 1) == 0


def _ring_cost(net: _Net, n: int, b: float, gamma: float) -> float:
    """Each of the 2(N-1) steps takes the ring's slowest link (a node has one flow out and one in)."""
    s = b / n
    links = []
    if min(net.g, n) > 1:
        links.append(net.alpha_intra + s * net.beta_intra)
    if n > net.g:
        links.append(net.alpha + s * net.beta)
    step = max(links)
    return (n - 1) * (step + s * gamma) + (n - 1) * step


def _step(net: _Net, dist: int, b: float) -> float:
    """A step of every worker with the partner ``dist`` ranks away: all G of a node cross at once, or none."""
    return net.alpha + b * net.beta * net.share(net.g) if dist >= net.g else net.alpha_intra + b * net.beta_intra


def _butterfly_cost(fam: str, net: _Net, n: int, b: float, gamma: float) -> float | None:
    """``rd`` or Rabenseifner step by step; None where the steps are not uniform (the timeline decides)."""
    if net.g == 1 or n <= net.g:  # one kind of link, one flow per node: the textbook form
        a, beta = (net.alpha, net.beta) if net.g == 1 else (net.alpha_intra, net.beta_intra)
        return _dot(_FLAT_TERMS[fam](n, b), a, beta, gamma)
    if not (_pow2(n) and _pow2(net.g) and n % net.g == 0):
        return None
    L = n.bit_length() - 1
    t = 0.0
    if fam == "rd":
        for j in range(L):
            t += _step(net, 1 << j, b) + b * gamma
        return t
    for j in range(L):  # recursive halving, then recursive doubling of the pieces
        t += _step(net, n >> (j + 1), b / (2 << j)) + b / (2 << j) * gamma
    for j in range(L):
        t += _step(net, 1 << j, b * (1 << j) / n)
    return t


def _server_cost(net: _Net, n: int, b: float, gamma: float) -> float:
    """The server's node mates over the intra-node link, everyone else through the NICs, one at a time."""
    mates = min(net.g, n) - 1
    others = n - 1 - mates
    one_way = mates * (net.alpha_intra + b * net.beta_intra) + others * (net.alpha + b * net.beta)
    return 2 * one_way + (n - 1) * b * gamma


def cost(plan: AnyPlan | str, n_workers: int, nbytes: float, profile: Profile | None = None) -> float:
    """Seconds for one all-reduce of ``nbytes`` over ``n_workers`` with ``plan``, all starting together.

    Args:
        plan: a plan or its text (``"ring"``, ``"rd"``, ``"hier:8"``, ...).
        n_workers: N.
        nbytes: the size of each worker's gradient in bytes (elements x bytes per element).
        profile: the cluster's constants and topology (default :class:`Profile`).

    Raises:
        InvalidArgument: unknown plan, N not matching the plan, negative size.
    """
    pr = profile or Profile()
    p = _plan(plan, n_workers)
    b = _check_bytes(nbytes)
    n = p.n
    fam = _family(p)
    if n == 1:
        return 0.0
    net = _Net.of(pr, pr.node_size(p))
    t: float | None = None
    if fam == "ring":
        t = _ring_cost(net, n, b, pr.gamma)
    elif fam in ("rd", "rabenseifner"):
        t = _butterfly_cost(fam, net, n, b, pr.gamma)
    elif fam in FOLDS:
        t = _server_cost(net, n, b, pr.gamma)
    elif fam == "hier":
        g = net.g
        intra = _ring(g, b, pr.alpha_intra, pr.beta_intra, pr.gamma) if g > 1 else 0.0
        t = intra + (_rd(n // g, b / g, pr.alpha, pr.beta * net.share(g), pr.gamma) if n // g > 1 else 0.0)
    return float(timeline(p, n, b, pr).end) if t is None else t  # tree:nccl and uneven steps: the timeline


def busbw_bound(plan: AnyPlan | str, n_workers: int, profile: Profile | None = None) -> float:
    """The most bus bandwidth (B/s) the links ``plan`` crosses allow for an all-reduce over ``n_workers``.

    An all-reduce over p parties, each sending and receiving at ``B`` B/s, takes at least
    ``2 (p-1)/p n / B`` (Patarasuk & Yuan 2009; Chan et al. 2007). For the workers (one
    message each way at a time, over their fastest link) that bounds busbw by ``B``; for
    the M nodes (``c`` NICs of ``1 / beta`` each) by ``c / beta * (N-1) M / (N (M-1))``.
    Infinite for one worker (nothing moves).
    """
    pr = profile or Profile()
    p = _plan(plan, n_workers)
    n, g = p.n, pr.node_size(p)
    if n == 1:
        return math.inf
    nodes = -(-n // g)
    if nodes == 1:
        return 1 / pr.beta_intra
    port = max(1 / pr.beta, 1 / pr.beta_intra if g > 1 else 0.0)
    return min(port, pr.nics_per_node / pr.beta * (n - 1) * nodes / (n * (nodes - 1)))


def bus_bandwidth(nbytes: float, seconds: float, n_workers: int) -> tuple[float, float]:
    """nccl-tests' ``(algbw, busbw)`` of an all-reduce in bytes per second (inf for zero time)."""
    if seconds <= 0:
        return math.inf, math.inf
    alg = nbytes / seconds
    return alg, alg * 2 * (n_workers - 1) / n_workers


@dataclass(frozen=True)
class Timeline:
    """The simulated messages of one all-reduce.

    Attributes:
        ready: when each worker's compute ended (its start), seconds.
        done: when each worker holds the result.
        order: the order in which the server added the workers' gradients (parameter-server
            plans: by readiness with ``order="arrival"``, ties to the lower rank), else ``range(N)``.
        messages: (sender, receiver, start, end) of every message, in program order.
    """

    ready: NDArray[np.float64]
    done: NDArray[np.float64]
    order: NDArray[np.intp]
    messages: list[tuple[int, int, float, float]] = field(repr=False)

    @property
    def end(self) -> float:
        """When the last worker holds the result."""
        return float(self.done.max()) if self.done.size else 0.0

    @property
    def wait(self) -> NDArray[np.float64]:
        """Per worker, time between its own start and the end: communication plus waiting for the others."""
        return self.end - self.ready


class _Sim:
    """Worker clocks, NICs and the message rules.

    ``round``: messages that happen at once; the flows that leave or enter a node in it
    share its NICs. ``send``: one message on its own; if it leaves its node it holds one
    NIC of each end (the earliest free) while it moves. ``nics`` (busy-until per NIC, per
    node and direction) may be shared between simulations that run at the same time.
    """

    def __init__(self, ready: NDArray[np.float64], net: _Net, nics: dict[tuple[int, int], list[float]] | None = None):
        self.t = ready.astype(np.float64).copy()
        self.net = net
        self.nics = {} if nics is None else nics
        self.messages: list[tuple[int, int, float, float]] = []

    def _nic(self, node: int, way: int) -> list[float]:
        return self.nics.setdefault((node, way), [-math.inf] * self.net.nics)

    def send(self, s: int, d: int, b: float, gamma: float = 0.0) -> None:
        t0 = max(self.t[s], self.t[d])
        cross = self.net.cross(s, d)
        if cross:
            out, inn = self._nic(s // self.net.g, 0), self._nic(d // self.net.g, 1)
            i, j = out.index(min(out)), inn.index(min(inn))
            t0 = max(t0, out[i], inn[j])
        a, beta = self.net.link(s, d)
        t1 = t0 + a + b * beta
        if cross:
            out[i] = inn[j] = t1
        self.t[s] = max(self.t[s], t1)
        self.t[d] = t1 + b * gamma
        self.messages.append((s, d, float(t0), float(t1)))

    def round(self, pairs: Sequence[tuple[int, int]], b: float, gamma: float = 0.0) -> None:
        """Messages that happen at once: all start from the clocks before the round."""
        g = self.net.g
        crossing = [(s // g, d // g) for s, d in pairs if self.net.cross(s, d)]
        out, inn = Counter(x for x, _ in crossing), Counter(y for _, y in crossing)
        t = self.t.copy()
        new = t.copy()
        for s, d in pairs:
            share = max(self.net.share(out[s // g]), self.net.share(inn[d // g])) if self.net.cross(s, d) else 1.0
            t0 = max(t[s], t[d])
            a, beta = self.net.link(s, d, share)
            t1 = t0 + a + b * beta
            new[s] = max(new[s], t1)
            new[d] = max(new[d], t1 + b * gamma)
            self.messages.append((s, d, float(t0), float(t1)))
        self.t = new


def _sim_ring(sim: _Sim, rings: Sequence[Sequence[int]], b: float, gamma: float, scatter: bool, gather: bool) -> None:
    """Rings (one per list of ranks, all the same size) stepping together: reduce-scatter, allgather of b / k."""
    k = len(rings[0])
    pairs = [(ranks[i], ranks[(i + 1) % k]) for ranks in rings for i in range(k)]
    for _ in range(k - 1 if scatter else 0):  # reduce-scatter: chunks of b / k, added on arrival
        sim.round(pairs, b / k, gamma)
    for _ in range(k - 1 if gather else 0):
        sim.round(pairs, b / k)


def _extra(n: int) -> tuple[int, int]:
    L = n.bit_length() - 1
    return 1 << L, n - (1 << L)


def _sim_rd(sim: _Sim, groups: Sequence[Sequence[int]], b: float, gamma: float) -> None:
    """Recursive doubling in each group of ranks (all the same size), the groups stepping together."""
    P, r = _extra(len(groups[0]))
    if r:  # odd ranks 2i+1 (i < r) hand their vector to 2i
        sim.round([(ranks[2 * i + 1], ranks[2 * i]) for ranks in groups for i in range(r)], b, gamma)
    virts = [[ranks[2 * i] if i < r else ranks[i + r] for i in range(P)] for ranks in groups]
    dist = 1
    while dist < P:
        sim.round([(virt[v], virt[v ^ dist]) for virt in virts for v in range(P)], b, gamma)
        dist <<= 1
    if r:
        sim.round([(ranks[2 * i], ranks[2 * i + 1]) for ranks in groups for i in range(r)], b)


def _sim_rabenseifner(sim: _Sim, n: int, b: float, gamma: float) -> None:
    P, r = _extra(n)
    if r:
        sim.round([(2 * i + 1, 2 * i) for i in range(r)], b, gamma)
    virt = [2 * i if i < r else i + r for i in range(P)]
    L = P.bit_length() - 1
    for j in range(L):  # recursive halving: exchange half of what is left, add it
        sim.round([(virt[v], virt[v ^ (P >> (j + 1))]) for v in range(P)], b / (2 << j), gamma)
    for j in range(L):  # recursive doubling of the pieces
        sim.round([(virt[v], virt[v ^ (1 << j)]) for v in range(P)], b * (1 << j) / P)
    if r:
        sim.round([(2 * i, 2 * i + 1) for i in range(r)], b)


def _sim_server(sim: _Sim, n: int, b: float, gamma: float, order: Order) -> NDArray[np.intp]:
    """Rank 0 gathers, adds and broadcasts; with ``arrival`` it adds in the order the workers are ready.

    Its own gradient needs no message: it takes its place in the order at its own ready
    time (the server cannot add anything before it has finished computing itself).
    """
    used = np.argsort(sim.t, kind="stable").astype(np.intp) if order == "arrival" else np.arange(n, dtype=np.intp)
    for w in used.tolist():
        if w:
            sim.send(w, 0, b, gamma)
    for w in range(1, n):
        sim.send(0, w, b)
    return used


def _tree_down(n: int, g: int, which: int) -> tuple[list[list[int]], int]:
    """Children of every rank in NCCL tree ``which`` (chain in a node, binary tree across nodes) and its root."""
    nnodes = n // g
    kids = _dtree_children(nnodes, which)
    down: list[list[int]] = [[] for _ in range(n)]
    for x in range(nnodes):
        for i in range(g - 1):
            down[x * g + i].append(x * g + i + 1)
        at0, at1 = (x * g, x * g) if g == 1 else (x * g + 1, x * g)
        d0, d1 = kids[x]
        if d0 >= 0:
            down[at0].append(d0 * g)
        if d1 >= 0:
            down[at1].append(d1 * g)
    has_parent = {c for cs in down for c in cs}
    return down, next(x * g for x in range(nnodes) if x * g not in has_parent)


def _sim_tree(sim: _Sim, b: float, gamma: float) -> None:
    """NCCL's two trees, each carrying half the data, unpipelined; the slower one ends the step.

    Each rank adds its children's partial sums in its ``down`` order (up the tree), then
    the root sends the sum back down in the same order. The two trees run at once and
    share the nodes' NICs.
    """
    start = sim.t.copy()
    n, g = start.size, sim.net.g
    ends = []
    for which in (0, 1):
        sub = _Sim(start, sim.net, sim.nics)
        down, root = _tree_down(n, g, which)
        post: list[int] = []  # ranks in post order: children before parents
        stack = [(root, False)]
        while stack:
            v, seen = stack.pop()
            if seen:
                post.append(v)
                continue
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(down[v]))
        for v in post:
            for c in down[v]:
                sub.send(c, v, b / 2, gamma)
        for v in reversed(post):  # parents before children
            for c in down[v]:
                sub.send(v, c, b / 2)
        sim.messages.extend(sub.messages)
        ends.append(sub.t)
    sim.t = np.maximum(ends[0], ends[1])


def timeline(
    plan: AnyPlan | str,
    n_workers: int,
    nbytes: float,
    profile: Profile | None = None,
    *,
    ready: ArrayLike | None = None,
    order: Order = "rank",
) -> Timeline:
    """Simulate one all-reduce message by message, each worker starting at ``ready[i]``.

    Args:
        plan: a plan or its text.
        n_workers: N.
        nbytes: each worker's gradient size in bytes.
        profile: the cluster's constants and topology.
        ready: when each worker's compute ends (default: all at 0).
        order: for the parameter-server plans (see :data:`FOLDS`): ``rank`` adds the
            workers in rank order, ``arrival`` in the order they are ready.

    Returns:
        The :class:`Timeline`; with equal ``ready`` its ``end`` equals :func:`cost`
        (up to rounding of the float sums).
    """
    pr = profile or Profile()
    p = _plan(plan, n_workers)
    b = _check_bytes(nbytes)
    n = p.n
    r0 = np.zeros(n) if ready is None else np.asarray(ready, dtype=np.float64)
    if r0.shape != (n,) or not np.isfinite(r0).all():
        raise InvalidArgument(f"ready must be {n} finite start times, got shape {r0.shape}")
    if order not in ("rank", "arrival"):
        raise unknown_name("order", order, ("rank", "arrival"))
    sim = _Sim(r0, _Net.of(pr, pr.node_size(p)))
    fam = _family(p)
    used = np.arange(n, dtype=np.intp)
    g = sim.net.g
    if n == 1:
        pass
    elif fam == "ring":
        _sim_ring(sim, [range(n)], b, pr.gamma, scatter=True, gather=True)
    elif fam == "rd":
        _sim_rd(sim, [range(n)], b, pr.gamma)
    elif fam == "rabenseifner":
        _sim_rabenseifner(sim, n, b, pr.gamma)
    elif fam == "hier":
        nodes = [range(x * g, x * g + g) for x in range(n // g)]
        if g > 1:
            _sim_ring(sim, nodes, b, pr.gamma, scatter=True, gather=False)
        if n // g > 1:  # shard s crosses the nodes between their local ranks s, every shard at once
            _sim_rd(sim, [[node[s] for node in nodes] for s in range(g)], b / g, pr.gamma)
        if g > 1:
            _sim_ring(sim, nodes, b, pr.gamma, scatter=False, gather=True)
    elif fam in FOLDS:
        used = _sim_server(sim, n, b, pr.gamma, order)
    elif fam == "nccl_tree":
        _sim_tree(sim, b, pr.gamma)
    else:  # pragma: no cover - every family of plans.FAMILIES is handled above
        raise InvalidArgument(f"no time model for plan {p.name!r}")
    return Timeline(ready=r0.copy(), done=sim.t, order=used, messages=sim.messages)

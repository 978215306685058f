"""Experiment B on real Open MPI processes: re-ranking and arrival order.

* :func:`reranking`: every step the ranks are re-numbered by ``Comm.Split(0, key)``
  with a fresh random key per rank, so each worker's position in the ring / tree
  changes; the real result must equal the emulation of the *relabelled* plan,
  bit for bit, at every step (and usually differs from the un-relabelled one).
* :func:`arrival_order`: ``MPI_Reduce(SUM)`` to rank 0 through coll/adapt's linear
  tree, whose root adds its own buffer and then each child's in the order the
  messages arrive (``coll_adapt_ireduce.c``, ``recv_cb``). Every rank but 0 sleeps
  a random delay first; each step's result must be the sequential fold
  ``((x0 + x_a) + x_b) + ...`` for some order (a, b, ...) of the children, and we
  record which order and how many distinct results the steps produced.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from fpreduce.backends import mpi
from fpreduce.backends._common import bits, differing, emulate, make_inputs
from fpreduce.plans import sequential


@dataclass(frozen=True)
class RerankStep:
    """One re-ranked step: ``holder[j]`` is the worker (old rank) that became rank j."""

    holder: tuple[int, ...]
    differing: int
    differing_unrelabelled: int
    ranks_agree: bool


def reranking(
    n: int, algorithm: str, *, steps: int = 6, elements: int = 200, seed: int = 0, timeout: float = 120.0
) -> list[RerankStep]:
    """Run ``steps`` all-reduces, each on ``COMM_WORLD.Split(0, key)`` with new random keys.

    Worker w always sends row w of its step's inputs; the library sees it as rank
    ``holder.index(w)``. Returns, per step, the elements differing from the plan
    relabelled by ``holder`` (goal 0) and from the plan without relabelling.
    """
    rng = np.random.default_rng([seed, n, 1])
    keys = [rng.permutation(n).tolist() for _ in range(steps)]
    cases = [make_inputs(n, elements, "fp32", seed * 1000 + s) for s in range(steps)]
    res = mpi.run_allreduce(cases, algorithm, split_keys=keys, timeout=timeout)
    out = []
    for X, k, outs in zip(cases, keys, res, strict=True):
        _, plan, _ = mpi.expected_plan(algorithm, n, elements, "fp32")
        holder = tuple(int(v) for v in np.argsort(k, kind="stable"))  # Split orders by (key, old rank)
        y = outs[0]
        agree = all(np.array_equal(bits(y), bits(o)) for o in outs[1:])
        out.append(
            RerankStep(
                holder,
                differing(y, emulate(X, plan.relabel(holder), "fp32")),
                differing(y, emulate(X, plan, "fp32")),
                agree,
            )
        )
    return out


@dataclass(frozen=True)
class ArrivalResult:
    """The arrival-order run.

    Attributes:
        orders: per step, every children order (after rank 0) whose sequential
            fold equals the real result bit for bit (empty: no order explains it).
        delay_orders: per step, the children sorted by their injected delay.
        distinct: number of distinct results (bitwise) over the steps.
        possible: number of distinct results the (n-1)! orders can give.
    """

    orders: tuple[tuple[tuple[int, ...], ...], ...]
    delay_orders: tuple[tuple[int, ...], ...]
    distinct: int
    possible: int

    @property
    def explained(self) -> bool:
        """Every step equals a sequential sum in some arrival order."""
        return all(self.orders)

    @property
    def matched_delay_order(self) -> int:
        """Steps whose result is the fold in the order of the injected delays."""
        return sum(d in o for d, o in zip(self.delay_orders, self.orders, strict=True))


def arrival_order(
    n: int, *, steps: int = 12, elements: int = 256, seed: int = 0, spacing: float = 0.02, timeout: float = 120.0
) -> ArrivalResult:
    """``steps`` real reductions of the same inputs, children delayed by a random permutation.

    Child ``c`` sleeps ``spacing * position`` seconds, its position in a random
    permutation drawn per step; rank 0 does not sleep. n <= 8 (all (n-1)! orders
    are enumerated).
    """
    if not 2 <= n <= 8:
        raise ValueError("arrival_order enumerates (n-1)! orders: use 2 <= n <= 8")
    rng = np.random.default_rng([seed, n, 2])
    delays = [[0.0, *(rng.permutation(n - 1) * spacing).tolist()] for _ in range(steps)]
    X = make_inputs(n, elements, "fp32", seed)
    res = mpi.run_allreduce([X] * steps, "ring", delays=delays, timeout=timeout)
    folds = {p: bits(emulate(X, sequential(n, (0, *p)), "fp32")) for p in itertools.permutations(range(1, n))}
    orders = []
    seen = set()
    for outs in res:
        y = bits(outs[0])
        seen.add(y.tobytes())
        orders.append(tuple(p for p, v in folds.items() if np.array_equal(v, y)))
    delay_orders = tuple(tuple(int(i) + 1 for i in np.argsort(d[1:], kind="stable")) for d in delays)
    return ArrivalResult(tuple(orders), delay_orders, len(seen), len({v.tobytes() for v in folds.values()}))

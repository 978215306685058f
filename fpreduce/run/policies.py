"""Order policies: the plan an arm reduces with at each step.

An arm's :class:`~fpreduce.run.config.OrderPolicy` (its ``order``) gives ``fixed:<plan>``
the same plan every step, ``shuffle:<plan>`` the plan re-ranked by a fresh random
permutation, ``arrival`` a sequential fold in the arrival order of the latency model
(``[arrival]``: each worker's compute ends at ``base + mean[w] + jitter``; a parameter
server adds the gradients as they come, the order of
:func:`fpreduce.core.timing.timeline`'s server), ``atomic`` every element its own random order, ``random_tree`` a
random tree shape and leaf order.

Randomness: the draws of step ``t`` come from ``default_rng([seed, t, crc32(order),
salt])``, so two arms with the same policy see the same orders, and a run is bitwise
reproducible from its config and seed; ``salt`` re-seeds them (another run of the
same job). The arrival means are drawn once per run from ``default_rng([seed, 0xA771])``.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from fpreduce import plans
from fpreduce.core.timing import timeline
from fpreduce.run.config import ArmSpec, Config

__all__ = ["arrival_means", "plan_for", "shuffle_permutation"]


def _rng(cfg: Config, step: int, order: str, salt: int) -> np.random.Generator:
    return np.random.default_rng([cfg.experiment.seed, step, zlib.crc32(order.encode()), salt])


def arrival_means(cfg: Config) -> np.ndarray:
    """Per-worker mean extra latency, drawn once per run (the slow and the fast workers)."""
    rng = np.random.default_rng([cfg.experiment.seed, 0xA771])
    return rng.uniform(0.0, cfg.arrival.spread, cfg.experiment.workers)


def plan_for(cfg: Config, arm: ArmSpec, step: int, *, salt: int = 0) -> Any:
    """The plan ``arm`` uses at ``step`` (``salt`` re-seeds the policy: another run)."""
    n = cfg.experiment.workers
    policy = arm.policy
    if policy.kind == "fixed":
        return plans.parse(policy.plan, n)
    rng = _rng(cfg, step, arm.order, salt)
    if policy.kind == "shuffle":
        return plans.parse(policy.plan, n).relabel(rng.permutation(n))  # = shuffle_permutation(...)
    if policy.kind == "arrival":
        a = cfg.arrival
        jitter = {
            "exponential": lambda: rng.exponential(a.scale, n),
            "normal": lambda: rng.normal(0.0, a.scale, n),
            "lognormal": lambda: rng.lognormal(0.0, a.scale, n),
        }[a.jitter]()
        ready = a.base + arrival_means(cfg) + jitter
        return plans.sequential(n, timeline("sequential", n, 0, ready=ready, order="arrival").order)
    if policy.kind == "atomic":
        return plans.parse("atomic", n, seed=int(rng.integers(0, 2**31)))
    return plans.random_tree(n, rng)


def shuffle_permutation(cfg: Config, arm: ArmSpec, step: int, *, salt: int = 0) -> np.ndarray:
    """The permutation a ``shuffle:<plan>`` arm relabels its plan with at ``step`` (see :func:`plan_for`)."""
    return _rng(cfg, step, arm.order, salt).permutation(cfg.experiment.workers)

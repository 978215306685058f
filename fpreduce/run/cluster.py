"""The ``[cluster]`` table of the scale and price configs (and the ``profile`` of scale.json, the ``cluster`` of
price.json): a :class:`~fpreduce.core.timing.Profile` read through :mod:`fpreduce.run.schema`.

>>> cluster_profile({"gpus_per_node": 8}).gpus_per_node
8
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.timing import Profile
from fpreduce.run.schema import Table, build, rule

__all__ = ["ClusterTable", "cluster_profile"]


@dataclass(frozen=True)
class ClusterTable(Table):
    """The ``[cluster]`` table of the scale and price configs: a :class:`~fpreduce.core.timing.Profile`'s
    constants (seconds, seconds per byte; workers and NICs per node), or a bandwidth in place of a per-byte
    time (``bandwidth``: B/s of one NIC for ``beta``, ``bandwidth_intra`` for ``beta_intra``,
    ``reduce_bandwidth`` for ``gamma``; one of the two, never both). Keys not given take the Profile's defaults.
    """

    table: ClassVar[str] = "cluster"
    alpha: float = rule(Profile.alpha, lo=0)
    beta: float | None = rule(None, lo=0, gt=True)
    gamma: float | None = rule(None, lo=0)
    alpha_intra: float = rule(Profile.alpha_intra, lo=0)
    beta_intra: float | None = rule(None, lo=0, gt=True)
    gpus_per_node: int = rule(1, lo=1)
    nics_per_node: int = rule(1, lo=1)
    name: str = "default"
    bandwidth: float | None = rule(None, lo=0, gt=True)
    bandwidth_intra: float | None = rule(None, lo=0, gt=True)
    reduce_bandwidth: float | None = rule(None, lo=0, gt=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        for time, rate in _RATES.items():
            if getattr(self, time) is not None and getattr(self, rate) is not None:
                raise InvalidArgument(f"{self.table}.{time} and {rate}: give one of them (s/B or B/s)")

    def profile(self) -> Profile:
        """The profile: every key given, the bandwidths as their per-byte times."""
        kw = {k: getattr(self, k) for k in ("alpha", "alpha_intra", "gpus_per_node", "nics_per_node", "name")}
        for time, rate in _RATES.items():
            t, r = getattr(self, time), getattr(self, rate)
            kw[time] = t if t is not None else 1.0 / r if r is not None else getattr(Profile, time)
        return Profile(**kw)


_RATES = {"beta": "bandwidth", "beta_intra": "bandwidth_intra", "gamma": "reduce_bandwidth"}


def cluster_profile(d: object, table: str = "cluster") -> Profile:
    """The profile of a ``[cluster]`` table (:class:`ClusterTable`), each error one line naming ``{table}.<key>``.

    >>> cluster_profile({"bandwidth": 25e9}).beta
    4e-11
    >>> cluster_profile({"bandwidth": 0})
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: cluster.bandwidth: must be finite and > 0, got 0.0
    """
    return build(ClusterTable, table, d, aliases={"latency": "alpha", "nics": "nics_per_node"}).profile()

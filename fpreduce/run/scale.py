"""The ``fpreduce scale`` config: tables ``[scale]`` and ``[cluster]``, read through :mod:`fpreduce.run.schema`.

The curve it asks for is :func:`fpreduce.analysis.scaling.scaling`; this module only reads
and checks the document (``examples/scaling.toml``): every key optional, unknown keys and
tables refused with a close-match hint, every error one line naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fpreduce.analysis.scaling import MAX_WORKERS, ScaleConfig, scaling
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.tomlfile import read_toml
from fpreduce.core.timing import Profile
from fpreduce.run.rundir import check_name
from fpreduce.run.schema import Table, build, document, named, rule, tables

#: why scale.workers is capped (bounded work, issue 26)
_WHY = "time and memory grow with N^2: N = 2048 takes ~20 s and 0.4 GiB"


__all__ = ["ClusterTable", "ScaleTable", "cluster_profile", "load_scale_config", "scale_config_from_dict"]


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
                raise InvalidArgument(f"cluster.{time} and cluster.{rate}: give one of them (s/B or B/s)")

    def profile(self) -> Profile:
        """The profile: every key given, the bandwidths as their per-byte times."""
        kw = {k: getattr(self, k) for k in ("alpha", "alpha_intra", "gpus_per_node", "nics_per_node", "name")}
        for time, rate in _RATES.items():
            t, r = getattr(self, time), getattr(self, rate)
            kw[time] = t if t is not None else 1.0 / r if r is not None else getattr(Profile, time)
        return Profile(**kw)


_RATES = {"beta": "bandwidth", "beta_intra": "bandwidth_intra", "gamma": "reduce_bandwidth"}


def cluster_profile(d: dict[str, Any]) -> Profile:
    """The profile of a ``[cluster]`` table (:class:`ClusterTable`), each error one line naming ``cluster.<key>``.

    >>> cluster_profile({"bandwidth": 25e9}).beta
    4e-11
    >>> cluster_profile({"bandwidth": 0})
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: cluster.bandwidth: must be finite and > 0, got 0.0
    """
    return build(ClusterTable, "cluster", d, aliases={"latency": "alpha", "nics": "nics_per_node"}).profile()


@dataclass(frozen=True)
class ScaleTable(Table):
    """The ``[scale]`` table as written (:class:`~fpreduce.analysis.scaling.ScaleConfig` is what it asks for).

    Attributes:
        name: a label (the default output ``runs/<name>``).
        workers: the N to evaluate (1 .. 4096: the simulation grows with N^2).
        plans: the plans to compare (plan names: ``ring``, ``hier:8``).
        compute: seconds per step for the whole global batch on one worker (> 0).
        bytes: the gradient's size in bytes, or several sizes (a message-size sweep); each >= 0.
        elements: the gradient's elements instead of ``bytes`` (0: not given).
        bytes_per_element: with ``elements`` (>= 1).
    """

    table: ClassVar[str] = "scale"
    name: str = "scaling"
    workers: tuple[int, ...] = rule(ScaleConfig.workers, lo=1, top=MAX_WORKERS, nonempty=True, why=_WHY)
    plans: tuple[str, ...] = rule(ScaleConfig.plans, nonempty=True)
    compute: float = rule(ScaleConfig.compute, lo=0, gt=True)
    bytes: float | tuple[float, ...] = rule(1e8, lo=0, nonempty=True)
    elements: int = rule(0, lo=0)
    bytes_per_element: int = rule(4, lo=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("scale.name", self.name)


def load_scale_config(path: str | Path) -> ScaleConfig:
    """Read a scale config (TOML); every error one line naming the file and the key."""
    d = read_toml(path, "the scale config")
    with document(path):
        return scale_config_from_dict(d)


def scale_config_from_dict(d: Mapping[str, Any]) -> ScaleConfig:
    """A :class:`~fpreduce.analysis.scaling.ScaleConfig` from parsed TOML: tables ``scale`` and ``cluster``.

    >>> scale_config_from_dict({"scale": {"workers": [1, 3.9]}})
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: scale.workers[1]: expected integer, got 3.9
    """
    t = tables(dict(d), ("scale", "cluster"))
    if "bytes" in t["scale"] and "elements" in t["scale"]:
        raise InvalidArgument("scale.bytes and scale.elements: give one of them (the size in bytes or in elements)")
    s = build(ScaleTable, "scale", t["scale"], aliases={"worker": "workers", "plan": "plans"})
    profile = cluster_profile(t["cluster"])
    nbytes = float(s.elements * s.bytes_per_element) if s.elements else s.bytes
    cfg = ScaleConfig(s.workers, s.plans, s.compute, nbytes, profile, s.name)
    with named("scale.plans"):
        scaling(cfg.workers[:1], cfg.plans, compute=cfg.compute, nbytes=0.0, profile=profile)  # the plan names
    return cfg

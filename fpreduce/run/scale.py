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

from fpreduce.analysis.scaling import MAX_WORKERS, ScaleConfig, check_work, scaling
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.tomlfile import read_toml
from fpreduce.run.cluster import cluster_profile
from fpreduce.run.schema import Table, build, check_name, document, named, rule, tables

#: why scale.workers is capped (bounded work, issue 26)
_WHY = "the closed forms answer any N in microseconds; 2^30 workers is beyond any cluster"


__all__ = ["ScaleTable", "load_scale_config", "scale_config_from_dict"]


@dataclass(frozen=True)
class ScaleTable(Table):
    """The ``[scale]`` table as written (:class:`~fpreduce.analysis.scaling.ScaleConfig` is what it asks for).

    Attributes:
        name: a label (the default output ``runs/<name>``).
        workers: the N to evaluate (1 .. 2^30; a point without a closed form runs its event timeline,
            whose messages are capped: :func:`~fpreduce.analysis.scaling.check_work`).
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
        scaling([1], cfg.plans, compute=cfg.compute, nbytes=0.0, profile=profile)  # the plan names
    with named("scale.workers"):
        check_work(cfg.workers, cfg.plans, profile)
    return cfg

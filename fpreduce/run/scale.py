"""The ``fpreduce scale`` config: tables ``[scale]`` and ``[cluster]``, read through :mod:`fpreduce.run.schema`.

The curve it asks for is :func:`fpreduce.analysis.scaling.scaling`; this module only reads
and checks the document (``examples/scaling.toml``): every key optional, unknown keys and
tables refused with a close-match hint, every error one line naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fpreduce.analysis.scaling import MAX_WORKERS, ScaleConfig, scaling
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.tomlfile import read_toml
from fpreduce.core.timing import Profile
from fpreduce.run.rundir import check_name
from fpreduce.run.schema import build, document, in_range, named, tables

__all__ = ["ScaleTable", "load_scale_config", "scale_config_from_dict"]


@dataclass(frozen=True)
class ScaleTable:
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

    name: str = "scaling"
    workers: tuple[int, ...] = ScaleConfig.workers
    plans: tuple[str, ...] = ScaleConfig.plans
    compute: float = ScaleConfig.compute
    bytes: float | tuple[float, ...] = 1e8
    elements: int = 0
    bytes_per_element: int = 4

    def __post_init__(self) -> None:
        check_name("scale.name", self.name)
        for key in ("workers", "plans"):
            if not getattr(self, key):
                raise InvalidArgument(f"scale.{key}: empty, expected at least one entry")
        for i, n in enumerate(self.workers):
            in_range(f"scale.workers[{i}]", n, 1, integer=True)
            if n > MAX_WORKERS:  # bounded work (issue 26)
                raise InvalidArgument(
                    f"scale.workers[{i}]: at most {MAX_WORKERS} (time and memory grow with N^2: N = 2048 takes ~20 s "
                    f"and 0.4 GiB), got {n}"
                )
        in_range("scale.compute", self.compute, 0, gt=True)
        sizes = self.bytes if isinstance(self.bytes, tuple) else (self.bytes,)
        if not sizes:
            raise InvalidArgument("scale.bytes: empty, expected at least one size")
        for i, b in enumerate(sizes):
            in_range("scale.bytes" + (f"[{i}]" if isinstance(self.bytes, tuple) else ""), b, 0)
        in_range("scale.elements", self.elements, 0, integer=True)
        in_range("scale.bytes_per_element", self.bytes_per_element, 1, integer=True)


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
    with named("cluster"):
        profile = Profile.from_dict(t["cluster"])
    nbytes = float(s.elements * s.bytes_per_element) if s.elements else s.bytes
    cfg = ScaleConfig(s.workers, s.plans, s.compute, nbytes, profile, s.name)
    with named("scale.plans"):
        scaling(cfg.workers[:1], cfg.plans, compute=cfg.compute, nbytes=0.0, profile=profile)  # the plan names
    return cfg

"""The price study's documents: its config (tables ``[price]``: :class:`PriceSpec`, ``[source]``: the model's
keys, ``[compute]``: :class:`~fpreduce.run.clock.ComputeModel`, ``[cluster]``: :mod:`fpreduce.run.cluster`),
read through :mod:`fpreduce.run.schema`, and the row each mode gives (:class:`PriceRow`, price.json's ``rows``).

:mod:`fpreduce.run.price` runs the study; this module holds what its files say, so that the reader of
price.json (:mod:`fpreduce.run.rundir`) checks a study's config by the rules its config was read with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fpreduce.base.tomlfile import read_toml
from fpreduce.core.formats import format_name
from fpreduce.core.timing import Profile
from fpreduce.plans import parse
from fpreduce.run.clock import ComputeModel, parse_mode
from fpreduce.run.cluster import cluster_profile
from fpreduce.run.model import ModelSpec, n_params
from fpreduce.run.schema import Table, build, check_name, document, named, rule, tables
from fpreduce.run.sources import check_memory

__all__ = [
    "MAX_WORKERS",
    "PriceConfig",
    "PriceRow",
    "PriceSpec",
    "load_price_config",
    "memory_of",
    "price_config_from_dict",
]

#: the most workers a price simulation takes (bounded work, issue 26)
MAX_WORKERS = 4096
_WHY = "work and memory grow with workers x steps x modes: 256 workers x 2 steps x 4 modes took 31 s and 0.3 GiB"


@dataclass(frozen=True)
class PriceSpec(Table):
    """The ``[price]`` table.

    Attributes:
        name: label of the study (default output ``runs/<name>``).
        workers: N.
        seed: seeds the model, the data and (with the mode's relaunch salt) the timing.
        steps: step-equivalents per mode (N gradients each).
        modes: the modes; the first is the reference (should be ``sync``: deterministic).
        plan: the all-reduce's plan (``sync``, ``local``).
        input: the gradients' format.
        accumulate: the reduction's accumulator format.
        master: the master weights' format (``fp32`` or ``bf16``).
        target_loss: the loss whose first crossing is timed (0: 1.2 x the reference's final loss).
    """

    table: ClassVar[str] = "price"
    name: str = "price"
    workers: int = rule(16, lo=1, top=MAX_WORKERS, why=_WHY)
    seed: int = rule(0, lo=0)
    steps: int = rule(60, lo=1)
    modes: tuple[str, ...] = rule(("sync", "sync:arrival", "async", "local:4"), nonempty=True)
    plan: str = "ring"
    input: str = "bf16"
    accumulate: str = "bf16"
    master: str = "fp32"
    target_loss: float = rule(0.0, lo=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("price.name", self.name)
        for k in ("input", "accumulate", "master"):  # bfloat16, float32, ... stored as bf16, fp32
            with named(f"price.{k}"):
                object.__setattr__(self, k, format_name(getattr(self, k)))
        for i, m in enumerate(self.modes):
            with named(f"price.modes[{i}]"):
                parse_mode(m, self.workers)
        with named("price.plan"):
            parse(self.plan, self.workers)


@dataclass(frozen=True)
class PriceConfig:
    spec: PriceSpec = field(default_factory=PriceSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    compute: ComputeModel = field(default_factory=ComputeModel)
    profile: Profile = field(default_factory=Profile)


@dataclass(frozen=True)
class PriceRow:
    """One mode's time and numerics.

    Attributes:
        mode: the mode's text.
        step_s: mean simulated seconds per step-equivalent.
        time_to_target_s: simulated seconds until the loss first reaches the target (NaN: never).
        final_loss: loss after the last step-equivalent.
        weights_differ_ref: fraction of the final weights that differ in at least one bit from the reference
            mode's (0.25: a quarter of the weights; not a fraction of bits).
        distance_vs_reference: ||w - w_ref|| / ||w_ref|| of the final weights.
        weights_differ_rerun: fraction of the final weights that differ in at least one bit from a relaunch's
            (the same job with another timing seed).
        staleness_mean: mean staleness of the applied gradients.
        staleness_max: largest staleness.
        idle_fraction: the fraction of the N workers' time (from 0 to the mode's last update) spent not
            computing a gradient (barrier, network, server): 1 - compute seconds / (N x end).
    """

    mode: str
    step_s: float
    time_to_target_s: float
    final_loss: float
    weights_differ_ref: float
    distance_vs_reference: float
    weights_differ_rerun: float
    staleness_mean: float
    staleness_max: int
    idle_fraction: float


def load_price_config(path: str | Path) -> PriceConfig:
    """Read a price config; unknown tables and keys are errors with a close-match hint, every error names the file."""
    d = read_toml(path, "the price config")
    with document(path):
        cfg = price_config_from_dict(d)
        sp, m = cfg.spec, cfg.model
        what = f"this price study ({sp.workers} workers, a model of {m.inputs}-{m.hidden}-{m.outputs})"
        check_memory(memory_of(cfg), what, "price.workers or the model's source.hidden, source.inputs, source.outputs")
        return cfg


def memory_of(cfg: PriceConfig) -> int:
    """A lower bound of the bytes a price study holds at once (float64): the student's parameters per worker and
    a few copies (weights, momentum, the sum, the reference's), the teacher's, and a global batch's inputs and
    activations."""
    sp, m = cfg.spec, cfg.model
    student, teacher = n_params(m.inputs, m.hidden, m.outputs), n_params(m.inputs, m.teacher_hidden, m.outputs)
    batch = sp.workers * m.batch_per_worker * (m.inputs + 2 * m.hidden + m.teacher_hidden + 2 * m.outputs)
    return 8 * (student * (sp.workers + 8) + teacher + batch)


def price_config_from_dict(d: dict[str, Any]) -> PriceConfig:
    """A :class:`PriceConfig` from parsed TOML (tables price, source, compute, cluster), checked by
    :mod:`fpreduce.run.schema` (each error one line naming the key)."""
    t = tables(d, ("price", "source", "compute", "cluster"))
    spec = build(PriceSpec, "price", t["price"])
    compute = build(ComputeModel, "compute", t["compute"])
    profile = cluster_profile(t["cluster"])
    return PriceConfig(spec, ModelSpec.from_dict({"kind": "model", **t["source"]}), compute, profile)

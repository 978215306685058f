"""Experiment configuration: a TOML file validated eagerly into frozen dataclasses.

Unknown keys and bad values raise :class:`InvalidArgument` naming the key (with a
close-match hint); every default is written back out by :func:`to_toml` into the
run directory's ``config.toml``. The embedded default (``default.toml``, package
data) is what ``fpreduce run`` uses without a file.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Literal, cast, get_args

import tomli_w

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.base.tomlfile import parse_toml, read_toml
from fpreduce.core.formats import format_name
from fpreduce.core.options import ALGORITHMS, AVERAGES
from fpreduce.core.rounding import MODES
from fpreduce.plans import parse
from fpreduce.run.schema import Table, build, check_fields, check_name, document, named, rule
from fpreduce.run.sources import SourceSpec, file_shape, spec_from_dict

__all__ = [
    "ArmSpec",
    "ArrivalSpec",
    "Config",
    "ExperimentSpec",
    "OrderPolicy",
    "check_name",
    "default_compare_to",
    "default_config",
    "diff",
    "from_dict",
    "load_config",
    "parse_toml",
    "read_toml",
    "to_dict",
    "to_toml",
]

PolicyKind = Literal["fixed", "shuffle", "arrival", "atomic", "random_tree"]
POLICIES: tuple[PolicyKind, ...] = get_args(PolicyKind)
#: the policies that take a plan: ``fixed:<plan>``, ``shuffle:<plan>``
PLANNED: tuple[PolicyKind, ...] = ("fixed", "shuffle")
JITTERS = ("exponential", "normal", "lognormal")


@dataclass(frozen=True)
class OrderPolicy:
    """An arm's order policy, parsed from its ``order`` text (see :class:`ArmSpec`).

    Attributes:
        kind: ``fixed``, ``shuffle``, ``arrival``, ``atomic`` or ``random_tree``.
        plan: the plan text of ``fixed:<plan>`` and ``shuffle:<plan>`` (``""`` for the
            others: text after their ``:`` is ignored).

    >>> OrderPolicy.parse("shuffle:ring:nccl")
    OrderPolicy(kind='shuffle', plan='ring:nccl')
    >>> OrderPolicy.parse("arival")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: unknown order policy 'arival'; did you mean 'arrival'? ...
    """

    kind: PolicyKind
    plan: str = ""

    @classmethod
    def parse(cls, text: str, *, key: str = "order") -> OrderPolicy:
        """The policy of an ``order`` text; InvalidArgument naming ``key`` (close-match hint) if unknown.

        The plan is checked against a worker count later (:class:`Config`).
        """
        kind, _, plan = text.partition(":")
        if kind not in POLICIES:
            raise unknown_name(f"{key} policy", kind, POLICIES)
        if kind in PLANNED and not plan:
            raise InvalidArgument(f"{key}: {kind!r} needs a plan, e.g. '{kind}:ring:nccl'")
        return cls(cast(PolicyKind, kind), plan if kind in PLANNED else "")

    def __str__(self) -> str:
        return f"{self.kind}:{self.plan}" if self.plan else self.kind


@dataclass(frozen=True)
class ExperimentSpec(Table):
    """``[experiment]``: name, steps, workers (N), seed (>= 0: numpy's generators take no negative seed).

    (Every step of every arm is also re-run with an independently seeded order policy:
    the ``rerun_*`` columns; the former ``check_steps`` key is gone.)"""

    table: ClassVar[str] = "experiment"
    name: str = "ab-bf16"
    steps: int = rule(40, lo=1)
    workers: int = rule(16, lo=1)
    seed: int = rule(0, lo=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("experiment.name", self.name)


@dataclass(frozen=True)
class ArrivalSpec(Table):
    """``[arrival]``: the latency model of the ``arrival`` order policy.

    Worker w's message arrives at ``base + mean_w + jitter``: ``mean_w`` is drawn
    once per run, uniform in [0, spread); ``jitter`` is drawn every step from
    ``exponential`` (scale), ``normal`` (std scale) or ``lognormal`` (sigma scale).
    Messages are summed sequentially in arrival order (ties: lower rank first).
    """

    table: ClassVar[str] = "arrival"
    base: float = 1.0
    spread: float = rule(0.5, lo=0)
    jitter: str = rule("exponential", choices=JITTERS)
    scale: float = rule(0.5, lo=0)


@dataclass(frozen=True)
class ArmSpec:
    """One ``[[arms]]`` entry: how this arm reduces (everything else is shared).

    ``order`` is a policy: ``fixed:<plan>``, ``shuffle:<plan>`` (the plan re-ranked by
    a fresh random permutation every step), ``arrival`` (sequential in the arrival
    order of the latency model), ``atomic`` (every element its own random order,
    new every step), ``random_tree`` (a random tree shape and order every step);
    :attr:`policy` is it parsed (:class:`OrderPolicy`), checked when the arm is built.
    ``output`` is the format the result is rounded to once (default: accumulate).
    ``compare_to`` names the arm whose results this arm's divergence columns are measured
    against (:func:`default_compare_to` when empty; resolved by :class:`Config`).
    """

    name: str = "A"
    order: str = "fixed:sequential"
    input: str = "bf16"
    accumulate: str = "bf16"
    output: str = ""
    rounding: str = rule("nearest_even", choices=MODES)
    algorithm: str = rule("plain", choices=ALGORITHMS)
    average: str = rule("none", choices=AVERAGES)
    compare_to: str = ""

    def __post_init__(self) -> None:
        check_name("arms[].name", self.name)
        key = f"arms.{self.name}"
        check_fields(self, key)
        for k in ("input", "accumulate") + (("output",) if self.output else ()):
            with named(f"{key}.{k}"):  # "bfloat16", "float32", ... become the canonical bf16, fp32 in config.toml too
                object.__setattr__(self, k, format_name(getattr(self, k)))
        self.policy  # noqa: B018 - parsed (and checked) now, once

    @functools.cached_property
    def policy(self) -> OrderPolicy:
        """The parsed ``order`` (the text stays what the config says: it seeds the policy's draws)."""
        return OrderPolicy.parse(self.order, key=f"arms.{self.name}.order")

    @property
    def out_format(self) -> str:
        return self.output or self.accumulate

    @property
    def arithmetic(self) -> tuple[str, str, str, str, str, str]:
        """What shapes an arm's sum besides its order: formats, rounding, algorithm, averaging."""
        return (self.input, self.accumulate, self.out_format, self.rounding, self.algorithm, self.average)


def default_compare_to(arms: tuple[ArmSpec, ...] | list[ArmSpec], arm: ArmSpec) -> str:
    """The arm ``arm`` is compared with when its ``compare_to`` is empty.

    The first fixed-order arm (in config order) with the same input, accumulate and output
    formats, rounding, algorithm and averaging: its fixed-order twin, so that the
    divergence columns compare like with like. A fixed-order arm that is the first of
    its kind is its own twin (compared with itself: nothing to compare, divergence 0).
    Without a twin, the first arm (the run's reference); pairs whose output formats
    differ are then measured in the wider format and labelled so.
    """
    for b in arms:
        if b.policy.kind == "fixed" and b.arithmetic == arm.arithmetic:
            return b.name
    return arms[0].name


@dataclass(frozen=True)
class Config:
    """A whole experiment; ``arms[0]`` is the reference arm; every arm's ``compare_to`` is resolved."""

    experiment: ExperimentSpec
    source: SourceSpec
    arrival: ArrivalSpec = field(default_factory=ArrivalSpec)
    arms: tuple[ArmSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.arms:
            raise InvalidArgument("config needs at least one [[arms]] entry")
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"arm names must be unique, got {names}")
        for a in self.arms:
            if a.compare_to and a.compare_to not in names:
                raise unknown_name(f"arms.{a.name}.compare_to arm", a.compare_to, tuple(names))
        resolved = tuple(
            a if a.compare_to else replace(a, compare_to=default_compare_to(self.arms, a)) for a in self.arms
        )
        object.__setattr__(self, "arms", resolved)  # every arm names its comparison (written to config.toml)
        n = self.experiment.workers
        for a in self.arms:
            if a.policy.plan:
                family = a.policy.plan.split(":")[0]
                most = PLAN_WORKERS.get(family, PLAN_WORKERS[""])
                if n > most:  # bounded work: refused before the plan is built (issue 26)
                    raise InvalidArgument(
                        f"arms.{a.name}.order: {family} plans are built for at most {most} workers, got "
                        f"experiment.workers = {n} (bounded work: a plan holds a tree of N leaves per segment; ring "
                        "over 4096 workers takes ~6 s to build, rabenseifner over 1024 ~3 s); 'atomic' and 'arrival' "
                        "orders build no plan"
                    )
                try:
                    parse(a.policy.plan, n)
                except InvalidArgument as e:
                    raise InvalidArgument(f"arms.{a.name}.order: {e}") from None
        if self.source.kind == "model" and any(a.algorithm == "binned" for a in self.arms):
            pass  # allowed: binned works on any float32 gradients

    def warnings(self) -> list[str]:
        """Legal but questionable settings, printed by the CLI."""
        out = []
        for a in self.arms:
            if a.accumulate.startswith("fp8") and self.experiment.workers > 1000:
                out.append(
                    f"arm {a.name}: an {a.accumulate} accumulator with "
                    f"{self.experiment.workers} workers will mostly saturate"
                )
        by_name = {a.name: a for a in self.arms}
        for a in self.arms:
            b = by_name.get(a.compare_to)
            if b is not None and b.average != a.average:
                out.append(
                    f"arm {a.name} (average {a.average}) is compared with {b.name} (average {b.average}): "
                    "their difference is mostly the averaging, not the order; give both the same average"
                )
        return out


_TABLES = ("experiment", "source", "arrival", "arms")

#: bounded work: the most workers a plan is built for, by family ("": any other; a plan of N workers holds at least
#: N leaves, and the segmented ones a tree per segment: ring's grow with N^2, rabenseifner's faster)
PLAN_WORKERS = {"": 1 << 20, "ring": 4096, "rabenseifner": 1024, "ompi": 1024}

#: bounded work: the most arms one run compares
MAX_ARMS = 256


def _default_arms() -> list[dict[str, Any]]:
    """The embedded default's ``[[arms]]`` (A, B, B-fp32acc, B-binned): what a config without arms runs."""
    return list(tomllib.loads(_default_text())["arms"])


def _default_text() -> str:
    return resources.files("fpreduce.run").joinpath("default.toml").read_text(encoding="utf-8")


def from_dict(d: dict[str, Any]) -> Config:
    """Validate a parsed TOML document (without ``arms``: the embedded default's arms)."""
    for k in d:
        if k not in _TABLES:
            raise unknown_name("table", k, _TABLES)
    exp = build(ExperimentSpec, "experiment", d.get("experiment", {}))
    src = spec_from_dict(d.get("source", {}))
    arr = build(ArrivalSpec, "arrival", d.get("arrival", {}))
    arms_raw = d.get("arms")
    if arms_raw is None:
        arms_raw = _default_arms()
    if not isinstance(arms_raw, list):
        raise InvalidArgument("arms must be an array of tables: [[arms]]")
    if len(arms_raw) > MAX_ARMS:
        raise InvalidArgument(
            f"arms: at most {MAX_ARMS} [[arms]] entries, got {len(arms_raw)} (every arm keeps its state, results and "
            "metrics for the whole run: 10^5 arms reached 5 GB)"
        )
    arms = []
    for i, a in enumerate(arms_raw):
        name = a.get("name", f"arm{i}") if isinstance(a, dict) else f"arm{i}"
        arms.append(build(ArmSpec, f"arms.{name}", {"name": name, **a} if isinstance(a, dict) else a))
    return Config(exp, src, arr, tuple(arms))


def _set(d: dict[str, Any], assignment: str) -> None:
    """Apply ``--set key=value`` (``experiment.steps=10``, ``arms.B.accumulate=fp32``; arm names may hold dots)."""
    key, eq, raw = assignment.partition("=")
    if not eq:
        raise InvalidArgument(f"--set expects key=value, got {assignment!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word is a string
    key = key.strip()
    if key.startswith("arms.") and key.count(".") >= 2:
        name, _, field = key[len("arms.") :].rpartition(".")
        if "arms" not in d:
            d["arms"] = _default_arms()
        for a in d["arms"] if isinstance(d["arms"], list) else []:
            if isinstance(a, dict) and a.get("name") == name:
                a[field] = value
                return
        raise InvalidArgument(f"--set {key}: no arm named {name!r}")
    parts = key.split(".")
    if len(parts) != 2 or parts[0] not in ("experiment", "source", "arrival"):
        raise InvalidArgument(f"--set {key}: write table.key, e.g. experiment.steps=10 or arms.B.accumulate=fp32")
    table = d.setdefault(parts[0], {})
    if not isinstance(table, dict):
        raise InvalidArgument(f"--set {key}: [{parts[0]}] must be a table, got {table!r}")
    if key == "source.kind" and value != table.get("kind", "synthetic"):
        table.clear()  # another kind: the old kind's keys (dist, path, ...) do not carry over
    table[parts[1]] = value


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), *, source: str | Path | None = None
) -> Config:
    """Read a TOML config (the embedded default when ``path`` is None), apply overrides.

    ``source`` (``fpreduce run --source PATH``): gradients recorded in a file or directory
    replace the whole ``[source]`` table; the workers and steps are the recording's (all of
    its steps) and the experiment is named after it. Overrides still win.
    """
    d = parse_toml(_default_text(), "the default config") if path is None else read_toml(path)
    if source is not None:
        steps, workers, _ = file_shape(source)
        d["source"] = {"kind": "file", "path": str(source)}
        e = d.setdefault("experiment", {})
        if isinstance(e, dict):
            e.update(workers=workers, steps=steps)
            p = Path(source).resolve()
            name = p.stem if p.is_file() else p.name
            if path is None and _plain_name(name):
                e["name"] = name
    where = " + ".join([*([str(path)] if path is not None else []), *(["--set"] if overrides else [])])
    with document(where or None):  # every error names the file (and --set when overrides took part)
        for s in overrides:
            _set(d, s)
        return from_dict(d)


def _plain_name(name: str) -> bool:
    try:
        check_name("experiment.name", name)
    except InvalidArgument:
        return False
    return True


def default_config() -> Config:
    """The embedded default experiment."""
    return load_config(None)


def to_dict(cfg: Config) -> dict[str, Any]:
    """The resolved config as TOML tables: every key, defaults included."""
    return {
        "experiment": {f.name: getattr(cfg.experiment, f.name) for f in fields(cfg.experiment)},
        "source": cfg.source.to_dict(),
        "arrival": {f.name: getattr(cfg.arrival, f.name) for f in fields(cfg.arrival)},
        "arms": [{f.name: getattr(a, f.name) for f in fields(a)} for a in cfg.arms],
    }


def to_toml(cfg: Config) -> str:
    """The resolved config, every key written out by tomli-w (parses back to an equal Config).

    >>> from_dict(tomllib.loads(to_toml(default_config()))) == default_config()
    True
    """
    return "# resolved by fpreduce: every default written out\n" + tomli_w.dumps(to_dict(cfg))


def diff(a: Config, b: Config) -> list[str]:
    """The keys whose values differ between two configs, as ``key: a -> b`` lines."""
    da, db = to_dict(a), to_dict(b)
    out = []
    for t in ("experiment", "source", "arrival"):
        for k in sorted(set(da[t]) | set(db[t])):
            if da[t].get(k) != db[t].get(k):
                out.append(f"{t}.{k}: {da[t].get(k)!r} -> {db[t].get(k)!r}")
    if da["arms"] != db["arms"]:
        names = [[x["name"] for x in d["arms"]] for d in (da, db)]
        out.append(f"arms: {names[0]} -> {names[1]}" if names[0] != names[1] else "arms: settings differ")
    return out


def with_steps(cfg: Config, steps: int) -> Config:
    """``cfg`` with another number of steps (the CLI's ``--steps``)."""
    return replace(cfg, experiment=replace(cfg.experiment, steps=steps))

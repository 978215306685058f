"""The one validator of every document fpreduce reads: config tables, scale and price configs, summary.json,
a recording's manifest.

TOML tables become frozen dataclasses (:func:`build`): a table's keys are the dataclass's
fields, their types the fields' annotations (``int``, ``float``, ``str``, ``bool`` and tuples
of them). JSON documents are checked key by key with the same rules (:func:`integer`,
:func:`number`, :func:`string`, :func:`array`, :func:`table`). The rules: a bool is not a
number and a float is not an int (``3.9`` is not 3, ``true`` is not 1), an int is accepted
for a float, every number is finite, ranges are closed sets of plain numbers. Every error
is an :class:`InvalidArgument` naming the key (``experiment.steps``, ``source.noise``,
``arms.B.order``, ``layouts[0][1].start``); :func:`document` puts the file in front.
"""

from __future__ import annotations

import contextlib
import json
import math
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from fpreduce.base.errors import InvalidArgument, unknown_name

T = TypeVar("T")
K = TypeVar("K", bound="KindSpec")

_WHAT = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


@contextlib.contextmanager
def document(where: str | Path | None) -> Iterator[None]:
    """Errors raised inside name the document first: ``{where}: {message}`` (unless they already do, or name
    a ``--set`` override).

    ``where`` is the file (or ``"c.toml + --set"``); None adds nothing (the embedded default).
    A document nested too deeply for Python (a RecursionError anywhere in its checks) is one
    line too.

    >>> with document("c.toml"):
    ...     in_range("experiment.steps", 0, 1, integer=True)
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: c.toml: experiment.steps: must be an integer >= 1, got 0
    """
    try:
        yield
    except InvalidArgument as e:
        if where is None or str(e).startswith((str(where), "--set")):  # (an override's error names the override)
            raise
        raise InvalidArgument(f"{where}: {e}") from None
    except RecursionError:
        raise InvalidArgument(f"{where}: nested too deeply") from None


@contextlib.contextmanager
def named(key: str) -> Iterator[None]:
    """Errors raised inside (by a parser that does not know the key: a plan, a mode) name ``key`` first.

    >>> from fpreduce.plans import parse
    >>> with named("price.plan"):
    ...     parse("rign", 4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: price.plan: unknown plan 'rign'; did you mean 'ring'? ...
    """
    try:
        yield
    except InvalidArgument as e:
        if str(e).startswith(key):
            raise
        raise InvalidArgument(f"{key}: {e}") from None


def check(ok: bool, key: str, what: str, value: object) -> None:
    """Raise ``InvalidArgument("{key}: must be {what}, got {value!r}")`` unless ``ok``."""
    if not ok:
        raise InvalidArgument(f"{key}: must be {what}, got {shown(value)}")


def choice(key: str, value: object, choices: tuple[str, ...], *, aliases: Mapping[str, str] | None = None) -> None:
    """Raise an unknown-name error (close-match hint, then the choices) unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise unknown_name(key, value, choices, aliases=aliases)


def is_int(v: object) -> bool:
    """An int that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: object) -> bool:
    """An int or float (NaN and Inf included) that is not a bool."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def is_finite(v: object) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def in_range(
    key: str, v: object, lo: float, *, gt: bool = False, hi: float | None = None, integer: bool = False
) -> None:
    """Check that ``v`` is a finite number (or an int) > or >= lo, and < hi.

    >>> in_range("source.elements", 0, 1, integer=True)
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: source.elements: must be an integer >= 1, got 0
    """
    ok = (is_int(v) if integer else is_finite(v)) and (v > lo if gt else v >= lo) and (hi is None or v < hi)  # type: ignore[operator]
    what = f"{'an integer' if integer else 'finite and'} {'>' if gt else '>='} {lo}"
    check(ok, key, what + ("" if hi is None else f" and < {hi}"), v)


def shown(v: object, limit: int = 60) -> str:
    """``repr(v)``, cut to ``limit`` characters (a document's value may be huge or nested deeply)."""
    try:
        r = repr(v)
    except RecursionError:
        r = f"<{type(v).__name__} nested too deeply>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


def typed(key: str, value: object, typ: str) -> Any:
    """``value`` checked against a field type: ``int``, ``float``, ``str``, ``bool``, ``tuple[T, ...]`` of one
    of them (a TOML array), or a union of those (``float | tuple[float, ...]``).

    Bools are not numbers and floats are not ints; an int is accepted for a float and
    converted; a float must be finite. An array becomes a tuple, its entries checked as ``T``
    (named ``key[i]``).

    >>> typed("scale.workers", [1, 2], "tuple[int, ...]")
    (1, 2)
    >>> typed("scale.workers", [1, 3.9], "tuple[int, ...]")
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: scale.workers[1]: expected integer, got 3.9
    """
    if "|" in typ:
        kinds = [t.strip() for t in typ.split("|")]
        array = next((t for t in kinds if t.startswith("tuple[")), None)
        return typed(key, value, array if array and isinstance(value, list | tuple) else kinds[0])
    if typ.startswith("tuple[") and typ.endswith(", ...]"):
        if not isinstance(value, list | tuple):
            raise InvalidArgument(f"{key}: expected an array of {_WHAT.get(typ[6:-6], typ[6:-6])}s, got {shown(value)}")
        return tuple(typed(f"{key}[{i}]", v, typ[6:-6]) for i, v in enumerate(value))
    if typ == "float" and is_int(value):
        try:
            value = float(value)  # type: ignore[arg-type]
        except OverflowError:
            raise InvalidArgument(f"{key}: must be finite, got {value!r}") from None
    if typ == "int":
        ok = is_int(value)
    elif typ == "float":
        ok = isinstance(value, float)
    elif typ == "bool":
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise InvalidArgument(f"{key}: expected {_WHAT.get(typ, typ)}, got {shown(value)}")
    if typ == "float" and not math.isfinite(value):  # type: ignore[arg-type]
        raise InvalidArgument(f"{key}: must be finite, got {value!r}")
    return value


def integer(key: str, v: object, lo: int = 0, hi: int | None = None) -> int:
    """``v``, an integer (not a float, not a bool) in [lo, hi]; else one line naming ``key``.

    >>> integer("world_size", 3.9, 1)
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: world_size: expected integer, got 3.9
    """
    typed(key, v, "int")
    check(lo <= v and (hi is None or v <= hi), key, f"an integer >= {lo}" if hi is None else f"in [{lo}, {hi}]", v)  # type: ignore[operator]
    return v  # type: ignore[return-value]


def number(key: str, v: object, lo: float | None = None, *, null: bool = False) -> float | None:
    """``v``, a finite number (an int is accepted) >= lo, as a float; None too when ``null``."""
    if v is None and null:
        return None
    x = typed(key, v, "float")
    if lo is not None:
        in_range(key, x, lo)
    return x  # type: ignore[no-any-return]


def string(key: str, v: object, choices: tuple[str, ...] | None = None) -> str:
    """``v``, a string (one of ``choices`` when given: an unknown-name error with a hint otherwise)."""
    typed(key, v, "str")
    if choices is not None:
        choice(key, v, choices)
    return v  # type: ignore[return-value]


def array(key: str, v: object, n: int | None = None, *, nonempty: bool = False, n_key: str = "") -> list[Any]:
    """``v``, a list (of ``n`` entries when given, ``n`` being the key ``n_key``'s value when named; at least one
    when ``nonempty``)."""
    if not isinstance(v, list):
        raise InvalidArgument(f"{key}: expected an array, got {shown(v)}")
    if n is not None and len(v) != n:
        raise InvalidArgument(f"{key}: {len(v)} entries, expected {f'{n_key} = ' if n_key else ''}{n}")
    if nonempty and not v:
        raise InvalidArgument(f"{key}: empty, expected at least one entry")
    return v


class _Bare:
    """A bare ``NaN``/``Infinity``/``-Infinity`` where a JSON document needs a number (:func:`strict_json`)."""

    def __init__(self, name: str) -> None:
        self.name = name


def strict_json(text: str | bytes) -> Any:
    """A standard JSON document (RFC 8259): a bare ``NaN``, ``Infinity`` or ``-Infinity`` is refused naming its key.

    >>> strict_json('{"world_size": NaN}')
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: world_size: NaN is not a JSON number (not readable JSON)
    """
    try:
        doc = json.loads(text, parse_constant=_Bare)
    except ValueError as e:  # (json.JSONDecodeError)
        raise InvalidArgument(f"not readable JSON ({e})") from None
    except RecursionError:
        raise InvalidArgument("not readable JSON (nested too deeply)") from None
    todo: list[tuple[str, Any]] = [("", doc)]
    while todo:  # (a loop, not a recursion: the document may be as deep as the parser allowed)
        key, v = todo.pop()
        if isinstance(v, _Bare):
            raise InvalidArgument(f"{key or 'the document'}: {v.name} is not a JSON number (not readable JSON)")
        if isinstance(v, dict):
            todo += [(f"{key}.{k}" if key else str(k), x) for k, x in reversed(v.items())]
        elif isinstance(v, list):
            todo += [(f"{key}[{i}]", x) for i, x in reversed(list(enumerate(v)))]
    return doc


def table(key: str, v: object, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``v``, a table (a JSON object) holding every key of ``required`` (one line naming the first missing);
    ``key`` ``""``: the document's top level (its keys named alone)."""
    if not isinstance(v, dict):
        raise InvalidArgument(f"{key or 'the document'}: expected a table, got {shown(v)}")
    for k in required:
        if k not in v:
            raise InvalidArgument(f"{key}.{k}: required" if key else f"{k}: required")
    return v


def tables(d: object, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """A document's top level: only the tables ``names`` (an unknown one gets a close-match hint), each a table;
    the missing ones empty."""
    if not isinstance(d, dict):
        raise InvalidArgument(f"expected a document of tables, got {shown(d)}")
    for k in d:
        if k not in names:
            raise unknown_name("table", k, names)
    return {k: table(f"[{k}]", d[k]) if k in d else {} for k in names}


def build(
    cls: type[T],
    table: str,
    d: object,
    *,
    fixed: Mapping[str, object] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> T:
    """Build the dataclass ``cls`` from the TOML table ``d`` (named ``table`` in messages).

    Args:
        cls: a dataclass whose field annotations are types :func:`typed` knows.
        table: the table's name: ``experiment``, ``source``, ``arms.B``.
        d: the parsed table.
        fixed: keys allowed besides the fields, whose value must be the one given
            (``{"kind": "model"}``); they are not passed to ``cls``.
        aliases: other common spellings of keys, for the hint of an unknown key.

    Raises:
        InvalidArgument: not a table, unknown key (with a close-match hint), wrong type
            (see :func:`typed`), missing required key, or whatever ``cls`` refuses.
    """
    fixed = fixed or {}
    if not isinstance(d, dict):
        raise InvalidArgument(f"[{table}] must be a table, got {shown(d)}")
    spec = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    kwargs = {}
    for key, v in d.items():
        if key in fixed:
            check(v == fixed[key], f"{table}.{key}", repr(fixed[key]), v)
        elif key in spec:
            kwargs[key] = typed(f"{table}.{key}", v, str(spec[key].type))
        else:
            e = unknown_name("key", key, [*fixed, *spec], aliases=aliases)
            raise InvalidArgument(f"{table}.{key}: {e}")
    for name, f in spec.items():
        if name not in kwargs and f.default is MISSING and f.default_factory is MISSING:
            when = "".join(f" when {k} = {v!r}" for k, v in fixed.items())
            raise InvalidArgument(f"{table}.{name}: required{when}")
    try:
        return cls(**kwargs)
    except InvalidArgument as e:  # (a Table's own checks name its usual table: the document's name instead)
        own = getattr(cls, "table", "")
        if own and own != table and str(e).startswith(f"{own}."):
            raise InvalidArgument(table + str(e)[len(own) :]) from None
        raise


@dataclass(frozen=True)
class Rule:
    """What a field of a :class:`Table` may hold besides its type (see :func:`rule`)."""

    lo: float | None = None
    gt: bool = False
    hi: float | None = None
    top: float | None = None
    choices: tuple[str, ...] | None = None
    aliases: Mapping[str, str] | None = None
    nonempty: bool = False
    why: str = ""


def rule(
    default: Any = MISSING,
    *,
    lo: float | None = None,
    gt: bool = False,
    hi: float | None = None,
    top: float | None = None,
    choices: tuple[str, ...] | None = None,
    aliases: Mapping[str, str] | None = None,
    nonempty: bool = False,
    why: str = "",
) -> Any:
    """A dataclass field with its rule, checked by :func:`check_fields` (every entry of an array alike).

    Args:
        default: the default (none: a required key).
        lo: the lowest value (``> lo`` with ``gt``); ``hi``: values below it; ``top``: the highest value.
        choices: the closed set of a string (an unknown one gets a close-match hint, ``aliases`` too).
        nonempty: a string or an array needs at least one character or entry.
        why: said after a range's failure (the bounded-work caps say what the cap protects).
    """
    meta = {"rule": Rule(lo, gt, hi, top, choices, aliases, nonempty, why)}
    return field(metadata=meta) if default is MISSING else field(default=default, metadata=meta)


def _entry(key: str, v: object, typ: str, r: Rule | None) -> None:
    """One value of a field of type ``typ`` (``int``, ``float``, ``str``, ``bool``) checked against ``r``."""
    if typ in ("int", "float"):
        ok = is_int(v) if typ == "int" else is_finite(v)
        low = None if r is None else r.lo
        if ok and r is not None:
            ok = (low is None or (v > low if r.gt else v >= low)) and (r.hi is None or v < r.hi)  # type: ignore[operator]
            ok = ok and (r.top is None or v <= r.top)  # type: ignore[operator]
        if not ok:
            bounds = [] if r is None else [f"{'>' if r.gt else '>='} {low}"] * (low is not None)
            if r is not None:
                bounds += [f"< {r.hi}"] * (r.hi is not None) + [f"<= {r.top}"] * (r.top is not None)
            what = ("an integer " if typ == "int" else "finite and " if bounds else "finite") + " and ".join(bounds)
            why = f" ({r.why})" if r is not None and r.why and r.top is not None and is_number(v) and v > r.top else ""  # type: ignore[operator]
            check(False, key, what.strip() + why, v)
    elif typ == "bool":
        check(isinstance(v, bool), key, "a boolean", v)
    else:
        check(isinstance(v, str), key, "a string", v)
        if r is not None and r.nonempty:
            check(v != "", key, "a non-empty string", v)
        if r is not None and r.choices is not None:
            choice(key, v, r.choices, aliases=r.aliases)


def check_fields(obj: object, table: str) -> None:
    """Every field of the dataclass ``obj`` checked against its annotation and its :func:`rule`; errors name
    ``{table}.{field}`` (``{table}.{field}[i]`` for an array's entry). A field whose annotation allows None
    (``float | None``: a key with no value unless given) is skipped when None.

    >>> from fpreduce.run.config import ArrivalSpec
    >>> ArrivalSpec(spread=-1.0)
    Traceback (most recent call last):
    fpreduce.base.errors.InvalidArgument: arrival.spread: must be finite and >= 0, got -1.0
    """
    for f in fields(obj):  # type: ignore[arg-type]
        v, typ, r = getattr(obj, f.name), str(f.type), f.metadata.get("rule")
        kinds = [t.strip() for t in typ.split("|")]
        if v is None and "None" in kinds:
            continue
        array = next((t[6:-6] for t in kinds if t.startswith("tuple[")), None)
        if array is not None and isinstance(v, tuple | list):
            if r is not None and r.nonempty and not v:
                raise InvalidArgument(f"{table}.{f.name}: empty, expected at least one entry")
            for i, x in enumerate(v):
                _entry(f"{table}.{f.name}[{i}]", x, array, r)
        else:
            _entry(f"{table}.{f.name}", v, kinds[0], r)


def check_name(key: str, name: object) -> None:
    """Refuse a name that is not a plain name (InvalidArgument naming ``key``).

    A name is used as a directory (``runs/<name>``: :func:`fpreduce.run.rundir.out_dir`) and printed in tables,
    CSV rows and legends: it must be a non-empty string of at most 100 characters,
    not ``.`` or ``..``, without a path separator (``/``, ``\\``) or a control,
    format or line-separator character (Unicode categories Cc, Cf, Zl, Zp).
    """
    if not isinstance(name, str):
        why = "not a string"
    elif not name:
        why = "empty"
    elif name.strip() in (".", ".."):
        why = "a directory reference"
    elif len(name) > 100:
        why = f"{len(name)} characters long (at most 100)"
    elif (c := next((c for c in name if c in "/\\" or unicodedata.category(c) in _NOT_IN_NAMES), None)) is not None:
        why = f"it contains {c!r}"
    else:
        return
    raise InvalidArgument(
        f"{key}: must be a plain name (no path separator, control character, '.' or '..'), got {name!r}: {why}"
    )


_NOT_IN_NAMES = ("Cc", "Cf", "Zl", "Zp", "Cs")


class Table:
    """A TOML table as a frozen dataclass whose fields carry their types and rules (:func:`rule`), checked on
    construction by :func:`check_fields` (built from a document by :func:`build`, or directly)."""

    #: the table's name in messages (``experiment``, ``source``, ``compute``)
    table: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_fields(self, self.table)


class KindSpec(Table):
    """Shared ``from_dict``/``to_dict`` of the dataclasses of a table with a ``kind`` key.

    One dataclass per kind of ``[source]`` (``SyntheticSpec``, ``ModelSpec``, ``FileSpec``);
    the field annotations are the value types.
    """

    table: ClassVar[str] = "source"
    kind: ClassVar[str]
    #: other common spellings of keys, for the hint of an unknown key
    key_aliases: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def from_dict(cls: type[K], d: dict[str, Any]) -> K:
        """Build the spec from a mapping (a TOML table), checking keys and value types.

        Args:
            d: field values; a ``kind`` key is allowed and must name this spec's kind.

        Returns:
            The validated spec.

        Raises:
            InvalidArgument: unknown key (with a close-match hint), missing required
                key, wrong type (bools are not numbers, floats are not ints and must be
                finite; an int is accepted for a float field) or invalid value; the
                message names the key.
        """
        return build(cls, cls.table, d, fixed={"kind": cls.kind}, aliases=cls.key_aliases)

    def to_dict(self) -> dict[str, Any]:
        """Every field (and ``kind``) as plain Python values, for the resolved config."""
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}  # type: ignore[arg-type]

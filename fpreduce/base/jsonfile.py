"""Standard JSON: the one writer (and its reader) of every JSON file and ``--json`` output.

JSON has no Infinity or NaN (RFC 8259): Python's :mod:`json` writes them bare and strict
parsers (``JSON.parse``, jq, serde_json, Go) refuse the document. :func:`dumps` writes a
non-finite number as ``null`` and says what it was beside it, in the object holding it,
under the key's name with ``_nonfinite`` appended (``"inf"``, ``"-inf"`` or ``"nan"``,
which ``float()`` reads back); in a list, by index (``"i/j"`` in nested lists)::

    {"exact": null, "exact_nonfinite": "inf"}
    {"loss": [0.5, null, null], "loss_nonfinite": {"1": "nan", "2": "inf"}}

A non-finite number directly in a top-level list has no object to hold its reason: ``null``
alone. :func:`loads` reads a document back with its non-finite numbers as floats again (and
the ``*_nonfinite`` keys gone); older files holding bare ``NaN``/``Infinity`` read as before.
numpy scalars and arrays are written as Python numbers and lists.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

__all__ = ["SUFFIX", "dumps", "loads"]

#: appended to a key to name the entry holding the reason of its non-finite number(s)
SUFFIX = "_nonfinite"
_REASONS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def dumps(obj: Any, **kwargs: Any) -> str:
    """``obj`` as standard JSON (``json.dumps`` keywords such as ``indent`` accepted; never a bare NaN)."""
    clean, _ = _clean(obj)
    return json.dumps(clean, allow_nan=False, **kwargs)


def loads(text: str | bytes) -> Any:
    """A document written by :func:`dumps` (or any JSON), its non-finite numbers restored as floats.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``) or nested too deeply (the callers name the file).
    """
    try:
        return json.loads(text, object_hook=_restore)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _reason(x: float) -> str:
    return "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"


def _clean(v: Any) -> tuple[Any, str | dict[str, str] | None]:
    """(``v`` with its non-finite floats as None, their reasons: a string for a number, index -> reason for a list)."""
    if isinstance(v, np.ndarray | np.generic):
        v = v.tolist()
    if isinstance(v, float):
        return (v, None) if math.isfinite(v) else (None, _reason(v))
    if isinstance(v, dict):
        return _clean_object(v), None
    if isinstance(v, list | tuple):
        out, why = [], {}
        for i, x in enumerate(v):
            c, r = _clean(x)
            out.append(c)
            if isinstance(r, str):
                why[str(i)] = r
            elif r:
                why.update({f"{i}/{k}": s for k, s in r.items()})
        return out, why or None
    return v, None


def _clean_object(d: dict[Any, Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, v in d.items():
        out[k], why = _clean(v)
        if why:
            key = f"{k}{SUFFIX}"
            if key in d:
                raise ValueError(f"cannot write the reason of {k!r}'s non-finite value: {key!r} is taken")
            out[key] = why
    return out


def _restore(d: dict[str, Any]) -> dict[str, Any]:
    """``object_hook``: put back the non-finite numbers whose reasons are beside their keys."""
    for key in [k for k in d if k.endswith(SUFFIX)]:
        base, why = key[: -len(SUFFIX)], d[key]
        if base not in d:
            continue
        if isinstance(why, str) and why in _REASONS and d[base] is None:
            d[base] = _REASONS[why]
        elif isinstance(why, dict) and isinstance(d[base], list) and _restore_list(d[base], why):
            pass
        else:
            continue  # not a reason this module wrote: leave the document as it is
        del d[key]
    return d


def _restore_list(values: list[Any], why: dict[str, Any]) -> bool:
    """Put ``why``'s numbers into ``values`` (index paths ``i/j``); False (nothing changed) if one does not fit."""
    places = []
    for path, r in why.items():
        *outer, last = path.split("/")
        seq: Any = values
        try:
            for i in outer:
                seq = seq[int(i)]
            j = int(last)
            ok = isinstance(seq, list) and 0 <= j < len(seq) and seq[j] is None and r in _REASONS
        except (ValueError, IndexError, TypeError):
            ok = False
        if not ok:
            return False
        places.append((seq, j, _REASONS[r]))
    for seq, j, x in places:
        seq[j] = x
    return True

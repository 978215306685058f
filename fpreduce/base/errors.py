"""The package's exception type."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InvalidArgument(ValueError):
    """Raised at the public boundary for bad names, shapes, dtypes or values.

    The message says what was wrong and what to do instead.
    """


def unknown_name(kind: str, name: object, choices: Iterable[str]) -> InvalidArgument:
    """Build an InvalidArgument for an unknown name, with a close-match hint."""
    choices = list(choices)
    hint = difflib.get_close_matches(str(name), choices, n=1)
    msg = f"unknown {kind} {name!r}"
    if hint:
        msg += f"; did you mean {hint[0]!r}?"
    msg += f" (choices: {', '.join(choices)})"
    return InvalidArgument(msg)

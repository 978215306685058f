"""The package's exception type."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping


class FpreduceWarning(UserWarning):
    """A warning of fpreduce's own (the ``fpreduce`` command prints each as one line)."""


class InvalidArgument(ValueError):
    """Raised at the public boundary for bad names, shapes, dtypes or values.

    The message says what was wrong and what to do instead.
    """


def unknown_name(
    kind: str, name: object, choices: Iterable[str], *, aliases: Mapping[str, str] | None = None
) -> InvalidArgument:
    """Build an InvalidArgument for an unknown name, with a close-match hint.

    ``aliases`` maps other common spellings (looked up in lower case) to a choice: such
    a hint comes before the closest spelling.

    >>> str(unknown_name("dist", "gaussian", ["normal", "lognormal"], aliases={"gaussian": "normal"}))
    "unknown dist 'gaussian'; did you mean 'normal'? (choices: normal, lognormal)"
    """
    choices = list(choices)
    alias = (aliases or {}).get(str(name).lower())
    hint = [alias] if alias in choices else difflib.get_close_matches(str(name), choices, n=1)
    msg = f"unknown {kind} {name!r}"
    if hint:
        msg += f"; did you mean {hint[0]!r}?"
    msg += f" (choices: {', '.join(choices)})"
    return InvalidArgument(msg)

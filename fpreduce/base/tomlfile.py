"""Reading TOML files: one place that turns an unreadable, non-UTF-8 or malformed file into one line."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from fpreduce.base.errors import InvalidArgument

__all__ = ["parse_toml", "read_toml"]


def read_toml(path: str | Path, what: str = "config") -> dict[str, Any]:
    """The parsed TOML file ``path``; InvalidArgument naming it if unreadable, not UTF-8 or malformed."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InvalidArgument(f"cannot read {what} {p}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"{p}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})") from None
    return parse_toml(text, str(p))


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """``tomllib.loads(text)``; InvalidArgument naming ``where`` if malformed."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidArgument(f"{where}: malformed TOML: {e}") from None

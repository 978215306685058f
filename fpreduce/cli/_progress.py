"""Progress bars for long commands, drawn by tqdm on stderr.

Silent when stdout or stderr is not a terminal (a script, a pipe, CI, a log file):
nothing but the results reaches a file. One bar object serves a whole command and
starts again when a new count begins (a resumed run starts at its first new step).
"""

from __future__ import annotations

import sys
from typing import Any


def interactive() -> bool:
    """Whether a person is watching: both stdout and stderr are terminals."""
    return sys.stdout.isatty() and sys.stderr.isatty()


class Bar:
    """``bar(done, total, eta=...)``: the runner's and the sweep's progress callback, as a tqdm bar."""

    def __init__(self, unit: str, desc: str | None = None) -> None:
        self.unit, self.desc = unit, desc
        self._bar: Any = None

    def __call__(self, done: int, total: int, eta: float = 0.0) -> None:
        if self._bar is not None and (done <= self._bar.n or total != self._bar.total):
            self.close()  # a new count
        if self._bar is None:
            from tqdm import tqdm

            start = done - 1
            self._bar = tqdm(
                total=total, initial=start, unit=self.unit, desc=self.desc, file=sys.stderr, disable=not interactive()
            )
        self._bar.update(done - self._bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

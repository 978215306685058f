"""Progress of long commands, on stderr: the command line's one owner of it.

On a terminal (stdout and stderr both): a tqdm bar. Off a terminal (a pipe, a log file,
nohup, CI, a job scheduler): a plain line every :data:`INTERVAL` seconds, with what is
done, the rate and the time left, e.g.
``fpreduce price: 3200/11520 gradients (28%), 151 gradients/s, about 55 s left``
and a last line when the count ends, if any line was written. ``-q`` silences both
(:func:`silence`); ``NO_COLOR`` is respected (the bar is drawn without colour, in ASCII).
One bar object serves a whole command and starts again when a new count begins (a
resumed run starts at its first new step). A call that repeats the count done so far is a
heartbeat: a long wait (real ranks starting up) still gets its line every ~15 s, with the
time it has taken.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

#: seconds between two plain progress lines off a terminal
INTERVAL = 15.0
#: the clock of the plain lines (tests replace it)
clock = time.monotonic
_SILENT = False


def silence(on: bool = True) -> None:
    """``-q``: no bar and no progress line for the rest of the command."""
    global _SILENT
    _SILENT = on


def interactive() -> bool:
    """Whether a person is watching: both stdout and stderr are terminals."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


def _first(done: int) -> int:
    """What was done when a count's first call came: one unit less (it reports a unit just finished), or
    nothing (a first call at 0 starts the clock)."""
    return max(done - 1, 0)


def _rate(r: float) -> str:
    return f"{r:.0f}" if r >= 10 else f"{r:.2g}"


class Bar:
    """``bar(done, total, eta=...)``: a progress callback, as a tqdm bar or plain lines (see the module)."""

    def __init__(self, unit: str, desc: str | None = None) -> None:
        self.unit, self.desc = unit, desc
        self._bar: Any = None
        self._count: tuple[int, float, float, int, int] | None = None  # (total, start, last line, done at start, done)
        self._said = False
        self._ended: tuple[int, int] | None = None  # (done, total) of the count that just ended

    def __call__(self, done: int, total: int, eta: float = 0.0) -> None:
        if _SILENT or (done, total) == self._ended:
            return  # (an ended count said again: a last poll)
        self._ended = (done, total) if done >= total else None
        if interactive():
            self._tqdm(done, total)
        else:
            self._line(done, total)

    def _tqdm(self, done: int, total: int) -> None:
        if self._bar is not None and (done < self._bar.n or total != self._bar.total):
            self.close()  # a new count
        if self._bar is None:
            from tqdm import tqdm

            plain = bool(os.environ.get("NO_COLOR"))
            self._bar = tqdm(
                total=total, initial=_first(done), unit=self.unit, desc=self.desc, file=sys.stderr, ascii=plain or None
            )
        self._bar.update(done - self._bar.n)  # (0: a heartbeat, the bar's clock moves on)
        if done >= total:
            self.close()

    def _line(self, done: int, total: int) -> None:
        now = clock()
        if self._count is None or self._count[0] != total or done < self._count[4]:
            self._count, self._said = (total, now, now, _first(done), done), False  # a new count
        total_, start, last, first, _ = self._count
        self._count = (total_, start, last, first, done)
        if now - last < INTERVAL and done < total:
            return
        if done >= total and not self._said:
            self._count = None  # a short count: no line at all
            return
        self._count = (total_, start, now, first, done)
        rate = (done - first) / max(now - start, 1e-9)
        what = f"fpreduce {self.desc}: " if self.desc else "fpreduce: "
        text = f"{what}{done}/{total} {self.unit}s ({done / max(total, 1):.0%}), {_rate(rate)} {self.unit}s/s"
        if done >= total:
            text += f", done in {_duration(now - start)}"
            self._count = None
        elif rate > 0:
            text += f", about {_duration((total - done) / rate)} left"
        else:
            text += f", {_duration(now - start)} so far, time left not known yet"
        self._said = True
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

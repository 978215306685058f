"""The threads of the compiled kernels: how many to use, how a span of columns splits, the one pool.

The kernels release the GIL (:func:`fpreduce.base.jit.kernel`), so Python threads run them on every
core. A reduction's columns are independent (each column's sum is its own fold, and a stochastic
rounding draws by element and addition, never by position in a chunk), so splitting them gives
the same bits for any number of threads: :func:`split` only decides which thread adds which
columns. ``threads=None`` means every core this process may run on (``os.sched_getaffinity``), or
``$FPREDUCE_THREADS`` when set; small work stays on one thread (a thread's start costs more than
it saves below :data:`MIN_WORK` additions).

>>> split(10, 3, align=4)
[(0, 4), (4, 8), (8, 10)]
>>> resolve(None, 1000), resolve(3, 1000)
(1, 3)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fpreduce.base.errors import InvalidArgument

__all__ = ["MIN_WORK", "available", "check", "resolve", "run", "split"]

MIN_WORK = 1 << 20  # additions per thread at least (about 0.3 ms of float32 adds): below, one thread
T = TypeVar("T")
_POOL: list[tuple[int, ThreadPoolExecutor]] = []  # (its workers, the pool): one, grown when a call needs more
_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it starts its own pool
    os.register_at_fork(after_in_child=_POOL.clear)


def available() -> int:
    """The cores this process may run on (``$FPREDUCE_THREADS`` if set: a positive integer)."""
    env = os.environ.get("FPREDUCE_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise InvalidArgument(f"FPREDUCE_THREADS must be a positive integer, got {env!r}")
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (macOS, Windows)
        return os.cpu_count() or 1


def check(threads: object, name: str = "threads") -> int | None:
    """``threads`` checked: None (every core) or an integer >= 1 (InvalidArgument naming ``name``)."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidArgument(f"{name} must be None (every core) or an integer >= 1, got {threads!r}")
    return threads


def resolve(threads: int | None, work: int) -> int:
    """The threads a kernel of ``work`` additions runs on: ``threads`` as asked, or for None :func:`available`
    but at most one per :data:`MIN_WORK` additions (at least one)."""
    if threads is not None:
        return threads
    return max(1, min(available(), work // MIN_WORK))


def split(size: int, parts: int, align: int = 64) -> list[tuple[int, int]]:
    """``[0, size)`` cut into at most ``parts`` consecutive spans of nearly equal length, each a multiple of
    ``align`` but the last (a span's columns start on a cache line); empty spans dropped."""
    step = -(-size // max(parts, 1))
    step = -(-step // align) * align
    return [(lo, min(lo + step, size)) for lo in range(0, size, max(step, 1))]


def run(fn: Callable[..., T], args: Sequence[tuple[Any, ...]]) -> list[T]:
    """``[fn(*a) for a in args]``, the calls on the pool's threads (the first on this one); results in order.

    ``fn`` should release the GIL (a compiled kernel) for the threads to run at once.
    """
    if len(args) <= 1:
        return [fn(*a) for a in args]
    with _LOCK:
        if not _POOL or _POOL[0][0] < len(args) - 1:
            if _POOL:
                _POOL[0][1].shutdown(wait=False)  # (its threads end once idle)
            workers = max(len(args) - 1, available())
            _POOL[:] = [(workers, ThreadPoolExecutor(workers, thread_name_prefix="fpreduce"))]
        pool = _POOL[0][1]
    rest = [pool.submit(fn, *a) for a in args[1:]]
    first = fn(*args[0])
    return [first, *(f.result() for f in rest)]

"""What every benchmark here times with: the best of a few runs, and the in-place baseline.

The benchmarks run as scripts (``python tests/benchmarks/bench_X.py``), so this
directory is on ``sys.path`` and ``from _timing import best`` finds this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np


def best(fn: Callable[[], object], repeat: int = 2) -> float:
    """The fastest of ``repeat`` calls of ``fn``, in seconds."""
    t = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def inplace_adds(X: np.ndarray) -> np.ndarray:
    """The rows of ``X`` summed by in-place adds, ``np.add(acc, X[k], out=acc)``: numpy's fastest plain fold."""
    acc = X[0].copy()
    for k in range(1, X.shape[0]):
        np.add(acc, X[k], out=acc)
    return acc

"""Calibrate the cost model on a real library: time Open MPI's all-reduce algorithms, fit alpha, beta, gamma.

``calibrate(np=K)`` runs ``mpirun -np K`` once per algorithm (forced as in
:mod:`fpreduce.backends.mpi`: loopback and shared memory only), times ``MPI_Allreduce``
over a range of sizes (the slowest rank's time, median of the repetitions), and fits the
closed forms of :mod:`fpreduce.core.timing`: every measured time is
``a * alpha + m * beta + g * gamma`` with the plan's coefficients ``(a, m, g)``
(:func:`fpreduce.core.timing.terms`).

* The joint fit uses every algorithm at once: non-negative least squares on the relative
  error (each row divided by its measured time, so microsecond latencies and millisecond
  transfers weigh alike). beta and gamma are told apart only because the algorithms move
  and add bytes in different ratios (ring 2:1, recursive doubling 1:1).
* Per algorithm, beta and gamma multiply the same byte count, so only ``alpha`` and one
  per-byte time can be fitted: they are reported beside the joint fit, with each fit's
  prediction error.

On one machine every message goes through shared memory: the profile describes that
transport (written as both the inter- and the intra-node constants). A benchmark, not a
test: timings depend on the machine and its load.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fpreduce.backends import mpi
from fpreduce.backends._common import BackendError, new_workdir, run_group
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.timing import Profile, terms

__all__ = ["PLANS", "AlgorithmFit", "Calibration", "calibrate", "fit", "is_calibration"]

#: Open MPI algorithm -> the plan whose closed form models its time
PLANS = {"basic_linear": "linear", "recursive_doubling": "rd", "ring": "ring", "rabenseifner": "rabenseifner"}
DEFAULT_SIZES = tuple(4**k for k in range(0, 12))  # 1 .. 4M elements


@dataclass(frozen=True)
class AlgorithmFit:
    """One algorithm's measurements and fits.

    Attributes:
        algorithm: Open MPI's name.
        nbytes: message sizes (bytes).
        measured: median time per size (s).
        predicted: the joint profile's prediction per size (s).
        alpha: this algorithm's own latency fit (s per message).
        per_byte: this algorithm's own per-byte fit (s per byte moved, gamma folded in).
        error: median relative error of the joint prediction.
        own_error: median relative error of this algorithm's own fit.
    """

    algorithm: str
    nbytes: NDArray[np.float64]
    measured: NDArray[np.float64]
    predicted: NDArray[np.float64]
    alpha: float
    per_byte: float
    error: float
    own_error: float


@dataclass(frozen=True)
class Calibration:
    """A fitted profile and how well it predicts each algorithm."""

    profile: Profile
    np: int
    fits: list[AlgorithmFit]

    def to_toml(self) -> str:
        """The profile as a ``[cluster]`` table (with the prediction errors as comments)."""
        p = self.profile
        lines = [
            f"{_HEADER} --backend mpi --np {self.np}: Open MPI over shared memory on one machine",
            *(f"# {f.algorithm}: median prediction error {f.error:.1%} (own fit {f.own_error:.1%})" for f in self.fits),
            "[cluster]",
            f"name = {json.dumps(p.name)}",
        ]
        lines += [f"{k} = {float(getattr(p, k))!r}" for k in ("alpha", "beta", "gamma", "alpha_intra", "beta_intra")]
        lines.append(f"gpus_per_node = {p.gpus_per_node}")
        return "\n".join(lines) + "\n"


#: a median prediction error above this is a fit that misses: ``calibrate`` warns
MISS = 0.25


def misses(c: Calibration, limit: float = MISS) -> list[str]:
    """One warning per algorithm the joint profile predicts with a median relative error above ``limit``."""
    return [
        f"the fitted profile predicts {f.algorithm} with a median error of {f.error:.0%} (over {limit:.0%}; "
        f"{f.algorithm}'s own fit: {f.own_error:.0%}): treat this profile's predictions for {f.algorithm} as rough"
        for f in c.fits
        if f.error > limit
    ]


#: the first line of a profile written by :meth:`Calibration.to_toml`
_HEADER = "# fpreduce calibrate"


def is_calibration(path: Path) -> bool:
    """Whether ``path`` is a profile written by ``fpreduce calibrate`` (one ``calibrate -o`` may replace)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(_HEADER)) == _HEADER.encode()
    except OSError:
        return False


def _nnls(A: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.float64]:
    """Non-negative least squares for a few columns: the best of the exhaustive active sets."""
    k = A.shape[1]
    best, best_res = np.zeros(k), float(np.sum(y * y))
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            x, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            if (x < 0).any():
                continue
            res = float(np.sum((A[:, cols] @ x - y) ** 2))
            if res < best_res:
                best_res, best = res, np.zeros(k)
                best[list(cols)] = x
    return best


def fit(n: int, times: dict[str, dict[float, float]], *, name: str = "calibrated") -> Calibration:
    """Fit a :class:`Profile` to measured times: ``times[algorithm][nbytes] = seconds``.

    >>> true = Profile(alpha=2e-6, beta=1e-10, gamma=5e-11)
    >>> from fpreduce.core.timing import cost
    >>> t = {a: {b: cost(PLANS[a], 4, b, true) for b in (8.0, 8e3, 8e6)} for a in PLANS}
    >>> p = fit(4, t).profile
    >>> [round(v / w, 6) for v, w in zip((p.alpha, p.beta, p.gamma), (2e-6, 1e-10, 5e-11))]
    [1.0, 1.0, 1.0]
    """
    rows, ys = [], []
    for alg, by_size in times.items():
        if alg not in PLANS:
            raise unknown_name("mpi algorithm", alg, PLANS)
        for nb, t in by_size.items():
            if not t > 0:
                raise InvalidArgument(f"{alg}: measured time {t!r} for {nb} bytes is not positive")
            rows.append(np.array(terms(PLANS[alg], n, nb)) / t)
            ys.append(1.0)
    if len(rows) < 3:
        raise InvalidArgument("calibration needs at least three measured points")
    alpha, beta, gamma = (float(v) for v in _nnls(np.array(rows), np.array(ys)))
    beta = beta if beta > 0 else 1e-30  # a profile's beta must be > 0
    prof = Profile(alpha=alpha, beta=beta, gamma=gamma, alpha_intra=alpha, beta_intra=beta, gpus_per_node=n, name=name)
    fits = []
    for alg, by_size in times.items():
        b = np.array(sorted(by_size), dtype=np.float64)
        meas = np.array([by_size[v] for v in b])
        T = np.array([terms(PLANS[alg], n, v) for v in b])
        pred = T @ np.array([prof.alpha, prof.beta, prof.gamma])
        own = _nnls(np.column_stack([T[:, 0], T[:, 1] + T[:, 2]]) / meas[:, None], np.ones(len(b)))
        own_pred = np.column_stack([T[:, 0], T[:, 1] + T[:, 2]]) @ own
        fits.append(
            AlgorithmFit(
                alg,
                b,
                meas,
                pred,
                float(own[0]),
                float(own[1]),
                float(np.median(np.abs(pred - meas) / meas)),
                float(np.median(np.abs(own_pred - meas) / meas)),
            )
        )
    return Calibration(prof, n, fits)


def measure(
    n: int,
    algorithm: str,
    sizes: Sequence[int],
    *,
    reps: int = 5,
    dtype: str = "fp32",
    timeout: float = 300.0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[float, float]:
    """Median seconds of one real ``MPI_Allreduce`` per size (elements) on ``n`` local ranks, keyed by bytes;
    ``progress(done, len(sizes))`` counts the sizes timed while ``mpirun`` runs."""
    mpi.check_available()
    if algorithm not in mpi.ALGORITHMS:
        raise unknown_name("mpi algorithm", algorithm, mpi.ALGORITHMS)
    if dtype not in mpi.DTYPES:
        raise unknown_name("dtype", dtype, mpi.DTYPES)
    item = 8 if dtype == "fp64" else 4
    with new_workdir() as d:
        workdir = Path(d)
        job = {"sizes": [int(m) for m in sizes], "reps": int(reps), "dtype": dtype}
        (workdir / "job.json").write_text(json.dumps(job))
        argv = mpi.mpirun_argv(n, algorithm, workdir, module="fpreduce.backends._mpi_timer")
        poll = None if progress is None else lambda: progress(_timed(workdir, len(sizes)), len(sizes))
        run_group([(argv, mpi._ENV)], timeout=timeout, what=f"mpirun -np {n} ({algorithm}) timing", poll=poll)
        out = workdir / "times.json"
        if not out.exists():
            raise BackendError(f"mpirun -np {n} ({algorithm}) timing exited 0 but wrote no times")
        times = json.loads(out.read_text())
    return {float(int(m) * item): float(np.median(times[str(int(m))])) for m in sizes}


def _timed(workdir: Path, k: int) -> int:
    """How many of the ``k`` sizes the timer's rank 0 has timed (it touches ``timed.<i>``)."""
    return sum((workdir / f"timed.{i}").exists() for i in range(k))


def calibrate(
    n: int = 2,
    *,
    algorithms: Sequence[str] = tuple(PLANS),
    sizes: Sequence[int] = DEFAULT_SIZES,
    reps: int = 5,
    dtype: str = "fp32",
    progress: Callable[[int, int], None] | None = None,
) -> Calibration:
    """Time Open MPI's forced all-reduce algorithms on ``n`` local ranks and fit a profile; ``progress(done,
    total)`` counts the (algorithm, size) timings done, ``len(algorithms) x len(sizes)`` in all.

    Raises:
        InvalidArgument: Open MPI or mpi4py missing, n < 2, unknown algorithm, fewer than 2 sizes.
        BackendError: a rank died or the job timed out.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise InvalidArgument(f"calibration needs --np >= 2 ranks, got {n!r}")
    for a in algorithms:
        if a not in PLANS:
            raise unknown_name("mpi algorithm", a, PLANS)
    if len(set(sizes)) < 2 or min(sizes) < 1:
        raise InvalidArgument("calibration needs at least two distinct sizes >= 1 element")
    total = len(algorithms) * len(sizes)
    times = {}
    for i, a in enumerate(algorithms):
        step = None if progress is None else _offset(progress, i * len(sizes), total)
        times[a] = measure(n, a, sizes, reps=reps, dtype=dtype, progress=step)
    if progress is not None:
        progress(total, total)
    return fit(n, times, name=f"openmpi-shm-np{n}")


def _offset(progress: Callable[[int, int], None], before: int, total: int) -> Callable[[int, int], None]:
    """One algorithm's ``progress(done, of its sizes)`` as the calibration's: ``before`` timings done already."""
    return lambda done, _: progress(before + done, total)

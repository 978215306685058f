"""Open MPI ``MPI_Allreduce(SUM)`` on N local processes, with the algorithm forced or left to Open MPI.

``mpirun -np N python -m fpreduce.backends._mpi_worker DIR`` with the tuned
component's dynamic rules on and ``coll_tuned_allreduce_algorithm`` set (numbers
from Open MPI 4.1's ``coll_tuned_allreduce_decision.c``; ``ompi_info --param coll
tuned --level 9`` lists them), or, for :data:`DEFAULT`, no collective parameter at
all: Open MPI picks by its fixed rules, and the plan to compare with is
``ompi:default`` (:mod:`fpreduce.plans.ompi`). Only loopback and shared memory are used
(``btl self,vader``, ``pml ob1``, OOB on ``lo``), and where ``unshare -n`` is
allowed mpirun runs in a private network namespace that has nothing but ``lo``;
``coll_han_priority 0`` keeps Open MPI 5's hierarchical component out of the way.
Without ``unshare -n`` Open MPI 4.1's mpirun listens on 0.0.0.0 and on the IPv6
wildcard (``ss -ltnp`` during a job: ``oob_tcp_if_include lo`` only chooses what it
advertises; no MCA parameter binds the listeners to loopback, and neither
``oob_tcp_disable_ipv6_family`` nor ``ptl_tcp_disable_ipv6`` closes the IPv6 one):
:class:`ExposedListenerWarning` says so (``fpreduce verify`` prints it as a warning).

Which plan the library follows (:func:`fpreduce.plans.ompi.algorithm_plan`, read from
``ompi/mca/coll/base/coll_base_allreduce.c``, Open MPI v4.1.4, and confirmed bit for bit by
:func:`fpreduce.backends.verify`):

==================  ====  =====================================================
algorithm           k     plan (with the size-dependent fallbacks)
==================  ====  =====================================================
basic_linear        1     ``linear`` (reduce to 0 from rank n-1 down, bcast)
nonoverlapping      2     the tuned reduce + bcast; we force the reduce to
                          basic_linear (``coll_tuned_reduce_algorithm 1``): ``linear``
recursive_doubling  3     ``rd``
ring                4     ``ring:ompi``; ``rd`` when M < N
segmented_ring      5     ``ring:ompi`` (segments only pipeline it); the plain
                          ring when M < N * segcount (segcount = segment bytes /
                          item size; segment size 0, the default, means always),
                          hence ``rd`` when M < N
rabenseifner        6     ``rabenseifner``; basic_linear (``linear``) when M < 2^floor(log2 N)
default             --    the fixed rules' choice by N, M x item size (``ompi:default``)
==================  ====  =====================================================

Open MPI 4 has no fp16/bf16 MPI datatype: fp32 and fp64 only.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fpreduce.backends._common import (
    BackendError,
    _kill,
    collect,
    excerpt,
    new_workdir,
    python,
    ranks_done,
    run_group,
)
from fpreduce.base.errors import FpreduceWarning, InvalidArgument, unknown_name
from fpreduce.plans import AnyPlan, linear, rabenseifner, rd, ring
from fpreduce.plans.ompi import ALGORITHMS, algorithm_plan, default_plan

#: The algorithm name that forces nothing: Open MPI's fixed decision rules pick (``ompi:default``).
DEFAULT = "default"
DTYPES = ("fp32", "fp64")
#: default ``coll_tuned_allreduce_algorithm_segmentsize`` we pass for segmented_ring (bytes)
SEGMENT_BYTES = 64
INSTALL = (
    "install Open MPI and mpi4py: `apt-get install -y openmpi-bin libopenmpi-dev` "
    "then `pip install 'fpreduce[mpi]'` (or `pip install mpi4py`)"
)
_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
_FAILED_RANK = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]")


def check_available() -> str:
    """The Open MPI version string; InvalidArgument with the install command if missing."""
    if shutil.which("mpirun") is None or shutil.which("ompi_info") is None:
        raise InvalidArgument(f"backend 'mpi' needs Open MPI's mpirun and ompi_info on PATH; {INSTALL}")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise InvalidArgument(f"backend 'mpi' needs the Python package mpi4py; {INSTALL}") from None
    return _version()


@functools.cache
def _version() -> str:
    out = subprocess.run(["ompi_info", "--version"], capture_output=True, text=True, timeout=60, check=False)
    line = (out.stdout or "").strip().splitlines()
    return line[0] if line else "Open MPI (unknown version)"


def expected_plan(
    algorithm: str, n: int, m: int, dtype: str, *, segment_bytes: int = SEGMENT_BYTES
) -> tuple[str, AnyPlan, str]:
    """(plan text, plan, note) that Open MPI 4.1 follows for this algorithm, N and M of ``dtype``.

    ``algorithm`` is a key of ``ALGORITHMS`` (forced, with ``segment_bytes`` for the
    segmented ring: :func:`fpreduce.plans.ompi.algorithm_plan`) or :data:`DEFAULT` (the
    fixed rules' choice, ``ompi:default``: :func:`fpreduce.plans.ompi.default_plan`; the
    note names the algorithm chosen). The note says when a size-dependent fallback
    applies (empty otherwise).
    """
    item = 8 if dtype == "fp64" else 4
    if algorithm == DEFAULT:
        _, text, plan, note = default_plan(n, m, item)
        return text, plan, note
    return algorithm_plan(algorithm, n, m, item, segment_bytes=segment_bytes)


def contrast_plans(n: int) -> dict[str, AnyPlan]:
    """The Open MPI plans, for contrast (plus NCCL's and gloo's rings)."""
    return {
        "linear": linear(n),
        "rd": rd(n),
        "ring:ompi": ring(n, "ompi"),
        "rabenseifner": rabenseifner(n),
        "ring:nccl": ring(n, "nccl"),
    }


def mpirun_argv(
    n: int,
    algorithm: str,
    workdir: Path,
    *,
    segment_bytes: int = SEGMENT_BYTES,
    adapt: bool = False,
    module: str = "fpreduce.backends._mpi_worker",
) -> list[str]:
    """The mpirun command line (loopback and shared memory only), ``algorithm`` forced unless :data:`DEFAULT`.

    ``adapt``: MPI_Reduce goes to coll/adapt with its linear tree (``coll_adapt_priority
    100``, ``coll_adapt_reduce_algorithm 6``, one segment up to 1 MiB), whose root adds
    the children's buffers in the order they arrive. ``module``: the Python module
    each rank runs (``python -m module workdir``).
    """
    mca = {
        "pml": "ob1",
        "btl": "self,vader",
        "btl_vader_single_copy_mechanism": "none",  # CMA is often not permitted in containers
        "oob_tcp_if_include": "lo",
        "btl_tcp_if_include": "lo",
        "mpi_yield_when_idle": "1",
    }
    if algorithm == DEFAULT:  # Open MPI's fixed rules, whatever OMPI_MCA_coll_tuned_* the environment sets
        mca["coll_tuned_use_dynamic_rules"] = "0"  # its default value
    else:
        mca["coll_han_priority"] = "0"
        mca["coll_tuned_use_dynamic_rules"] = "1"
        mca["coll_tuned_allreduce_algorithm"] = str(ALGORITHMS[algorithm])
        mca["coll_tuned_allreduce_algorithm_segmentsize"] = str(segment_bytes if algorithm == "segmented_ring" else 0)
    if algorithm == "nonoverlapping":
        mca["coll_tuned_reduce_algorithm"] = "1"  # basic_linear reduce
        mca["coll_tuned_bcast_algorithm"] = "1"
    if adapt:
        mca["coll_adapt_priority"] = "100"
        mca["coll_adapt_reduce_algorithm"] = "6"
        mca["coll_adapt_reduce_segment_size"] = str(1 << 20)
    prefix = _netns()
    if not prefix:  # mpirun's listeners are reachable from the network: say so
        warnings.warn(EXPOSED, ExposedListenerWarning, stacklevel=2)
    argv = ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none"]
    for k, v in mca.items():
        argv += ["--mca", k, v]
    return [*prefix, *argv, python(), "-m", module, str(workdir)]


class ExposedListenerWarning(FpreduceWarning):
    """mpirun runs outside a private network namespace: its listener is reachable from the network."""


EXPOSED = (
    "mpirun runs without a private network namespace (`unshare -n` is missing or not allowed here): "
    "Open MPI's out-of-band listeners bind every interface (0.0.0.0 and ::) for the job's duration, "
    "whatever oob_tcp_if_include says; the data moves over loopback and shared memory only, but the ports "
    "are reachable from the network. Run where `unshare -n` works (root or user namespaces) to close them"
)


@functools.cache
def _netns() -> tuple[str, ...]:
    """A prefix that runs mpirun in a new network namespace holding only loopback, if allowed.

    Open MPI's out-of-band TCP listener binds every interface (``oob_tcp_if_include
    lo`` only limits what it advertises); in a private namespace (``unshare -n``,
    root or user namespaces needed) there is nothing but ``lo`` to bind. Empty
    when unavailable: then the listener is reachable from outside while the job runs.
    """
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return ()
    prefix = ("unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh")
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else ()


def run_allreduce(
    cases: Sequence[np.ndarray],
    algorithm: str,
    *,
    timeout: float = 120.0,
    segment_bytes: int = SEGMENT_BYTES,
    split_keys: Sequence[Sequence[int]] | None = None,
    delays: Sequence[Sequence[float]] | None = None,
    fault: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[np.ndarray]]:
    """Run one real MPI_Allreduce(SUM) per case in a single ``mpirun``; every rank's results.

    Args:
        cases: (n, m_i) float32 or float64 arrays, all with the same n and dtype;
            rank r sends row r.
        algorithm: a key of ``ALGORITHMS`` (forced) or :data:`DEFAULT` (Open MPI's own choice).
        timeout: seconds before the whole job is killed.
        segment_bytes: the segmented ring's segment size.
        split_keys: per case, the key of every rank for ``Comm.Split`` (re-ranking).
        delays: per case, every rank's sleep in seconds before an ``MPI_Reduce(SUM)``
            to rank 0 through coll/adapt's linear tree (arrival order; ``algorithm``
            still forces the tuned allreduce, unused then). Only rank 0's result counts.
        fault: test hook, ``die:R`` or ``hang:R`` makes rank R exit or hang.
        progress: ``progress(done, 2 n)`` while the job runs: the ranks that reached the all-reduce plus
            those that wrote their result.

    Returns:
        ``out[i][r]``: rank r's result of case i.

    Raises:
        InvalidArgument: Open MPI or mpi4py missing, bad algorithm or arrays.
        BackendError: a rank died or the job timed out (message names the rank).
    """
    check_available()
    if algorithm not in ALGORITHMS and algorithm != DEFAULT:
        raise unknown_name("mpi algorithm", algorithm, (DEFAULT, *ALGORITHMS))
    n = cases[0].shape[0]
    dt = cases[0].dtype
    if dt not in (np.float32, np.float64) or any(c.dtype != dt or c.shape[0] != n for c in cases):
        raise InvalidArgument("mpi cases must all be (n, m) float32 or all float64 arrays with the same n")
    with new_workdir() as d:
        workdir = Path(d)
        np.save(workdir / "inputs.npy", np.concatenate(cases, axis=1))
        job: dict[str, object] = {"sizes": [int(c.shape[1]) for c in cases], "fault": fault}
        if split_keys is not None:
            job["split_keys"] = [[int(k) for k in ks] for ks in split_keys]
        if delays is not None:
            job["delays"] = [[float(t) for t in ts] for ts in delays]
        (workdir / "job.json").write_text(json.dumps(job))
        run_group(
            [(mpirun_argv(n, algorithm, workdir, segment_bytes=segment_bytes, adapt=delays is not None), _ENV)],
            timeout=timeout,
            what=f"mpirun -np {n} ({algorithm})",
            rank_of_failure=_FAILED_RANK,
            workdir=workdir,
            n=n,
            poll=None if progress is None else lambda: progress(ranks_done(workdir, n), 2 * n),
        )
        outs, missing = collect(workdir, n)
        if missing:
            raise BackendError(f"mpirun -np {n} ({algorithm}) exited 0 but rank(s) {missing} wrote no result")
    res: list[list[np.ndarray]] = []
    lo = 0
    for c in cases:
        m = c.shape[1]
        res.append([o[lo : lo + m] for o in outs])
        lo += m
    return res


def run_command(cmd: Sequence[str], what: str, timeout: float) -> str:
    """Run an mpirun command line (its own process group, :data:`_ENV` added); its output (stderr merged).

    Raises BackendError on a non-zero exit (with the ranks' ``fpreduce: error:`` lines, or
    the output's last lines, and the rank mpirun names) or after ``timeout`` seconds (the
    job's process group is killed).
    """
    proc = subprocess.Popen(  # noqa: S603 - our own argv
        list(cmd),
        env={**os.environ, **_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill([proc])  # type: ignore[list-item]
        raise BackendError(f"{what}: timed out after {timeout:g} s; killed") from None
    finally:
        _kill([proc])  # type: ignore[list-item]
    if proc.returncode != 0:
        errors = list(dict.fromkeys(ln.strip() for ln in text.splitlines() if "fpreduce: error:" in ln))
        m = _FAILED_RANK.search(text)
        tail = excerpt(text)
        raise BackendError(
            f"{what}: exited with code {proc.returncode}"
            + (f" (rank {m.group(1)} failed first)" if m else "")
            + ": "
            + (" ".join(errors) if errors else f"Output: {tail}")
        )
    return text

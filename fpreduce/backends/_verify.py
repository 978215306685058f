"""``verify``: one real all-reduce against fpreduce's matching plan (``fpreduce verify``)."""

from __future__ import annotations

import re
from collections.abc import Callable

from fpreduce.backends import gloo, mpi
from fpreduce.backends._common import VerifyResult, backend_dtype, compare, make_inputs
from fpreduce.base.errors import InvalidArgument, unknown_name

#: backend names accepted by :func:`verify`.
BACKENDS = ("mpi", "gloo")
_DEFAULT = {"mpi": mpi.DEFAULT, "gloo": "ring"}


def algorithms(backend: str) -> tuple[str, ...]:
    """The algorithms a backend can run (``mpi``: ``default``, Open MPI's own choice, then the tuned
    allreduce algorithms it can be forced to)."""
    if backend == "mpi":
        return (mpi.DEFAULT, *mpi.ALGORITHMS)
    if backend == "gloo":
        return gloo.ALGORITHMS
    raise unknown_name("backend", backend, BACKENDS)


def dtypes(backend: str) -> tuple[str, ...]:
    """The formats a backend can sum (Open MPI 4 has no fp16/bf16 MPI datatype)."""
    algorithms(backend)
    return mpi.DTYPES if backend == "mpi" else gloo.DTYPES


def verify(
    backend: str,
    np: int,
    algorithm: str | None = None,
    dtype: str = "fp32",
    elements: int = 1000,
    seed: int = 0,
    *,
    timeout: float = 120.0,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyResult:
    """Run a real all-reduce on ``np`` local processes and count the bits fpreduce gets wrong.

    Seeded inputs (``np`` workers x ``elements``, rounded to ``dtype``) are summed by
    the real library with ``algorithm`` forced (for mpi, ``default`` forces nothing:
    Open MPI picks by its fixed rules), and by :func:`fpreduce.reduce` with the plan
    the library follows for that size (including its size-dependent fallbacks; for
    ``default``, ``ompi:default``'s choice, named in the case's note); the result
    counts differing elements (goal 0), checks that all ranks received identical
    bits, and, for contrast, counts the elements that differ from the other plans.

    Args:
        backend: ``mpi`` (Open MPI via mpi4py) or ``gloo`` (torch.distributed).
        np: number of processes (2..64; all on this machine, loopback only).
        algorithm: a name from :func:`algorithms` (default: ``default`` for mpi, ``ring`` for gloo).
        dtype: ``fp32`` or ``fp64`` for mpi; ``fp32``, ``fp16``, ``bf16``, ``fp64`` for gloo (any spelling of
            them: ``float32``, ``torch.bfloat16``, ...).
        elements: M, the number of elements all-reduced (>= 1).
        seed: seed of the inputs.
        timeout: seconds before a hung run is killed.
        progress: ``progress(done, total)`` while it works: the tasks are each rank reaching the
            all-reduce, each rank's result written, and each plan emulated.

    Returns:
        A VerifyResult with one case; ``.summary()`` is printable, ``.ok`` the verdict.

    Raises:
        InvalidArgument: unknown backend/algorithm/dtype, bad sizes, or the
            library is not installed (the message gives the install command).
        BackendError: a rank died or the run timed out (the message names it).

    Inputs are finite (no NaN/Inf); values are normal numbers of assorted
    magnitudes, so the sums depend on the association.
    """
    algos = algorithms(backend)
    alg = algorithm or _DEFAULT[backend]
    if alg not in algos:
        raise unknown_name(f"{backend} algorithm", alg, algos)
    dtype = backend_dtype(backend, dtype, dtypes(backend))
    for what, v, lo, hi in (("np", np, 2, 64), ("elements", elements, 1, 1 << 28)):
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise InvalidArgument(f"{what} must be an integer in {lo}..{hi}, got {v!r}")
    if not isinstance(seed, int) or seed < 0:
        raise InvalidArgument(f"seed must be a non-negative integer, got {seed!r}")
    X = make_inputs(np, elements, dtype, seed)
    ranks, tick = _counted(progress, np, _tasks(backend, np, alg, elements, dtype))
    if backend == "mpi":
        library = mpi.check_available()
        outs = mpi.run_allreduce([X], alg, timeout=timeout, progress=ranks)[0]
        text, plan, note = mpi.expected_plan(alg, np, elements, dtype)
        if alg == mpi.DEFAULT and not re.search(r"(?<![\d.])4\.1\.\d", library):
            note += f"; these are Open MPI 4.1's rules, and {library} ran"
        case = compare(X, outs, dtype, (text, plan, note), mpi.contrast_plans(np), tick=tick)
    else:
        library = gloo.check_available()
        outs = gloo.run_allreduce([X], [dtype], timeout=timeout, progress=ranks)[0]
        case = compare(X, outs, dtype, gloo.expected_plan(alg, np, elements, dtype), gloo.contrast_plans(np), tick=tick)
    return VerifyResult(backend, np, alg, seed, library, (case,))


def _tasks(backend: str, np: int, algorithm: str, elements: int, dtype: str) -> int:
    """How many tasks :func:`verify` counts in its progress: ``np`` ranks reaching the all-reduce, ``np``
    results written, and one emulation per plan compared (the library's plan and its contrasts)."""
    lib = mpi if backend == "mpi" else gloo
    name = lib.expected_plan(algorithm, np, elements, dtype)[0]
    return 2 * np + 1 + sum(k != name for k in lib.contrast_plans(np))


def _counted(
    progress: Callable[[int, int], None] | None, np: int, total: int
) -> tuple[Callable[[int, int], None] | None, Callable[[], None] | None]:
    """``progress`` as the two callbacks the run takes: the ranks' count (started now, at 0 of ``total``),
    then one tick per plan emulated."""
    if progress is None:
        return None, None
    done = [2 * np]

    def tick() -> None:
        done[0] += 1
        progress(min(done[0], total), total)

    progress(0, total)
    return (lambda d, _: progress(d, total)), tick

"""Shared machinery of the backends: inputs, launching ranks, comparing bits, the result type.

A backend run is: the parent writes the inputs (one ``(N, M)`` array per case) to a
private temporary directory, launches N real processes that each load their own
row, run the library's all-reduce and write their result atomically (temp file +
rename) as ``out.<rank>.npy``; the parent waits with a timeout, kills the whole
process group on a hang, names the ranks that failed, and compares the bits of
every rank's result with :func:`fpreduce.reduce` under the matching plan. The
temporary directory is removed in every case, so nothing half-written survives.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.engine import reduce
from fpreduce.core.formats import format_name
from fpreduce.core.rounding import round_to
from fpreduce.plans import AnyPlan


class BackendError(RuntimeError):
    """A real collective run failed: a rank died, hung past the timeout, or disagreed."""


def make_inputs(n: int, m: int, dtype: str, seed: int) -> NDArray[np.floating]:
    """Seeded (n, m) gradients, rounded to ``dtype``, whose sum depends on the order.

    Normal values scaled by 2^k, k uniform in [-6, 6] per element and worker, so
    partial sums lose different low bits under different associations; moderate
    enough that fp16 never overflows. float64 for fp64, float32 otherwise.
    """
    rng = np.random.default_rng([seed, n, m])
    x = rng.standard_normal((n, m)) * np.exp2(rng.integers(-6, 7, size=(n, m)))
    if dtype == "fp64":
        return x
    return np.asarray(round_to(x, dtype), dtype=np.float32)


def backend_dtype(backend: str, dtype: object, allowed: Sequence[str]) -> str:
    """``dtype`` as people write it (``bfloat16``, ``torch.float32``, ``np.float64``, a dtype object) as the
    format name a backend sums (one of ``allowed``); another format or an unknown name: one line with the
    backend's choices."""
    try:
        name = format_name(dtype)
    except InvalidArgument:
        name = str(dtype)
    if name not in allowed:
        extra = " (Open MPI 4 has no fp16/bf16 MPI datatype)" if backend == "mpi" else ""
        raise unknown_name(f"{backend} dtype{extra}", str(dtype), allowed)
    return name


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of float32 / float64 values (fp16/bf16 travel as exact float32)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)


def differing(a: np.ndarray, b: np.ndarray) -> int:
    """Number of elements whose bits differ (after bringing both to the wider type)."""
    if a.dtype != b.dtype:
        a, b = a.astype(np.float64), b.astype(np.float64)
    return int(np.count_nonzero(bits(a) != bits(b)))


def emulate(X: np.ndarray, plan: AnyPlan, dtype: str) -> NDArray[np.floating]:
    """fr.reduce with input = accumulator = ``dtype``, nearest even (what the libraries do)."""
    return reduce(X, plan, input=dtype, accumulate=dtype)


@dataclass(frozen=True)
class CaseResult:
    """One real all-reduce compared with fpreduce.

    Attributes:
        elements: M, the element count of the all-reduce.
        dtype: the format summed.
        plan: text of the plan the library is expected to follow for this case.
        note: why that plan (e.g. a size-dependent fallback), or "".
        differing: elements whose bits differ from ``plan`` (goal: 0).
        contrast: for other plans, how many elements differ from them.
        ranks_agree: every rank received the same bits.
    """

    elements: int
    dtype: str
    plan: str
    note: str
    differing: int
    contrast: Mapping[str, int]
    ranks_agree: bool

    @property
    def ok(self) -> bool:
        """Bit-exact and all ranks agree."""
        return self.differing == 0 and self.ranks_agree


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of :func:`fpreduce.backends.verify`.

    Attributes:
        backend: ``mpi`` or ``gloo``.
        np: number of processes.
        algorithm: the library algorithm forced (``ring`` for gloo), or ``default`` (Open MPI's own choice).
        seed: the seed of the inputs.
        library: the library and version that ran (e.g. ``Open MPI v4.1.4``).
        cases: one :class:`CaseResult` per (elements, dtype).
    """

    backend: str
    np: int
    algorithm: str
    seed: int
    library: str
    cases: tuple[CaseResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Every case bit-exact with every rank agreeing."""
        return all(c.ok for c in self.cases)

    def summary(self) -> str:
        """A few human-readable lines, one per case, then the verdict."""
        lines = [f"{self.backend} ({self.library}), np={self.np}, algorithm={self.algorithm}, seed={self.seed}"]
        for c in self.cases:
            others = ", ".join(f"{k}: {v}" for k, v in c.contrast.items())
            lines.append(
                f"  {c.dtype} M={c.elements}: {c.differing} of {c.elements} elements differ from "
                f"plan {c.plan!r}{' (' + c.note + ')' if c.note else ''}; "
                f"ranks {'agree' if c.ranks_agree else 'DISAGREE'}; other plans differ in: {others or '-'}"
            )
        lines.append("OK: bit-exact" if self.ok else "MISMATCH")
        return "\n".join(lines)


def compare(
    X: np.ndarray,
    outs: Sequence[np.ndarray],
    dtype: str,
    plan: tuple[str, AnyPlan, str],
    others: Mapping[str, AnyPlan],
    *,
    tick: Callable[[], None] | None = None,
) -> CaseResult:
    """Compare every rank's result with the matching plan and rank 0's with the others; ``tick()`` after each
    plan emulated (progress)."""
    name, p, note = plan
    y = outs[0]
    agree = all(np.array_equal(bits(y), bits(o)) for o in outs[1:])

    def emulated(q: AnyPlan) -> NDArray[np.floating]:
        z = emulate(X, q, dtype)
        if tick is not None:
            tick()
        return z

    mine = differing(y, emulated(p))
    contrast = {k: differing(y, emulated(q)) for k, q in others.items() if k != name}
    return CaseResult(X.shape[1], dtype, name, note, mine, contrast, agree)


def new_workdir() -> tempfile.TemporaryDirectory[str]:
    """A private temporary directory (removed on exit, success or not)."""
    return tempfile.TemporaryDirectory(prefix="fpreduce-verify-")


def collect(workdir: Path, n: int) -> tuple[list[np.ndarray], list[int]]:
    """Every rank's result (in rank order) and the ranks that wrote none."""
    outs, missing = [], []
    for r in range(n):
        f = workdir / f"out.{r}.npy"
        if f.exists():
            outs.append(np.load(f))
        else:
            missing.append(r)
    return outs, missing


def run_group(
    cmds: Sequence[tuple[list[str], Mapping[str, str]]],
    *,
    timeout: float,
    what: str,
    rank_of_failure: re.Pattern[str] | None = None,
    workdir: Path | None = None,
    n: int = 0,
    poll: Callable[[], None] | None = None,
) -> None:
    """Run the commands as one process group each; all must exit 0 within ``timeout`` seconds; ``poll()``
    is called while they run (every ~20 ms: the caller's progress).

    A command that exits non-zero makes the others be killed at once; on timeout
    all are killed (``SIGKILL`` to each command's own process group: only the
    processes this function started). Raises BackendError naming the failed
    command index (= rank when there is one command per rank) or, with a single
    launcher command (mpirun), the rank parsed from its output by ``rank_of_failure``.
    """
    procs = []
    logs = []
    try:
        for argv, env in cmds:
            log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in finally
            logs.append(log)
            procs.append(
                subprocess.Popen(  # noqa: S603 - our own argv
                    argv,
                    env={**os.environ, **env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout
        failed: list[int] = []
        while True:
            codes = [p.poll() for p in procs]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed or all(c == 0 for c in codes):
                break
            if poll is not None:
                poll()
            if time.monotonic() > deadline:
                hung = [i for i, c in enumerate(codes) if c is None]
                _kill(procs)
                raise BackendError(
                    f"{what}: timed out after {timeout:g} s; still running: "
                    f"{_who(hung, len(cmds))}; killed.{_progress(workdir, n)} {_tail(logs, hung)}"
                )
            time.sleep(0.02)
        if failed:
            _kill(procs)
            detail = ""
            if rank_of_failure is not None:
                logs[0].seek(0)
                m = rank_of_failure.search(logs[0].read().decode(errors="replace"))
                if m:
                    detail = f" (rank {m.group(1)} failed first)"
            i = failed[0]
            raise BackendError(
                f"{what}: {_who([i], len(cmds))} exited with code {procs[i].returncode}{detail}. {_tail(logs, [i])}"
            )
    finally:
        _kill(procs)
        for log in logs:
            log.close()


def ranks_done(workdir: Path, n: int) -> int:
    """How far a group of ``n`` ranks got, out of ``2 n``: the ranks that reached the collective (each touches
    ``started.<rank>``) plus those that wrote their result (``out.<rank>.npy``)."""
    return sum((workdir / f"started.{r}").exists() + (workdir / f"out.{r}.npy").exists() for r in range(n))


def _progress(workdir: Path | None, n: int) -> str:
    """Which ranks never reached the collective (workers touch ``started.<rank>`` first)."""
    if workdir is None or n == 0:
        return ""
    late = [r for r in range(n) if not (workdir / f"started.{r}").exists()]
    if late:
        return f" Rank {', '.join(map(str, late))} never reached the all-reduce."
    return " Every rank entered the all-reduce; none finished."


def _who(idx: Sequence[int], total: int) -> str:
    if total == 1:
        return "the launcher"
    return "rank " + ", ".join(str(i) for i in idx)


def _tail(logs: Sequence[object], idx: Sequence[int]) -> str:
    out = []
    for i in idx[:1]:
        f = logs[i]
        f.seek(0)  # type: ignore[attr-defined]
        text = f.read().decode(errors="replace").strip()  # type: ignore[attr-defined]
        if text:
            out.append("Output: " + excerpt(text))
    return " ".join(out)


def excerpt(text: str, keep: int = 4) -> str:
    """A failed process's output on one line: its error lines first, then its first and last ``keep``
    lines (mpirun's cause is often at the top and the Python exception at the bottom), rules dropped."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip() and set(ln.strip()) - set("-=*")]
    errors = [ln for ln in lines if "Error" in ln or "error:" in ln][-2:]
    shown = lines if len(lines) <= 2 * keep else [*lines[:keep], "...", *lines[-keep:]]
    return " | ".join(dict.fromkeys([*errors, *shown]))


def _kill(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        # the whole group, also when the leader already exited (mpirun's children)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def python() -> str:
    """The running interpreter (workers run in the same environment)."""
    return sys.executable

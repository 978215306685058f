"""A live group of local ranks serving one real all-reduce per call (the black box a reveal probes).

Launching torch's gloo ranks or mpirun costs seconds; a reveal makes 2N calls and more to
verify. :class:`LiveAllReduce` launches the ranks once, as :mod:`fpreduce.backends.gloo` and
:mod:`fpreduce.backends.mpi` do (gloo: N processes joined through a ``FileStore``, sockets on
127.0.0.1; mpi: mpirun with the algorithm forced, loopback and shared memory only), and each
call hands them an ``(N, E)`` input through their private directory: ``in.<k>.npy`` written
atomically, every rank all-reduces its row and writes ``out.<k>.<rank>.npy``
(``python -m fpreduce.backends._live_worker``). The call returns rank 0's result and counts
the elements where another rank got other bits (:attr:`LiveAllReduce.disagreeing`). A rank
that dies or a call that outlasts ``timeout`` is a :class:`BackendError` naming the rank; the
ranks are stopped (then killed) and the directory removed on :meth:`close`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.backends import gloo, mpi
from fpreduce.backends._common import BackendError, _kill, backend_dtype, bits, excerpt, new_workdir, python
from fpreduce.base.errors import InvalidArgument, unknown_name

__all__ = ["BACKENDS", "LiveAllReduce"]

#: The libraries a live group runs.
BACKENDS = ("gloo", "mpi")


def _torch_found() -> str:
    """``torch`` (its version comes from rank 0, which imports it): the parent does not import torch (seconds
    of CPU the ranks need as they start); a torch without gloo fails in the ranks, with their log."""
    if importlib.util.find_spec("torch") is None:
        raise InvalidArgument(f"backend 'gloo' needs PyTorch; {gloo.INSTALL}")
    return "torch"


class LiveAllReduce:
    """``N`` local ranks of ``backend`` that all-reduce (SUM) one ``(N, E)`` input per call.

    Args:
        backend: ``gloo`` (torch.distributed, CPU) or ``mpi`` (Open MPI through mpi4py).
        ranks: N, 2..64.
        algorithm: Open MPI's forced algorithm (a key of ``mpi.ALGORITHMS``), or ``default`` (the
            default for mpi: Open MPI's own choice); gloo: ``ring``.
        dtype: the tensor's format (gloo: fp32, fp16, bf16, fp64; mpi: fp32, fp64).
        timeout: seconds a launch or one call may take.

    Use as a context manager (it returns once every rank has joined: ``start_seconds``);
    ``fn(X)`` with X of shape (N, E) (values of ``dtype``) returns rank 0's result as float64
    (its values are exact in ``dtype``). ``fn.in_format("bf16")`` is the same ranks all-reducing
    tensors of another of the backend's dtypes (one launch for several formats).
    """

    def __init__(
        self, backend: str, ranks: int, *, algorithm: str | None = None, dtype: str = "fp32", timeout: float = 120.0
    ) -> None:
        if backend not in BACKENDS:
            raise unknown_name("backend", backend, BACKENDS)
        lib = gloo if backend == "gloo" else mpi
        algorithm = algorithm or (mpi.DEFAULT if backend == "mpi" else "ring")
        allowed = (mpi.DEFAULT, *mpi.ALGORITHMS) if backend == "mpi" else tuple(gloo.ALGORITHMS)
        if algorithm not in allowed:
            raise unknown_name(f"{backend} algorithm", algorithm, allowed)
        dtype = backend_dtype(backend, dtype, lib.DTYPES)
        if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= 64:
            raise InvalidArgument(f"--np must be an integer in 2..64, got {ranks!r}")
        self.library = _torch_found() if backend == "gloo" else lib.check_available()
        self.backend, self.ranks, self.algorithm, self.dtype, self.timeout = backend, ranks, algorithm, dtype, timeout
        self.calls = self.disagreeing = 0
        self.start_seconds = 0.0
        self._dir: Any = None
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> LiveAllReduce:
        self._dir = new_workdir()
        work = Path(self._dir.name)
        job = {"backend": self.backend, "dtype": self.dtype, "timeout": self.timeout}
        (work / "job.json").write_text(json.dumps(job))
        if self.backend == "gloo":
            env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"}
            argv = [python(), "-m", "fpreduce.backends._live_worker", str(work)]
            cmds = [([*argv, str(r), str(self.ranks)], env) for r in range(self.ranks)]
        else:
            argv = mpi.mpirun_argv(self.ranks, self.algorithm, work, module="fpreduce.backends._live_worker")
            cmds = [(argv, {**os.environ, **mpi._ENV})]
        for cmd, env in cmds:
            log = open(work / f"log.{len(self._procs)}", "wb")  # noqa: SIM115 - closed as the process ends
            self._procs.append(
                subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
            )
            log.close()
        t0 = time.monotonic()
        self._wait([work / f"ready.{r}" for r in range(self.ranks)], "start")
        self.start_seconds = time.monotonic() - t0
        self.library = (work / "ready.0").read_text() or self.library  # (gloo: the version rank 0 imported)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the ranks (a ``stop`` file, then a kill after a few seconds) and remove the directory."""
        if self._dir is None:
            return
        (Path(self._dir.name) / "stop").touch()
        end = time.monotonic() + 10
        while any(p.poll() is None for p in self._procs) and time.monotonic() < end:
            time.sleep(0.02)
        _kill(self._procs)
        self._procs = []
        self._dir.cleanup()
        self._dir = None

    def in_format(self, dtype: str) -> Callable[[Any], NDArray[np.float64]]:
        """The all-reduce of these ranks on tensors of ``dtype`` (a dtype of the backend: gloo fp32, fp16,
        bf16, fp64) instead of the group's own."""
        name = backend_dtype(self.backend, dtype, (gloo if self.backend == "gloo" else mpi).DTYPES)
        return lambda X: self._call(X, name)

    def __call__(self, X: Any) -> NDArray[np.float64]:
        return self._call(X, self.dtype)

    def _call(self, X: Any, dtype: str) -> NDArray[np.float64]:
        if self._dir is None:
            raise InvalidArgument("a LiveAllReduce is called inside its `with` block")
        A = np.asarray(X)
        if A.ndim != 2 or A.shape[0] != self.ranks:
            raise InvalidArgument(f"the input must be ({self.ranks}, E), got shape {A.shape}")
        work, k = Path(self._dir.name), self.calls
        if dtype != self.dtype:
            (work / f"dtype.{k}").write_text(dtype)  # read by the ranks before in.<k>.npy appears
        tmp = work / f".in.{k}.npy"
        with open(tmp, "wb") as f:
            np.save(f, A.astype(np.float64))
        os.replace(tmp, work / f"in.{k}.npy")
        names = [work / f"out.{k}.{r}.npy" for r in range(self.ranks)]
        self._wait(names, f"answer call {k}")
        outs = [np.load(p) for p in names]
        self.calls += 1
        (work / f"in.{k}.npy").unlink()
        (work / f"dtype.{k}").unlink(missing_ok=True)
        for r in range(self.ranks):
            (work / f"out.{k}.{r}.npy").unlink()
        y = outs[0]
        self.disagreeing += int(np.count_nonzero(np.any([bits(o) != bits(y) for o in outs[1:]], axis=0)))
        return y

    def _wait(self, names: list[Path], what: str) -> None:
        """Until every file of ``names`` exists (BackendError if a rank dies or time runs out)."""
        work = Path(self._dir.name)
        end, pause = time.monotonic() + self.timeout, 0.0005
        while not all(p.exists() for p in names):
            dead = [i for i, p in enumerate(self._procs) if p.poll() is not None]
            if dead or time.monotonic() > end:
                how = "exited" if dead else f"did not {what} within {self.timeout:g} s"
                who = "mpirun" if self.backend == "mpi" else f"rank {dead[0] if dead else '?'}"
                log = work / f"log.{dead[0] if dead else 0}"
                tail = excerpt(log.read_text(errors="replace")) if log.exists() else ""
                self.close()
                raise BackendError(f"live {self.backend} all-reduce on {self.ranks} ranks: {who} {how}. {tail}")
            time.sleep(pause)
            pause = min(pause * 2, 0.002)

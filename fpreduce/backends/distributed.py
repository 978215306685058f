"""``fpreduce run CONFIG --distributed``: one run split over MPI ranks by element ranges.

Launched as ``mpirun -np K python -m fpreduce.cli run CONFIG --distributed --out DIR``
(or ``srun``, or a cluster's mpirun, with the same command). Unlike ``--backend mpi``
(ranks = the experiment's workers, a real MPI_Allreduce), here the ranks share the
*work*: every rank takes a contiguous range of whole element chunks
(:func:`fpreduce.run.split.span`), generates or reads only that slice of every step's
gradients (synthetic and file sources give the same bits for a slice as for the whole),
reduces it under every arm and measures it; rank 0 merges the ranks' statistics exactly
(:mod:`fpreduce.run.split`) and is the only one to touch the run directory, through the
unchanged runner (:func:`fpreduce.run.runner.run_experiment`, its ``step_fn`` hook).
``metrics.csv`` is byte-identical to a single process's, and ``summary.json`` identical
but for the times and a ``"distributed"`` table (ranks, each rank's elements, the
merge's time).

Per step: rank 0 broadcasts the step; every rank computes its share; rank 0 gathers the
shares (per-chunk float sums, counts, maxima, histograms, 65,536 counts of the relative
errors' top bits per arm), broadcasts the median's buckets, gathers the low-bit counts
inside them, merges, and writes the step's checkpoint as a single process would.

Failure: a rank whose checks or share fail sends its error instead; rank 0 stops with
one line, ``rank R failed at step S: ...`` (or ``rank R: ...`` before the first step:
then nothing is written), and the others leave. The run directory holds the checkpoint
of the last finished step (every file is replaced atomically): a readable, resumable
run (``--resume`` with any number of ranks). A rank killed outright ends the whole job
(mpirun), with the same directory left behind.

Training sources (``kind = "model"``): the gradient *reduction* is split, the update is
not. Every step rank 0 sends every arm's parameters (and optimizer state); every rank
computes the gradients from them, reduces an even share of the elements under every arm
whose rounding is not stochastic (:func:`fpreduce.run.split.reduce_part`) and sends its
pieces back; rank 0 joins them, reduces the stochastic arms whole, measures the one chunk
and updates every arm, as a single process does (docs/distributed.md).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from fpreduce.backends import mpi
from fpreduce.base.errors import InvalidArgument
from fpreduce.run import split
from fpreduce.run.config import Config
from fpreduce.run.rundir import Results
from fpreduce.run.runner import Progress, check_run, run_experiment
from fpreduce.run.sources import Source, open_source

__all__ = ["DistributedRun", "launch", "mpi_pool"]

_TELL, _GIVE = 17, 18  # message tags: rank 0 to the others, the others to rank 0
_POLL_S = 0.001


#: the Open MPI settings that keep a job's transports (and what its out-of-band channel advertises) on loopback
LOOPBACK_MCA = {"btl_tcp_if_include": "lo", "oob_tcp_if_include": "lo"}
_LOOPBACK_FLAGS = " ".join(f"--mca {k} {v}" for k, v in LOOPBACK_MCA.items())


def loopback_env(env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Default the job's Open MPI transports to loopback (``OMPI_MCA_*``), unless the caller set them."""
    for k, v in LOOPBACK_MCA.items():
        env.setdefault(f"OMPI_MCA_{k}", v)


def listener_warning(env: Mapping[str, str] | None = None, interfaces: Sequence[str] | None = None) -> str | None:
    """What to say when this process is a rank of an ``mpirun`` whose listeners are not contained: not in a
    network namespace holding only ``lo`` and without the loopback MCA settings (None when contained or
    not under mpirun). ``interfaces``: this namespace's network interfaces (default /sys/class/net)."""
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" not in env:
        return None  # not an Open MPI job (srun, mpich, a singleton): nothing of ours to say
    if interfaces is None:
        try:
            interfaces = os.listdir("/sys/class/net")
        except OSError:
            interfaces = ["unknown"]
    if set(interfaces) <= {"lo"}:
        return None  # a private network namespace: nothing but loopback to listen on
    btl = env.get("OMPI_MCA_btl", "")
    named = "tcp" in btl.lstrip("^").split(",")
    tcp_off = (btl.startswith("^") and named) or (bool(btl) and not btl.startswith("^") and not named)
    missing = [
        k for k in LOOPBACK_MCA if env.get(f"OMPI_MCA_{k}") != "lo" and not (k == "btl_tcp_if_include" and tcp_off)
    ]
    if not missing:
        return None
    return (
        "LISTENERS NOT CONTAINED: this --distributed run's mpirun lets its ranks and daemons talk (and listen) on "
        f"every network interface ({', '.join(sorted(set(interfaces) - {'lo'}))}): {', '.join(missing)} not set to lo. "
        f"For a one-machine run pass `mpirun {_LOOPBACK_FLAGS} ...` (or export "
        + " ".join(f"OMPI_MCA_{k}={v}" for k, v in LOOPBACK_MCA.items())
        + "), and run mpirun under `unshare -n` to close the listening ports themselves"
    )


def _one_line(e: BaseException) -> str:
    text = str(e) if isinstance(e, InvalidArgument) else f"{type(e).__name__}: {e}"
    return " ".join(text.split())


class DistributedRun:
    """One rank of a run split over ``MPI.COMM_WORLD`` (or ``comm``): :meth:`run` on every rank."""

    def __init__(self, cfg: Config, comm: Any = None) -> None:
        if comm is None:
            try:
                from mpi4py import MPI
            except ImportError:
                raise InvalidArgument(
                    "--distributed needs the Python package mpi4py: pip install 'fpreduce[mpi]'"
                ) from None
            comm = MPI.COMM_WORLD
        self.cfg, self.comm = cfg, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.root = self.rank == 0
        loud = listener_warning() if self.root else None
        if loud:
            warnings.warn(loud, mpi.ExposedListenerWarning, stacklevel=2)
        self.spans: list[tuple[int, int]] = []
        self.merge_time = 0.0  # rank 0: gathering the shares (waiting included) and merging them
        self.wait_time = 0.0  # of which waiting for the shares and counts
        self.compute = [0.0, 0.0]  # this rank's seconds computing its shares: wall, CPU (process time)
        self.computed: list[list[float]] = []  # rank 0: every rank's, as last reported

    def _wait(self, source: int, tag: int) -> Any:
        """Receive from ``source``, polling with short sleeps: a blocking MPI wait spins on a core, which
        on a machine with fewer cores than ranks takes it from the ranks that compute."""
        while not self.comm.Iprobe(source=source, tag=tag):
            time.sleep(_POLL_S)
        return self.comm.recv(source=source, tag=tag)

    def _bcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (point to point, polled)."""
        if not self.root:
            return self._wait(0, _TELL)
        for r in range(1, self.size):
            self.comm.send(obj, dest=r, tag=_TELL)
        return obj

    def _gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` on rank 0, in rank order (polled); [] elsewhere. (Each rank's compute
        seconds so far travel with it, for the summary's ``distributed`` table.)"""
        if not self.root:
            self.comm.send((obj, self.compute), dest=0, tag=_GIVE)
            return []
        got = [(obj, self.compute), *(self._wait(r, _GIVE) for r in range(1, self.size))]
        self.computed = [list(c) for _, c in got]
        return [o for o, _ in got]

    def _timed(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, its wall and CPU seconds added to this rank's compute time."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args)
        finally:
            self.compute[0] += time.perf_counter() - t0
            self.compute[1] += time.process_time() - c0

    def _check(self) -> Source | None:
        """Every rank opens the source and checks the run; rank 0 raises the first rank's error."""
        source, err = None, None
        try:
            source = open_source(self.cfg.source, workers=self.cfg.experiment.workers, seed=self.cfg.experiment.seed)
            lo, hi = split.span(self.cfg, source, self.rank, self.size)
            source = check_run(self.cfg, None if source.kind == "model" else hi - lo)  # memory for its elements
        except Exception as e:  # noqa: BLE001 - sent to rank 0, which says it in one line
            err = _one_line(e)
        errors = self._gather(err)
        bad = next(((r, x) for r, x in enumerate(errors) if x), None) if self.root else None
        bad = self._bcast(bad)
        if bad is not None:
            if self.root:
                raise InvalidArgument(bad[1] if bad[0] == 0 else f"rank {bad[0]}: {bad[1]}")
            return None
        assert source is not None
        self.spans = [split.span(self.cfg, source, r, self.size) for r in range(self.size)]
        return source

    def run(
        self,
        config: Config | str | Path | None = None,
        out: str | Path | None = None,
        *,
        resume: bool = False,
        force: bool = False,
        progress: Progress | None = None,
    ) -> Results | None:
        """Run the split experiment: rank 0 returns the Results, the other ranks compute shares and return None."""
        if config is not None and config is not self.cfg:
            raise InvalidArgument("DistributedRun.run: pass the Config the runner was built with")
        source = self._check()
        if source is None:
            return None
        training = source.kind == "model"
        if not self.root:
            (self._serve_model if training else self._serve)(source)
            return None
        try:
            return run_experiment(
                self.cfg,
                out,
                resume=resume,
                force=force,
                progress=progress,
                summary_extra=self._extra,
                step_fn=self._step,
                share=None if training else self.spans[0][1] - self.spans[0][0],
            )
        finally:
            self._bcast(None)  # the others leave

    def _share(
        self, source: Source, arms: list[Any], step: int, times: dict[str, float]
    ) -> tuple[Any, split.Share | None, str | None]:
        lo, hi = self.spans[self.rank]
        try:
            st, share = self._timed(split.compute_share, self.cfg, source, arms, step, times, lo, hi)
        except Exception as e:  # noqa: BLE001 - sent to rank 0
            return None, None, _one_line(e)
        return st, share, None

    def _serve(self, source: Source) -> None:
        """Ranks > 0: compute a share for every step rank 0 broadcasts, until it broadcasts None."""
        arms = split.rank_arms(self.cfg, source)
        times = {"engine": 0.0, "source": 0.0, "exact": 0.0, "metrics": 0.0}
        while (step := self._bcast(None)) is not None:
            st, share, err = self._share(source, arms, step, times)
            self._gather(share if err is None else err)
            buckets = self._bcast(None)
            if buckets is not None:
                self._gather(split.low_counts(st, buckets))

    def _step(
        self,
        cfg: Config,
        source: Source,
        arms: list[Any],
        step: int,
        rows: list[dict[str, Any]],
        times: dict[str, float],
        on_step: Any,
    ) -> None:
        """Rank 0's step (the runner's ``step_fn``): its own share, the others', the exact merge, the rows."""
        if source.kind == "model":
            self._step_model(cfg, source, arms, step, rows, times)
            return
        self._bcast(step)
        st, share, err = self._share(source, arms, step, times)
        t0 = time.perf_counter()
        shares = self._gather(share if err is None else err)
        self.wait_time += time.perf_counter() - t0
        bad = next(((r, x) for r, x in enumerate(shares) if isinstance(x, str)), None)
        buckets = None if bad else split.median_buckets(shares)
        self._bcast(buckets)
        if bad is not None:
            raise InvalidArgument(f"rank {bad[0]} failed at step {step}: {bad[1]}")
        assert buckets is not None
        mine = split.low_counts(st, buckets)
        t1 = time.perf_counter()
        lows = self._gather(mine)
        self.wait_time += time.perf_counter() - t1
        merged = split.merge(cfg, shares, split.medians(shares, buckets, lows))
        split.record(cfg, source, arms, step, merged, rows)
        self.merge_time += time.perf_counter() - t0

    def _parts(self, source: Source, arms: list[Any], step: int, times: dict[str, float]) -> Any:
        """Training: this rank's (result, re-run result) per arm on its element range, or its error (one line)."""
        try:
            return self._timed(split.reduce_part, self.cfg, source, arms, step, times, *self.spans[self.rank])
        except Exception as e:  # noqa: BLE001 - sent to rank 0
            return _one_line(e)

    def _serve_model(self, source: Source) -> None:
        """Ranks > 0 of a training run: every step, rank 0's parameters in, this rank's reductions out."""
        arms = split.rank_arms(self.cfg, source)
        times = {"engine": 0.0, "source": 0.0}
        while (msg := self._bcast(None)) is not None:
            step, params = msg
            for a, (p, st) in zip(arms, params, strict=True):
                a.params, a.state = p, st
            self._gather(self._parts(source, arms, step, times))

    def _step_model(
        self,
        cfg: Config,
        source: Source,
        arms: list[Any],
        step: int,
        rows: list[dict[str, Any]],
        times: dict[str, float],
    ) -> None:
        """Rank 0's training step: every rank reduces its element range of every arm's gradient (computed
        from the parameters rank 0 sends), rank 0 joins them, measures the whole gradient and updates."""
        self._bcast((step, [(a.params, a.state) for a in arms]))
        mine = self._parts(source, arms, step, times)
        t0 = time.perf_counter()
        parts = self._gather(mine)
        self.wait_time += time.perf_counter() - t0
        bad = next(((r, x) for r, x in enumerate(parts) if isinstance(x, str)), None)
        if bad is not None:
            raise InvalidArgument(f"rank {bad[0]} failed at step {step}: {bad[1]}")
        split.train_step(cfg, source, arms, step, rows, times, split.join_parts(parts))
        self.merge_time += time.perf_counter() - t0

    def _extra(self) -> dict[str, Any]:
        return {
            "distributed": {
                "ranks": self.size,
                "elements": [hi - lo for lo, hi in self.spans],
                "merge_time_s": round(self.merge_time, 3),
                "merge_wait_time_s": round(self.wait_time, 3),
                "rank_compute_time_s": [round(c[0], 3) for c in self.computed],  # each rank's share, wall
                "rank_cpu_time_s": [round(c[1], 3) for c in self.computed],  # and CPU
            }
        }


def mpi_pool(jobs: int = 1) -> Executor:
    """mpi4py's ``MPIPoolExecutor``: the ranks of ``mpirun -np K python -m mpi4py.futures -m fpreduce.cli
    sweep ... --executor mpi`` (K - 1 workers), else ``jobs`` workers spawned with ``MPI_Comm_spawn``
    (InvalidArgument, in one line, where spawning is not possible, e.g. a singleton Open MPI without a launcher)."""
    if "mpi4py.MPI" not in sys.modules:  # before MPI_Init: spawn --jobs workers even beyond the cores (as --jobs does)
        os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
        if "OMPI_COMM_WORLD_SIZE" not in os.environ:  # spawned workers are on this machine: loopback, unless set
            loopback_env()
    try:
        from mpi4py import MPI
        from mpi4py.futures import MPIPoolExecutor
    except ImportError:
        raise InvalidArgument("--executor mpi needs the Python package mpi4py: pip install 'fpreduce[mpi]'") from None
    if MPI.COMM_WORLD.Get_size() > 1:  # under `python -m mpi4py.futures`: its static pool
        loud = listener_warning()
        if loud:
            warnings.warn(loud.replace("--distributed run", "sweep"), mpi.ExposedListenerWarning, stacklevel=2)
        return MPIPoolExecutor()  # type: ignore[no-any-return]
    ex = MPIPoolExecutor(max_workers=jobs)
    try:
        ex.bootup(wait=True)
    except MPI.Exception as e:
        raise InvalidArgument(
            f"--executor mpi: cannot spawn {jobs} MPI worker(s) ({_one_line(e)}); launch the sweep as "
            "`mpirun -np K python -m mpi4py.futures -m fpreduce.cli sweep CONFIG --executor mpi` (K - 1 workers)"
        ) from None
    return ex  # type: ignore[no-any-return]


def launch(program: Sequence[str], np_: int, *, timeout: float = 300.0) -> str:
    """Run ``python PROGRAM`` on ``np_`` ranks of a local, loopback-only ``mpirun``; its output.

    ``program``: what follows ``python``, e.g. ``["-m", "fpreduce.cli", "run", CONFIG,
    "--distributed", "--out", DIR]`` or ``["-m", "mpi4py.futures", "-m", "fpreduce.cli",
    "sweep", ...]``. The launcher of ``--backend mpi`` (shared memory, OOB on ``lo``, a
    private network namespace where ``unshare -n`` is allowed). Raises BackendError on
    failure, with the ranks' ``fpreduce: error:`` lines, or after ``timeout`` seconds
    (the job's process group is killed).
    """
    mpi.check_available()
    argv = mpi.mpirun_argv(np_, "ring", Path("."))
    return mpi.run_command([*argv[:-3], *program], f"mpirun -np {np_} python {' '.join(program[:4])}", timeout)

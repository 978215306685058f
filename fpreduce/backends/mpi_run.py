"""``fpreduce run CONFIG --backend mpi``: the experiment runner on real Open MPI ranks.

Launched as ``mpirun -np N python -m fpreduce.cli run CONFIG --backend mpi --out DIR``
(or ``srun`` / a cluster's ``mpirun`` with the same command) with N =
``experiment.workers``: rank w is worker w.

* Every rank computes its own worker's gradient row: row w of
  ``source.gradients(step)``. Synthetic and file sources are deterministic per
  (seed, step, worker), so each rank computes the whole (N, M) array and keeps its
  row: N times the work of one row, fine for the sizes an experiment uses; no
  gradient ever travels except through the all-reduce. (Training sources are
  refused: each arm's gradient depends on that arm's parameters.)
* An arm runs on the real library when Open MPI can do exactly what it describes:
  ``fixed:<plan>`` or ``shuffle:<plan>`` where ``<plan>`` is the plan the forced
  algorithm follows at this N and M (:func:`fpreduce.backends.mpi.expected_plan`:
  ``ring:ompi`` for ring, ``rd``, ``rabenseifner``, ``linear``; a size-dependent
  fallback makes the arm emulated-only), input = accumulator = output in fp32 or
  fp64, nearest even, ``algorithm = "plain"``, ``average = "none"``. For such an arm
  and every step, all ranks do a real ``MPI_Allreduce(SUM)`` of their rows; a
  ``shuffle`` arm first re-ranks with ``COMM_WORLD.Split(0, key)``, worker w's key
  being its position in the step's permutation (:func:`fpreduce.run.policies.
  shuffle_permutation`), so the real ring / tree positions change with the plan.
  Every other arm is emulated only.
* The algorithm is fixed per launch (an MCA parameter read at ``MPI_Init``):
  ``--mpi-algorithm`` (a plan name ``ring:ompi``/``rd``/``rabenseifner``/``linear``
  or an Open MPI name ``ring``, ``recursive_doubling``, ...), or what the launcher
  already set (``mpirun --mca coll_tuned_allreduce_algorithm K``), or else the
  algorithm of the first arm that could run for real. The ranks set the
  ``OMPI_MCA_coll_tuned_*`` variables themselves before ``MPI_Init``; arms that need
  another algorithm run emulated (launch again for them).
* Rank 0 runs :func:`fpreduce.run_experiment` unchanged (same run directory, same
  metrics) with an ``on_step`` hook: when an arm's emulated result ``y`` is ready it
  tells the other ranks (a small ``bcast`` of (step, arm)), all do the collective,
  and rank 0 compares the real result's bits with ``y``. It writes ``RUN/real.csv``
  (``step, arm, real_agree, ranks_agree``: the fraction of elements whose real bits
  equal the emulated ones, and 1/0 whether every rank received identical bits, a
  gathered hash; ``nan`` for emulated-only arms) and adds ``"backend": "mpi"`` and
  an ``"mpi"`` table to summary.json.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.backends import mpi
from fpreduce.backends._common import bits
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.rounding import round_to
from fpreduce.run.config import PLANNED, ArmSpec, Config, load_config
from fpreduce.run.policies import shuffle_permutation
from fpreduce.run.rundir import Results, read_real, write_real
from fpreduce.run.runner import Progress, run_experiment
from fpreduce.run.sources import Source, open_source

__all__ = [
    "PLAN_ALGORITHMS",
    "ArmMode",
    "MpiRunner",
    "classify",
    "describe",
    "launch",
    "load_real",
    "require_real",
    "resolve_algorithm",
]

#: plan name -> the Open MPI algorithm (``mpi.ALGORITHMS`` key) that follows it
PLAN_ALGORITHMS = {
    "ring:ompi": "ring",
    "rd": "recursive_doubling",
    "rabenseifner": "rabenseifner",
    "linear": "basic_linear",
}
_ENV_ALG = "OMPI_MCA_coll_tuned_allreduce_algorithm"


def resolve_algorithm(name: str) -> str:
    """An Open MPI allreduce algorithm (key of ``mpi.ALGORITHMS``) from a plan or algorithm name or number."""
    s = name.strip()
    if s in PLAN_ALGORITHMS:
        return PLAN_ALGORITHMS[s]
    if s in mpi.ALGORITHMS:
        return s
    by_number = {str(k): a for a, k in mpi.ALGORITHMS.items()}
    if s in by_number:
        return by_number[s]
    raise unknown_name("mpi algorithm", s, (*PLAN_ALGORITHMS, *mpi.ALGORITHMS))


@dataclass(frozen=True)
class ArmMode:
    """How one arm runs under ``--backend mpi``.

    Attributes:
        name: the arm.
        real: a real MPI_Allreduce runs for it every step.
        plan: the plan text of its order policy ("" for other policies).
        dtype: fp32 or fp64 when real, else "".
        note: why it is emulated only ("" when real).
    """

    name: str
    real: bool
    plan: str
    dtype: str
    note: str


def _real_formats(a: ArmSpec) -> str:
    """ "" if Open MPI can sum exactly like this arm, else the reason it cannot."""
    if a.input not in mpi.DTYPES or a.accumulate != a.input or a.out_format != a.input:
        return (
            f"formats {a.input}->{a.accumulate}->{a.out_format}: Open MPI 4 sums fp32 or fp64 "
            "with input = accumulator = output (no fp16/bf16 datatype)"
        )
    if a.rounding != "nearest_even":
        return f"rounding {a.rounding!r}: MPI_SUM rounds to nearest even"
    if a.algorithm != "plain":
        return f"algorithm {a.algorithm!r}: MPI_SUM is a plain sum"
    if a.average != "none":
        return f"average {a.average!r}: MPI_SUM does not average"
    return ""


def _default_algorithm(cfg: Config) -> str:
    """The algorithm of the first arm that could run for real (ring if none)."""
    for a in cfg.arms:
        plan = a.policy.plan
        if plan in PLAN_ALGORITHMS and not _real_formats(a):
            return PLAN_ALGORITHMS[plan]
    return "ring"


def classify(cfg: Config, algorithm: str, elements: int) -> list[ArmMode]:
    """Which arms run on the real library when ``algorithm`` is forced, and why not the others."""
    n = cfg.experiment.workers
    out = []
    for a in cfg.arms:
        plan = a.policy.plan.strip()
        if a.policy.kind not in PLANNED:
            out.append(
                ArmMode(
                    a.name,
                    False,
                    "",
                    "",
                    f"order policy {a.policy.kind!r} has no Open MPI counterpart (fixed:<plan> and shuffle:<plan> do)",
                )
            )
            continue
        why = _real_formats(a)
        if why:
            out.append(ArmMode(a.name, False, plan, "", why))
            continue
        if plan not in PLAN_ALGORITHMS:
            out.append(
                ArmMode(
                    a.name,
                    False,
                    plan,
                    "",
                    f"plan {plan!r} is not an Open MPI allreduce ({', '.join(PLAN_ALGORITHMS)})",
                )
            )
            continue
        got, _, note = mpi.expected_plan(algorithm, n, elements, a.input)
        if got != plan:
            need = PLAN_ALGORITHMS[plan]
            why = (
                f"plan {plan!r} needs algorithm {need} but this launch forces {algorithm} (one per mpirun)"
                if need != algorithm
                else f"{note} ({got}, not {plan})"
            )
            out.append(ArmMode(a.name, False, plan, "", why))
            continue
        out.append(ArmMode(a.name, True, plan, a.input, ""))
    return out


def describe(modes: Sequence[ArmMode], algorithm: str) -> list[str]:
    """One line per arm: whether it runs on the real library and, if not, why (printed by ``fpreduce run``).

    >>> describe([ArmMode("A", True, "ring:ompi", "fp32", ""), ArmMode("B", False, "", "", "order policy 'arrival'")],
    ...          "ring")
    ['arm A: real MPI_Allreduce (ring, plan ring:ompi, fp32)', "arm B: emulated only: order policy 'arrival'"]
    """
    return [
        f"arm {m.name}: real MPI_Allreduce ({algorithm}, plan {m.plan}, {m.dtype})"
        if m.real
        else f"arm {m.name}: emulated only: {m.note}"
        for m in modes
    ]


def require_real(modes: Sequence[ArmMode], *, allow_emulated: bool) -> None:
    """InvalidArgument when no arm can run on the real library, unless ``allow_emulated``.

    A ``--backend mpi`` run in which nothing touches MPI would look like a verification
    and be none: real.csv all NaN. The message lists each arm's reason.
    """
    if allow_emulated or any(m.real for m in modes):
        return
    why = "; ".join(f"{m.name}: {m.note}" for m in modes)
    raise InvalidArgument(
        f"--backend mpi: no arm can run on the real library ({why}); change the arms, or pass "
        "--allow-emulated to run them all emulated"
    )


def _force_algorithm(algorithm: str | None, cfg: Config) -> str:
    """Set the OMPI_MCA_coll_tuned_* variables for MPI_Init; the algorithm in force.

    A value the launcher set (``mpirun --mca coll_tuned_allreduce_algorithm K``) wins;
    ``algorithm`` must then agree with it.
    """
    want = resolve_algorithm(algorithm) if algorithm else None
    pre = os.environ.get(_ENV_ALG)
    if pre:
        have = resolve_algorithm(pre)
        if want is not None and want != have:
            raise InvalidArgument(
                f"the launcher forces coll_tuned_allreduce_algorithm={pre} ({have}) but "
                f"--mpi-algorithm asks for {want}: drop one of them"
            )
        want = have
    if want is None:
        want = _default_algorithm(cfg)
    if "mpi4py.MPI" in sys.modules:  # MPI already initialized: too late to force anything
        if os.environ.get(_ENV_ALG) not in (str(mpi.ALGORITHMS[want]), want):
            raise InvalidArgument(
                "MPI was initialized before fpreduce could force the allreduce algorithm: "
                "run `python -m fpreduce.cli run ... --backend mpi` as the program of mpirun"
            )
        return want
    env = {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        _ENV_ALG: str(mpi.ALGORITHMS[want]),
        "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": str(
            mpi.SEGMENT_BYTES if want == "segmented_ring" else 0
        ),
    }
    if want == "nonoverlapping":
        env["OMPI_MCA_coll_tuned_reduce_algorithm"] = "1"
        env["OMPI_MCA_coll_tuned_bcast_algorithm"] = "1"
    os.environ.update(env)
    # components that would take MPI_Allreduce away from coll/tuned (Open MPI 5's han,
    # Mellanox hcoll, UCC), unless the launcher decided otherwise
    for k in ("OMPI_MCA_coll_han_priority", "OMPI_MCA_coll_hcoll_enable", "OMPI_MCA_coll_ucc_enable"):
        os.environ.setdefault(k, "0")
    return want


def _elements(source: Source) -> int:
    m = getattr(source, "elements", None)
    return int(m) if isinstance(m, int) else int(source.gradients(0).shape[1])


class MpiRunner:
    """One rank of ``fpreduce run --backend mpi``: initializes MPI (forcing the algorithm).

    ``root`` is true on rank 0, the rank that writes the run directory. Raises
    InvalidArgument (on every rank alike) for a wrong number of ranks, a training
    source, mpi4py missing or an unknown algorithm.
    """

    def __init__(self, cfg: Config, *, algorithm: str | None = None) -> None:
        if cfg.source.kind == "model":
            raise InvalidArgument(
                "--backend mpi: source kind 'model' (training) is not supported: each arm's "
                "gradient depends on its own parameters; use a synthetic or file source"
            )
        self.cfg = cfg
        self.algorithm = _force_algorithm(algorithm, cfg)
        try:
            from mpi4py import MPI
        except ImportError:
            raise InvalidArgument(f"--backend mpi needs the Python package mpi4py; {mpi.INSTALL}") from None
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        n = cfg.experiment.workers
        if self.size != n:
            raise InvalidArgument(
                f"experiment.workers = {n} but this MPI job has {self.size} rank(s); launch one rank per worker: "
                f"`mpirun -np {n} python -m fpreduce.cli run CONFIG --backend mpi --out DIR`"
            )
        self.root = self.rank == 0
        err = ""
        try:  # may fail on some ranks only (a file missing on one node): agree before going on
            self.source = open_source(cfg.source, workers=n, seed=cfg.experiment.seed)
            self.elements = _elements(self.source)
            self.modes = {m.name: m for m in classify(cfg, self.algorithm, self.elements)}
        except Exception as e:  # re-raised on every rank below
            err = str(e) or repr(e)
        errors = [(r, m) for r, m in enumerate(self.comm.allgather(err)) if m]
        if errors:
            raise InvalidArgument(f"rank {errors[0][0]}: {errors[0][1]}")
        self.library = MPI.Get_library_version().strip().splitlines()[0].split(",")[0]
        hosts = self.comm.gather(MPI.Get_processor_name(), root=0)
        self.hosts = sorted(set(hosts)) if hosts else []
        self._cache: tuple[int, np.ndarray] | None = None
        self._pending = False
        self._rows: list[dict[str, Any]] = []
        self._first_step: int | None = None
        self._old_rows: list[dict[str, Any]] = []
        self._dir = Path(".")

    # --- every rank ------------------------------------------------------------------------------

    def _row(self, step: int, arm: ArmSpec) -> np.ndarray:
        """This rank's gradient row of ``step``, rounded to the arm's input format."""
        if self._cache is None or self._cache[0] != step:
            self._cache = (step, self.source.gradients(step))
        x = round_to(self._cache[1][self.rank : self.rank + 1], arm.input)[0]
        return np.ascontiguousarray(x, dtype=np.float64 if arm.input == "fp64" else np.float32)

    def _collective(self, step: int, index: int) -> tuple[np.ndarray, bool]:
        """The real all-reduce of arm ``index`` at ``step``; (result, every rank got the same bits)."""
        MPI = self.MPI
        arm = self.cfg.arms[index]
        send = self._row(step, arm)
        recv = np.empty_like(send)
        dtype = MPI.DOUBLE if send.dtype == np.float64 else MPI.FLOAT
        comm: Any = self.comm
        if arm.policy.kind == "shuffle":
            perm = shuffle_permutation(self.cfg, arm, step)  # position j is held by worker perm[j]
            key = int(np.argsort(perm, kind="stable")[self.rank])  # = j with perm[j] == this worker
            comm = self.comm.Split(0, key)
        try:
            comm.Allreduce([send, dtype], [recv, dtype], op=MPI.SUM)
        finally:
            if comm is not self.comm:
                comm.Free()
        digests = self.comm.gather(hashlib.blake2b(recv.tobytes(), digest_size=16).digest(), root=0)
        return recv, digests is not None and len(set(digests)) == 1

    def serve(self) -> None:
        """Ranks > 0: do the collectives rank 0 asks for until it says stop."""
        try:
            while True:
                cmd = self.comm.bcast(None, root=0)
                if cmd is None:
                    return
                self._collective(*cmd)
        except Exception as e:  # a collective is pending elsewhere: end the whole job
            sys.stderr.write(f"fpreduce: error: rank {self.rank}: {e}\n")
            sys.stderr.flush()
            self.comm.Abort(2)

    # --- rank 0 ----------------------------------------------------------------------------------

    def _on_step(self, step: int, arm: ArmSpec, y: np.ndarray) -> None:
        if self._first_step is None:  # resume: keep what the earlier run measured before this step
            self._first_step = step
            self._rows = [r for r in self._old_rows if r["step"] < step]
        mode = self.modes[arm.name]
        agree = ranks = float("nan")
        if mode.real:
            index = next(i for i, a in enumerate(self.cfg.arms) if a.name == arm.name)
            self._pending = True
            self.comm.bcast((step, index), root=0)
            real, same = self._collective(step, index)
            self._pending = False
            yv = np.ascontiguousarray(y, dtype=real.dtype)
            agree = float(np.mean(bits(real) == bits(yv))) if real.size else 1.0
            ranks = 1.0 if same else 0.0
        self._rows.append({"step": step, "arm": arm.name, "real_agree": agree, "ranks_agree": ranks})
        if arm.name == self.cfg.arms[-1].name:
            write_real(self._dir, self._rows)

    def _summary(self) -> dict[str, Any]:
        arms = {}
        for name, m in self.modes.items():
            entry: dict[str, Any] = {"real": m.real, "plan": m.plan, "note": m.note}
            if m.real:
                v = [r["real_agree"] for r in self._rows if r["arm"] == name]
                entry["dtype"] = m.dtype
                entry["min_real_agree"] = min(v) if v else None
                entry["ranks_agree"] = all(r["ranks_agree"] == 1.0 for r in self._rows if r["arm"] == name)
            arms[name] = entry
        return {
            "backend": "mpi",
            "mpi": {
                "library": self.library,
                "ranks": self.size,
                "hosts": self.hosts,
                "algorithm": self.algorithm,
                "coll_tuned_allreduce_algorithm": mpi.ALGORITHMS[self.algorithm],
                "arms": arms,
            },
        }

    def run(
        self,
        config: Config | str | Path | None = None,
        out: str | Path | None = None,
        *,
        resume: bool = False,
        force: bool = False,
        progress: Progress | None = None,
    ) -> Results | None:
        """Run the experiment: rank 0 returns the Results, the other ranks serve and return None.

        ``config`` must be the Config given to the constructor (accepted for the
        signature of :func:`fpreduce.run_experiment`).
        """
        if config is not None and config is not self.cfg:
            raise InvalidArgument("MpiRunner.run: pass the Config the runner was built with")
        if not self.root:
            self.serve()
            return None
        self._dir = Path(out) if out is not None else Path("runs") / self.cfg.experiment.name
        self._old_rows = load_real(self._dir) if resume else []
        try:
            res = run_experiment(
                self.cfg,
                self._dir,
                resume=resume,
                force=force,
                progress=progress,
                on_step=self._on_step,
                summary_extra=self._summary,
            )
        except BaseException as e:
            if self._pending:  # the others are inside a collective that will never complete
                sys.stderr.write(f"fpreduce: error: rank 0 failed during a collective: {e!r}; aborting the job\n")
                sys.stderr.flush()
                self.comm.Abort(2)
            self.comm.bcast(None, root=0)
            raise
        self.comm.bcast(None, root=0)
        return res


def load_real(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``RUN/real.csv`` (empty if the run has none): step, arm, real_agree, ranks_agree.

    (:func:`fpreduce.run.rundir.read_real`, under the name docs/verification.md uses.)
    """
    return read_real(run_dir)


def launch(
    config: str | Path,
    out: str | Path,
    *,
    algorithm: str = "ring:ompi",
    np_: int | None = None,
    args: Sequence[str] = (),
    timeout: float = 300.0,
) -> str:
    """Run ``fpreduce run CONFIG --backend mpi`` under a local, loopback-only ``mpirun``; its output.

    The same launcher as :func:`fpreduce.backends.verify` (shared memory, OOB on ``lo``,
    a private network namespace where ``unshare -n`` is allowed, the algorithm forced
    with ``--mca``). ``np_`` defaults to the config's ``experiment.workers``; ``args``
    are appended to the ``fpreduce run`` command (e.g. ``--steps 3``). Raises
    BackendError on failure (with the ranks' ``fpreduce: error:`` lines and the rank
    mpirun names) or after ``timeout`` seconds (the job's process group is killed).
    """
    mpi.check_available()
    alg = resolve_algorithm(algorithm)
    n = np_ if np_ is not None else load_config(config).experiment.workers
    argv = mpi.mpirun_argv(n, alg, Path(out))
    if argv[-3:-1] != ["-m", "fpreduce.backends._mpi_worker"]:  # pragma: no cover - launcher changed
        raise RuntimeError(f"unexpected mpirun command line {argv}")
    cmd = [
        *argv[:-3],
        "-m",
        "fpreduce.cli",
        "run",
        str(config),
        "--backend",
        "mpi",
        "--mpi-algorithm",
        alg,
        "--out",
        str(out),
        "--quiet",
        *args,
    ]
    return mpi.run_command(cmd, f"mpirun -np {n} fpreduce run --backend mpi ({alg})", timeout)

"""torch.distributed's gloo backend: ``all_reduce(SUM)`` on N local CPU processes.

N subprocesses ``python -m fpreduce.backends._gloo_worker`` join a process group
through a ``FileStore`` in a private temporary directory, with
``GLOO_SOCKET_IFNAME=lo``: the only sockets are gloo's, on 127.0.0.1. fp32, fp16
and bf16 (and fp64) CPU tensors.

The plan: gloo's ring (``ring(n, "gloo", item_bytes=...)``: chunk c folded from
rank c-1 down to c, gloo's segment sizing from the byte count). Every hop adds
two values of the tensor's dtype and rounds to it (c10::Half / c10::BFloat16
arithmetic goes through float32 and rounds to nearest even, which for two fp16
or bf16 operands equals one correct rounding), so the emulation uses input =
accumulator = dtype.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fpreduce.backends._common import BackendError, collect, new_workdir, python, ranks_done, run_group
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans import AnyPlan, linear, rd, ring, sequential

ALGORITHMS = ("ring",)
DTYPES = ("fp32", "fp16", "bf16", "fp64")
INSTALL = "install the CPU build of PyTorch: `pip install 'fpreduce[torch]'` (or `pip install torch==2.13.0`)"
_ITEM_BYTES = {"fp32": 4, "fp64": 8, "fp16": 2, "bf16": 2}


def check_available() -> str:
    """The torch version string; InvalidArgument with the install command if missing."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise InvalidArgument(f"backend 'gloo' needs PyTorch; {INSTALL}") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise InvalidArgument(f"backend 'gloo': this torch build has no gloo support; {INSTALL}")
    return f"torch {torch.__version__} (gloo)"


def expected_plan(algorithm: str, n: int, m: int, dtype: str) -> tuple[str, AnyPlan, str]:
    """(plan text, plan, note) that torch's gloo all_reduce follows."""
    if algorithm not in ALGORITHMS:
        raise unknown_name("gloo algorithm", algorithm, ALGORITHMS)
    item = _ITEM_BYTES[dtype]
    text = "ring:gloo" if item == 4 else f"ring:gloo (item_bytes={item})"
    return text, ring(n, "gloo", item_bytes=item), ""


def contrast_plans(n: int) -> dict[str, AnyPlan]:
    """Other plans, for contrast."""
    return {
        "ring:ompi": ring(n, "ompi"),
        "ring:nccl": ring(n, "nccl"),
        "rd": rd(n),
        "linear": linear(n),
        "sequential": sequential(n),
    }


def run_allreduce(
    cases: Sequence[np.ndarray],
    dtypes: Sequence[str],
    *,
    timeout: float = 120.0,
    fault: str | None = None,
    ddp: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[np.ndarray]]:
    """Run one real gloo all_reduce(SUM) per (case, dtype) on N processes; every rank's results.

    With ``ddp=True`` each case is instead one parameter's gradient averaged by PyTorch's
    ``DistributedDataParallel`` (no comm hook) over gloo: what ``average="ddp"`` emulates.

    Args:
        cases: (n, m_i) arrays of values exactly representable in ``dtypes[i]``.
        dtypes: the tensor dtype of each case (``fp32``, ``fp16``, ``bf16``, ``fp64``).
        timeout: seconds before every rank is killed.
        fault: test hook, ``die:R`` or ``hang:R``.
        progress: ``progress(done, 2 n)`` while the ranks run: those that joined the group plus those that
            wrote their result.

    Returns:
        ``out[i][r]``: rank r's result of case i (float32, float64 for fp64).

    Raises:
        InvalidArgument: torch missing, bad dtype.
        BackendError: a rank died or the run timed out (message names the rank).
    """
    check_available()
    for d in dtypes:
        if d not in DTYPES:
            raise unknown_name("gloo dtype", d, DTYPES)
    n = cases[0].shape[0]
    if any(c.shape[0] != n for c in cases) or len(cases) != len(dtypes):
        raise InvalidArgument("gloo cases must all have the same number of rows n, one dtype per case")
    with new_workdir() as d:
        workdir = Path(d)
        np.save(workdir / "inputs.npy", np.concatenate([c.astype(np.float64) for c in cases], axis=1))
        job = {
            "sizes": [int(c.shape[1]) for c in cases],
            "dtypes": list(dtypes),
            "fault": fault,
            "timeout": timeout,
            "ddp": ddp,
        }
        (workdir / "job.json").write_text(json.dumps(job))
        env = {"GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"}
        worker = [python(), "-m", "fpreduce.backends._gloo_worker", str(workdir)]
        cmds = [([*worker, str(r), str(n)], env) for r in range(n)]
        what = f"{'DDP gradient averaging' if ddp else 'gloo all_reduce'} on {n} processes"
        poll = None if progress is None else lambda: progress(ranks_done(workdir, n), 2 * n)
        run_group(cmds, timeout=timeout, what=what, workdir=workdir, n=n, poll=poll)
        outs, missing = collect(workdir, n)
        if missing:
            raise BackendError(f"gloo all_reduce on {n} processes: rank(s) {missing} wrote no result")
    res: list[list[np.ndarray]] = []
    lo = 0
    for c, dt in zip(cases, dtypes, strict=True):
        m = c.shape[1]
        res.append([o[lo : lo + m] if dt == "fp64" else o[lo : lo + m].astype(np.float32) for o in outs])
        lo += m
    return res

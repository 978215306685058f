"""One rank of a live all-reduce group (``python -m fpreduce.backends._live_worker DIR [RANK N]``).

Reads ``DIR/job.json`` (backend, dtype, timeout). gloo: RANK and N on the command line, a
process group through a ``FileStore`` in DIR (gloo's pairs on ``lo``); mpi: the rank from
``COMM_WORLD`` (mpirun forced the algorithm); ``DIR/ready.<rank>`` once joined (gloo: torch's
version in it). Then, for k = 0, 1, ...: waits for ``DIR/in.<k>.npy`` (or ``DIR/stop``),
all-reduces (SUM) its row in the dtype (``DIR/dtype.<k>``'s when the parent wrote one for that
call, else the job's) and writes the result as float64 to ``DIR/out.<k>.<rank>.npy``
atomically. It exits 1 when its parent is gone or no call came for :data:`IDLE` seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np

#: Seconds a rank waits for its next call (the parent may compile kernels between calls) before it gives up.
IDLE = 3600.0


def _gloo(workdir: Path, rank: int, n: int, timeout: float) -> tuple[str, Callable[[np.ndarray, str], np.ndarray]]:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.FileStore(str(workdir / "store"), n)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n, timeout=timedelta(seconds=timeout))
    kinds = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}

    def allreduce(row: np.ndarray, dtype: str) -> np.ndarray:
        t = torch.from_numpy(row).to(kinds[dtype])  # (exact: row holds values of dtype)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.to(torch.float64).numpy()  # type: ignore[no-any-return]

    return f"torch {torch.__version__} (gloo)", allreduce


def _mpi() -> tuple[int, Callable[[np.ndarray, str], np.ndarray]]:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD

    def allreduce(row: np.ndarray, dtype: str) -> np.ndarray:
        kind, mpitype = (np.float64, MPI.DOUBLE) if dtype == "fp64" else (np.float32, MPI.FLOAT)
        send = row.astype(kind)
        recv = np.zeros_like(send)
        comm.Allreduce([send, mpitype], [recv, mpitype], op=MPI.SUM)
        return recv.astype(np.float64)

    return comm.Get_rank(), allreduce


def main(argv: list[str]) -> int:
    workdir = Path(argv[0])
    job = json.loads((workdir / "job.json").read_text())
    timeout = float(job.get("timeout", 120))
    library = ""
    if job["backend"] == "gloo":
        rank = int(argv[1])
        library, allreduce = _gloo(workdir, rank, int(argv[2]), timeout)
    else:
        rank, allreduce = _mpi()
    (workdir / f"ready.{rank}").write_text(library)
    k, parent = 0, os.getppid()
    while True:
        inp, idle, pause = workdir / f"in.{k}.npy", time.monotonic() + IDLE, 0.0005
        while not inp.exists() and not (workdir / "stop").exists():
            if os.getppid() != parent or time.monotonic() > idle:
                sys.stderr.write(f"fpreduce: error: rank {rank}: no call for {IDLE:g} s or the parent is gone" + "\n")
                return 1
            time.sleep(pause)
            pause = min(pause * 2, 0.002)
        if not inp.exists():
            if job["backend"] == "gloo":  # no interpreter teardown (torch's takes seconds a rank; all is written)
                sys.stderr.flush()
                os._exit(0)
            return 0  # (MPI finalizes at exit)
        row = np.array(np.load(inp, mmap_mode="r")[rank])
        dtype = workdir / f"dtype.{k}"
        out = allreduce(row, dtype.read_text() if dtype.exists() else job["dtype"])
        tmp = workdir / f".out.{k}.{rank}.npy"
        with open(tmp, "wb") as f:
            np.save(f, out)
        os.replace(tmp, workdir / f"out.{k}.{rank}.npy")
        k += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

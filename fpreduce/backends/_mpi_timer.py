"""One MPI rank of a calibration run (``mpirun -np N python -m fpreduce.backends._mpi_timer DIR``).

Reads ``DIR/job.json`` (``sizes`` in elements, ``reps``, ``dtype``); for each size runs
two warm-up ``MPI_Allreduce(SUM)`` calls, then ``reps`` timed ones, each after a barrier.
A repetition's time is the slowest rank's (``MPI_Wtime`` around the call, max over
ranks); rank 0 writes every repetition's time per size to ``DIR/times.json``
atomically, and touches ``DIR/timed.<k>`` when size ``k`` is done (the parent's progress). Only
numpy and mpi4py are used here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    workdir = Path(argv[0])
    job = json.loads((workdir / "job.json").read_text())
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    dt = np.float64 if job["dtype"] == "fp64" else np.float32
    mpitype = MPI.DOUBLE if dt == np.float64 else MPI.FLOAT
    times: dict[str, list[float]] = {}
    for k, m in enumerate(job["sizes"]):
        send = np.full(int(m), 1.0 + rank, dtype=dt)
        recv = np.empty_like(send)
        reps = []
        for i in range(2 + int(job["reps"])):
            comm.Barrier()
            t0 = MPI.Wtime()
            comm.Allreduce([send, mpitype], [recv, mpitype], op=MPI.SUM)
            t = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
            if i >= 2:
                reps.append(t)
        times[str(m)] = reps
        if rank == 0:
            (workdir / f"timed.{k}").touch()
    if rank == 0:
        tmp = workdir / ".times.json.tmp"
        tmp.write_text(json.dumps(times))
        os.replace(tmp, workdir / "times.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One MPI rank of a verification run (``mpirun -np N python -m fpreduce.backends._mpi_worker DIR``).

Reads ``DIR/job.json`` (case sizes, dtype, optional fault injection) and row
``rank`` of ``DIR/inputs.npy``; runs one ``MPI_Allreduce(SUM)`` per case on
``COMM_WORLD`` (the algorithm is whatever the MCA parameters force) and writes
the concatenated results to ``DIR/out.<rank>.npy`` atomically. With
``"split_keys"`` in the job, every case runs instead on ``Comm.Split(0, key)``
with this rank's key for that case (re-ranking: new rank = position of the key).
With ``"delays"``, every case is instead an ``MPI_Reduce(SUM)`` to rank 0 after a
barrier and a per-rank sleep (seconds): the arrival-order experiment (coll/adapt).
Only numpy and mpi4py are used here; the comparison happens in the parent.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def _fault(job: dict, rank: int) -> None:
    kind, _, who = str(job.get("fault") or "").partition(":")
    if kind and who and int(who) == rank:
        if kind == "die":
            os._exit(3)
        if kind == "hang":
            time.sleep(3600)


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    workdir = Path(argv[0])
    job = json.loads((workdir / "job.json").read_text())
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    X = np.load(workdir / "inputs.npy", mmap_mode="r")
    row = np.ascontiguousarray(X[rank])
    mpitype = MPI.DOUBLE if row.dtype == np.float64 else MPI.FLOAT
    _fault(job, rank)
    (workdir / f"started.{rank}").touch()
    outs = []
    lo = 0
    keys = job.get("split_keys")
    delays = job.get("delays")
    for i, m in enumerate(job["sizes"]):
        send = row[lo : lo + m].copy()
        recv = np.zeros_like(send)
        if delays:  # arrival-order experiment: MPI_Reduce to rank 0 after a per-rank delay
            comm.Barrier()
            time.sleep(delays[i][rank])
            comm.Reduce([send, mpitype], [recv, mpitype], op=MPI.SUM, root=0)
        else:
            c = comm.Split(0, keys[i][rank]) if keys else comm
            c.Allreduce([send, mpitype], [recv, mpitype], op=MPI.SUM)
            if keys:
                c.Free()
        outs.append(recv)
        lo += m
    out = np.concatenate(outs) if outs else np.empty(0, dtype=row.dtype)
    path = workdir / f"out.{rank}.npy"
    tmp = workdir / f".out.{rank}.npy.tmp"
    with open(tmp, "wb") as f:
        np.save(f, out)
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

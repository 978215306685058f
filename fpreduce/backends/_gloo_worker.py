"""One rank of a gloo verification run (``python -m fpreduce.backends._gloo_worker DIR RANK N``).

Reads ``DIR/job.json`` (case sizes and dtypes, optional fault injection) and row
``RANK`` of ``DIR/inputs.npy`` (float64 holding values exact in every dtype
asked for); joins ``torch.distributed`` with the gloo backend through a
``FileStore`` in DIR (gloo's connections bound to ``lo``), runs one
``all_reduce(SUM)`` per (case, dtype) on a CPU tensor of that dtype, and writes
the results (as exact float32) to ``DIR/out.<RANK>.npy`` atomically.

With ``"ddp": true`` in the job, each case is instead the gradient of one parameter of
a model wrapped in ``DistributedDataParallel`` (no comm hook, CPU, gloo): the
parameter's ``.grad`` after one backward pass, averaged by DDP itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> int:
    workdir, rank, n = Path(argv[0]), int(argv[1]), int(argv[2])
    job = json.loads((workdir / "job.json").read_text())
    kind, _, who = str(job.get("fault") or "").partition(":")
    if kind == "die" and int(who) == rank:
        os._exit(3)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # rendezvous through a file (no TCP store listening on every interface);
    # gloo's own pairs are bound to loopback by GLOO_SOCKET_IFNAME=lo
    store = dist.FileStore(str(workdir / "store"), n)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=n, timeout=timedelta(seconds=float(job.get("timeout", 120)))
    )
    if kind == "hang" and int(who) == rank:
        time.sleep(3600)
    (workdir / f"started.{rank}").touch()
    types = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}
    X = np.load(workdir / "inputs.npy", mmap_mode="r")
    row = np.ascontiguousarray(X[rank])
    outs = []
    lo = 0
    for m, dtype in zip(job["sizes"], job["dtypes"], strict=True):
        t = torch.from_numpy(row[lo : lo + m].copy()).to(types[dtype])
        if job.get("ddp"):
            t = _ddp_gradient(torch, t)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        outs.append(t.to(torch.float64 if dtype == "fp64" else torch.float32).numpy())
        lo += m
    out = np.concatenate([o.astype(np.float64) for o in outs]) if outs else np.empty(0)
    tmp = workdir / f".out.{rank}.npy.tmp"
    with open(tmp, "wb") as f:
        np.save(f, out)
    os.replace(tmp, workdir / f"out.{rank}.npy")
    dist.barrier()  # every rank is done communicating
    if job.get("ddp"):
        # DDP's reducer threads can abort the interpreter's teardown ("terminate called without an
        # active exception", seen under load): the result is written, leave without destructors
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()
    return 0


def _ddp_gradient(torch, g):  # type: ignore[no-untyped-def]
    """The gradient DDP hands back for a parameter whose local gradient is ``g`` (exactly: the loss is
    ``sum(p * g)``, whose gradient is ``1 * g``, exact in every dtype)."""
    from torch.nn.parallel import DistributedDataParallel

    class Dot(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros_like(g))

        def forward(self, x):  # type: ignore[no-untyped-def]
            return (self.p * x).sum()

    ddp = DistributedDataParallel(Dot())
    ddp(g).backward()  # through DDP's forward, so that its reducer runs in the backward pass
    return ddp.module.p.grad.detach()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Verify fpreduce's NCCL plans on a GPU machine (not run in CI: no GPU there).

One channel, the Simple protocol, the algorithm forced::

    NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1 NCCL_DEBUG=INFO \\
        torchrun --standalone --nproc_per_node=4 scripts/verify_nccl.py --dtype bf16 --elements 100000

    NCCL_ALGO=Tree ... torchrun --nnodes=2 --nproc_per_node=4 ... scripts/verify_nccl.py --dtype fp32

Every rank builds the same seeded (world_size, M) inputs (``fpreduce.backends._common.make_inputs``),
sends its own row through ``torch.distributed.all_reduce(SUM)`` on its GPU, and rank 0
gathers every rank's result, checks they are bitwise identical, and counts the
elements that differ from ``fpreduce.reduce`` under the matching plan and under
the other plans (for contrast). Exit status 0 only when the matching plan is bit-exact.

The plan: ``ring:nccl`` for Ring (chunk c folded from ring position c+1 round to c)
and ``tree:nccl:G`` (G = GPUs per node = LOCAL_WORLD_SIZE) for Tree. NCCL orders
the ring by topology, not by rank: read the ring from the ``NCCL_DEBUG=INFO`` line
``Channel 00/01 :    0   1   3   2`` and pass it as ``--ring "0 1 3 2"`` (the plan is
relabelled with it). Known gap (docs/collectives.md): NCCL splits the buffer in
loops of ``nranks * chunkSize`` elements, our plan in N even chunks, so elements
can land in a different chunk; the script prints the first differing indices to
make that visible. Requires torch with CUDA and NCCL, and fpreduce installed.
"""
# ruff: noqa: T201  (a command-line script: it prints)

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

import fpreduce as fr
from fpreduce.backends._common import differing, make_inputs


def main() -> int:
    ap = argparse.ArgumentParser(description="fpreduce vs a real NCCL all_reduce (run under torchrun)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--elements", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ring", default="", help="ring order from NCCL_DEBUG=INFO, e.g. '0 1 3 2' (Ring only)")
    ap.add_argument("--plan", default="", help="override the matching plan text (e.g. 'ring:nccl')")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", n))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    types = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    X = make_inputs(n, a.elements, a.dtype, a.seed)
    t = torch.from_numpy(np.ascontiguousarray(X[rank], dtype=np.float32)).to(types[a.dtype]).cuda()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    mine = t.float().cpu()
    gathered = [torch.empty_like(mine) for _ in range(n)] if rank == 0 else None
    gloo = dist.new_group(backend="gloo")
    dist.gather(mine, gathered, dst=0, group=gloo)
    status = 0
    if rank == 0:
        assert gathered is not None
        outs = [g.numpy() for g in gathered]
        agree = all(np.array_equal(outs[0].view(np.uint32), o.view(np.uint32)) for o in outs[1:])
        algo = os.environ.get("NCCL_ALGO", "Ring")
        text = a.plan or ("ring:nccl" if algo.lower().startswith("ring") else f"tree:nccl:{local}")
        plan = fr.plans.parse(text, n)
        if a.ring and text.startswith("ring"):
            order = [int(v) for v in a.ring.split()]
            plan = plan.relabel(order)  # ring position i is rank order[i]
        y = outs[0]
        emu = fr.reduce(X, plan, input=a.dtype, accumulate=a.dtype)
        bad = np.flatnonzero(y.view(np.uint32) != emu.view(np.uint32))
        contrast = {}
        for other in ("ring:nccl", "ring:ompi", "ring:gloo", "rd", "sequential", f"tree:nccl:{local}"):
            if other != text:
                q = fr.plans.parse(other, n)
                contrast[other] = differing(y, fr.reduce(X, q, input=a.dtype, accumulate=a.dtype))
        report = {
            "nccl": torch.cuda.nccl.version(),
            "torch": torch.__version__,
            "algo": algo,
            "proto": os.environ.get("NCCL_PROTO"),
            "channels": os.environ.get("NCCL_MAX_NCHANNELS"),
            "np": n,
            "gpus_per_node": local,
            "dtype": a.dtype,
            "elements": a.elements,
            "seed": a.seed,
            "plan": text,
            "ring": a.ring,
            "differing": int(bad.size),
            "first_differing": bad[:20].tolist(),
            "ranks_agree": agree,
            "contrast": contrast,
        }
        print(json.dumps(report, default=str))
        print(
            f"{algo} {a.dtype} np={n} M={a.elements}: {bad.size} elements differ from {text!r}; "
            f"ranks {'agree' if agree else 'DISAGREE'}; other plans: {contrast}",
            file=sys.stderr,
        )
        status = 0 if bad.size == 0 and agree else 1
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())

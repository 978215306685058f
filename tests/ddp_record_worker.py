"""One rank of tests/test_replay.py's real DDP run: ``python tests/ddp_record_worker.py DIR RANK N STEPS``.

Trains a tiny MLP (12-20-20-3, buckets of 1 KB: two in fp32) with DistributedDataParallel (CPU,
gloo, rendezvous through a file in DIR, gloo bound to ``lo``) for STEPS steps in fp32 and in bf16, recording each with
``fpreduce.torch.Recorder`` into ``DIR/rec-fp32`` and ``DIR/rec-bf16``; then records 2 of 3
steps of a model under torch's ``allreduce_hook``, wrapped, into ``DIR/rec-hook``. A twin model
(same initialization, same batches) trains under plain DDP, without a hook: the recorder
must change no bit of the training (exit status 3 if it does). A second recorder into
``rec-fp32`` must fail on every rank (else exit status 4 or 5).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta


def main(argv: list[str]) -> int:
    out, rank, n, steps = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{out}/store", rank=rank, world_size=n, timeout=timedelta(seconds=60)
    )
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        models = []
        for _ in range(2):
            torch.manual_seed(0)
            layers = [torch.nn.Linear(12, 20), torch.nn.Tanh(), torch.nn.Linear(20, 20), torch.nn.Tanh()]
            net = torch.nn.Sequential(*layers, torch.nn.Linear(20, 3)).to(dtype)
            models.append(DistributedDataParallel(net, bucket_cap_mb=0.001))  # fp32: two buckets
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
        gen = torch.Generator().manual_seed(1000 + rank)
        with fpreduce.torch.Recorder(f"{out}/rec-{name}") as rec:
            rec.attach(models[0])
            for _ in range(steps):
                x, y = torch.randn(8, 12, generator=gen).to(dtype), torch.randn(8, 3, generator=gen).to(dtype)
                for m, opt in zip(models, opts, strict=True):
                    ((m(x) - y) ** 2).mean().backward()
                    opt.step()
                    opt.zero_grad()
                for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
                    if not torch.equal(
                        p.detach().reshape(-1).view(torch.uint8), q.detach().reshape(-1).view(torch.uint8)
                    ):
                        return 3
    # a directory holding a recording is refused on every rank (none waits for rank 0 in vain)
    try:
        fpreduce.torch.Recorder(f"{out}/rec-fp32").attach(DistributedDataParallel(torch.nn.Linear(2, 2)))
        return 4
    except fpreduce.InvalidArgument as e:
        if "already holds a recording" not in str(e):
            return 5
    # a user's hook wrapped (torch's allreduce_hook: divide by N, then sum), 2 of 3 steps recorded
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(12, 5))
    with fpreduce.torch.Recorder(f"{out}/rec-hook", steps=2) as rec:
        rec.attach(model, default_hooks.allreduce_hook, None, average="predivide")
        for _ in range(3):
            model(torch.randn(4, 12, generator=gen)).square().mean().backward()
            model.zero_grad()
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # DDP's reducer threads can abort the interpreter's teardown; everything is written


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One rank of tests/test_replay.py's real DDP run: ``python tests/ddp_record_worker.py DIR RANK N STEPS``.

Trains a tiny MLP (12-20-20-3, buckets of 1 KB: two in fp32) with DistributedDataParallel (CPU,
gloo, rendezvous through a file in DIR, gloo bound to ``lo``) for STEPS steps in fp32 and in bf16, recording each with
``fpreduce.torch.Recorder`` into ``DIR/rec-fp32`` and ``DIR/rec-bf16``; then records 2 of 3
steps of a model under torch's ``allreduce_hook``, wrapped, into ``DIR/rec-hook``. A twin model
(same initialization, same batches) trains under plain DDP, without a hook: the recorder
must change no bit of the training (exit status 3 if it does). A second recorder into
``rec-fp32`` must fail on every rank (else exit status 4 or 5).

Then the other scaling paths of DDP, each beside its plain twin (exit status 3 if a bit differs):
``rec-view``: fp32, ``gradient_as_bucket_view=True`` and ``zero_grad(set_to_none=False)`` (DDP
divides the bucket in place from the second step; in the last step one parameter's gradient is
set to None, so that its bucket mixes both paths); ``rec-fp16c``: fp32 under torch's
``fp16_compress_hook``. DDP refuses ``bf16_compress_hook`` without CUDA and NCCL, so its
arithmetic runs here through the hook's own tensor form (``_compress_hook(torch.bfloat16, None,
(tensor,))``, gloo's bf16 all-reduce): rank 0 writes every rank's input and the result to
``DIR/bf16c-grads.npy`` and ``DIR/bf16c-real.npy``. Rank 0 writes the one-line refusals of an
unsupported hook, of sparse gradients and of ``bf16_compress_hook`` to ``DIR/refusals.json``.
Last, rank 0 alone checks the background writer (``_writer_checks``: ``DIR/writer.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from datetime import timedelta
from typing import Any


def _same(a: Any, b: Any) -> bool:
    """Every parameter of the two models has the same bits."""
    import torch

    return all(
        torch.equal(p.detach().reshape(-1).view(torch.uint8), q.detach().reshape(-1).view(torch.uint8))
        for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )


def _paths_run(out: str, rank: int, steps: int) -> int:
    """Record DDP's other scaling paths beside plain twins; 0, or 3 if the recorder changed a bit."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    runs = {
        "view": (None, {"gradient_as_bucket_view": True}),
        "fp16c": (default_hooks.fp16_compress_hook, {}),
    }
    for name, (hook, options) in runs.items():
        models = []
        for _ in range(2):
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
            models.append(DistributedDataParallel(net, bucket_cap_mb=0.0005, **options))  # fp32: two buckets
        if hook is not None:
            models[1].register_comm_hook(None, hook)  # the plain twin runs the hook itself
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
        gen = torch.Generator().manual_seed(2000 + rank)
        with fpreduce.torch.Recorder(f"{out}/rec-{name}") as rec:
            rec.attach(models[0], hook)
            for step in range(steps):
                x, y = torch.randn(8, 12, generator=gen), torch.randn(8, 3, generator=gen)
                for m, opt in zip(models, opts, strict=True):
                    if step == steps - 1 and hook is None:
                        m.module[0].bias.grad = None  # this parameter is copied again, its bucket mixes paths
                    ((m(x) - y) ** 2).mean().backward()
                    opt.step()
                    opt.zero_grad(set_to_none=False)
                if not _same(models[0], models[1]):
                    return 3
    return 0


def _refusals(out: str, rank: int) -> None:
    """What attach refuses, one line each (rank 0 writes them to DIR/refusals.json)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    def my_hook(state: Any, bucket: Any) -> Any:
        return default_hooks.allreduce_hook(state, bucket)

    said = {}
    cases = {
        "hook": (torch.nn.Linear(2, 2), my_hook),
        "sparse": (torch.nn.Sequential(torch.nn.Embedding(5, 2, sparse=True), torch.nn.Linear(2, 2)), None),
        "bf16c": (torch.nn.Linear(2, 2), default_hooks.bf16_compress_hook),
    }
    for case, (net, hook) in cases.items():
        try:
            fpreduce.torch.Recorder(f"{out}/rec-refused-{case}").attach(DistributedDataParallel(net), hook)
            said[case] = "accepted"
        except fpreduce.InvalidArgument as e:
            said[case] = str(e)
    if rank == 0:
        with open(f"{out}/refusals.json", "w") as f:
            json.dump(said, f)


def _bf16_compress(out: str, rank: int, n: int) -> None:
    """torch's bf16_compress_hook's arithmetic on one fp32 tensor per rank, over gloo."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    gen = torch.Generator().manual_seed(3000 + rank)
    x = torch.randn(1000, generator=gen) * torch.exp2(torch.randint(-8, 8, (1000,), generator=gen).float())
    parts = [torch.empty_like(x) for _ in range(n)] if rank == 0 else None
    dist.gather(x, parts, dst=0)
    y = default_hooks._compress_hook(torch.bfloat16, None, (x.clone(),)).wait()
    if rank == 0 and parts is not None:
        np.save(f"{out}/bf16c-grads.npy", torch.stack(parts).numpy())
        np.save(f"{out}/bf16c-real.npy", y.numpy())


def _slow_writes() -> Any:
    """Every step file slowed by 0.1 s (``fpreduce.torch._save`` wrapped); returns the original to restore."""
    import fpreduce.torch

    save = fpreduce.torch._save

    def slow(*args: Any) -> None:
        time.sleep(0.1)
        save(*args)

    fpreduce.torch._save = slow  # type: ignore[assignment]
    return save


def _writer_checks(out: str, rank: int) -> None:
    """The background writer, on rank 0 alone (a group of one: the bucket is the gradient, the all-reduce
    keeps it), its step files slowed so that it lags: ``DIR/writer/flushed`` records 3 steps of a tiny model
    and is closed at once; ``DIR/writer/failed`` loses its ``grads/`` after ``attach`` (step 0 cannot be
    written) and trains 3 steps. Rank 0 writes ``DIR/writer.json``: the steps on disk before and after
    ``close``, the parameters' gradients of each step (float32 bits, by name), what each step of the failed
    recording raised and what its ``close`` raised."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    alone = dist.new_group([0])  # every rank takes part in creating it
    if rank != 0:
        return
    save = _slow_writes()
    said: dict[str, Any] = {"grads": [], "steps_raised": []}
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 2))
    model = DistributedDataParallel(net, process_group=alone)
    rec = fpreduce.torch.Recorder(f"{out}/writer/flushed").attach(model)
    for _ in range(3):
        model(torch.randn(4, 6)).square().mean().backward()
        named = model.module.named_parameters()
        said["grads"].append({n: p.grad.view(-1).view(torch.int32).tolist() for n, p in named})
        model.zero_grad()
    said["before_close"] = rec.steps
    rec.close()
    said["after_close"] = rec.steps
    failing = DistributedDataParallel(torch.nn.Linear(3, 2), process_group=alone)
    rec = fpreduce.torch.Recorder(f"{out}/writer/failed").attach(failing)
    shutil.rmtree(f"{out}/writer/failed/grads")
    for _ in range(3):
        try:
            failing(torch.randn(4, 3)).sum().backward()
            said["steps_raised"].append(None)
        except Exception as e:  # what the user sees, type and message
            said["steps_raised"].append(f"{type(e).__name__}: {e}")
            break
    try:
        rec.close()
        said["close_raised"] = None
    except Exception as e:
        said["close_raised"] = f"{type(e).__name__}: {e}"
    fpreduce.torch._save = save  # type: ignore[assignment]
    with open(f"{out}/writer.json", "w") as f:
        json.dump(said, f)


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
    if _paths_run(out, rank, steps) != 0:
        return 3
    _refusals(out, rank)
    _bf16_compress(out, rank, n)
    _writer_checks(out, rank)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # DDP's reducer threads can abort the interpreter's teardown; everything is written


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

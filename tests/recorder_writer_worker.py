"""One gloo rank (world size 1) for tests/test_torch.py: ``python tests/recorder_writer_worker.py DIR``.

Every step file is slowed by 0.1 s (``fpreduce.torch._save`` wrapped), so that the recorder's
background writer lags behind the training: ``DIR/flushed`` records 3 steps of a tiny model and
is closed at once; then ``DIR/failed`` loses its ``grads/`` directory after ``attach``, so that
step 0 cannot be written, and trains 3 steps. Prints one JSON object: the steps on disk before
and after ``close``, the parameters' gradients of each step (their float32 bits, by name), what
each step of the failed recording raised and what its ``close`` raised.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any


def _slow_writes() -> None:
    import fpreduce.torch

    save = fpreduce.torch._save

    def slow(*args: Any) -> None:
        time.sleep(0.1)
        save(*args)

    fpreduce.torch._save = slow  # type: ignore[assignment]


def main(out: Path) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{out}/store", rank=0, world_size=1, timeout=timedelta(seconds=60)
    )
    _slow_writes()
    said: dict[str, Any] = {"grads": [], "steps_raised": []}
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 2)))
    rec = fpreduce.torch.Recorder(out / "flushed").attach(model)
    for _ in range(3):
        model(torch.randn(4, 6)).square().mean().backward()
        named = model.module.named_parameters()
        said["grads"].append({n: p.grad.view(-1).view(torch.int32).tolist() for n, p in named})
        model.zero_grad()
    said["before_close"] = rec.steps
    rec.close()
    said["after_close"] = rec.steps
    failing = DistributedDataParallel(torch.nn.Linear(3, 2))
    rec = fpreduce.torch.Recorder(out / "failed").attach(failing)
    shutil.rmtree(out / "failed" / "grads")
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
    print(json.dumps(said))  # noqa: T201  # the test reads it
    sys.stdout.flush()
    os._exit(0)  # DDP's reducer threads can abort the interpreter's teardown


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

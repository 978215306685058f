"""The DDP recorder's cost: a recorded training step against plain DDP's, same ranks, same process.

Run: python tests/benchmarks/bench_recorder.py [--np 2,4] [--rounds 5] [--steps 4] [--batch 64]

N local ranks (gloo on 127.0.0.1, a file rendezvous, one thread each) train a 4.2M-parameter
MLP (1024-2048-1024, fp32) twice over: a plain DDP model and a twin under
``fpreduce.torch.Recorder``, same initialization and batches. Each round times ``--steps``
plain steps, then ``--steps`` recorded steps (forward, backward, SGD step, zero_grad), and the
recorded block ends with ``Recorder.flush()``: the files still being written are counted in
the recorded steps' time (per step: the block's time over its steps). Printed, per N: the
medians over rounds of rank 0's plain step and recorded step, their ratio, the ratio's spread
over the rounds (min-max), and whether the two models ended bit-identical. Rank 0 deletes each
block's step files (a round at N = 4 writes ~84 MB a step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

SIZES = (1024, 2048, 1024)  # 4,197,376 parameters


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(), torch.nn.Linear(SIZES[1], SIZES[2])
    )


def _step(model: Any, opt: Any, gen: Any, batch: int) -> None:
    import torch

    x, y = torch.randn(batch, SIZES[0], generator=gen), torch.randn(batch, SIZES[2], generator=gen)
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    opt.zero_grad()


def _block(model: Any, opt: Any, gen: Any, batch: int, steps: int, rec: Any = None) -> float:
    """Seconds per step of ``steps`` steps (a recorder's files flushed inside the time)."""
    t0 = time.perf_counter()
    for _ in range(steps):
        _step(model, opt, gen, batch)
    if rec is not None:
        rec.flush()
    return (time.perf_counter() - t0) / steps


def rank_main(a: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    torch.set_num_threads(1)
    d = Path(a.dir)
    dist.init_process_group(
        "gloo", init_method=f"file://{d}/store", rank=a.rank, world_size=a.world, timeout=timedelta(seconds=600)
    )
    models = [DistributedDataParallel(_model()) for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in models]
    gens = [torch.Generator().manual_seed(1000 + a.rank) for _ in range(2)]
    plain, recorded = [], []
    with fpreduce.torch.Recorder(d / "rec") as rec:
        rec.attach(models[1])
        _block(models[0], opts[0], gens[0], a.batch, 1)  # warm-up (DDP rebuilds its buckets after step 0)
        _block(models[1], opts[1], gens[1], a.batch, 1, rec)
        for _ in range(a.rounds):
            dist.barrier()
            plain.append(_block(models[0], opts[0], gens[0], a.batch, a.steps))
            dist.barrier()
            recorded.append(_block(models[1], opts[1], gens[1], a.batch, a.steps, rec))
            if a.rank == 0:
                for sub in ("grads", "real"):
                    for f in (d / "rec" / sub).glob("step_*.npy"):
                        f.unlink()
        written = rec.steps
    same = all(
        torch.equal(p.detach().view(-1).view(torch.uint8), q.detach().view(-1).view(torch.uint8))
        for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True)
    )
    if a.rank == 0:
        params = sum(p.numel() for p in models[0].parameters())
        out = {"plain": plain, "recorded": recorded, "same": same, "written": written, "params": params}
        (d / "result.json").write_text(json.dumps(out))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # DDP's reducer threads can abort the interpreter's teardown


def run(n: int, a: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-recorder-") as d:
        args = ["--dir", d, "--world", str(n), "--rounds", str(a.rounds), "--steps", str(a.steps)]
        args += ["--batch", str(a.batch)]
        procs = [
            subprocess.Popen([sys.executable, __file__, *args, "--rank", str(r)], env=env, stderr=subprocess.PIPE)
            for r in range(n)
        ]
        errs = [p.communicate()[1] for p in procs]
        for r, (p, err) in enumerate(zip(procs, errs, strict=True)):
            if p.returncode != 0:
                raise SystemExit(f"rank {r} exited {p.returncode}: {err.decode()[-2000:]}")
        return dict(json.loads((Path(d) / "result.json").read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world", type=int, default=0)
    ap.add_argument("--dir", default="")
    a = ap.parse_args()
    if a.rank is not None:
        return rank_main(a)
    bad = 0
    for n in (int(v) for v in a.np.split(",")):
        r = run(n, a)
        ratios = [q / p for p, q in zip(r["plain"], r["recorded"], strict=True)]
        p, q = statistics.median(r["plain"]), statistics.median(r["recorded"])
        bad += not r["same"]
        print(
            f"N={n} {r['params']:,} parameters, batch {a.batch}: plain {p * 1e3:7.1f} ms/step, "
            f"recorded {q * 1e3:7.1f} ms/step, {q / p:4.2f}x (per round {min(ratios):.2f}-{max(ratios):.2f}x, "
            f"{a.rounds} rounds of {a.steps} steps, {r['written']} steps written); "
            f"training {'bit-identical' if r['same'] else 'CHANGED by the recorder'}",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

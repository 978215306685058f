"""The DDP recorder's cost: a recorded training step against plain DDP's, same ranks, same process.

Run: python tests/benchmarks/bench_recorder.py [--np 2,4] [--rounds 5] [--steps 4] [--batch 64]

N local ranks (gloo on 127.0.0.1, a file rendezvous, one thread each) train a 4.2M-parameter
MLP (1024-2048-1024, fp32) twice over: a plain DDP model and a twin under
``fpreduce.torch.Recorder``, same initialization and batches. Each round times ``--steps``
plain steps, then ``--steps`` recorded steps (forward, backward, SGD step, zero_grad), and the
recorded block ends with ``Recorder.flush()``: the files still being written are counted in
the recorded steps' time (per step: the block's time over its steps). Printed, per N: the
medians over rounds of rank 0's plain step and recorded step (wall time), their ratio and its
spread over the rounds (min-max); the CPU time of a step summed over the ranks (every thread,
user and system: what a loaded machine charges) and rank 0's alone; whether the two models
ended bit-identical; and the bytes a recorded step moves (what bounds its cost). Rank 0 deletes
each block's step files (~84 MB a step at N = 4).
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
TIMED = ("plain", "recorded")


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


def _block(model: Any, opt: Any, gen: Any, batch: int, steps: int, rec: Any = None) -> tuple[float, float]:
    """Wall and CPU seconds per step of ``steps`` steps (a recorder's files flushed inside the time)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        _step(model, opt, gen, batch)
    if rec is not None:
        rec.flush()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


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
    plain: list[tuple[float, float]] = []
    recorded: list[tuple[float, float]] = []
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
    params = sum(p.numel() for p in models[0].parameters())
    out = {"plain": plain, "recorded": recorded, "same": same, "written": written, "params": params}
    (d / f"rank{a.rank}.json").write_text(json.dumps(out))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # DDP's reducer threads can abort the interpreter's teardown


def run(n: int, a: argparse.Namespace) -> list[dict[str, Any]]:
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
        return [json.loads((Path(d) / f"rank{r}.json").read_text()) for r in range(n)]


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
        ranks = run(n, a)
        r = ranks[0]
        wall = [(p[0], q[0]) for p, q in zip(r["plain"], r["recorded"], strict=True)]
        ratios = [q / p for p, q in wall]
        p, q = statistics.median(w[0] for w in wall), statistics.median(w[1] for w in wall)
        cpu = [statistics.median(sum(x[kind][i][1] for x in ranks) for i in range(a.rounds)) for kind in TIMED]
        cpu0 = [statistics.median(c for _, c in r[kind]) for kind in TIMED]
        bad += not all(x["same"] for x in ranks)
        print(
            f"N={n} {r['params']:,} parameters, batch {a.batch}, {a.rounds} rounds of {a.steps} steps "
            f"({r['written']} written): plain {p * 1e3:.0f} ms/step, recorded {q * 1e3:.0f} ms/step: {q / p:.2f}x "
            f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x); CPU of all ranks {cpu[0] * 1e3:.0f} -> "
            f"{cpu[1] * 1e3:.0f} ms/step ({cpu[1] / cpu[0]:.2f}x), rank 0's "
            f"{cpu0[0] * 1e3:.0f} -> {cpu0[1] * 1e3:.0f}; "
            f"training {'bit-identical' if all(x['same'] for x in ranks) else 'CHANGED by the recorder'}",
            flush=True,
        )
        mb = r["params"] * 4 / 1e6  # a rank's buckets in float32
        print(  # what bounds the recorded step: the bytes it moves (docs/replay.md, Recorder cost)
            f"  per step: every rank copies {mb:.1f} MB, each of the {n - 1} others sends it to rank 0, which receives "
            f"{(n - 1) * mb:.1f} MB, keeps {mb:.1f} MB of result and writes {(n + 1) * mb:.1f} MB",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

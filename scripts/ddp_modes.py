"""Every DDP scaling mode x gradient dtype x world size, recorded beside a plain twin and replayed.

Run: python scripts/ddp_modes.py [--np 2,3,5,7] [--steps 5]   (about 1-2 min per N on 2 cores)

The table of docs/replay.md ("Every mode x dtype x N"). For each N, N local gloo ranks (CPU,
127.0.0.1, one thread each) train a 32-64-64-8 MLP (6,792 parameters, 4 KB buckets) for
``--steps`` steps in every mode and dtype, twice: under ``fpreduce.torch.Recorder`` and as a
plain twin (same initialization and batches; under a hook, the twin registers the hook itself).
Each rank counts the parameter elements whose bits differ between the twins after every step.
Then this process replays every recording (``fpreduce.backends.replay.replay``): the elements
whose bits differ from the real all-reduce, and the same with every path's average replaced by
``ddp`` (a replay that multiplies by float32(1/N) everywhere, as the version 1 recorder assumed).
Prints a Markdown table; exit status 1 if any twin or replay differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

SIZES = (32, 64, 64, 8)  # 6,792 parameters
BUCKET_MB = 4 / 1024  # 4 KB buckets
DTYPES = ("fp32", "bf16", "fp16")
#: mode -> (DDP options, keep the gradients between steps, torch's hook by name or None, dtypes)
MODES: dict[str, tuple[dict[str, bool], bool, str | None, tuple[str, ...]]] = {
    "default (`copy`)": ({}, False, None, DTYPES),
    "`gradient_as_bucket_view`, `set_to_none=False`": ({"gradient_as_bucket_view": True}, True, None, DTYPES),
    "`gradient_as_bucket_view`, `set_to_none=True`": ({"gradient_as_bucket_view": True}, False, None, DTYPES),
    "`batched_grad_copy`": ({"batched_grad_copy": True}, False, None, DTYPES),
    "`batched_grad_copy`, kept views": (
        {"batched_grad_copy": True, "gradient_as_bucket_view": True},
        True,
        None,
        DTYPES,
    ),
    "`allreduce_hook`": ({}, False, "allreduce_hook", DTYPES),
    "`fp16_compress_hook`": ({}, False, "fp16_compress_hook", ("fp32",)),
}


def _cases() -> list[tuple[int, str, str]]:
    return [(i, mode, dt) for i, (mode, (*_, dts)) in enumerate(MODES.items()) for dt in dts]


def _model(dtype: Any) -> Any:
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for a, b in zip(SIZES, SIZES[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1]).to(dtype)


def _differ(a: Any, b: Any) -> int:
    """Parameter elements of the two models whose bits differ."""
    import torch

    n = 0
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        word = torch.int16 if p.element_size() == 2 else torch.int32
        n += int((p.detach().reshape(-1).view(word) != q.detach().reshape(-1).view(word)).sum())
    return n


def _case(out: Path, rank: int, steps: int, i: int, mode: str, dt: str) -> dict[str, int]:
    """One mode and dtype on this rank: recorded model and plain twin; elements compared, differing."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    import fpreduce.torch

    options, kept, hook_name, _ = MODES[mode]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    hook = getattr(default_hooks, hook_name) if hook_name else None
    models = [DistributedDataParallel(_model(dtype), bucket_cap_mb=BUCKET_MB, **options) for _ in range(2)]
    if hook is not None:
        models[1].register_comm_hook(None, hook)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    gen = torch.Generator().manual_seed(4000 + 100 * i + rank)
    compared = differ = 0
    with fpreduce.torch.Recorder(out / f"case{i}-{dt}") as rec:
        rec.attach(models[0], hook)
        for _ in range(steps):
            x = torch.randn(8, SIZES[0], generator=gen).to(dtype)
            y = torch.randn(8, SIZES[-1], generator=gen).to(dtype)
            for m, opt in zip(models, opts, strict=True):
                ((m(x) - y) ** 2).mean().backward()
                opt.step()
                opt.zero_grad(set_to_none=not kept)
            compared += sum(p.numel() for p in models[0].parameters())
            differ += _differ(models[0], models[1])
    return {"compared": compared, "differ": differ}


def rank_main(a: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    out = Path(a.dir)
    dist.init_process_group(
        "gloo", init_method=f"file://{out}/store", rank=a.rank, world_size=a.world, timeout=timedelta(seconds=300)
    )
    said = {f"{i}-{dt}": _case(out, a.rank, a.steps, i, mode, dt) for i, mode, dt in _cases()}
    (out / f"rank{a.rank}.json").write_text(json.dumps(said))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # DDP's reducer threads can abort the interpreter's teardown


def _replayed(d: Path, fp32: bool) -> tuple[int, int, int | None, str]:
    """(elements replayed, differing, differing if every path were averaged as ``ddp``: fp32 only; the paths
    that ran, with their elements)."""
    from fpreduce.backends.replay import open_recording, replay

    rec = open_recording(d)
    res = replay(rec)
    ran = ", ".join(f"{k} {v['elements']:,}" for k, v in sorted(res["paths"].items()))
    if not fp32:
        return res["elements"], res["differ"], None, ran
    as_ddp = dataclasses.replace(rec, paths={k: {**v, "average": "ddp"} for k, v in rec.paths.items()})
    return res["elements"], res["differ"], replay(as_ddp)["differ"], ran


def run(n: int, steps: int) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="ddp-modes-") as d:
        args = ["--dir", d, "--world", str(n), "--steps", str(steps)]
        procs = [
            subprocess.Popen([sys.executable, __file__, *args, "--rank", str(r)], env=env, stderr=subprocess.PIPE)
            for r in range(n)
        ]
        errs = [p.communicate()[1] for p in procs]
        for r, (p, err) in enumerate(zip(procs, errs, strict=True)):
            if p.returncode != 0:
                raise SystemExit(f"N={n}: rank {r} exited {p.returncode}: {err.decode()[-2000:]}")
        ranks = [json.loads((Path(d) / f"rank{r}.json").read_text()) for r in range(n)]
        got = {}
        for i, _, dt in _cases():
            key = f"{i}-{dt}"
            elements, differ, as_ddp, ran = _replayed(Path(d) / f"case{i}-{dt}", dt == "fp32")
            twins = [r[key] for r in ranks]
            got[key] = {
                "compared": twins[0]["compared"],
                "twin_differ": sum(t["differ"] for t in twins),
                "elements": elements,
                "differ": differ,
                "as_ddp": as_ddp,
                "paths": ran,
            }
        return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", default="2,3,5,7")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world", type=int, default=0)
    ap.add_argument("--dir", default="")
    a = ap.parse_args()
    if a.rank is not None:
        return rank_main(a)
    ns = [int(v) for v in a.np.split(",")]
    results = {n: run(n, a.steps) for n in ns}
    head = "| mode | dtype | N | compared | twin differs | replayed | differ | paths that ran (elements) |"
    print(head + " all `ddp` would differ |")  # noqa: T201
    print("|---|---|---|---|---|---|---|---|---|")  # noqa: T201
    bad = 0
    for i, mode, dt in _cases():
        for n in ns:
            r = results[n][f"{i}-{dt}"]
            bad += r["twin_differ"] + r["differ"]
            as_ddp = "-" if r["as_ddp"] is None else f"{r['as_ddp']:,}"
            print(  # noqa: T201
                f"| {mode} | {dt} | {n} | {r['compared']:,} | {r['twin_differ']:,} | {r['elements']:,} | "
                f"{r['differ']:,} | {r['paths']} | {as_ddp} |"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

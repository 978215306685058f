"""Runner overhead: wall time of a synthetic run vs the engine's reduction time, same run.

Run: python tests/benchmarks/bench_runner.py [--small]
Overhead = (wall - engine - gradient generation) / engine, where the runner itself
records the time spent in fr.reduce (and the input casts) and in the gradient source.
The runner's share is split into the exact sums, the metrics and the rest.

Twice: on synthetic gradients, whose draws (numpy's normal generator, about 13 ns per element on
one core here: more CPU than everything else in the run) take two threads beside the runner on a
2-core machine and slow everything it does, and on the same gradients recorded to step files first
(``kind = "file"``, read by offset), where the runner's own work is measured without them.
"""

from __future__ import annotations

import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.base import jit as _jit
from fpreduce.run import config as cf
from fpreduce.run.runner import run_experiment
from fpreduce.run.sources import open_source

CONFIG = """
[experiment]
name = "bench"
steps = 3
workers = 64
seed = 0
[source]
kind = "synthetic"
elements = {elements}
[[arms]]
name = "A"
order = "fixed:sequential"
input = "bf16"
accumulate = "bf16"
[[arms]]
name = "B"
order = "arrival"
input = "bf16"
accumulate = "bf16"
[[arms]]
name = "B-fp32"
order = "arrival"
input = "bf16"
accumulate = "fp32"
"""


def main() -> None:
    elements = 1 << (16 if "--small" in sys.argv else 20)
    cfg = cf.from_dict(tomllib.loads(CONFIG.format(elements=elements)))
    with tempfile.TemporaryDirectory() as d:  # a tiny run first: loads the compiled kernels (once per process)
        t0 = time.perf_counter()
        run_experiment(cf.from_dict(tomllib.loads(CONFIG.format(elements=64).replace("steps = 3", "steps = 1"))), d)
        print(
            f"warm-up (imports, numba kernels from cache when installed: {_jit.AVAILABLE}):"
            f" {time.perf_counter() - t0:.2f} s, once per process"
        )
    print(f"64 workers x {elements} elements, 3 arms, 3 steps")
    with tempfile.TemporaryDirectory() as d:
        report("synthetic gradients", run_experiment(cfg, d).summary)
    with tempfile.TemporaryDirectory() as rec, tempfile.TemporaryDirectory() as d:
        src = open_source(cfg.source, workers=64, seed=0)
        for step in range(3):
            np.save(Path(rec) / f"step_{step:06d}.npy", src.gradients(step))
        text = CONFIG.format(elements=elements).replace(
            'kind = "synthetic"\nelements = ' + str(elements), f'kind = "file"\npath = "{rec}"'
        )
        recorded = run_experiment(cf.from_dict(tomllib.loads(text)), d).summary
        report("the same gradients recorded to step files", recorded)


def report(what: str, s: dict[str, Any]) -> None:
    wall, eng, src = s["wall_time_s"], s["engine_time_s"], s["source_time_s"]
    ex, met = s["exact_time_s"], s["metrics_time_s"]
    over = wall - eng - src
    print(f"{what}:")
    print(
        f"  wall {wall:.2f} s = engine {eng:.2f} s (reductions and input casts) + gradient source {src:.2f} s"
        f" + runner {over:.2f} s"
    )
    print(f"  runner overhead: {100 * over / eng:.0f}% of the engine's time (target <= 50%)")
    print(
        f"  of which exact sums {ex:.2f} s ({100 * ex / eng:.0f}%), metrics {met:.2f} s ({100 * met / eng:.0f}%),"
        f" I/O and bookkeeping {over - ex - met:.2f} s"
    )


if __name__ == "__main__":
    main()

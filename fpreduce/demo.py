"""A small Experiment A vs B on synthetic gradients (the quickstart demo).

Arm A sums the workers' gradients along the same plan every step (by default a
sequential fold over ranks 0..N-1); arm B along the same plan relabelled by a fresh
random permutation of the workers every step (for ``sequential``: arrival order
under network jitter; for ``ring:nccl``: the ring re-ranked). Both use the same
inputs; each step records, against the exact sum, the median and max relative
error of each arm, and between the arms the fraction of elements whose bits differ
and the mean and max ulp distance. Results are written
atomically: ``metrics.csv``, ``summary.json``, ``figures/ab.png`` and ``report.pdf``.

This is the stand-in for the full experiment runner (configs, more arms, training
mode), which is not built yet.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fpreduce import plans
from fpreduce._version import __version__
from fpreduce.engine import reduce
from fpreduce.exact import exact_sum
from fpreduce.metrics import ulp_distance
from fpreduce.rounding import round_to

__all__ = ["DemoConfig", "run_demo"]


@dataclass(frozen=True)
class DemoConfig:
    """Parameters of the demo (every one is written to summary.json)."""

    workers: int = 16
    elements: int = 4096
    steps: int = 20
    input: str = "bf16"
    accumulate: str = "bf16"
    plan: str = "sequential"
    seed: int = 0


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_demo(cfg: DemoConfig, out: Path) -> dict[str, object]:
    """Run the demo and write the run directory; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    n, m = cfg.workers, cfg.elements
    plan_a = plans.parse(cfg.plan, n)
    rows = []
    for step in range(cfg.steps):
        signal = rng.standard_normal(m)
        X = (signal + rng.standard_normal((n, m))).astype(np.float32)
        X = X * np.float32(2.0 ** (-step / 10))  # gradients shrink as training converges
        order = rng.permutation(n)
        Xi = round_to(X, cfg.input)  # once: both arms and the oracle sum the same inputs
        ya = reduce(Xi, plan_a, input=cfg.input, accumulate=cfg.accumulate)
        yb = reduce(Xi, plan_a.relabel(order), input=cfg.input, accumulate=cfg.accumulate)
        ex = exact_sum(Xi)
        s = ex.to_float64()
        with np.errstate(divide="ignore", invalid="ignore"):
            rel_a = np.abs(ex.error_of(ya)) / np.abs(s)
            rel_b = np.abs(ex.error_of(yb)) / np.abs(s)
        ok = np.isfinite(rel_a) & np.isfinite(rel_b)
        d = ulp_distance(ya, yb, cfg.accumulate)
        rows.append({
            "step": step,
            "median_rel_err_A": float(np.median(rel_a[ok])),
            "median_rel_err_B": float(np.median(rel_b[ok])),
            "max_rel_err_A": float(np.max(rel_a[ok])),
            "max_rel_err_B": float(np.max(rel_b[ok])),
            "frac_bits_differ": float(np.mean(d > 0)),
            "max_ulp_distance": int(d.max()),
            "mean_ulp_distance": float(d.mean()),
            "order_B": " ".join(map(str, order)),
        })
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    _atomic_write(out / "metrics.csv", buf.getvalue().encode())
    fr_diff = np.array([r["frac_bits_differ"] for r in rows])
    summary: dict[str, object] = {
        "version": __version__,
        "config": asdict(cfg),
        "steps_with_any_difference": int(np.sum(fr_diff > 0)),
        "median_frac_bits_differ": float(np.median(fr_diff)),
        "worst_ulp_distance": max(int(r["max_ulp_distance"]) for r in rows),  # type: ignore[call-overload]
        "complete": True,
    }
    _write_figures(rows, cfg, out)
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2).encode())
    return summary


def _write_figures(rows: list[dict[str, object]], cfg: DemoConfig, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    steps = [int(r["step"]) for r in rows]  # type: ignore[call-overload]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    ea = np.array([float(r["median_rel_err_A"]) for r in rows])  # type: ignore[arg-type]
    eb = np.array([float(r["median_rel_err_B"]) for r in rows])  # type: ignore[arg-type]
    ax1.plot(steps, ea, "o-", label="A: fixed ranks")
    ax1.plot(steps, eb, "s--", label="B: ranks shuffled every step")
    if np.any(ea > 0) and np.any(eb > 0) and np.all(np.concatenate([ea, eb]) > 0):
        ax1.set_yscale("log")  # zeros (correctly rounded medians) stay on a linear axis
    ax1.set_ylabel("median relative error\nvs exact sum (unitless)")
    ax1.set_title(
        f"Experiment A vs B: {cfg.workers} workers x {cfg.elements} elements\n"
        f"{cfg.input} inputs, {cfg.accumulate} accumulator, plan {cfg.plan}"
    )
    ax1.legend()
    ax1.grid(True, which="both", alpha=0.3)
    ax2.plot(steps, [100 * float(r["frac_bits_differ"]) for r in rows], "o-", color="C2",  # type: ignore[arg-type]
             label="elements whose bits differ (A vs B)")
    ax2.set_ylabel("elements differing (%)")
    ax2.set_xlabel("training step")
    ax2b = ax2.twinx()
    ax2b.plot(steps, [r["mean_ulp_distance"] for r in rows], "s:", color="C3",
              label="mean ulp distance A vs B")
    ax2b.set_ylabel(f"mean distance ({cfg.accumulate} ulps)")
    ax2b.set_ylim(bottom=0)
    ax2.set_ylim(0, 100)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax2b.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax2.xaxis.get_major_locator().set_params(integer=True)
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "figures" / "ab.png", dpi=110)
    tmp = out / "report.pdf.tmp"
    with PdfPages(tmp, metadata={"CreationDate": None, "ModDate": None,
                                 "Title": "fpreduce A vs B demo"}) as pdf:
        pdf.savefig(fig)
    os.replace(tmp, out / "report.pdf")
    plt.close(fig)

"""The price of determinism: time and numerics of each training mode, side by side.

``fpreduce price CONFIG`` trains the model source in every mode of the config on one
simulated clock (:mod:`fpreduce.run.clock`), relaunches each with another timing seed,
and tabulates per mode: time per step, time to a target loss, final loss, the fraction of
the final weights that differ in at least one bit from the deterministic reference's
(``sync`` with a fixed order, the first mode) and from the mode's own relaunch's, and the
load over time: how many workers compute and how many wait, and the idle fraction.

A config is TOML with tables ``[price]`` (:class:`PriceSpec`: name, workers, seed, steps,
modes, formats), ``[source]`` (the model's keys, see ``ModelSpec``), ``[cluster]``
(``fpreduce.core.timing.Profile``) and ``[compute]`` (:class:`~fpreduce.run.clock.ComputeModel`).
Every key is optional (``examples/price.toml``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.run import rundir
from fpreduce.run.clock import Trace, parse_mode, simulate
from fpreduce.run.model import ModelSource
from fpreduce.run.price_config import (
    MAX_WORKERS,
    PriceConfig,
    PriceRow,
    PriceSpec,
    load_price_config,
    price_config_from_dict,
)

__all__ = [
    "MAX_WORKERS",
    "PriceConfig",
    "PriceRow",
    "PriceSpec",
    "load_price_config",
    "price",
    "price_config_from_dict",
    "load_of",
    "save_price",
    "target_of",
]

#: bins of the load curve over a mode's simulated time (price.json's ``computing``)
LOAD_BINS = 400


def _first_below(tr: Trace, target: float) -> float:
    hit = [t for t, loss in zip(tr.time, tr.loss, strict=True) if loss <= target]
    return hit[0] if hit else float("nan")


def _weights_differ(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a.view(np.uint32) != b.view(np.uint32))) if a.size else 0.0


def price(
    cfg: PriceConfig, progress: Callable[[int, int], None] | None = None
) -> tuple[list[PriceRow], dict[str, Trace]]:
    """Train every mode (and a relaunch of each); the rows and the traces (reference first).

    ``progress(done, total)`` counts the gradients computed (steps x workers per training).
    """
    sp = cfg.spec
    src = ModelSource(cfg.model, workers=sp.workers, seed=sp.seed)
    kw = {
        "steps": sp.steps,
        "plan": sp.plan,
        "input": sp.input,
        "accumulate": sp.accumulate,
        "master": sp.master,
        "compute": cfg.compute,
        "profile": cfg.profile,
    }
    traces: dict[str, Trace] = {}
    reruns: dict[str, Trace] = {}
    each, done = sp.steps * sp.workers, [0]
    total = 2 * len(sp.modes) * each

    def tick() -> None:
        done[0] += 1
        if progress is not None and done[0] % sp.workers == 0:
            progress(min(done[0], total - 1), total)

    for i, m in enumerate(sp.modes):
        mode = parse_mode(m, sp.workers)
        traces[m] = simulate(src, mode, seed=sp.seed, tick=tick, **kw)  # type: ignore[arg-type]
        done[0] = max(done[0], (2 * i + 1) * each)  # (a mode that computes fewer gradients)
        reruns[m] = simulate(src, mode, seed=sp.seed + 7919, tick=tick, **kw)  # type: ignore[arg-type]
        done[0] = max(done[0], (2 * i + 2) * each)
    if progress is not None:
        progress(total, total)
    ref = traces[sp.modes[0]]
    target = sp.target_loss or 1.2 * ref.loss[-1]
    rows = []
    w_ref = ref.params.astype(np.float64)
    for m, tr in traces.items():
        w = tr.params.astype(np.float64)
        rows.append(
            PriceRow(
                m,
                tr.time[-1] / len(tr.time),
                _first_below(tr, target),
                tr.loss[-1],
                _weights_differ(tr.params, ref.params),
                _distance(w, w_ref),
                _weights_differ(tr.params, reruns[m].params),
                float(np.mean(tr.staleness)) if tr.staleness else 0.0,
                int(max(tr.staleness, default=0)),
                load_of(tr, sp.workers, 1)[1],
            )
        )
    return rows, traces


def _distance(w: np.ndarray, w_ref: np.ndarray) -> float:
    """||w - w_ref|| / ||w_ref||; NaN when a run diverged (weights not finite), said by the report."""
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.linalg.norm(w - w_ref)) / max(float(np.linalg.norm(w_ref)), 1e-300)


def load_of(tr: Trace, n: int, bins: int = LOAD_BINS) -> tuple[np.ndarray, float]:
    """The mean number of workers computing in each of ``bins`` equal bins of [0, end] (end: the mode's last
    update, ``tr.time[-1]``; compute intervals clipped to it, integrated exactly), and the idle fraction
    ``1 - compute seconds / (n x end)``."""
    end = tr.time[-1] if tr.time else 0.0
    iv = np.clip(np.asarray(tr.computing, np.float64).reshape(-1, 2), 0.0, end)
    if end <= 0 or not iv.size:
        return np.zeros(bins), 1.0
    edges = np.linspace(0.0, end, bins + 1)
    busy = np.zeros(bins + 1)  # compute seconds before each edge, summed over the intervals
    for a, b in iv:
        busy += np.clip(edges - a, 0.0, b - a)
    return np.diff(busy) / (end / bins), float(1.0 - busy[-1] / (n * end))


def target_of(cfg: PriceConfig, traces: dict[str, Trace]) -> float:
    """The target loss used: the config's, else 1.2 x the reference mode's final loss."""
    return cfg.spec.target_loss or 1.2 * traces[cfg.spec.modes[0]].loss[-1]


def save_price(out: Path, cfg: PriceConfig, rows: list[PriceRow], traces: dict[str, Trace]) -> dict[str, Any]:
    """Write the study's ``price.json`` (config, target, rows, traces) through :mod:`fpreduce.run.rundir`;
    the document written (what :func:`fpreduce.run.rundir.read_study` reads back)."""
    doc = {
        "config": {
            "price": asdict(cfg.spec),
            "source": asdict(cfg.model),
            "compute": asdict(cfg.compute),
            "cluster": asdict(cfg.profile),
        },
        "target_loss": target_of(cfg, traces),
        "rows": [asdict(r) for r in rows],
        "traces": {
            m: {
                "time": tr.time,
                "loss": tr.loss,
                "staleness": tr.staleness,
                "computing": [round(float(c), 4) for c in load_of(tr, cfg.spec.workers)[0]],
            }
            for m, tr in traces.items()
        },
    }
    rundir.write_study(out, "price", doc)
    return doc

"""Replay a recorded DDP all-reduce (``fpreduce.torch.Recorder``) bit for bit, and ask what else it could have been.

:func:`open_recording` reads and checks a recording (layout in :mod:`fpreduce.torch`);
:func:`replay` emulates every step's all-reduce bucket by bucket, as the library does
it, and counts the elements whose bits differ from the recorded real result:

* ``gloo``: gloo's ring with its segment sizing for the bucket's byte count
  (``ring(n, "gloo", item_bytes)``), **verified** against torch.distributed
  (docs/verification.md);
* ``nccl``: NCCL's ring model (``ring:nccl``, or any plan given, e.g. ``tree:nccl:8``),
  **modelled, not verified** here (no GPU; docs/collectives.md says what is not modelled).

Each bucket is summed in the gradients' dtype (every hop rounds to it) after the
recording's averaging (``ddp``: DDP's default ``grad * float32(1/N)``).

:func:`layer_rows` then asks, per parameter, how many elements' bits would change
against the recorded result under another order (the ring re-ranked every step by a random
permutation other than the identity: Experiment B's draws, the recorded order excluded), a
relaunch (one other rank assignment for the whole run), another world size (each rank's
gradient held by two ranks: 2N ranks, a model) and a wider accumulator (fp32; fp64 for fp32
gradients), the result rounded once to the dtype.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.engine import reduce
from fpreduce.core.formats import get_format
from fpreduce.core.metrics import ulp_gap
from fpreduce.plans import AnyPlan, parse, ring

__all__ = [
    "MODELLED",
    "VARIANTS",
    "Recording",
    "contrast_plans",
    "layer_rows",
    "open_recording",
    "replay",
    "run_config",
]

#: backend -> (default plan text, verified against the real library here)
MODELLED = {"gloo": ("ring:gloo", True), "nccl": ("ring:nccl", False)}
#: the what-ifs of :func:`layer_rows` (name -> what it models)
VARIANTS = {
    "order": "another order: the ring re-ranked every step by a fresh random permutation, never the recorded one",
    "relaunch": "a relaunch: one other assignment of ranks to the ring (random), kept for the whole run",
    "world": "another world size: 2N ranks, each recorded rank's gradient held by two (a model)",
    "wide": "a wider accumulator (fp32; fp64 for fp32 gradients), rounded once to the dtype",
}
_ITEM = {"fp32": 4, "bf16": 2, "fp16": 2}
_AVERAGES = ("ddp", "predivide", "after", "none")
#: largest ulp distance written (as metrics.csv does): a NaN or Inf against a number counts as this
_ULP_CAP = 2.0**20
_MANIFEST = "manifest.json"  # fpreduce.torch.MANIFEST (that module sits outside the layers)


def _step_file(kind: str, step: int) -> str:
    return f"{kind}/step_{step:06d}.npy"  # fpreduce.torch.step_file


def _npy_shape(path: Path) -> tuple[int, ...]:
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"{path}: not a readable .npy file ({e})") from None
    if np.dtype(dtype) != np.float32:
        raise InvalidArgument(f"{path}: dtype {np.dtype(dtype)}, a recording holds float32")
    return tuple(shape)


@dataclass(frozen=True)
class Recording:
    """A checked recording: its manifest's facts and where its steps are."""

    path: Path
    world: int
    backend: str
    dtype: str
    average: str
    torch: str
    steps: int
    elements: int
    layouts: list[list[dict[str, Any]]]
    step_layout: list[int]
    local_world: int | None = None  # ranks per node (torchrun's LOCAL_WORLD_SIZE), if known

    def step(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(grads (world, elements), real (elements,)) of step ``t``, float32."""
        return np.load(self.path / _step_file("grads", t)), np.load(self.path / _step_file("real", t))

    def buckets(self, t: int) -> list[dict[str, Any]]:
        """Step ``t``'s buckets: ``start`` (column in the step's files), ``elements``, ``params``."""
        return self.layouts[self.step_layout[t]]

    def plan(self, text: str | None = None, world: int | None = None) -> tuple[str, AnyPlan]:
        """(text, plan) of the all-reduce (``text`` None: the backend's default)."""
        n = world or self.world
        text = text or MODELLED[self.backend][0]
        if text == "ring:gloo":
            return text, ring(n, "gloo", item_bytes=_ITEM[self.dtype])
        return text, parse(text, n)


def _manifest(d: Path) -> dict[str, Any]:
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such recording directory")
    path = d / _MANIFEST
    if not path.is_file():
        raise InvalidArgument(f"{d}: no {_MANIFEST}: not a fpreduce.torch recording, or a truncated one")
    try:
        m = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgument(f"{path}: not readable JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != "fpreduce-ddp-recording":
        raise InvalidArgument(f"{path}: not a fpreduce.torch recording manifest")
    return m


def open_recording(path: str | Path) -> Recording:
    """Read and check a recording directory.

    Raises:
        InvalidArgument (one line naming the file and what is wrong): no directory or
            manifest, a backend the replay does not model, a step file missing (a truncated
            recording) or of another shape than the manifest's world size and elements.
    """
    d = Path(path)
    m = _manifest(d)
    try:
        rec = Recording(
            d,
            int(m["world_size"]),
            str(m["backend"]),
            str(m["dtype"]),
            str(m["average"]),
            str(m.get("torch", "?")),
            int(m["steps"]),
            int(m["elements"]),
            list(m["layouts"]),
            [int(i) for i in m["step_layout"]],
            int(m["local_world_size"]) if m.get("local_world_size") else None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidArgument(f"{d / _MANIFEST}: incomplete manifest ({type(e).__name__}: {e})") from None
    if rec.backend not in MODELLED:
        raise InvalidArgument(
            f"{d}: backend {rec.backend!r} is not modelled by the replay (modelled: gloo, verified; nccl, modelled)"
        )
    if rec.dtype not in _ITEM or rec.average not in _AVERAGES:
        raise InvalidArgument(f"{d / _MANIFEST}: dtype {rec.dtype!r} or average {rec.average!r} not replayable")
    if rec.steps < 1 or len(rec.step_layout) != rec.steps or rec.world < 1:
        raise InvalidArgument(f"{d / _MANIFEST}: records {rec.steps} steps of {rec.world} ranks: nothing to replay")
    for t in range(rec.steps):
        _check_step(rec, t)
    return rec


def _check_step(rec: Recording, t: int) -> None:
    for kind, want in (("grads", (rec.world, rec.elements)), ("real", (rec.elements,))):
        f = rec.path / _step_file(kind, t)
        if not f.is_file():
            raise InvalidArgument(
                f"{rec.path}: truncated recording: {_step_file(kind, t)} is missing ({rec.steps} steps)"
            )
        shape = _npy_shape(f)
        if kind == "grads" and len(shape) == 2 and shape[0] != rec.world:
            raise InvalidArgument(
                f"{f}: holds {shape[0]} ranks but the manifest says world_size = {rec.world}: "
                "a recording from another world size"
            )
        if shape != want:
            raise InvalidArgument(f"{f}: shape {shape}, expected {want} (manifest: world_size, elements)")
    if not 0 <= rec.step_layout[t] < len(rec.layouts):
        raise InvalidArgument(f"{rec.path / _MANIFEST}: step {t} names no bucket layout")
    if sum(int(b["elements"]) for b in rec.buckets(t)) != rec.elements:
        raise InvalidArgument(f"{rec.path / _MANIFEST}: step {t}'s buckets do not cover {rec.elements} elements")


def _emulate(
    rec: Recording, X: np.ndarray, t: int, plan: str | None, *, world: int | None = None, accumulate: str | None = None
) -> np.ndarray:
    """The all-reduce of step ``t``'s rows ``X`` (world rows), bucket by bucket."""
    n = X.shape[0]
    _, p = rec.plan(plan, n if world is None else world)
    y = np.empty(rec.elements, dtype=np.float32)
    for b in rec.buckets(t):
        lo, hi = int(b["start"]), int(b["start"]) + int(b["elements"])
        y[lo:hi] = reduce(
            X[:, lo:hi],
            p,
            input=rec.dtype,
            accumulate=accumulate or rec.dtype,
            output=rec.dtype,
            average=rec.average,  # type: ignore[arg-type]
        )
    return y


def _differ(y: np.ndarray, real: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=np.float32).view(np.uint32) != np.asarray(real, dtype=np.float32).view(np.uint32)


def replay(rec: Recording, plan: str | None = None) -> dict[str, Any]:
    """Emulate every recorded step; per step the elements whose bits differ from the real result.

    Returns a JSON-ready dict: ``real_match`` (the fraction of elements, over all steps,
    whose bits equal the real result), ``differ``, ``elements``, ``plan``, ``verified``
    (whether this plan was checked against the running library here), ``per_step`` and
    ``contrast``: step 0's differing elements under the other plans of :func:`contrast_plans`
    (does the check tell plans apart on this data?).
    """
    text, _ = rec.plan(plan)
    rows, bad = [], 0
    for t in range(rec.steps):
        X, real = rec.step(t)
        d = int(_differ(_emulate(rec, X, t, plan), real).sum())
        bad += d
        rows.append({"step": t, "elements": rec.elements, "differ": d, "match": 1.0 - d / rec.elements})
    X, real = rec.step(0)
    contrast = {c: int(_differ(_emulate(rec, X, 0, c), real).sum()) for c in contrast_plans(rec, text)}
    total = rec.steps * rec.elements
    return {
        "recording": str(rec.path),
        "backend": rec.backend,
        "plan": text,
        "verified": MODELLED[rec.backend][1] and plan in (None, MODELLED[rec.backend][0]),
        "world_size": rec.world,
        "dtype": rec.dtype,
        "average": rec.average,
        "torch": rec.torch,
        "steps": rec.steps,
        "elements": total,
        "differ": bad,
        "real_match": 1.0 - bad / total,
        "per_step": rows,
        "contrast": contrast,
    }


def contrast_plans(rec: Recording, used: str) -> list[str]:
    """The other plans a replay tries on step 0: the gloo and NCCL rings, NCCL's tree (when the
    recording knows the GPUs per node and they divide N), recursive doubling."""
    g = rec.local_world
    tree = [f"tree:nccl:{g}"] if g and rec.world % g == 0 and g < rec.world else []
    return [p for p in ("ring:gloo", "ring:nccl", *tree, "rd") if p != used]


def _params(rec: Recording, t: int) -> list[tuple[str, list[int], int, int]]:
    """(name, shape, first column, last column + 1) of every parameter in step ``t``'s files."""
    out = []
    for b in rec.buckets(t):
        for p in b["params"]:
            lo = int(b["start"]) + int(p["offset"])
            out.append(
                (str(p["name"]), [int(s) for s in p["shape"]], lo, lo + int(np.prod(p["shape"], dtype=np.int64)))
            )
    return out


def _other_perm(rng: np.random.Generator, n: int) -> np.ndarray:
    """A uniformly drawn permutation of ``n`` ranks other than the identity (when there is one)."""
    while True:
        p = rng.permutation(n)
        if n == 1 or (p != np.arange(n)).any():
            return p


def _variants(rec: Recording, X: np.ndarray, t: int, plan: str | None, seed: int) -> dict[str, np.ndarray]:
    n = rec.world
    step_perm = _other_perm(np.random.default_rng([seed, t, 1]), n)
    run_perm = _other_perm(np.random.default_rng([seed, 2]), n)
    wide = "fp64" if rec.dtype == "fp32" else "fp32"
    return {
        "order": _emulate(rec, X[step_perm], t, plan),
        "relaunch": _emulate(rec, X[run_perm], t, plan),
        "world": _emulate(rec, np.repeat(X, 2, axis=0), t, plan, world=2 * n),
        "wide": _emulate(rec, X, t, plan, accumulate=wide),
    }


def layer_rows(rec: Recording, plan: str | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Per parameter (in the order of the last step's buckets): elements (over all steps) and, per
    variant of :data:`VARIANTS` and for the emulation itself (``emulated``), the fraction of
    elements whose bits differ from the recorded real result and the largest distance in ulps
    (at most 2**20: a NaN or an infinity against a number counts as that, as in metrics.csv)."""
    acc: dict[str, dict[str, Any]] = {}
    fmt = get_format(rec.dtype)
    for t in range(rec.steps):
        X, real = rec.step(t)
        ys = {"emulated": _emulate(rec, X, t, plan), **_variants(rec, X, t, plan, seed)}
        for name, shape, lo, hi in _params(rec, t):
            row = acc.setdefault(name, {"param": name, "layer": name.rpartition(".")[0] or name, "shape": shape})
            row["elements"] = row.get("elements", 0) + (hi - lo)
            for v, y in ys.items():
                row[f"differ_{v}"] = row.get(f"differ_{v}", 0) + int(_differ(y[lo:hi], real[lo:hi]).sum())
                gap = float(np.max(np.minimum(ulp_gap(y[lo:hi], real[lo:hi], fmt), _ULP_CAP), initial=0.0))
                row[f"ulp_max_{v}"] = max(row.get(f"ulp_max_{v}", 0.0), gap)
    last = [name for name, *_ in _params(rec, rec.steps - 1)]
    rows = [acc[k] for k in sorted(acc, key=lambda k: last.index(k) if k in last else len(last))]
    for row in rows:
        for v in ("emulated", *VARIANTS):
            row[f"diff_frac_{v}"] = row[f"differ_{v}"] / row["elements"]
    return rows


def run_config(rec: Recording, plan: str | None = None, *, seed: int = 0, name: str | None = None) -> dict[str, Any]:
    """The ``fpreduce run`` config (as TOML tables) of the A/B analysis of a recording's gradients.

    The arms reduce each step's whole gradient as one buffer with the recording's plan
    (buckets are the per-parameter table's business): A fixed, B re-ranked every step,
    and both with the wider accumulator rounded once to the dtype.
    """
    text, _ = rec.plan(plan)
    wide = "fp64" if rec.dtype == "fp32" else "fp32"
    base = {"input": rec.dtype, "accumulate": rec.dtype, "average": rec.average}
    arms = [
        {"name": "A", "order": f"fixed:{text}", **base},
        {"name": "B", "order": f"shuffle:{text}", **base},
        {"name": f"A-{wide}acc", "order": f"fixed:{text}", **base, "accumulate": wide, "output": rec.dtype},
        {"name": f"B-{wide}acc", "order": f"shuffle:{text}", **base, "accumulate": wide, "output": rec.dtype},
    ]
    return {
        "experiment": {
            "name": name or f"replay-{rec.path.resolve().name}"[:100],
            "steps": rec.steps,
            "workers": rec.world,
            "seed": seed,
        },
        "source": {"kind": "file", "path": str((rec.path / "grads").resolve())},
        "arms": arms,
    }

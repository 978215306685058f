"""Replay a recorded DDP all-reduce (``fpreduce.torch.Recorder``) bit for bit, and ask what else it could have been.

:func:`open_recording` reads and checks a recording (layout in :mod:`fpreduce.torch`);
:func:`replay` emulates every step's all-reduce bucket by bucket, as the library does
it, and counts the elements whose bits differ from the recorded real result:

* ``gloo``: gloo's ring with its segment sizing for the bucket's byte count
  (``ring(n, "gloo", item_bytes)``), **verified** against torch.distributed
  (docs/verification.md);
* ``nccl``: NCCL's ring model (``ring:nccl``, or any plan given, e.g. ``tree:nccl:8``),
  **modelled, not verified** here (no GPU; docs/collectives.md says what is not modelled).

Each bucket is summed in the format the recording names (``wire``: the gradients' dtype,
or fp16 / bf16 under torch's compress hooks; every hop rounds to it) after the averaging of
the scaling path each parameter took in that step (``paths`` in the manifest: DDP's
``copy`` is ``ddp``, ``grad * float32(1/N)``; its ``in-place`` and ``batched`` divisions
and torch's hooks are ``predivide`` on the CPU, ``ddp`` on a GPU). A recording whose path
cannot be emulated (another hook, ranks that took different paths) is refused in one line,
never given a match ratio.

:func:`layer_rows` then asks, per parameter, how many elements' bits would change
against the recorded result under another order (the ring re-ranked every step by a random
permutation other than the identity: Experiment B's draws, the recorded order excluded), a
relaunch (one other rank assignment for the whole run), another world size (each rank's
gradient held by two ranks: 2N ranks, a model) and a wider accumulator (fp32; fp64 for fp32
gradients), the result rounded once to the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.engine import reduce
from fpreduce.core.formats import get_format
from fpreduce.core.metrics import ulp_gap
from fpreduce.core.rounding import round_to
from fpreduce.plans import AnyPlan, parse, ring
from fpreduce.run import schema
from fpreduce.run.sources import step_file, step_numbers

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
#: torch's hooks a recording of version 1 may name -> the format they sum in (None: the dtype)
_V1_HOOKS = {"ddp default": None, "allreduce_hook": None, "fp16_compress_hook": "fp16", "bf16_compress_hook": "bf16"}


def _step_file(kind: str, step: int) -> str:
    return f"{kind}/{step_file(step)}"  # fpreduce.torch.step_file writes them


def _npy_shape(path: Path) -> tuple[int, ...]:
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            data = f.tell()
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"{path}: not a readable .npy file ({e})") from None
    if np.dtype(dtype) != np.float32:
        raise InvalidArgument(f"{path}: dtype {np.dtype(dtype)}, a recording holds float32")
    if fortran:
        raise InvalidArgument(f"{path}: a Fortran-ordered array; a recording holds C order")
    size = path.stat().st_size
    want = data + 4 * int(np.prod(shape, dtype=object))
    if size != want:
        raise InvalidArgument(f"{path}: {size} bytes, but its header's shape {tuple(shape)} needs {want}")
    return tuple(shape)


@dataclass(frozen=True)
class Recording:
    """A checked recording: its manifest's facts and where its steps are.

    ``paths`` maps each scaling path the recording names to its ``average`` and ``wire`` (the
    format the all-reduce sums in); ``path_sets[step_paths[t]]`` says which path step t's buckets
    took: one path for every bucket, or per bucket a path or one per parameter.
    """

    path: Path
    world: int
    backend: str
    dtype: str
    torch: str
    steps: int
    elements: int
    layouts: list[list[dict[str, Any]]]
    step_layout: list[int]
    paths: dict[str, dict[str, str]]
    path_sets: list[Any]
    step_paths: list[int]
    hook: str = "ddp default"
    local_world: int | None = None  # ranks per node (torchrun's LOCAL_WORLD_SIZE), if known

    @property
    def wire(self) -> str:
        """The format the all-reduce sums in (the paths' first; a manifest of several is refused)."""
        return next(iter(self.paths.values()))["wire"]

    @property
    def average(self) -> str:
        """The averaging of the paths taken (``"ddp, predivide"`` when the steps took several)."""
        used = dict.fromkeys(self.paths[name]["average"] for name in self.path_counts())
        return ", ".join(used)

    def main_average(self) -> str:
        """The averaging of the most elements over all steps (for the A/B run's arms)."""
        counts: dict[str, int] = {}
        for name, k in self.path_counts().items():
            counts[self.paths[name]["average"]] = counts.get(self.paths[name]["average"], 0) + k
        return max(counts, key=lambda a: counts[a])

    def path_counts(self) -> dict[str, int]:
        """Per path taken, the elements (over all steps) that took it."""
        out: dict[str, int] = {}
        for t in range(self.steps):
            for b, names in zip(self.buckets(t), self.bucket_paths(t), strict=True):
                for name, lo, hi in _runs(b, names):
                    out[name] = out.get(name, 0) + hi - lo
        return out

    def step(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(grads (world, elements), real (elements,)) of step ``t``, float32."""
        return np.load(self.path / _step_file("grads", t)), np.load(self.path / _step_file("real", t))

    def buckets(self, t: int) -> list[dict[str, Any]]:
        """Step ``t``'s buckets: ``start`` (column in the step's files), ``elements``, ``params``."""
        return self.layouts[self.step_layout[t]]

    def bucket_paths(self, t: int) -> list[str | list[str]]:
        """Step ``t``'s path per bucket: a path name, or one per parameter."""
        entry = self.path_sets[self.step_paths[t]]
        return [entry] * len(self.buckets(t)) if isinstance(entry, str) else list(entry)

    def plan(self, text: str | None = None, world: int | None = None) -> tuple[str, AnyPlan]:
        """(text, plan) of the all-reduce (``text`` None: the backend's default)."""
        n = world or self.world
        text = text or MODELLED[self.backend][0]
        if text == "ring:gloo":
            return text, ring(n, "gloo", item_bytes=_ITEM[self.wire])
        return text, parse(text, n)


def _runs(bucket: dict[str, Any], names: str | list[str]) -> list[tuple[str, int, int]]:
    """(path, first column, last column + 1) within the bucket, one per parameter (one for the bucket
    when it took one path)."""
    if isinstance(names, str):
        return [(names, 0, int(bucket["elements"]))]
    out = []
    for name, prm in zip(names, bucket["params"], strict=True):
        lo = int(prm["offset"])
        out.append((name, lo, lo + int(np.prod(prm["shape"], dtype=np.int64))))
    return out


def _manifest(d: Path) -> dict[str, Any]:
    if not d.is_dir():
        raise InvalidArgument(f"{d}: no such recording directory")
    path = d / _MANIFEST
    if not path.is_file():
        raise InvalidArgument(f"{d}: no {_MANIFEST}: not a fpreduce.torch recording, or a truncated one")
    try:
        m = schema.strict_json(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"{path}: not readable JSON ({e})") from None
    except InvalidArgument as e:
        raise InvalidArgument(f"{path}: {e}") from None
    if not isinstance(m, dict) or m.get("format") != "fpreduce-ddp-recording":
        got = schema.shown(m.get("format")) if isinstance(m, dict) else "no object"
        raise InvalidArgument(f"{path}: format: {got}, not 'fpreduce-ddp-recording': not a fpreduce.torch recording")
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
    _check_manifest(d / _MANIFEST, m)
    _check_step_files(d, int(m["steps"]))
    try:
        paths, path_sets, step_paths = _paths(d, m)
        rec = Recording(
            d,
            int(m["world_size"]),
            str(m["backend"]),
            str(m["dtype"]),
            str(m.get("torch", "?")),
            int(m["steps"]),
            int(m["elements"]),
            list(m["layouts"]),
            [int(i) for i in m["step_layout"]],
            paths,
            path_sets,
            step_paths,
            str(m.get("hook") or "ddp default"),
            int(m["local_world_size"]) if m.get("local_world_size") else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, InvalidArgument):
            raise
        raise InvalidArgument(f"{d / _MANIFEST}: incomplete manifest ({type(e).__name__}: {e})") from None
    if rec.backend not in MODELLED:
        raise InvalidArgument(
            f"{d / _MANIFEST}: backend: {rec.backend!r} is not modelled by the replay (modelled: gloo, verified; "
            "nccl, modelled)"
        )
    if rec.dtype not in _ITEM:
        raise InvalidArgument(f"{d / _MANIFEST}: dtype: {rec.dtype!r} is not replayable (fp32, bf16, fp16)")
    if rec.steps < 1 or len(rec.step_layout) != rec.steps or len(rec.step_paths) != rec.steps or rec.world < 1:
        raise InvalidArgument(f"{d / _MANIFEST}: records {rec.steps} steps of {rec.world} ranks: nothing to replay")
    for t in range(rec.steps):
        _check_step(rec, t)
    return rec


def _paths(d: Path, m: dict[str, Any]) -> tuple[dict[str, dict[str, str]], list[Any], list[int]]:
    """The manifest's scaling paths (``paths``, ``path_sets``, ``step_paths``), checked to be emulable; a
    recording of version 1 took one path, its ``average`` (any hook it names but torch's own is refused)."""
    if "paths" not in m:
        hook = str(m.get("hook") or "ddp default")
        if hook not in _V1_HOOKS:
            raise InvalidArgument(f"{d / _MANIFEST}: hook: {hook!r}, which the replay cannot emulate")
        wire = _V1_HOOKS[hook] or str(m["dtype"])
        compress = "ddp" if m.get("backend") == "nccl" else "predivide"  # torch's div_ on a GPU multiplies by 1/N
        with schema.document(d / _MANIFEST):
            if not _V1_HOOKS[hook] and "average" not in m:  # (neither version 2's paths nor version 1's average)
                raise InvalidArgument("paths: required (a version 1 recording gives its one average instead)")
            average = compress if _V1_HOOKS[hook] else schema.string("average", m.get("average"), _AVERAGES)
        does = f"as recorded (version 1, {hook})"
        return {"recorded": {"average": average, "wire": wire, "does": does}}, ["recorded"], [0] * int(m["steps"])
    paths = {
        str(k): {"average": str(v["average"]), "wire": str(v["wire"]), "does": str(v.get("does", ""))}
        for k, v in dict(m["paths"]).items()
    }
    for name, v in paths.items():
        if v["average"] not in _AVERAGES or v["wire"] not in _ITEM:
            raise InvalidArgument(
                f"{d / _MANIFEST}: paths.{name}: average {v['average']!r}, wire {v['wire']!r}: not replayable "
                f"(averages: {', '.join(_AVERAGES)}; wires: {', '.join(_ITEM)})"
            )
    if len({v["wire"] for v in paths.values()}) != 1:
        raise InvalidArgument(f"{d / _MANIFEST}: paths that sum in different formats: not replayable")
    return paths, list(m["path_sets"]), [int(i) for i in m["step_paths"]]


def _check_manifest(where: Path, m: dict[str, Any]) -> None:
    """Types and ranges of every key the replay reads, before it reads any (:mod:`fpreduce.run.schema`):
    integers that are JSON integers, buckets that tile ``elements`` exactly (by ``start``) and parameters
    that tile their bucket exactly (by ``offset``, with shapes of non-negative integers), ``step_layout`` /
    ``step_paths`` naming a layout / path set that exists. Each failure is one line naming the file and the key."""
    with schema.document(where):
        schema.table("manifest", m, ("world_size", "steps", "elements", "layouts", "step_layout"))
        world = schema.integer("world_size", m["world_size"], 1, 2**20)
        steps = schema.integer("steps", m["steps"], 1, 10**9)
        elements = schema.integer("elements", m["elements"], 1, 2**40)
        if m.get("local_world_size") is not None:
            schema.integer("local_world_size", m["local_world_size"], 1, world)
        for key in ("backend", "dtype"):
            schema.string(key, m.get(key))
        for key in ("hook", "average"):
            if m.get(key) is not None:
                schema.string(key, m[key])
        layouts = schema.array("layouts", m["layouts"], nonempty=True)
        for i, layout in enumerate(layouts):
            _check_layout(f"layouts[{i}]", schema.array(f"layouts[{i}]", layout), elements)
        for t, v in enumerate(schema.array("step_layout", m["step_layout"], steps, n_key="steps")):
            schema.integer(f"step_layout[{t}]", v, 0, len(layouts) - 1)
        if "paths" in m:
            _check_path_keys(m, steps)


def _check_path_keys(m: dict[str, Any], steps: int) -> None:
    """``paths`` (name -> average, wire), ``path_sets`` (a path per step, bucket or parameter), ``step_paths``."""
    schema.table("manifest", m, ("path_sets", "step_paths"))
    for name, v in schema.table("paths", m["paths"]).items():
        for k in ("average", "wire"):
            schema.string(f"paths.{name}.{k}", schema.table(f"paths.{name}", v, (k,))[k])
    names = tuple(m["paths"])
    if not names:
        raise InvalidArgument("paths: empty, expected at least one path")
    sets = schema.array("path_sets", m["path_sets"], nonempty=True)
    for i, entry in enumerate(sets):  # a path for every bucket of a step, or a path per bucket, or per parameter
        for j, b in enumerate([entry] if isinstance(entry, str) else schema.array(f"path_sets[{i}]", entry)):
            key = f"path_sets[{i}]" + ("" if isinstance(entry, str) else f"[{j}]")
            for n, path in enumerate([b] if isinstance(b, str) else schema.typed(key, b, "tuple[str, ...]")):
                schema.string(key + ("" if isinstance(b, str) else f"[{n}]"), path, names)  # a path in 'paths'
    for t, v in enumerate(schema.array("step_paths", m["step_paths"], steps, n_key="steps")):
        schema.integer(f"step_paths[{t}]", v, 0, len(sets) - 1)


def _check_layout(key: str, layout: list[Any], elements: int) -> None:
    """The buckets tile columns [0, elements) exactly; each bucket's parameters tile it exactly."""
    spans = []
    for b, bucket in enumerate(layout):
        k = f"{key}[{b}]"
        bucket = schema.table(k, bucket, ("start", "elements", "params"))
        lo = schema.integer(f"{k}.start", bucket["start"], 0, elements)
        n = schema.integer(f"{k}.elements", bucket["elements"], 1, elements)
        pspans = []
        for i, prm in enumerate(schema.array(f"{k}.params", bucket["params"], nonempty=True)):
            kp = f"{k}.params[{i}]"
            prm = schema.table(kp, prm, ("name", "shape", "offset"))
            schema.string(f"{kp}.name", prm["name"])
            size = 1
            for j, dim in enumerate(schema.array(f"{kp}.shape", prm["shape"])):
                size *= schema.integer(f"{kp}.shape[{j}]", dim, 0, elements)  # Python ints: no overflow
            off = schema.integer(f"{kp}.offset", prm["offset"], 0, n)
            pspans.append((off, off + size, kp))
        _tiles(f"{k}.params", pspans, n, "offset", "shape")
        spans.append((lo, lo + n, k))
    _tiles(key, spans, elements, "start", "elements")


def _tiles(key: str, spans: list[tuple[int, int, str]], total: int, field: str, size: str) -> None:
    """The spans (first, last + 1, key) tile [0, total) exactly; else one line naming the span's ``field`` (where
    it starts) or ``size`` (how far it reaches)."""
    at, last = 0, key
    for lo, hi, k in sorted(spans):
        if lo != at:
            what = "overlaps the one before" if lo < at else f"leaves columns {at}..{lo - 1} uncovered"
            raise InvalidArgument(f"{k}.{field}: {lo} {what} (must tile {key} exactly)")
        at, last = hi, k
    if at > total:
        raise InvalidArgument(f"{last}.{size}: ends at {at}, past the {total} elements of {key} (must tile exactly)")
    if at < total:
        raise InvalidArgument(f"{key}: ends before its {total} elements (at {at}; must tile exactly)")


def _check_step_files(d: Path, steps: int) -> None:
    """``grads/`` and ``real/`` hold exactly ``step_000000.npy`` .. the last step's file
    (:func:`fpreduce.run.sources.step_numbers`: any other ``.npy``, a stray ``a.npy`` or a hidden
    ``.step_1.npy``, is refused; ``grads/`` is the A/B run's file source). A step past ``steps`` is refused.
    Files not ending in ``.npy`` are never read and left alone."""
    for kind in ("grads", "real"):
        sub = d / kind
        if not sub.is_dir():
            raise InvalidArgument(f"{d / _step_file(kind, 0)}: missing: a truncated recording (no {kind}/ directory)")
        found = set(step_numbers(sub))
        missing = sorted(set(range(steps)) - found)
        if missing:
            raise InvalidArgument(
                f"{d}: truncated recording: {_step_file(kind, missing[0])} is missing "
                f"({len(missing)} of the manifest's steps = {steps} missing)"
            )
        extra = sorted(found - set(range(steps)))
        if extra:
            raise InvalidArgument(
                f"{d / _step_file(kind, extra[0])}: beyond the manifest's steps = {steps} "
                f"({len(extra)} such): a numbering gap or a foreign file"
            )


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
    _check_paths(rec, t)


def _check_paths(rec: Recording, t: int) -> None:
    """Step ``t``'s paths: one per bucket (or per parameter), each one the replay emulates."""
    where = rec.path / _MANIFEST
    if not 0 <= rec.step_paths[t] < len(rec.path_sets):
        raise InvalidArgument(f"{where}: step_paths[{t}]: names no scaling paths (path_sets)")
    key = f"path_sets[{rec.step_paths[t]}]"  # (step_paths[t] names it)
    per_bucket = rec.bucket_paths(t)
    if len(per_bucket) != len(rec.buckets(t)):
        raise InvalidArgument(f"{where}: {key}: {len(per_bucket)} paths for step {t}'s {len(rec.buckets(t))} buckets")
    for i, (b, names) in enumerate(zip(rec.buckets(t), per_bucket, strict=True)):
        if not isinstance(names, str) and len(names) != len(b["params"]):
            raise InvalidArgument(
                f"{where}: {key}[{i}]: {len(names)} paths for the {len(b['params'])} parameters of step {t}'s "
                f"bucket {i}"
            )
        for name in [names] if isinstance(names, str) else names:
            if name not in rec.paths:
                raise InvalidArgument(
                    f"{where}: {key}: step {t}, bucket {i} took the path {name!r}, which the replay cannot emulate"
                )


def _emulate(
    rec: Recording, X: np.ndarray, t: int, plan: str | None, *, world: int | None = None, accumulate: str | None = None
) -> np.ndarray:
    """The all-reduce of step ``t``'s rows ``X`` (world rows), bucket by bucket, each parameter averaged as its
    path says (a bucket of several averages is reduced whole once per average: a column's tree depends on the
    bucket only), in the recording's wire format, then in the dtype."""
    n = X.shape[0]
    _, p = rec.plan(plan, n if world is None else world)
    y = np.empty(rec.elements, dtype=np.float32)
    for b, names in zip(rec.buckets(t), rec.bucket_paths(t), strict=True):
        lo, hi = int(b["start"]), int(b["start"]) + int(b["elements"])
        done: dict[tuple[str, str], np.ndarray] = {}
        for i, (name, a, z) in enumerate(_runs(b, names)):
            how = rec.paths[name]
            key = (how["average"], how["wire"])
            if key not in done:
                done[key] = _reduce_bucket(X[:, lo:hi], p, how, rec.dtype, accumulate)
            if i == 0:
                y[lo:hi] = done[key]  # columns of no parameter (none in DDP's buckets) as the first
            y[lo + a : lo + z] = done[key][a:z]
    return y


def _reduce_bucket(X: np.ndarray, p: AnyPlan, how: dict[str, str], dtype: str, accumulate: str | None) -> np.ndarray:
    wire = how["wire"]
    y = reduce(X, p, input=wire, accumulate=accumulate or wire, output=wire, average=how["average"])
    return np.asarray(y if wire == dtype else round_to(y, dtype), dtype=np.float32)


def _differ(y: np.ndarray, real: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=np.float32).view(np.uint32) != np.asarray(real, dtype=np.float32).view(np.uint32)


def replay(rec: Recording, plan: str | None = None) -> dict[str, Any]:
    """Emulate every recorded step; per step the elements whose bits differ from the real result.

    Returns a JSON-ready dict: ``real_match`` (the fraction of elements, over all steps,
    whose bits equal the real result), ``differ``, ``elements``, ``plan``, ``verified``
    (whether this plan was checked against the running library here), ``per_step``,
    ``contrast``: step 0's differing elements under the other plans of :func:`contrast_plans`
    (does the check tell plans apart on this data?), ``hook``, ``wire`` (the format summed in)
    and ``paths``: per scaling path taken, what it does, its average and its elements.
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
        "wire": rec.wire,
        "hook": rec.hook,
        "average": rec.average,
        "paths": {name: {**rec.paths[name], "elements": k} for name, k in rec.path_counts().items()},
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
    (buckets are the per-parameter table's business), in the format the all-reduce summed in,
    averaged as most of the recorded elements were (:meth:`Recording.main_average`): A fixed,
    B re-ranked every step, and both with the wider accumulator rounded once to that format.
    """
    text, _ = rec.plan(plan)
    wide = "fp64" if rec.dtype == "fp32" else "fp32"
    base = {"input": rec.wire, "accumulate": rec.wire, "average": rec.main_average()}
    arms = [
        {"name": "A", "order": f"fixed:{text}", **base},
        {"name": "B", "order": f"shuffle:{text}", **base},
        {"name": f"A-{wide}acc", "order": f"fixed:{text}", **base, "accumulate": wide, "output": rec.wire},
        {"name": f"B-{wide}acc", "order": f"shuffle:{text}", **base, "accumulate": wide, "output": rec.wire},
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

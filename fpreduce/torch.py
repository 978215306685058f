"""Record the gradient all-reduce of a PyTorch DDP training run, for ``fpreduce replay``.

::

    import fpreduce.torch
    with fpreduce.torch.Recorder("rec") as rec:     # on every rank
        rec.attach(ddp_model)                       # registers a DDP communication hook
        for x, y in loader:                         # train as usual
            loss_fn(ddp_model(x), y).backward(); opt.step(); opt.zero_grad()

The hook does, per step and per gradient bucket, what DDP itself does without a hook, then
one ``all_reduce(SUM)`` of the bucket, so that the training is unchanged, bit for bit. DDP
scales a gradient on one of three paths (torch's ``Reducer::mark_variable_ready_dense``),
and the recorder takes the same one, parameter by parameter, and writes down which:

* ``copy``: the gradient is copied into the bucket times ``1/N`` (``at::mul_out(bucket_view,
  grad, 1. / N)``: the factor and the product in float32, rounded to the gradient's dtype);
  the replay's average ``ddp``;
* ``in-place``: the gradient already is a view of the bucket (``gradient_as_bucket_view=True``
  and gradients kept between steps, ``zero_grad(set_to_none=False)``: from the second step),
  and DDP divides it in place, ``bucket_view.div_(N)``: on the CPU a true division, rounded
  once to the dtype (average ``predivide``); on a GPU torch multiplies by the float32
  reciprocal instead (average ``ddp``);
* ``batched``: ``batched_grad_copy=True``: the gradients are copied, then the whole bucket
  divided by N (as ``in-place``).

With a communication hook DDP only copies and the hook averages. The recorder wraps torch's
own hooks (``attach(model, hook)``): ``allreduce_hook`` (the bucket divided by N in place,
then summed), ``fp16_compress_hook`` and ``bf16_compress_hook`` (the bucket cast to fp16 or
bf16, divided by N and summed in it, cast back); any other hook, sparse gradients
(``nn.Embedding(sparse=True)``) and DDP's ``mixed_precision`` are refused at ``attach``
(the replay could not emulate them). Before scaling, the hook gathers every rank's bucket
(the local gradients, before any division) on rank 0, and after the all-reduce it keeps rank
0's result.

Rank 0 writes, one step at a time (memory: one step's ``N x elements`` values)::

    REC/manifest.json          world size (ranks per node, if torchrun says), backend, device,
                               dtype, wire (the format the all-reduce sums in: the dtype, or
                               a compress hook's), torch version, hook, DDP's options, the
                               bucket layouts (per bucket its elements and, per parameter,
                               name, shape and offset; ``step_layout[t]`` names step t's), the
                               scaling paths (``paths``: what each does and the ``average``
                               that emulates it) and which ran (``path_sets``: per bucket a
                               path, or one per parameter; ``step_paths[t]`` names step t's)
    REC/grads/step_000000.npy  (N, elements) float32: row r is rank r's buckets, concatenated
                               in bucket order (bf16 and fp16 values are exact in float32)
    REC/real/step_000000.npy   (elements,) float32: the all-reduced buckets rank 0 received

``grads/`` is also a ``fpreduce run`` file source (``source.kind = "file"``). DDP rebuilds
its buckets after the first step, so step 0 may have another layout than the later steps.
Gradients of dtype float32, bfloat16 and float16 (one dtype per model), on the CPU or a GPU.

This module imports torch when a :class:`Recorder` is attached; ``import fpreduce`` never does.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.base.errors import InvalidArgument

__all__ = ["AVERAGES", "FORMAT", "HOOKS", "MANIFEST", "PATHS", "Recorder", "step_file"]

FORMAT = "fpreduce-ddp-recording"
MANIFEST = "manifest.json"
VERSION = 2
#: the averages a recorded path can name (fpreduce.core's, as the replay emulates them)
AVERAGES = ("ddp", "predivide", "after", "none")
#: DDP's own scaling paths (no hook): what each does
PATHS = {
    "copy": "copied into the bucket times float32(1/N), rounded to the dtype (DDP's mul_out)",
    "in-place": "a view of the bucket (gradient_as_bucket_view, gradients kept): divided by N in place (DDP's div_)",
    "batched": "batched_grad_copy: copied into the bucket, then the whole bucket divided by N",
}
#: torch's hooks the recorder wraps (default_hooks' names) -> the format the all-reduce sums in (None: the dtype's)
HOOKS: dict[str, str | None] = {"allreduce_hook": None, "fp16_compress_hook": "fp16", "bf16_compress_hook": "bf16"}
_HOOK_DOES = {
    "allreduce_hook": "torch's allreduce_hook: the bucket divided by N in place, then summed",
    "fp16_compress_hook": "torch's fp16_compress_hook: cast to fp16, divided by N and summed in fp16, cast back",
    "bf16_compress_hook": "torch's bf16_compress_hook: cast to bf16, divided by N and summed in bf16, cast back",
}
#: a bucket whose ranks took different paths (the replay refuses it)
RANKS_DIFFER = "ranks differ"
_CODES = ("copy", "in-place")  # a path's code in the gathered bucket (paths that vary by step)
_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
_UNSEEN = -1  # no gradient reached the parameter this step


def step_file(kind: str, step: int) -> str:
    """The path of a step's file inside a recording: ``grads/step_000007.npy``."""
    return f"{kind}/step_{step:06d}.npy"


def _save(path: Path, a: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, a)
    os.replace(tmp, path)


class Recorder:
    """Records a DDP model's bucketed all-reduce (see the module docstring).

    Args:
        out_dir: the recording's directory (rank 0 creates it; it must not hold a recording).
        steps: record at most this many steps, then only all-reduce (None: every step).
        process_group: DDP's process group (None: the model's).
    """

    def __init__(self, out_dir: str | Path, *, steps: int | None = None, process_group: Any = None) -> None:
        if steps is not None and steps < 1:
            raise InvalidArgument(f"Recorder: steps must be >= 1 or None, got {steps}")
        self.out_dir, self.max_steps, self.group = Path(out_dir), steps, process_group
        self.steps = 0  # steps written (rank 0)
        self._seen = 0  # steps whose buckets were hooked (every rank: all decide alike to gather)
        self._lock = threading.Lock()
        self._pending: dict[int, dict[str, Any]] = {}  # bucket index -> grads, real, layout, paths
        self._last: int | None = None  # the last bucket's index in the pending step
        self._layouts: list[list[dict[str, Any]]] = []
        self._step_layout: list[int] = []
        self._path_sets: list[Any] = []
        self._step_paths: list[int] = []
        self._manifest: dict[str, Any] = {}
        self._fixed: str | None = None  # the path every parameter takes (None: per parameter, per step)
        self._before: dict[int, int | None] = {}  # id(param) -> its .grad's address before this step's accumulation
        self._attached = False
        self._closed = False

    # ------------------------------------------------------------------ attaching
    def attach(self, ddp_model: Any, hook: Any = None, state: Any = None, *, average: str | None = None) -> Recorder:
        """Register the recording communication hook on ``ddp_model`` (a DistributedDataParallel).

        Args:
            hook: None (DDP's own scaling, path by path, bit for bit) or one of torch's
                ``default_hooks`` in :data:`HOOKS`, run as DDP would run it.
            state: the hook's state (its process group: None or the recorder's).
            average: optional, a check: what the hook's division is for the replay (the
                recorder knows it: ``predivide`` on the CPU, ``ddp`` on a GPU).

        Raises:
            InvalidArgument (one line, on every rank, before anything is registered or
                written): another hook, a hook already registered on the model, sparse
                gradients, DDP's ``mixed_precision``, mixed or unsupported gradient dtypes,
                parameters off the CPU and GPU, a directory already holding a recording.
        """
        import torch.distributed as dist

        if self._attached:
            raise InvalidArgument("Recorder.attach: already attached to a model")
        name, dtype, device = _check_model(ddp_model, hook)
        paths = _paths(name, dtype, device)
        if average is not None and (name is None or average != paths[name]["average"]):
            want = "none: DDP's own paths are followed" if name is None else repr(paths[name]["average"])
            raise InvalidArgument(f"Recorder.attach: average {average!r} is not what {name or 'DDP'} does ({want})")
        group = self.group if self.group is not None else getattr(ddp_model, "process_group", None)
        group = group if group is not None else dist.group.WORLD
        if hook is not None and state is not None and state is not group:
            raise InvalidArgument("Recorder.attach: the hook's state (a process group) must be None or the recorder's")
        self.group = group
        self._world, self._rank = dist.get_world_size(group), dist.get_rank(group)
        self._names = {id(p): n for n, p in ddp_model.module.named_parameters()}
        self._user = (hook, state)
        as_view = bool(getattr(ddp_model, "gradient_as_bucket_view", False))
        batched = bool(getattr(ddp_model, "batched_grad_copy", False))
        self._fixed = name or ("batched" if batched else None if as_view else "copy")
        self._manifest = self._first_manifest(dist, group, name, dtype, device, paths)
        self._manifest.update(gradient_as_bucket_view=as_view, batched_grad_copy=batched)
        self._prepare_dir(dist, group)
        if self._fixed is None:  # gradient_as_bucket_view: the path depends on .grad just before accumulation
            for p in ddp_model.module.parameters():
                if p.requires_grad:
                    p.register_hook(self._watch(p))

        def recording_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses other annotations
            return self._hook(state, bucket)

        ddp_model.register_comm_hook(None, recording_hook)
        self._attached = True
        return self

    def _first_manifest(
        self, dist: Any, group: Any, hook: str | None, dtype: str, device: str, paths: dict[str, Any]
    ) -> dict[str, Any]:
        import torch

        return {
            "format": FORMAT,
            "version": VERSION,
            "world_size": self._world,
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE") or 0) or None,  # torchrun's
            "backend": str(dist.get_backend(group)),
            "device": device,
            "dtype": dtype,
            "wire": (HOOKS[hook] if hook else None) or dtype,
            "torch": str(torch.__version__),
            "average": "per path",  # readers of version 1 refuse it: one average no longer describes a recording
            "hook": hook or "ddp default",
            "storage": "float32 (exact for bf16 and fp16)",
            "steps": 0,
            "elements": 0,
            "paths": paths,
            "layouts": self._layouts,
            "step_layout": self._step_layout,
            "path_sets": self._path_sets,
            "step_paths": self._step_paths,
        }

    def _watch(self, p: Any) -> Any:
        """A hook run just before autograd accumulates ``p``'s gradient: it keeps where ``p.grad`` is then.
        Accumulated in place (``p.grad`` defined, grad mode off), the gradient stays there; DDP then finds
        it aliasing the bucket or not (torch's ``AccumulateGrad::accumulateGrad``)."""
        import torch

        key = id(p)

        def before(_grad: Any) -> None:
            g = p.grad
            self._before[key] = None if g is None or torch.is_grad_enabled() else int(g.data_ptr())

        return before

    def _prepare_dir(self, dist: Any, group: Any) -> None:
        """Rank 0 creates the directory and the manifest; every rank learns whether it could
        (else rank 0 alone would stop and the others wait for it in the first gather)."""
        error = None
        if self._rank == 0:
            try:
                if (self.out_dir / MANIFEST).exists():
                    raise InvalidArgument(f"{self.out_dir} already holds a recording: choose another directory")
                for sub in ("grads", "real"):
                    (self.out_dir / sub).mkdir(parents=True, exist_ok=True)
                self._write_manifest()
            except (InvalidArgument, OSError) as e:
                error = f"Recorder: {e}"
        box = [error]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        if box[0] is not None:
            raise InvalidArgument(str(box[0]))

    # ------------------------------------------------------------------ the hook
    def _hook(self, _state: Any, bucket: Any) -> Any:
        import torch.distributed as dist

        buf = bucket.buffer()
        paths = self._paths_of(bucket)
        recording = not self._closed and (self.max_steps is None or self._seen < self.max_steps)
        if recording:
            self._gather(bucket, buf, paths)
        if bucket.is_last():
            self._seen += 1
        hook, state = self._user
        if hook is not None:
            fut = hook(state, bucket)
        else:
            self._scale(bucket, buf, paths)
            fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()
            fut = fut.then(lambda f: f.value()[0])
        if not recording or self._rank != 0:
            return fut
        index = int(bucket.index())

        def keep(f: Any) -> Any:
            t = f.value()
            self._add(index, "real", t.detach().float().cpu().numpy().copy())
            return t

        return fut.then(keep)

    def _paths_of(self, bucket: Any) -> list[str]:
        """The path each of the bucket's parameters took (DDP's ``grad.is_alias_of(bucket_view)``)."""
        params = bucket.parameters()
        if self._fixed is not None:
            return [self._fixed] * len(params)
        out = []
        for p, view in zip(params, bucket.gradients(), strict=True):
            before = self._before.pop(id(p), _UNSEEN)
            if before == _UNSEEN:  # no gradient this step (unused): DDP looks at .grad as it is
                g = p.grad
                before = None if g is None else int(g.data_ptr())
            out.append("in-place" if before is not None and before == int(view.data_ptr()) else "copy")
        return out

    def _scale(self, bucket: Any, buf: Any, paths: list[str]) -> None:
        """DDP's scaling, path by path: ``copy`` times (1. / N), the others divided by N, in place."""
        n = self._world
        kinds = set(paths)
        if kinds == {"copy"}:
            buf.mul_(1.0 / n)  # DDP's reducer: grad * (1. / N), the factor and product in float32
        elif "copy" not in kinds:
            buf.div_(n)  # bucket_view.div_(N)
        else:
            for path, view in zip(paths, bucket.gradients(), strict=True):
                if path == "copy":
                    view.mul_(1.0 / n)
                else:
                    view.div_(n)

    def _gather(self, bucket: Any, buf: Any, paths: list[str]) -> None:
        import torch
        import torch.distributed as dist

        local = buf.detach().float()  # exact for bf16/fp16; gathered before the hook changes it
        if self._fixed is None:  # every rank's paths travel with its bucket
            codes = torch.tensor([float(_CODES.index(p)) for p in paths], dtype=torch.float32, device=local.device)
            local = torch.cat([local.reshape(-1), codes])
        if self._rank != 0:
            dist.gather(local, None, dst=0, group=self.group)
            return
        parts = [local.new_empty(local.shape) for _ in range(self._world)]
        dist.gather(local, parts, dst=0, group=self.group)
        base, size, m = buf.data_ptr(), buf.element_size(), int(buf.numel())
        params = [
            {"name": self._names.get(id(p), f"?{i}"), "shape": list(g.shape), "offset": (g.data_ptr() - base) // size}
            for i, (p, g) in enumerate(zip(bucket.parameters(), bucket.gradients(), strict=True))
        ]
        layout = {"index": int(bucket.index()), "elements": m, "params": params}
        rows = np.stack([p.cpu().numpy() for p in parts])
        grads = rows[:, :m]
        path: Any = paths[0] if len(set(paths)) == 1 else paths
        if self._fixed is None and (rows[:, m:] != rows[:1, m:]).any():
            path = RANKS_DIFFER
        with self._lock:
            if bucket.index() in self._pending:  # a new step while the last one never completed
                self._drop("a step's all-reduce did not complete")
            self._pending[int(bucket.index())] = {"layout": layout, "grads": grads, "paths": path}
            if bucket.is_last():
                self._last = int(bucket.index())
        self._flush_if_complete()

    def _add(self, index: int, key: str, value: np.ndarray) -> None:
        with self._lock:
            if index in self._pending:
                self._pending[index][key] = value
        self._flush_if_complete()

    def _drop(self, why: str) -> None:
        warnings.warn(f"fpreduce.torch.Recorder: step {self.steps} not recorded: {why}", stacklevel=3)
        self._pending, self._last = {}, None

    # ------------------------------------------------------------------ writing (rank 0)
    def _flush_if_complete(self) -> None:
        with self._lock:
            last, pend = self._last, self._pending
            if last is None or sorted(pend) != list(range(last + 1)) or any("real" not in b for b in pend.values()):
                return
            self._pending, self._last = {}, None
            self._write_step([pend[i] for i in range(last + 1)])

    def _write_step(self, buckets: list[dict[str, Any]]) -> None:
        layout: list[dict[str, Any]] = []
        start = 0
        for b in buckets:
            layout.append({**b["layout"], "start": start})
            start += b["layout"]["elements"]
        if layout not in self._layouts:
            self._layouts.append(layout)
        per_bucket = [b["paths"] for b in buckets]
        paths: Any = per_bucket[0] if all(p == per_bucket[0] and isinstance(p, str) for p in per_bucket) else per_bucket
        if paths not in self._path_sets:
            self._path_sets.append(paths)
        t = self.steps
        _save(self.out_dir / step_file("grads", t), np.concatenate([b["grads"] for b in buckets], axis=1))
        _save(self.out_dir / step_file("real", t), np.concatenate([b["real"] for b in buckets]))
        self._step_layout.append(self._layouts.index(layout))
        self._step_paths.append(self._path_sets.index(paths))
        self.steps = t + 1
        self._manifest.update(steps=self.steps, elements=start)
        self._write_manifest()

    def _write_manifest(self) -> None:
        path = self.out_dir / MANIFEST
        tmp = path.with_name(f".{MANIFEST}.tmp")
        tmp.write_text(json.dumps(self._manifest, indent=1) + "\n")
        os.replace(tmp, path)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Stop recording (the hook keeps all-reducing); a step left incomplete is dropped with a warning."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pending:
                self._drop("incomplete when the recorder was closed")

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- what the recorder can follow
def _hook_name(hook: Any) -> str | None:
    """The name in :data:`HOOKS` of torch's hook ``hook`` (None: no hook)."""
    if hook is None:
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    for name in HOOKS:
        if hook is getattr(default_hooks, name, None):
            return name
    what = getattr(hook, "__qualname__", None) or type(hook).__name__
    raise InvalidArgument(
        f"Recorder.attach: hook {what} is not supported: the replay cannot emulate it "
        f"(supported: torch's {', '.join(HOOKS)}; or no hook)"
    )


def _check_model(ddp_model: Any, hook: Any) -> tuple[str | None, str, str]:
    """(the hook's name, the gradients' dtype, cpu or cuda), or one line naming what the recorder cannot
    follow on this model (every rank raises alike, before any collective)."""
    if not hasattr(ddp_model, "register_comm_hook") or not hasattr(ddp_model, "module"):
        raise InvalidArgument(
            f"Recorder.attach: a DistributedDataParallel model needed, not {type(ddp_model).__name__}"
        )
    _refuse_unsupported(ddp_model)
    name = _hook_name(hook)
    check = getattr(ddp_model, "_check_comm_hook", None)
    if name is not None and check is not None:
        try:
            check(hook)  # what DDP refuses to register (bf16_compress_hook without CUDA and NCCL 2.10)
        except (TypeError, ValueError, RuntimeError) as e:
            raise InvalidArgument(f"Recorder.attach: DDP refuses {name} here: {str(e).splitlines()[0]}") from None
    params = [p for p in ddp_model.module.parameters() if p.requires_grad]
    dtypes = {str(p.dtype) for p in params}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else ""
    if dtype not in _DTYPES:
        raise InvalidArgument(f"Recorder: one gradient dtype of {sorted(_DTYPES)} needed, got {sorted(dtypes)}")
    devices = {p.device.type for p in params}
    if not devices <= {"cpu", "cuda"}:
        raise InvalidArgument(f"Recorder: parameters on {sorted(devices)}: only cpu and cuda are modelled")
    return name, _DTYPES[dtype], "cuda" if "cuda" in devices else "cpu"


def _refuse_unsupported(ddp_model: Any) -> None:
    """One line naming what the recorder cannot follow on this model (nothing registered yet)."""
    import torch

    hooks = getattr(ddp_model, "_comm_hooks", None) or []
    if hooks:
        name = getattr(hooks[0][0], "__qualname__", "a hook")
        raise InvalidArgument(
            f"Recorder.attach: the model already has a communication hook ({name}): pass it as attach(model, hook) "
            "instead of registering it"
        )
    if getattr(ddp_model, "mixed_precision", None) is not None:
        raise InvalidArgument("Recorder.attach: DDP's mixed_precision is not supported (buckets in another dtype)")
    for mod_name, mod in ddp_model.module.named_modules():
        sparse = isinstance(mod, torch.nn.Embedding | torch.nn.EmbeddingBag) and mod.sparse
        if sparse and any(p.requires_grad for p in mod.parameters(recurse=False)):
            raise InvalidArgument(
                f"Recorder.attach: sparse gradients are not supported ({mod_name or 'the model'}: "
                f"{type(mod).__name__}(sparse=True); use sparse=False to record)"
            )


def _paths(hook: str | None, dtype: str, device: str) -> dict[str, dict[str, str]]:
    """The scaling paths this model can take: what each does, the format it sums in and the replay's average.

    A division by N is a true division on the CPU (rounded once to the format: ``predivide``); on a GPU
    torch multiplies by the float32 reciprocal (``div_true_kernel_cuda``: ``ddp``).
    """
    divide = "predivide" if device == "cpu" else "ddp"
    if hook is not None:
        return {hook: {"does": _HOOK_DOES[hook], "wire": HOOKS[hook] or dtype, "average": divide}}
    return {
        path: {"does": does, "wire": dtype, "average": "ddp" if path == "copy" else divide}
        for path, does in PATHS.items()
    }

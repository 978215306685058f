"""Record the gradient all-reduce of a PyTorch DDP training run, for ``fpreduce replay``.

::

    import fpreduce.torch
    with fpreduce.torch.Recorder("rec") as rec:     # on every rank
        rec.attach(ddp_model)                       # registers a DDP communication hook
        for x, y in loader:                         # train as usual
            loss_fn(ddp_model(x), y).backward(); opt.step(); opt.zero_grad()

The hook does, per step and per gradient bucket, what DDP does without a hook: every
gradient times ``1/N`` (the factor in float32, the product rounded to the gradient's
dtype: ``bucket.mul_(1/N)``, as DDP's reducer copies gradients into its buckets), then one
``all_reduce(SUM)`` of the bucket: the training is unchanged, bit for bit. Before that it
gathers every rank's bucket (the local gradients, before the division) on rank 0, and
after it keeps rank 0's result. Wrap your own hook with ``attach(model, hook=h,
average=...)`` instead (``average`` says what your hook does, for the replay:
``predivide`` for torch's ``allreduce_hook``; ``none`` for a plain sum).

Rank 0 writes, one step at a time (memory: one step's ``N x elements`` values)::

    REC/manifest.json          world size (ranks per node, if torchrun says), backend, dtype,
                               torch version, average, and the bucket layouts: per bucket
                               its elements and, per parameter, name, shape and offset;
                               ``step_layout[t]`` names step t's layout
    REC/grads/step_000000.npy  (N, elements) float32: row r is rank r's buckets, concatenated
                               in bucket order (bf16 and fp16 values are exact in float32)
    REC/real/step_000000.npy   (elements,) float32: the all-reduced buckets rank 0 received

``grads/`` is also a ``fpreduce run`` file source (``source.kind = "file"``). DDP rebuilds
its buckets after the first step, so step 0 may have another layout than the later steps.
Gradients of dtype float32, bfloat16 and float16 (one dtype per model).

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

__all__ = ["AVERAGES", "FORMAT", "MANIFEST", "Recorder", "step_file"]

FORMAT = "fpreduce-ddp-recording"
MANIFEST = "manifest.json"
#: what the replay can emulate after the sum: DDP's default, or a user hook's division
AVERAGES = ("ddp", "predivide", "after", "none")
_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


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
        process_group: DDP's process group (None: the default group).
    """

    def __init__(self, out_dir: str | Path, *, steps: int | None = None, process_group: Any = None) -> None:
        if steps is not None and steps < 1:
            raise InvalidArgument(f"Recorder: steps must be >= 1 or None, got {steps}")
        self.out_dir, self.max_steps, self.group = Path(out_dir), steps, process_group
        self.steps = 0  # steps written (rank 0)
        self._seen = 0  # steps whose buckets were hooked (every rank: all decide alike to gather)
        self._lock = threading.Lock()
        self._pending: dict[int, dict[str, Any]] = {}  # bucket index -> grads, real, layout
        self._last: int | None = None  # the last bucket's index in the pending step
        self._layouts: list[list[dict[str, Any]]] = []
        self._step_layout: list[int] = []
        self._manifest: dict[str, Any] = {}
        self._attached = False
        self._closed = False

    # ------------------------------------------------------------------ attaching
    def attach(self, ddp_model: Any, hook: Any = None, state: Any = None, *, average: str | None = None) -> Recorder:
        """Register the recording communication hook on ``ddp_model`` (a DistributedDataParallel).

        Args:
            hook: a DDP communication hook ``hook(state, bucket) -> Future[Tensor]`` to wrap
                (None: DDP's default averaging, reproduced bit for bit).
            state: the wrapped hook's state.
            average: what the all-reduce does besides the sum, for the replay (see
                :data:`AVERAGES`); default ``ddp`` without a hook, required with one.
        """
        import torch
        import torch.distributed as dist

        if self._attached:
            raise InvalidArgument("Recorder.attach: already attached to a model")
        if hook is not None and average is None:
            raise InvalidArgument(f"Recorder.attach: say what your hook averages: average= one of {AVERAGES}")
        average = average or "ddp"
        if average not in AVERAGES:
            raise InvalidArgument(f"Recorder.attach: unknown average {average!r} (choices: {', '.join(AVERAGES)})")
        group = self.group if self.group is not None else dist.group.WORLD
        self._world, self._rank = dist.get_world_size(group), dist.get_rank(group)
        self._names = {id(p): name for name, p in ddp_model.module.named_parameters()}
        dtypes = {str(p.dtype) for p in ddp_model.module.parameters() if p.requires_grad}
        dtype = next(iter(dtypes)) if len(dtypes) == 1 else ""
        if dtype not in _DTYPES:
            raise InvalidArgument(f"Recorder: one gradient dtype of {sorted(_DTYPES)} needed, got {sorted(dtypes)}")
        self._user = (hook, state)
        self._manifest = {
            "format": FORMAT,
            "version": 1,
            "world_size": self._world,
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE") or 0) or None,  # torchrun's
            "backend": str(dist.get_backend(group)),
            "dtype": _DTYPES[dtype],
            "torch": str(torch.__version__),
            "average": average,
            "hook": "ddp default" if hook is None else getattr(hook, "__qualname__", repr(hook)),
            "storage": "float32 (exact for bf16 and fp16)",
            "steps": 0,
            "elements": 0,
            "layouts": self._layouts,
            "step_layout": self._step_layout,
        }
        self._prepare_dir(dist, group)

        def recording_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses other annotations
            return self._hook(state, bucket)

        ddp_model.register_comm_hook(None, recording_hook)
        self._attached = True
        return self

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
        recording = not self._closed and (self.max_steps is None or self._seen < self.max_steps)
        if recording:
            self._gather(bucket, buf)
        if bucket.is_last():
            self._seen += 1
        hook, state = self._user
        if hook is not None:
            fut = hook(state, bucket)
        else:
            buf.mul_(1.0 / self._world)  # DDP's reducer: grad * (1. / N), the factor and product in float32
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

    def _gather(self, bucket: Any, buf: Any) -> None:
        import torch.distributed as dist

        local = buf.detach().float()  # exact for bf16/fp16; gathered before the hook changes it
        if self._rank != 0:
            dist.gather(local, None, dst=0, group=self.group)
            return
        parts = [local.new_empty(local.shape) for _ in range(self._world)]
        dist.gather(local, parts, dst=0, group=self.group)
        base, size = buf.data_ptr(), buf.element_size()
        params = [
            {"name": self._names.get(id(p), f"?{i}"), "shape": list(g.shape), "offset": (g.data_ptr() - base) // size}
            for i, (p, g) in enumerate(zip(bucket.parameters(), bucket.gradients(), strict=True))
        ]
        layout = {"index": int(bucket.index()), "elements": int(buf.numel()), "params": params}
        grads = np.stack([p.cpu().numpy() for p in parts])
        with self._lock:
            if bucket.index() in self._pending:  # a new step while the last one never completed
                self._drop("a step's all-reduce did not complete")
            self._pending[int(bucket.index())] = {"layout": layout, "grads": grads}
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
        t = self.steps
        _save(self.out_dir / step_file("grads", t), np.concatenate([b["grads"] for b in buckets], axis=1))
        _save(self.out_dir / step_file("real", t), np.concatenate([b["real"] for b in buckets]))
        self._step_layout.append(self._layouts.index(layout))
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

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
(the replay could not emulate them). Before scaling, the hook copies the bucket (the local
gradients, before any division) and starts sending the copy to rank 0, without waiting (on the
CPU point to point into the row it fills, else ``dist.gather``); after the all-reduce it keeps a
copy of rank 0's result.

Rank 0 writes the steps in order, in a background thread, while the training goes on: it holds
at most two steps (one written, one waiting), and the hook waits for room before a third, so
memory on rank 0 stays at most three steps' ``N x elements`` float32 (buffers are used again).
:meth:`Recorder.flush` waits until every completed step is on disk, and ``close()`` flushes. A
write that fails ends the recording and raises :class:`RecordingError`, in one line, on rank 0:
at the next step's hook, or at ``flush()`` / ``close()``. Each file is written whole under a
temporary name, then renamed; the manifest last::

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
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.base.errors import InvalidArgument

__all__ = ["AVERAGES", "FORMAT", "HOOKS", "MANIFEST", "PATHS", "Recorder", "RecordingError", "step_file"]

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
_TAG = 0x46505200  # the point-to-point tags of a bucket's rows: this plus the bucket's index


def step_file(kind: str, step: int) -> str:
    """The path of a step's file inside a recording: ``grads/step_000007.npy``."""
    return f"{kind}/step_{step:06d}.npy"


def _save(path: Path, shape: tuple[int, ...], pieces: list[np.ndarray]) -> None:
    """Write the float32 array of ``shape`` whose C-order values are ``pieces``, one after the other, as
    ``np.save`` would (its header, version 1.0), without joining them first; atomically (a temporary
    file, then a rename)."""
    if sum(int(a.size) for a in pieces) != int(np.prod(shape)) or any(a.dtype != np.float32 for a in pieces):
        raise ValueError(f"fpreduce.torch: pieces of {shape} float32 expected")  # a bug of the recorder's
    tmp = path.with_name(f".{path.name}.tmp")
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False, "shape": shape}
    with open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for a in pieces:
            f.write(np.ascontiguousarray(a).data)
    os.replace(tmp, path)


class RecordingError(RuntimeError):
    """A recorded step could not be written (rank 0): raised once, at the next step's hook, by
    :meth:`Recorder.flush` or by :meth:`Recorder.close`; the steps after it are not recorded."""


class _Writer:
    """Rank 0's step files, written in order by one background thread, while training goes on.

    It holds at most ``depth`` steps, the one it writes included (the recording hook waits for room:
    memory stays bounded, and a disk slower than the training slows the training down).
    The thread ends when nothing waits (a new one starts with the next step), so it never holds up
    the interpreter's exit; a failed write ends the recording: the error is kept for :meth:`wait`.
    """

    def __init__(self, depth: int) -> None:
        self._jobs: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._depth, self._running = depth, False
        self._error: str | None = None
        self._reported = False

    def put(self, job: Callable[[], None]) -> None:
        with self._cond:
            if self._error is not None:
                return  # the recording ended at the failed step
            self._jobs.append(job)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="fpreduce-recorder-writer").start()

    def wait(self, *, room: bool) -> None:
        """Wait until it holds fewer than ``depth`` steps (``room``) or every step is written; a failed
        write raises :class:`RecordingError` (once)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._error is not None or (len(self._jobs) < self._depth if room else not self._running)
            )
            if self._error is not None and not self._reported:
                self._reported = True
                raise RecordingError(self._error)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs:
                    self._running = False
                    self._cond.notify_all()
                    return
                job = self._jobs[0]
            try:
                job()
            except Exception as e:  # kept for the training thread, said in one line
                said = str(e) if isinstance(e, RecordingError) else f"fpreduce.torch.Recorder: {type(e).__name__}: {e}"
                with self._cond:
                    self._error = " ".join(said.split())
                    self._jobs.clear()
                    self._running = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._jobs.popleft()
                self._cond.notify_all()


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
        self.steps = 0  # steps on disk (rank 0; flush() waits for the others)
        self._queued = 0  # steps handed to the writer (rank 0)
        self._seen = 0  # steps whose buckets were hooked (every rank: all decide alike to gather)
        self._lock = threading.Lock()
        self._writer = _Writer(depth=2)  # rank 0: one step written, one waiting (a third is gathered)
        self._sent: list[tuple[int, Any, list[Any]]] = []  # (step, buffer, its sends) in flight from this rank
        self._free: dict[tuple[int, str], list[Any]] = {}  # float32 buffers to use again, by (elements, device)
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
        import torch
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
            real = self._take(int(t.numel()), torch.device("cpu"))
            real.copy_(t.detach().reshape(-1))  # DDP reuses the bucket
            self._add(index, "real", real)
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
        """Start gathering the bucket's copy (taken before any scaling) on rank 0; its writer waits
        for the rows. Each rank first waits for what it sent of the earlier steps."""
        self._wait_sent(self._seen)
        local = self._snapshot(buf, paths)
        if self._rank != 0:
            self._sent.append((self._seen, local, self._transfer(int(bucket.index()), local, None)))
            return
        self._writer.wait(room=True)  # a failed write surfaces here, at the next step
        rows = [local] + [self._take(int(local.numel()), local.device) for _ in range(1, self._world)]
        works = self._transfer(int(bucket.index()), local, rows)
        base, size, m = buf.data_ptr(), buf.element_size(), int(buf.numel())
        params = [
            {"name": self._names.get(id(p), f"?{i}"), "shape": list(g.shape), "offset": (g.data_ptr() - base) // size}
            for i, (p, g) in enumerate(zip(bucket.parameters(), bucket.gradients(), strict=True))
        ]
        layout = {"index": int(bucket.index()), "elements": m, "params": params}
        path: Any = paths[0] if len(set(paths)) == 1 else paths
        with self._lock:
            if bucket.index() in self._pending:  # a new step while the last one never completed
                self._drop("a step's all-reduce did not complete")
            self._pending[int(bucket.index())] = {"layout": layout, "rows": rows, "works": works, "paths": path}
            if bucket.is_last():
                self._last = int(bucket.index())
        self._flush_if_complete()

    def _snapshot(self, buf: Any, paths: list[str]) -> Any:
        """The bucket as float32 (exact for bf16/fp16), then, when the paths vary, each parameter's path code."""
        import torch

        m = int(buf.numel())
        local = self._take(m if self._fixed is not None else m + len(paths), buf.device)
        local[:m].copy_(buf.detach().reshape(-1))
        if self._fixed is None:  # every rank's paths travel with its bucket
            local[m:].copy_(torch.tensor([float(_CODES.index(p)) for p in paths], dtype=torch.float32))
        return local

    def _transfer(self, index: int, local: Any, rows: list[Any] | None) -> list[Any]:
        """Every rank's ``local`` into ``rows`` on rank 0 (None elsewhere). On the CPU, point to point
        into the rows themselves (gloo's gather receives into one flat tensor, then copies it out)."""
        import torch.distributed as dist

        if local.device.type != "cpu":
            return [dist.gather(local, rows, group=self.group, async_op=True, group_dst=0)]
        tag = _TAG + index
        if rows is None:
            return [dist.isend(local, group=self.group, tag=tag, group_dst=0)]
        return [dist.irecv(rows[r], group=self.group, tag=tag, group_src=r) for r in range(1, self._world)]

    def _wait_sent(self, before: int) -> None:
        """Wait for this rank's buckets of the steps before ``before`` to be sent; their buffers are free again."""
        while self._sent and self._sent[0][0] < before:
            _, local, works = self._sent.pop(0)
            for w in works:
                w.wait()
            self._give([local])

    def _take(self, n: int, device: Any) -> Any:
        """A float32 buffer of ``n`` elements on ``device``: a free one if there is one (writing into
        fresh pages costs more than the copy itself)."""
        import torch

        with self._lock:
            free = self._free.get((n, str(device)))
            if free:
                return free.pop()
        return torch.empty(n, dtype=torch.float32, device=device)

    def _give(self, buffers: list[Any]) -> None:
        with self._lock:
            for b in buffers:
                self._free.setdefault((int(b.numel()), str(b.device)), []).append(b)

    def _add(self, index: int, key: str, value: Any) -> None:
        with self._lock:
            if index in self._pending:
                self._pending[index][key] = value
        self._flush_if_complete()

    def _drop(self, why: str) -> None:
        warnings.warn(f"fpreduce.torch.Recorder: step {self._queued} not recorded: {why}", stacklevel=3)
        self._pending, self._last = {}, None

    # ------------------------------------------------------------------ writing (rank 0)
    def _flush_if_complete(self) -> None:
        with self._lock:
            last, pend = self._last, self._pending
            if last is None or sorted(pend) != list(range(last + 1)) or any("real" not in b for b in pend.values()):
                return
            self._pending, self._last = {}, None
            t, self._queued = self._queued, self._queued + 1
        self._writer.put(partial(self._write_step, t, [pend[i] for i in range(last + 1)]))

    def _write_step(self, t: int, buckets: list[dict[str, Any]]) -> None:
        """Step ``t``'s two files, then the manifest (the writer's thread, steps in order)."""
        try:
            for b in buckets:
                for w in b["works"]:
                    w.wait()
                b["arrays"] = [r.cpu().numpy() for r in b["rows"]]
        except RuntimeError as e:
            raise RecordingError(f"fpreduce.torch.Recorder: step {t}: the gather of the buckets failed: {e}") from e
        layout: list[dict[str, Any]] = []
        start = 0
        for b in buckets:
            layout.append({**b["layout"], "start": start})
            start += b["layout"]["elements"]
        per_bucket = [_bucket_paths(b) for b in buckets]
        paths: Any = per_bucket[0] if all(p == per_bucket[0] and isinstance(p, str) for p in per_bucket) else per_bucket
        n = len(buckets[0]["arrays"])
        grads = [b["arrays"][r][: b["layout"]["elements"]] for r in range(n) for b in buckets]
        try:
            _save(self.out_dir / step_file("grads", t), (n, start), grads)
            _save(self.out_dir / step_file("real", t), (start,), [b["real"].numpy() for b in buckets])
            if layout not in self._layouts:
                self._layouts.append(layout)
            if paths not in self._path_sets:
                self._path_sets.append(paths)
            self._step_layout.append(self._layouts.index(layout))
            self._step_paths.append(self._path_sets.index(paths))
            self._manifest.update(steps=t + 1, elements=start)
            self._write_manifest()
        except OSError as e:
            raise RecordingError(f"fpreduce.torch.Recorder: step {t} not written to {self.out_dir}: {e}") from e
        self.steps = t + 1
        if t and self._step_layout[-1] != self._step_layout[-2]:  # DDP rebuilt its buckets: the old sizes go
            with self._lock:
                self._free.clear()
        self._give([r for b in buckets for r in (*b["rows"], b["real"])])

    def _write_manifest(self) -> None:
        path = self.out_dir / MANIFEST
        tmp = path.with_name(f".{MANIFEST}.tmp")
        tmp.write_text(json.dumps(self._manifest, indent=1) + "\n")
        os.replace(tmp, path)

    # ------------------------------------------------------------------ closing
    def flush(self) -> None:
        """Wait until every completed step is on disk (rank 0) or sent to rank 0 (the others).

        Raises:
            RecordingError (rank 0, once): a step could not be written; the recording ends before it.
        """
        self._wait_sent(self._seen + 1)
        self._writer.wait(room=False)

    def close(self) -> None:
        """Stop recording (the hook keeps all-reducing) and :meth:`flush`; a step left incomplete is
        dropped with a warning."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pending:
                self._drop("incomplete when the recorder was closed")
        try:
            self.flush()
        finally:
            self._free.clear()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the body's exception goes on; a failed write beside it is said, not raised over it
            self.close()
        except RecordingError as e:
            warnings.warn(str(e), stacklevel=2)


# ---------------------------------------------------------------------- what the recorder can follow
def _bucket_paths(bucket: dict[str, Any]) -> Any:
    """A gathered bucket's path (or paths): ``ranks differ`` when the ranks' path codes differ."""
    rows, m = bucket["arrays"], bucket["layout"]["elements"]
    if any(len(r) > m and (r[m:] != rows[0][m:]).any() for r in rows):
        return RANKS_DIFFER
    return bucket["paths"]


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

"""The teacher-student MLP behind the ``model`` gradient source (numpy, manual backprop).

Model: one hidden layer, ``out = act(x @ W1 + b1) @ W2 + b2`` with ``act`` tanh or
ReLU. Parameters travel as one flat vector laid out ``[W1 (inputs x hidden,
row-major), b1 (hidden), W2 (hidden x outputs, row-major), b2 (outputs)]``.

Task: inputs ``x ~ N(0, I)``; targets ``y = teacher(x) + teacher_noise * N(0, I)``
where the teacher is a fixed random MLP of the same form (tanh, ``teacher_hidden``
units). Loss of a batch of ``b`` samples: ``L = (1/b) * sum_i 0.5 * ||out_i - y_i||^2``
(mean over samples, half the squared error summed over outputs).

Everything here is computed in float64 and vectorized over any leading batch
dimensions: ``x`` of shape ``(..., b, inputs)`` gives one loss and one gradient per
leading index (e.g. one per worker). Only elementwise ufuncs, ``matmul`` and
``sum`` are used.

Data-parallel training (``ModelSource``): the global batch of step ``t``
(``workers * batch_per_worker`` samples drawn from ``default_rng([seed, t,
1002])``) is split into contiguous shards in worker order; ``gradients(t,
params)`` is each worker's gradient of ``loss_scale`` times its shard's mean loss,
computed in float64 and rounded once to float32; ``update`` divides the reduced
sum by ``workers * loss_scale`` and applies SGD (optionally with momentum) to the
fp32 master weights. The teacher and the initial weights depend on the seed only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.run.schema import KindSpec, rule

Activation = Literal["tanh", "relu"]
ACTIVATIONS = ("tanh", "relu")
F64 = NDArray[np.float64]
_TEACHER, _INIT, _DATA = 1000, 1001, 1002  # default_rng stream tags (sources uses 0..999)


def n_params(inputs: int, hidden: int, outputs: int) -> int:
    """Number of parameters of the MLP."""
    return inputs * hidden + hidden + hidden * outputs + outputs


def unpack(p: F64, inputs: int, hidden: int, outputs: int) -> tuple[F64, F64, F64, F64]:
    """Views ``(W1, b1, W2, b2)`` of a flat parameter vector (last axis = parameters)."""
    lead = p.shape[:-1]
    i1 = inputs * hidden
    i2 = i1 + hidden
    i3 = i2 + hidden * outputs
    return (
        p[..., :i1].reshape(*lead, inputs, hidden),
        p[..., i1:i2],
        p[..., i2:i3].reshape(*lead, hidden, outputs),
        p[..., i3:],
    )


def init(rng: np.random.Generator, inputs: int, hidden: int, outputs: int) -> F64:
    """LeCun-normal weights (std 1/sqrt(fan_in)), zero biases, flat float64."""
    w1 = rng.standard_normal((inputs, hidden)) / np.sqrt(inputs)
    w2 = rng.standard_normal((hidden, outputs)) / np.sqrt(hidden)
    return np.concatenate([w1.ravel(), np.zeros(hidden), w2.ravel(), np.zeros(outputs)])


def forward(p: F64, x: F64, inputs: int, hidden: int, outputs: int, act: Activation) -> tuple[F64, F64, F64]:
    """Pre-activations, hidden activations and outputs for ``x`` of shape (..., b, inputs)."""
    w1, b1, w2, b2 = unpack(p, inputs, hidden, outputs)
    pre = x @ w1 + b1
    h = np.tanh(pre) if act == "tanh" else np.maximum(pre, 0.0)
    return pre, h, h @ w2 + b2


def loss_and_grad(p: F64, x: F64, y: F64, inputs: int, hidden: int, outputs: int, act: Activation) -> tuple[F64, F64]:
    """Loss and its exact gradient (backprop) for each leading batch index.

    Args:
        p: flat float64 parameters, shape (n_params,).
        x: inputs, shape (..., b, inputs).
        y: targets, shape (..., b, outputs).
        inputs: input width.
        hidden: hidden width.
        outputs: output width.
        act: ``tanh`` or ``relu`` (ReLU's derivative at 0 is taken as 0).

    Returns:
        ``(loss, grad)`` with shapes ``(...)`` and ``(..., n_params)``.
    """
    b = x.shape[-2]
    pre, h, out = forward(p, x, inputs, hidden, outputs, act)
    r = out - y
    loss = 0.5 * np.sum(r * r, axis=(-2, -1)) / b
    _, _, w2, _ = unpack(p, inputs, hidden, outputs)
    g_w2 = np.swapaxes(h, -1, -2) @ r / b
    g_b2 = r.sum(axis=-2) / b
    dh = r @ w2.T
    dpre = dh * (1.0 - h * h) if act == "tanh" else dh * (pre > 0)
    g_w1 = np.swapaxes(x, -1, -2) @ dpre / b
    g_b1 = dpre.sum(axis=-2) / b
    lead = x.shape[:-2]
    grad = np.concatenate([g_w1.reshape(*lead, -1), g_b1, g_w2.reshape(*lead, -1), g_b2], axis=-1)
    return loss, grad


def check_step(step: int, max_steps: int | None) -> None:
    """Raise InvalidArgument unless ``step`` is an integer in [0, max_steps)."""
    ok = isinstance(step, int | np.integer) and not isinstance(step, bool) and step >= 0
    if ok and max_steps is not None:
        ok = step < max_steps
    if not ok:
        lim = "" if max_steps is None else f" and < {max_steps}"
        raise InvalidArgument(f"step must be an integer >= 0{lim}, got {step!r}")


@dataclass(frozen=True)
class ModelSpec(KindSpec):
    """The teacher-student MLP trained data-parallel.

    Attributes:
        hidden: student hidden width.
        inputs: input width.
        outputs: output width.
        batch_per_worker: samples per worker shard (global batch = workers x this).
        lr: learning rate (> 0).
        momentum: heavy-ball momentum in [0, 1) (0: plain SGD).
        loss_scale: static loss scale (> 0): gradients are of ``loss_scale * loss``
            and ``update`` divides it out; use a power of two.
        teacher_noise: std of Gaussian noise added to the teacher's targets (>= 0).
        teacher_hidden: teacher hidden width.
        activation: student activation, ``tanh`` or ``relu`` (the teacher uses tanh).
    """

    kind: ClassVar[str] = "model"
    # a plain class attribute (not annotated), so not a dataclass field
    key_aliases = {"batch_size": "batch_per_worker", "learning_rate": "lr"}
    hidden: int = rule(64, lo=1)
    inputs: int = rule(32, lo=1)
    outputs: int = rule(8, lo=1)
    batch_per_worker: int = rule(16, lo=1)
    lr: float = rule(0.05, lo=0, gt=True)
    momentum: float = rule(0.0, lo=0, hi=1)
    loss_scale: float = rule(1.0, lo=0, gt=True)
    teacher_noise: float = rule(0.0, lo=0)
    teacher_hidden: int = rule(64, lo=1)
    activation: str = rule("tanh", choices=ACTIVATIONS)


class ModelSource:
    """The teacher-student MLP (``fpreduce.run.model``) trained data-parallel.

    Attributes:
        spec: the ModelSpec.
        workers: number of workers (shards of each global batch).
        seed: experiment seed.
        dims: ``(inputs, hidden, outputs)``.
        elements: number of student parameters (length of ``params`` and gradients).
    """

    kind = "model"
    max_steps: int | None = None

    def __init__(self, spec: ModelSpec, *, workers: int, seed: int) -> None:
        self.spec, self.workers, self.seed = spec, workers, seed
        self.dims = (spec.inputs, spec.hidden, spec.outputs)
        self.elements = n_params(*self.dims)
        self._teacher = init(np.random.default_rng([seed, _TEACHER]), spec.inputs, spec.teacher_hidden, spec.outputs)

    def batch(self, step: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Inputs and targets of step's global batch, shapes (workers, batch_per_worker, .)."""
        check_step(step, None)
        sp = self.spec
        rng = np.random.default_rng([self.seed, step, _DATA])
        x = rng.standard_normal((self.workers, sp.batch_per_worker, sp.inputs))
        y = forward(self._teacher, x, sp.inputs, sp.teacher_hidden, sp.outputs, "tanh")[2]
        if sp.teacher_noise > 0:
            y = y + sp.teacher_noise * rng.standard_normal(y.shape)
        return x, y

    def init_params(self) -> NDArray[np.float32]:
        """Initial fp32 master weights (depend on the seed only: the same for every arm)."""
        rng = np.random.default_rng([self.seed, _INIT])
        return init(rng, *self.dims).astype(np.float32)

    def init_state(self) -> dict[str, NDArray[np.float32]]:
        """Optimizer state for ``update``: ``{"velocity": zeros}`` with momentum, else ``{}``."""
        return {"velocity": np.zeros(self.elements, np.float32)} if self.spec.momentum else {}

    def _params64(self, params: NDArray[np.float32] | None) -> NDArray[np.float64]:
        p = np.asarray(params) if params is not None else None
        if p is None or p.shape != (self.elements,):
            got = None if p is None else p.shape
            raise InvalidArgument(f"model source needs params of shape ({self.elements},), got {got}")
        return p.astype(np.float64)

    def gradients(
        self, step: int, params: NDArray[np.float32] | None = None, *, lo: int = 0, hi: int | None = None
    ) -> NDArray[np.float32]:
        """Each worker's fp32 gradient of ``loss_scale`` x its shard's mean loss (elements lo..hi-1).

        Computed in float64 and rounded once to float32 (nearest-even; overflow ->
        ±Inf). NaN/Inf parameters give NaN/Inf gradients, passed through.
        """
        x, y = self.batch(step)
        p = self._params64(params)
        with np.errstate(all="ignore"):
            g = loss_and_grad(p, x, y, *self.dims, self.spec.activation)[1]  # type: ignore[arg-type]
            return (g[:, lo:hi] * self.spec.loss_scale).astype(np.float32)

    def loss(self, step: int, params: NDArray[np.float32]) -> float:
        """Mean loss over step's global batch (unscaled, float64)."""
        x, y = self.batch(step)
        flat = (x.reshape(-1, self.spec.inputs), y.reshape(-1, self.spec.outputs))
        with np.errstate(all="ignore"):
            return float(loss_and_grad(self._params64(params), *flat, *self.dims, self.spec.activation)[0])  # type: ignore[arg-type]

    def update(
        self, params: NDArray[np.float32], g_sum: NDArray[np.floating], state: dict[str, NDArray[np.float32]]
    ) -> NDArray[np.float32]:
        """One SGD step on fp32 master weights from the reduced gradient sum.

        ``g = g_sum / (workers * loss_scale)`` (the average of the unscaled
        gradients); without momentum ``p <- p - lr * g``; with momentum (PyTorch
        convention) ``v <- momentum * v + g; p <- p - lr * v``, ``v`` kept as float32
        in ``state["velocity"]`` (updated in place; created when absent). Arithmetic
        is float64 elementwise from the exact inputs, each stored result rounded
        once to float32: portable and bitwise reproducible. NaN/Inf propagate.

        Args:
            params: fp32 master weights (not modified).
            g_sum: the arm's reduced SUM over workers (float32 or float64 values).
            state: optimizer state (from ``init_state`` or empty).

        Returns:
            The new fp32 master weights.
        """
        p = self._params64(params)
        g = np.asarray(g_sum, dtype=np.float64)
        if g.shape != p.shape:
            raise InvalidArgument(f"update needs g_sum of shape {p.shape}, got {g.shape}")
        g = g / (self.workers * self.spec.loss_scale)
        with np.errstate(all="ignore"):
            if self.spec.momentum:
                v = state.get("velocity")
                v64 = np.zeros(self.elements) if v is None else v.astype(np.float64)
                state["velocity"] = (self.spec.momentum * v64 + g).astype(np.float32)
                g = state["velocity"].astype(np.float64)
            return (p - self.spec.lr * g).astype(np.float32)

"""Parameter layouts of open decoder models: synthetic gradients shaped like a real model's (``source.layout``).

A layout is the model's parameter tensors in the order of its published checkpoint
(Hugging Face ``state_dict`` order: ``embed_tokens``; per layer ``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``, ``input_layernorm``,
``post_attention_layernorm``; the final ``norm``; ``lm_head`` unless tied), their sizes
from the model's published ``config.json``. The gradient is one flat vector over them;
the synthetic source multiplies every element's draw by its tensor's scale:

    scale = KIND[kind] * 2 ** (-(L - 1 - l) / L)   (layer l of L; embedding: l = 0, norm and head: l = L - 1)

(the values are synthetic: a per-tensor size contrast, larger towards the output,
layer norms larger than matrices; not a recording). ``source.elements`` may be smaller
than the model: then the gradient is its first ``elements`` parameters (a fraction to
measure and extrapolate from).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["LAYOUTS", "Decoder", "scales", "tensors", "total"]

#: per-kind factor of the synthetic scale
KIND = {
    "embed": 0.02,
    "q": 0.5,
    "k": 0.5,
    "v": 1.0,
    "o": 1.0,
    "gate": 0.7,
    "up": 0.7,
    "down": 1.0,
    "norm": 5.0,
    "head": 2.0,
}


@dataclass(frozen=True)
class Decoder:
    """A Llama-style decoder's shapes (the fields of its ``config.json``)."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool = False


LAYOUTS = {
    # TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T: 1,100,048,384 parameters
    "tinyllama-1.1b": Decoder(vocab=32000, hidden=2048, intermediate=5632, layers=22, heads=32, kv_heads=4),
    # meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters
    "llama-2-7b": Decoder(vocab=32000, hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32),
}


def tensors(name: str) -> list[tuple[str, int, float]]:
    """(tensor name, elements, synthetic scale) of layout ``name``, in checkpoint order."""
    d = LAYOUTS[name]
    h, kv = d.hidden, d.hidden // d.heads * d.kv_heads
    L = d.layers

    def sc(kind: str, layer: int) -> float:
        return KIND[kind] * 2.0 ** (-(L - 1 - layer) / L)

    out = [("model.embed_tokens.weight", d.vocab * h, sc("embed", 0))]
    for i in range(L):
        p = f"model.layers.{i}."
        sizes = {"q": h * h, "k": h * kv, "v": h * kv, "o": h * h}
        out += [(f"{p}self_attn.{k}_proj.weight", n, sc(k, i)) for k, n in sizes.items()]
        out += [(f"{p}mlp.{k}_proj.weight", h * d.intermediate, sc(k, i)) for k in ("gate", "up", "down")]
        out += [(f"{p}{k}.weight", h, sc("norm", i)) for k in ("input_layernorm", "post_attention_layernorm")]
    out.append(("model.norm.weight", h, sc("norm", L - 1)))
    if not d.tied:
        out.append(("lm_head.weight", d.vocab * h, sc("head", L - 1)))
    return out


@functools.cache
def _table(name: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    t = tensors(name)
    starts = np.concatenate([[0], np.cumsum([n for _, n, _ in t])]).astype(np.int64)
    return starts, np.array([s for _, _, s in t])


def total(name: str) -> int:
    """The parameter count of layout ``name``."""
    return int(_table(name)[0][-1])


def scales(name: str, lo: int, hi: int) -> NDArray[np.float64]:
    """The synthetic scale of elements lo..hi-1 of layout ``name``."""
    starts, sc = _table(name)
    t = np.searchsorted(starts, np.arange(lo, hi, dtype=np.int64), side="right") - 1
    return sc[t]

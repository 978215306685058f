"""Plans by name: the text syntax of :func:`parse` and its families.

``parse(text, n)`` turns a family of ``FAMILIES`` with its parameters (or an
explicit tree) into a plan; the syntax is listed in :mod:`fpreduce.plans`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans.collectives import hier, linear, nccl_tree, rabenseifner, rd, ring
from fpreduce.plans.per_element import PerElementPlan, atomic
from fpreduce.plans.segmented import SegmentedPlan
from fpreduce.plans.trees import Plan, blocked, kary, numpy_pairwise, pairwise, reverse, sequential, tree

__all__ = ["DESCRIPTIONS", "FAMILIES", "AnyPlan", "parse"]

#: Any plan: one tree for every element, one per chunk, or one order per element.
AnyPlan = Union[Plan, SegmentedPlan, PerElementPlan]

#: Plan family names accepted by :func:`parse` (parameters after ``:``).
FAMILIES = (
    "sequential",
    "reverse",
    "pairwise",
    "kary",
    "blocked",
    "numpy",
    "ring",
    "rd",
    "rabenseifner",
    "linear",
    "tree",
    "hier",
    "atomic",
)

#: One line per family for ``fpreduce list plans``: the syntax, then what it models.
DESCRIPTIONS: dict[str, str] = {
    "sequential": "sequential: ((x0 + x1) + x2) + ... in worker order (a left-deep fold)",
    "reverse": "reverse: the fold from the last worker to the first",
    "pairwise": "pairwise: a balanced binary tree over consecutive workers",
    "kary": "kary:K: K-ary tree, each node folding its K children in order (K >= 2)",
    "blocked": "blocked:B: fold blocks of B workers, then fold the block sums (B >= 1)",
    "numpy": "numpy: np.sum's association (8 strided accumulators, halves above 128)",
    "ring": "ring[:nccl|mpich|ompi|gloo]: ring all-reduce, one order per chunk, as that library does",
    "rd": "rd: recursive doubling (Open MPI, MPICH); beyond a power of two, pairs fold first",
    "rabenseifner": "rabenseifner: reduce-scatter by halving, then allgather (Open MPI, MPICH)",
    "linear": "linear: Open MPI basic_linear: rank 0 folds every rank in order",
    "tree": "tree:nccl:G: NCCL's double binary tree across nodes of G GPUs (G divides n)",
    "hier": "hier:G: Horovod hierarchical: reduce-scatter in nodes of G, rd across nodes",
    "atomic": "atomic: every element its own random order (GPU atomicAdd), seeded",
}


def parse(text: str, n: int | None = None, *, seed: int | None = 0) -> AnyPlan:
    """Parse a plan name (needs ``n``) or an explicit tree; the syntax is in :mod:`fpreduce.plans`.

    Args:
        text: a family from ``FAMILIES`` with its parameters (``kary:4``,
            ``ring:gloo``, ``tree:nccl:8``, ``hier:8``) or a tree ``"((0,1),2)"``.
        n: number of workers (optional for an explicit tree, checked if given).
        seed: the seed of ``atomic``'s orders (None means 0; ignored by the
            other families).

    Raises:
        InvalidArgument: unknown family (with a close-match hint), bad parameter,
            G not dividing n, or a tree whose leaves are not 0..n-1.

    >>> parse("pairwise", 4).draw()
    '((0+1)+(2+3))'
    >>> parse("kary:3", 4).draw()
    '(((0+1)+2)+3)'
    """
    s = text.strip()
    if s.startswith("("):
        p = tree(s)
        if n is not None and p.n != n:
            raise InvalidArgument(f"tree {s!r} has {p.n} leaves but n={n}")
        return p
    family, _, arg = s.partition(":")
    if family not in FAMILIES:
        raise unknown_name("plan", s, FAMILIES)
    if n is None:
        raise InvalidArgument(f"plan {s!r} needs the number of workers n")
    if family in _SIMPLE or family == "atomic":
        if arg:
            raise InvalidArgument(f"plan {family!r} takes no parameter, got {s!r}")
        return atomic(n, seed or 0) if family == "atomic" else _SIMPLE[family](n)
    if family == "ring":
        return ring(n, arg or "nccl")
    if family == "tree":
        kind, _, g = arg.partition(":")
        if kind != "nccl":
            raise unknown_name("tree kind", kind, ("nccl",))
        return nccl_tree(n, _int_param(s, "gpus_per_node", g, "tree:nccl:8"))
    if family == "kary":
        return kary(n, _int_param(s, "k", arg, "kary:4"))
    if family == "blocked":
        return blocked(n, _int_param(s, "block", arg, "blocked:8"))
    return hier(n, _int_param(s, "gpus_per_node", arg, "hier:8"))


_SIMPLE: dict[str, Callable[[int], Plan | SegmentedPlan]] = {
    "sequential": sequential,
    "reverse": reverse,
    "pairwise": pairwise,
    "numpy": numpy_pairwise,
    "rd": rd,
    "rabenseifner": rabenseifner,
    "linear": linear,
}


def _int_param(text: str, what: str, arg: str, example: str) -> int:
    try:
        return int(arg)
    except ValueError:
        raise InvalidArgument(
            f"plan {text!r}: {what} must be an integer, got {arg!r}; write e.g. {example!r}"
        ) from None

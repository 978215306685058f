"""Plans by name: the text syntax of :func:`parse` and its families.

``parse(text, n)`` turns a family of ``FAMILIES`` with its parameters (or an
explicit tree) into a plan; the syntax is listed in :mod:`fpreduce.plans`. One family
is chosen by the message as well: ``ompi:default`` (Open MPI's own choice,
:mod:`fpreduce.plans.ompi`) needs its element count and item size (``fr.reduce``
gives X's); :func:`by_message` tells such a text apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans.collectives import hier, linear, nccl_tree, rabenseifner, rd, ring
from fpreduce.plans.ompi import default_plan
from fpreduce.plans.per_element import PerElementPlan, atomic
from fpreduce.plans.segmented import SegmentedPlan
from fpreduce.plans.trees import Plan, blocked, kary, numpy_pairwise, pairwise, reverse, sequential, tree

__all__ = ["DESCRIPTIONS", "FAMILIES", "AnyPlan", "by_message", "parse"]

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
    "ompi",
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
    "ompi": "ompi:default: Open MPI 4.1's own all-reduce choice (fixed rules) for the message's N, M and datatype",
}


def parse(
    text: str,
    n: int | None = None,
    *,
    seed: int | None = 0,
    elements: int | None = None,
    item_bytes: int | None = None,
) -> AnyPlan:
    """Parse a plan name (needs ``n``) or an explicit tree; the syntax is in :mod:`fpreduce.plans`.

    Args:
        text: a family from ``FAMILIES`` with its parameters (``kary:4``,
            ``ring:gloo``, ``tree:nccl:8``, ``hier:8``) or a tree ``"((0,1),2)"``.
        n: number of workers (optional for an explicit tree, checked if given).
        seed: the seed of ``atomic``'s orders (None means 0; ignored by the
            other families).
        elements, item_bytes: the message ``ompi:default`` is chosen for (M elements
            of this many bytes: 4 for fp32, 8 for fp64); ignored by the other families.

    Raises:
        InvalidArgument: unknown family (with a close-match hint), bad parameter,
            G not dividing n, a tree whose leaves are not 0..n-1, or ``ompi:default``
            without its message (or where Open MPI picks an algorithm not modelled).

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
    if family == "ompi":
        return _ompi(s, arg, n, elements, item_bytes)
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


def by_message(text: str) -> bool:
    """Whether the plan text is chosen by the message too (``ompi:default``): :func:`parse` needs its size."""
    return text.strip().partition(":")[0] == "ompi"


def _ompi(text: str, arg: str, n: int, elements: int | None, item_bytes: int | None) -> AnyPlan:
    if arg != "default":
        raise unknown_name("ompi plan", text, ("ompi:default",))
    if elements is None or item_bytes is None:
        raise InvalidArgument(
            f"plan {text!r} is Open MPI's choice for a message: it needs the element count and the item size "
            "(fr.reduce takes them from X)"
        )
    return default_plan(n, elements, item_bytes)[2]


def _int_param(text: str, what: str, arg: str, example: str) -> int:
    try:
        return int(arg)
    except ValueError:
        raise InvalidArgument(
            f"plan {text!r}: {what} must be an integer, got {arg!r}; write e.g. {example!r}"
        ) from None

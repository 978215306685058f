"""Reduction plans: the tree that associates the N workers' values.

A plan is a binary tree over worker indices, given as nested tuples: a leaf is an
``int`` (a worker), an inner node a pair ``(left, right)`` whose two partial sums
are added (and rounded) once. A sequential fold is the degenerate left-deep tree.
Three kinds: :class:`Plan` (one tree for every element), :class:`SegmentedPlan`
(one tree per chunk of elements, as ring and Rabenseifner do) and
:class:`PerElementPlan` (every element its own random order: GPU atomics).

Text syntax (``parse(text, n)``), one family per item of ``FAMILIES``:

* ``sequential``, ``reverse``, ``pairwise``, ``kary:K`` (K >= 2), ``blocked:B``
  (B >= 1), ``numpy`` (numpy's own ``np.sum`` association);
* ``ring`` (= ``ring:nccl``), ``ring:nccl|mpich|ompi|gloo``; ``rd``
  (recursive doubling), ``rabenseifner``, ``linear`` (Open MPI basic_linear);
* ``tree:nccl:G`` and ``hier:G`` with G GPUs per node (G must divide n);
* ``atomic`` (seeded by ``parse(..., seed=)``);
* ``ompi:default``: Open MPI 4.1's own choice for the message (``parse(...,
  elements=M, item_bytes=4)``; ``fr.reduce`` gives X's), :mod:`~fpreduce.plans.ompi`;
* an explicit tree such as ``"((0,1),(2,(3,4)))"``.

Where each collective's association comes from (source file and function) is in
``docs/collectives.md``. Plans carry no values, so NaN, Inf, -0.0, overflow and
subnormals are the engine's business; a plan only fixes the association.

Modules, one concept each (this package re-exports their public names):

* :mod:`~fpreduce.plans.trees`: :data:`Tree`, :func:`fold`, :class:`Plan`, the
  simple builders (``sequential`` ... ``numpy_pairwise``) and random trees
  (:func:`random_tree`, :func:`tree_from_gaps`);
* :mod:`~fpreduce.plans.segmented`: :class:`SegmentedPlan` and :class:`Split`;
* :mod:`~fpreduce.plans.collectives`: the collectives' plans and tree builders;
* :mod:`~fpreduce.plans.per_element`: :class:`PerElementPlan` (``atomic``) and its
  order drawing (numpy, and the numba kernel of the private ``_atomic_kernel``);
* :mod:`~fpreduce.plans.ompi`: Open MPI 4.1's all-reduce algorithms, their plans and
  its fixed decision rules (``ompi:default``);
* :mod:`~fpreduce.plans.families`: :func:`parse`, ``FAMILIES`` and ``AnyPlan``.
"""

from __future__ import annotations

from fpreduce.plans.collectives import hier as hier
from fpreduce.plans.collectives import linear as linear
from fpreduce.plans.collectives import nccl_tree as nccl_tree
from fpreduce.plans.collectives import rabenseifner as rabenseifner
from fpreduce.plans.collectives import rd as rd
from fpreduce.plans.collectives import ring as ring
from fpreduce.plans.families import FAMILIES as FAMILIES
from fpreduce.plans.families import AnyPlan as AnyPlan
from fpreduce.plans.families import by_message as by_message
from fpreduce.plans.families import parse as parse
from fpreduce.plans.per_element import PerElementPlan as PerElementPlan
from fpreduce.plans.per_element import atomic as atomic
from fpreduce.plans.segmented import SegmentedPlan as SegmentedPlan
from fpreduce.plans.segmented import Split as Split
from fpreduce.plans.trees import RANDOM_TREE as RANDOM_TREE
from fpreduce.plans.trees import Plan as Plan
from fpreduce.plans.trees import Tree as Tree
from fpreduce.plans.trees import blocked as blocked
from fpreduce.plans.trees import fold as fold
from fpreduce.plans.trees import kary as kary
from fpreduce.plans.trees import numpy_pairwise as numpy_pairwise
from fpreduce.plans.trees import pairwise as pairwise
from fpreduce.plans.trees import random_tree as random_tree
from fpreduce.plans.trees import reverse as reverse
from fpreduce.plans.trees import sequential as sequential
from fpreduce.plans.trees import tree as tree
from fpreduce.plans.trees import tree_from_gaps as tree_from_gaps

__all__ = [
    "AnyPlan",
    "FAMILIES",
    "PerElementPlan",
    "RANDOM_TREE",
    "Plan",
    "SegmentedPlan",
    "Split",
    "Tree",
    "atomic",
    "blocked",
    "by_message",
    "fold",
    "hier",
    "kary",
    "linear",
    "nccl_tree",
    "numpy_pairwise",
    "pairwise",
    "parse",
    "rabenseifner",
    "random_tree",
    "rd",
    "reverse",
    "ring",
    "sequential",
    "tree",
    "tree_from_gaps",
]

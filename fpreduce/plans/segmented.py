"""Plans with one tree per chunk of elements, and how the chunks are cut.

Ring all-reduce and Rabenseifner reduce each chunk of the buffer with its own
tree: :class:`SegmentedPlan` holds those trees (or one shape and a leaf order per
chunk, run by the engine as one vectorized fold) and a :class:`Split`, the rule
that derives the chunk sizes from the element count as each library does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.plans.trees import Plan

__all__ = ["SegmentedPlan", "Split", "gloo_chunk", "halving_sizes"]


def halving_sizes(m: int, blocks: int) -> list[int]:
    """Block sizes of recursive vector halving (left half ``w // 2``), by position."""
    sizes = [m]
    while len(sizes) < blocks:
        sizes = [s for w in sizes for s in (w // 2, w - w // 2)]
    return sizes


def gloo_chunk(m: int, n: int, item_bytes: int, max_segment_bytes: int) -> int:
    """Elements per rank chunk in gloo's ring allreduce (``gloo/allreduce.cc`` ``ring``).

    numSegments = roundUp(max(ceil(bytes / maxSegmentBytes), 2n), n); a segment is
    ceil(m / numSegments) elements and a chunk numSegments / n segments, so the
    last chunks may be short or empty.
    """
    seg_max = item_bytes * max(1, max_segment_bytes // item_bytes)
    total = m * item_bytes
    num = max(-(-total // seg_max), 2 * n)
    num = -(-num // n) * n
    seg = -(-m // num)
    return seg * (num // n)


@dataclass(frozen=True)
class Split:
    """How a SegmentedPlan cuts m elements into its chunks.

    Attributes:
        kind: ``even``: ``np.array_split`` sizes (the first ``m % k`` chunks one
            larger: Open MPI's "early" and "late" blocks); ``halving``: recursive
            vector halving, left half ``w // 2`` (Rabenseifner); ``gloo``: gloo's
            ring, chunks of ``numSegments / k`` segments of ``ceil(m /
            numSegments)`` elements, trailing chunks short or empty; ``horovod``:
            k-1 equal shards of ``m // (k-1)`` elements and the remainder last;
            ``ceil``: chunks of ``ceil(m / k)`` elements, the last short or empty
            (MPICH's ring).
        item_bytes: element size in bytes (``gloo`` only; 4 for float32, 2 for
            fp16/bf16 tensors).
        max_segment_bytes: gloo's ``maxSegmentSize`` (default 1 MiB).
    """

    kind: Literal["even", "halving", "gloo", "horovod", "ceil"] = "even"
    item_bytes: int = 4
    max_segment_bytes: int = 1 << 20

    def sizes(self, m: int, k: int) -> list[int]:
        """Chunk sizes for m elements and k chunks (they sum to m)."""
        if self.kind == "halving":
            return halving_sizes(m, k)
        if self.kind == "gloo":
            chunk = gloo_chunk(m, k, self.item_bytes, self.max_segment_bytes)
            return [max(0, min(chunk, m - c * chunk)) for c in range(k)]
        if self.kind == "ceil":
            chunk = -(-m // k)
            return [max(0, min(chunk, m - c * chunk)) for c in range(k)]
        if self.kind == "horovod":
            per = m // (k - 1)
            return [per] * (k - 1) + [m - per * (k - 1)]
        return [m // k + (1 if c < m % k else 0) for c in range(k)]


class _ShapedTrees(Sequence[Plan]):
    """``trees`` of a SegmentedPlan given as one shape and a leaf order per chunk (lazy)."""

    def __init__(self, name: str, shape: Plan, perms: NDArray[np.intp]) -> None:
        self._name, self._shape, self._perms = name, shape, perms

    def __len__(self) -> int:
        return int(self._perms.shape[0])

    def __getitem__(self, c):  # type: ignore[no-untyped-def, override]
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        t = self._shape.relabel(self._perms[c])
        return Plan(self._name, t.n, t.root)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _ShapedTrees):
            return self._shape == other._shape and np.array_equal(self._perms, other._perms)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._shape, self._perms.tobytes()))


@dataclass(frozen=True)
class SegmentedPlan:
    """Different trees for consecutive element chunks (how ring all-reduce works).

    The m elements are split into ``len(trees)`` chunks as ``split`` says (by
    default as ``np.array_split`` does: the first ``m % k`` chunks get one extra
    element; Open MPI's ring calls them "early" blocks); chunk c is reduced with
    ``trees[c]``. With fewer elements than chunks, the trailing chunks are empty.

    When every chunk has the same tree shape and only the leaf order changes (a
    ring), give ``shape`` (a tree over slots 0..n-1) and ``perms`` (chunk c puts
    worker ``perms[c][k]`` in slot k) instead of ``trees``: ``trees`` is then built
    lazily, and the engine runs all chunks as one vectorized fold.

    Attributes:
        name: the plan's text name.
        n: number of workers.
        trees: one Plan per chunk.
        split: how chunk sizes are derived from the element count.
        shape: the common tree over slots (or None).
        perms: per chunk, slot -> worker (with ``shape``).
        grouping: a tree every chunk's tree equals but for the order of each
            addition's two operands (Rabenseifner's: recursive doubling's), or None.
            IEEE addition is commutative in nearest even and the directed modes,
            so the engine folds every chunk with it there (one tree for the
            whole vector); not in stochastic rounding, whose draws number the
            additions in each chunk's own tree order.
    """

    name: str
    n: int
    trees: Sequence[Plan] = ()
    split: Split = field(default_factory=Split)
    shape: Plan | None = None
    perms: Sequence[Sequence[int]] | NDArray[np.intp] = field(default=(), compare=False, repr=False)
    grouping: Plan | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.shape is None:
            return
        P = np.array(self.perms, dtype=np.intp).reshape(len(self.perms), self.n)  # a private copy
        P.flags.writeable = False
        if not np.array_equal(np.sort(P, axis=1), np.broadcast_to(np.arange(self.n), P.shape)):
            raise InvalidArgument(f"plan {self.name!r}: every chunk's order must be a permutation of 0..{self.n - 1}")
        object.__setattr__(self, "trees", _ShapedTrees(self.name, self.shape, P))

    @property
    def chunk_orders(self) -> NDArray[np.intp] | None:
        """(chunks, n) slot -> worker array of a shaped plan, else None."""
        return self.trees._perms if isinstance(self.trees, _ShapedTrees) else None

    def bounds(self, m: int) -> NDArray[np.int64]:
        """Chunk boundaries: chunk c is elements ``bounds[c]:bounds[c+1]``."""
        sizes = np.array(self.split.sizes(int(m), len(self.trees)), dtype=np.int64)
        return np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes)])

    def depths(self) -> NDArray[np.int64]:
        """Worst-case additions on each worker's path over all chunks."""
        P = self.chunk_orders
        if P is None or self.shape is None:
            return np.max([t.depths() for t in self.trees], axis=0)
        out = np.zeros(self.n, dtype=np.int64)
        np.maximum.at(out, P.ravel(), np.tile(self.shape.depths(), P.shape[0]))
        return out

    def relabel(self, perm: Sequence[int] | np.ndarray) -> SegmentedPlan:
        """Every chunk's tree relabelled by ``perm`` (re-ranking the ring)."""
        P = self.chunk_orders
        if P is None or self.shape is None:
            trees = tuple(t.relabel(perm) for t in self.trees)
            grouping = None if self.grouping is None else self.grouping.relabel(perm)
            return SegmentedPlan(self.name, self.n, trees, self.split, grouping=grouping)
        p = np.asarray(perm, dtype=np.intp)
        if p.shape != (self.n,) or not np.array_equal(np.sort(p), np.arange(self.n)):
            raise InvalidArgument(f"perm must be a permutation of 0..{self.n - 1}")
        return SegmentedPlan(self.name, self.n, (), self.split, self.shape, p[P])

    def draw(self) -> str:
        """One line per chunk: ``chunk c: tree``."""
        return "\n".join(f"chunk {c}: {t.draw()}" for c, t in enumerate(self.trees))

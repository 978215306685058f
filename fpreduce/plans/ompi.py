"""Open MPI 4.1's ``MPI_Allreduce``: the plan of each tuned algorithm, and the one it picks itself.

The tuned component (``coll/tuned``) has six all-reduce algorithms (:data:`ALGORITHMS`,
numbered as ``coll_tuned_allreduce_algorithm`` numbers them). Forced, each follows one
plan, with the fallbacks its source takes on small messages (:func:`algorithm_plan`,
read from ``ompi/mca/coll/base/coll_base_allreduce.c``). Not forced (the default: no
dynamic rules), Open MPI picks one by its fixed decision rules
(``ompi_coll_tuned_allreduce_intra_dec_fixed`` in
``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c``) from the communicator size, the
message size in bytes (count x datatype size) and whether the operation is
commutative: :func:`fixed_decision`, and :func:`default_plan` the plan of its choice,
the plan family ``ompi:default``. The rules and the algorithms are the same in every
release from v4.1.0 to v4.1.8 (read at v4.1.4); Open MPI 5 and 4.0 decide otherwise.

The fixed rules call the segmented ring with segment size 0, which its source turns
into one segment of the whole message, hence the plain ring (and recursive doubling
below N elements). They pick ``nonoverlapping`` (reduce, then broadcast) only at
N >= 128 for a commutative operation; its reduce is the tuned reduce's own fixed
choice (binomial or in-order trees with segments), which no plan here models:
:func:`default_plan` refuses it rather than guess.
"""

from __future__ import annotations

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans._checks import check_n, check_param
from fpreduce.plans.collectives import linear, rabenseifner, rd, ring
from fpreduce.plans.segmented import SegmentedPlan
from fpreduce.plans.trees import Plan

__all__ = ["ALGORITHMS", "RELEASES", "algorithm_plan", "default_plan", "fixed_decision", "segment_count"]

#: The Open MPI releases whose fixed all-reduce rules :func:`fixed_decision` follows.
RELEASES = "Open MPI 4.1 (v4.1.0 to v4.1.8)"

#: algorithm name -> its number (``coll_tuned_allreduce_algorithm``, Open MPI 4.1 and 5.0).
ALGORITHMS = {
    "basic_linear": 1,
    "nonoverlapping": 2,
    "recursive_doubling": 3,
    "ring": 4,
    "segmented_ring": 5,
    "rabenseifner": 6,
}

_NAME = {k: name for name, k in ALGORITHMS.items()}

# The fixed rules as data: (communicator sizes below this bound, [(bytes below this bound, algorithm
# number), ..., (None, algorithm number for every larger message)]), the first row whose bound exceeds
# the communicator size applies (the last row's bound None: every larger communicator).
_Rule = tuple[int | None, tuple[tuple[int | None, int], ...]]
_COMMUTATIVE: tuple[_Rule, ...] = (
    (4, ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5), (None, 6))),
    (8, ((16, 4), (8192, 3), (None, 6))),
    (16, ((8192, 3), (None, 6))),
    (32, ((64, 5), (4096, 3), (None, 6))),
    (64, ((128, 5), (None, 6))),
    (128, ((262144, 3), (None, 6))),
    (256, ((131072, 2), (262144, 3), (None, 6))),
    (512, ((4096, 2), (None, 6))),
    (2048, ((2048, 2), (16384, 3), (None, 6))),
    (4096, ((2048, 2), (4096, 5), (16384, 3), (None, 6))),
    (None, ((2048, 2), (16384, 5), (32768, 3), (None, 6))),
)
_NONCOMMUTATIVE: tuple[_Rule, ...] = (
    (4, ((131072, 3), (None, 1))),
    (8, ((None, 3),)),
    (16, ((1048576, 3), (None, 2))),
    (128, ((None, 3),)),
    (256, ((131072, 2), (524288, 3), (None, 2))),
    (512, ((4096, 2), (524288, 3), (None, 2))),
    (None, ((2048, 2), (None, 3))),
)


def fixed_decision(n: int, nbytes: int, *, commutative: bool = True) -> str:
    """The algorithm Open MPI 4.1 picks for an all-reduce of ``nbytes`` bytes over ``n`` ranks.

    Open MPI's fixed rules (nothing forced): by communicator size ``n``, message size
    ``nbytes`` (count x datatype size, e.g. 4 x M for M floats) and whether the
    operation is commutative (``MPI_SUM`` on floats is).

    >>> fixed_decision(3, 1000 * 8)
    'ring'
    >>> fixed_decision(4, 1000 * 4)
    'recursive_doubling'
    >>> fixed_decision(4, 1 << 20)
    'rabenseifner'
    """
    check_n(n)
    check_param("ompi:default", "message bytes", nbytes, 0)
    for below, steps in _COMMUTATIVE if commutative else _NONCOMMUTATIVE:
        if below is None or n < below:
            return _NAME[next(alg for limit, alg in steps if limit is None or nbytes < limit)]
    raise AssertionError("the last rule has no bound")  # pragma: no cover


def algorithm_plan(
    algorithm: str, n: int, m: int, item_bytes: int, *, segment_bytes: int = 0
) -> tuple[str, Plan | SegmentedPlan, str]:
    """(plan text, plan, note) that Open MPI 4.1's ``algorithm`` follows for ``m`` elements of ``item_bytes``.

    The note says when a size-dependent fallback applies (empty otherwise):
    the ring runs recursive doubling below ``n`` elements, the segmented ring runs the
    plain ring below ``n`` x its segment count (``segment_bytes`` 0, what the fixed
    rules pass, means one segment: always), Rabenseifner runs basic_linear below
    2^floor(log2 n) elements. ``nonoverlapping`` is modelled as forced with the tuned
    reduce forced to basic_linear too (the backend does so): reduce to 0 as ``linear``.
    """
    if algorithm not in ALGORITHMS:
        raise unknown_name("mpi algorithm", algorithm, ALGORITHMS)
    check_n(n)
    check_param(algorithm, "elements", m, 0)
    check_param(algorithm, "item_bytes", item_bytes, 1)
    pof2 = 1 << (n.bit_length() - 1)
    if algorithm in ("basic_linear", "nonoverlapping"):
        return "linear", linear(n), ""
    if algorithm == "recursive_doubling":
        return "rd", rd(n), ""
    if algorithm == "rabenseifner":
        if m < pof2:
            return "linear", linear(n), f"M < {pof2}: Open MPI falls back to basic_linear"
        return "rabenseifner", rabenseifner(n), ""
    note = ""
    if algorithm == "segmented_ring":
        segcount = segment_count(segment_bytes, item_bytes, m)
        if m < n * segcount:
            note = f"M < N*segcount = {n * segcount}: Open MPI falls back to the plain ring"
    if m < n:
        return "rd", rd(n), (note + "; " if note else "") + "M < N: the ring falls back to recursive doubling"
    return "ring:ompi", ring(n, "ompi"), note


def segment_count(segment_bytes: int, item_bytes: int, count: int) -> int:
    """Elements per segment of ``segment_bytes`` (Open MPI's ``COLL_BASE_COMPUTED_SEGCOUNT``): the whole
    number of items nearest above half an item, and the whole message of ``count`` items when the
    segment is below one item (0 included) or not below the message."""
    if not item_bytes <= segment_bytes < item_bytes * count:
        return count
    seg, rest = divmod(segment_bytes, item_bytes)
    return seg + 1 if rest > item_bytes >> 1 else seg


def default_plan(n: int, m: int, item_bytes: int) -> tuple[str, str, Plan | SegmentedPlan, str]:
    """(algorithm, plan text, plan, note): what Open MPI 4.1 runs for ``MPI_Allreduce(SUM)`` by default.

    :func:`fixed_decision` for ``m`` elements of ``item_bytes`` bytes over ``n`` ranks, then
    :func:`algorithm_plan` of its choice with the segment size the fixed rules pass (0).

    Raises:
        InvalidArgument: the rules pick ``nonoverlapping`` (N >= 128, small messages),
            whose reduce is a tree of the tuned reduce that no plan here models.

    >>> default_plan(3, 1000, 8)[:2]
    ('ring', 'ring:ompi')
    >>> default_plan(8, 1 << 20, 4)[:2]
    ('rabenseifner', 'rabenseifner')
    """
    check_param("ompi:default", "elements", m, 0)
    check_param("ompi:default", "item_bytes", item_bytes, 1)
    nbytes = m * item_bytes
    algorithm = fixed_decision(n, nbytes)
    if algorithm == "nonoverlapping":
        raise InvalidArgument(
            f"plan 'ompi:default': at N={n} and {nbytes} bytes Open MPI 4.1 picks nonoverlapping "
            "(its tuned reduce's own tree, then a broadcast), which fpreduce does not model; "
            "force an algorithm (e.g. 'rd' with coll_tuned_allreduce_algorithm 3)"
        )
    text, plan, note = algorithm_plan(algorithm, n, m, item_bytes)
    why = f"Open MPI 4.1's fixed rules: N={n}, {nbytes} bytes -> {algorithm}"
    return algorithm, text, plan, why + (f"; {note}" if note else "")

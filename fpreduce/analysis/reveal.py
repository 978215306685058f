"""Reveal: the summation tree of a black-box reduction, as a plan verified bit for bit.

``revelation(fn, n, format=...)`` finds the tree a function ``fn`` (a 1-D array of ``n``
values of the format's storage dtype -> the reduced scalar) sums along, with masked probes
(FPRev, Xie et al., USENIX ATC 2025): every summand is the unit ``u`` except ``+M`` at
leaf ``i`` and ``-M`` at leaf ``j``, ``M`` the smallest power of two with ``(n-2) u``
absorbed by ``M`` *and* by ``-M`` in the format (:func:`probe_scale`). In a tree that
rounds every partial sum to the format, the units added beside ``M`` or ``-M`` inside the
smallest subtree holding both vanish, ``M - M`` is exactly 0, and the units outside that
subtree are counted exactly: ``fn`` returns ``(n - L[i, j]) u`` with ``L[i, j]`` the
number of leaves of that subtree (the size of the lowest common ancestor).

Two ways to rebuild the tree from those sizes (``method``):

* ``basic``: all ``n (n-1) / 2`` pairs, then leaves join bottom-up by increasing size
  (FPRev's basic algorithm; nodes of more than two children, fused multi-term additions,
  show as such);
* ``fast`` (default): a pivot leaf ``q`` of a subtree ``G`` is probed against the rest
  of ``G`` (``|G| - 1`` calls): the sizes seen from ``q`` are its ancestors, the leaves at
  one size are the sibling subtree of ``q``'s path there, and each is revealed the same
  way. Pivots are drawn at random (``seed``): a left fold of 1024 takes about 2n calls,
  balanced trees about n log2(n) / 2.

Whatever the method, the revealed plan is then run by :func:`fpreduce.reduce` against
``fn`` on ``verify`` random inputs in the format (normal, heavy-tailed, cancelling): the
verdict is ``tree`` only with 0 differing bits. When no binary tree in the format
explains the probes (cancellation comes back exact: a wider accumulator; sizes that are
not a tree; a node of k > 2 children) the verdict says so, with the probe as evidence.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core.engine import reduce
from fpreduce.core.formats import Format, as_native, format_name, get_format
from fpreduce.core.rounding import round_to
from fpreduce.plans import FAMILIES, Plan, Tree, fold, parse

__all__ = [
    "METHODS",
    "NotATree",
    "REGION_VERIFY",
    "Region",
    "Revelation",
    "Seen",
    "canonical",
    "confirm_regions",
    "hazard_map",
    "knob_map",
    "match_family",
    "probe_scale",
    "regions",
    "reveal",
    "revelation",
    "tree_text",
]

#: How the tree is rebuilt from the probes: all pairs, or pivots.
METHODS = ("fast", "basic")

#: Verdicts: one binary tree explains every bit; no binary tree in the format does (with
#: the probe that shows it); the function is not one fixed tree (its outputs vary between
#: calls, or the revealed tree fails on random data).
Verdict = Literal["tree", "wider accumulator", "not a binary tree", "no fixed tree"]

#: The accumulators tried, narrowest first, when cancellation comes back exact in the format.
WIDER = ("fp32", "fp64")

_BLOCK_CELLS = 1 << 22  # (n x columns) values verified per call of reduce: bounded memory


@dataclass(frozen=True, eq=False)
class Revelation:
    """What a reveal found and how it was checked.

    Attributes:
        n, format: the number of summands and the format of every value and partial sum.
        verdict: ``tree`` (``plan`` explains every bit checked), ``wider accumulator``
            (``plan`` does with every partial sum rounded to ``accumulate``, the result
            once to ``format``), ``not a binary tree`` or ``no fixed tree`` (``plan`` is
            None; ``evidence`` says why).
        plan: the revealed tree as a :class:`~fpreduce.plans.Plan` (children ordered by
            their smallest leaf), or None.
        evidence: one paragraph: the probe or the input that decided the verdict.
        unit, big: the probes' summand ``u`` and mask ``M`` (:func:`probe_scale`).
        calls: calls of ``fn`` to reveal (probes, the all-unit sum included).
        probe_seconds: seconds spent revealing.
        checked: random inputs summed by both ``fn`` and the plan; differing: of them,
            how many gave different bits; verify_seconds: seconds spent verifying.
        method: ``fast`` or ``basic``.
        accumulate: the format of the plan's partial sums (``format`` but for a wider accumulator).
        fused: cancellation is exact in every accumulator and one rounding of the exact sum
            (``fr.reduce(X, plan, algorithm="exact")``) gave every bit on the inputs checked: a fused
            n-term addition (verdict ``not a binary tree``: a plan's trees are binary, and a fused node
            of k < n terms inside a tree is not expressible).
    """

    n: int
    format: str
    verdict: Verdict
    plan: Plan | None
    evidence: str
    unit: float
    big: float
    calls: int
    probe_seconds: float
    checked: int = 0
    differing: int = 0
    verify_seconds: float = 0.0
    method: str = "fast"
    accumulate: str = ""
    fused: bool = False

    def __post_init__(self) -> None:
        if not self.accumulate:
            object.__setattr__(self, "accumulate", self.format)


class NotATree(InvalidArgument):
    """``reveal`` found no binary tree in the format that explains the function (``.revelation`` says why)."""

    def __init__(self, found: Revelation) -> None:
        super().__init__(f"{found.verdict}: {found.evidence}")
        self.revelation = found


def probe_scale(fmt: str | Format, n: int, accumulate: str | Format | None = None) -> tuple[float, float]:
    """The unit ``u`` and mask ``M`` of the probes of ``n`` summands of ``fmt`` summed in ``accumulate``.

    ``M = 2**e`` with ``(n - 2) u <= 2**(e - p - 1)`` (``p`` the accumulator's precision,
    default ``fmt``'s): any sum of up to ``n - 2`` units added to ``M`` or to ``-M`` (whose
    lower neighbour is half an ulp closer) rounds back to it, and no more than that, so a
    wider accumulator (``M / u`` below its own ``2**p``) keeps the units: exact cancellation
    shows. ``u = 1`` while ``M`` fits below ``fmt``'s ``2**emax``, else a smaller power of two
    (fp16 from n = 11: ``u = 2**-7`` at n = 1000; subnormal units for a wide accumulator).

    Raises:
        InvalidArgument: ``n`` over ``2**p`` of either format (sums of units would round),
            or no unit in ``fmt`` small enough (fp8 at large n, fp16 into fp64).
    """
    f = get_format(fmt)
    a = f if accumulate is None else get_format(accumulate)
    most = 2 ** min(f.precision, a.precision)
    if not 1 <= n <= most:
        raise InvalidArgument(f"n must be 1..{most} to reveal a sum of {f.name} (counts of units exact), got {n}")
    ratio = a.precision + 1 + max(0, math.ceil(math.log2(max(n - 2, 1))))  # log2(M / u)
    top = min(f.emax, ratio)
    if top - ratio < f.emin - f.precision + 1:
        into = "" if a is f else f" summed in {a.name}"
        raise InvalidArgument(f"n={n} is too large to reveal {f.name}{into}: its range holds no mask M for it")
    return 2.0 ** (top - ratio), 2.0**top


#: probe calls between two heartbeats of a reveal's progress
_TICK = 512


class _Probes:
    """``fn`` under masked probes: the size of the subtree that joins two leaves (``tick()`` every
    :data:`_TICK` calls: a heartbeat for progress)."""

    def __init__(
        self, fn: Callable[[Any], Any], n: int, f: Format, a: Format, tick: Callable[[], None] | None = None
    ) -> None:
        self.fn, self.n, self.f, self.tick = fn, n, f, tick
        self.unit, self.big = probe_scale(f, n, a)
        self.base = as_native(np.full(n, self.unit), f)
        self.calls = 0

    def value(self, x: Any) -> float:
        """``fn(x)`` as a float64 scalar (refusing a vector or an exception, in one line)."""
        self.calls += 1
        if self.tick is not None and self.calls % _TICK == 0:
            self.tick()
        return call_scalar(self.fn, x)

    def size(self, i: int, j: int) -> int:
        """L[i, j]: the leaves of the smallest subtree holding i and j, from ``fn``'s count of the others."""
        x = self.base.copy()
        x[i], x[j] = self.big, -self.big
        v = self.value(x)
        count = v / self.unit
        if not (math.isfinite(count) and count == int(count) and 0 <= count <= self.n - 2):
            raise _Refused(f"probe +M at {i}, -M at {j} returned {v!r}, not a count of units {self.unit!r}")
        return self.n - int(count)


class _Refused(Exception):
    """The probes show no binary tree in the format (the message is the evidence; ``exact``: exact cancellation)."""

    def __init__(self, evidence: str, exact: bool = False) -> None:
        super().__init__(evidence)
        self.exact = exact


def call_scalar(fn: Callable[[Any], Any], x: Any) -> float:
    """``fn(x)`` as a float64 scalar: numpy scalars, 0-d arrays, torch tensors, Python floats.

    Raises:
        InvalidArgument: ``fn`` raised, or returned no scalar.
    """
    try:
        out = fn(x)
    except Exception as e:  # the black box's own failure, whatever it is: one line
        raise InvalidArgument(f"the function raised {type(e).__name__}: {e}") from None
    if hasattr(out, "detach"):  # a torch tensor (any dtype: its values are exact in float64)
        out = out.detach().cpu().double().numpy()
    try:
        a = np.asarray(out)
        if a.ndim != 0:
            raise InvalidArgument(f"the function must return one scalar, got shape {a.shape}")
        return float(a.astype(np.float64))
    except (TypeError, ValueError) as e:
        if isinstance(e, InvalidArgument):
            raise
        raise InvalidArgument(f"the function must return one number, got {type(out).__name__}") from None


def _reveal_fast(probes: _Probes, rng: np.random.Generator) -> Tree:
    """The tree by pivots: each subtree's pivot against the rest of it (no recursion: trees are deep)."""
    spines: list[tuple[int, list[int]]] = []  # per task: its pivot, the tasks of its siblings up the path
    tasks: list[list[int]] = [list(range(probes.n))]
    for group in tasks:  # (grows while walked)
        q = group[int(rng.integers(len(group)))]
        sizes: dict[int, list[int]] = {}
        for j in group:
            if j != q:
                sizes.setdefault(probes.size(q, j), []).append(j)
        kids = []
        for sib in siblings(q, sizes, probes.n):
            kids.append(len(tasks))
            tasks.append(sib)
        spines.append((q, kids))
    return assemble(tasks, spines)


def siblings(q: int, sizes: dict[int, list[int]], n: int) -> list[list[int]]:
    """The sibling subtrees up pivot ``q``'s path (their leaves), from the sizes ``q``'s probes saw.

    Raises:
        _Refused: sizes no binary tree has (the evidence; ``exact`` when cancellation came back exact).
    """
    below = 1
    out = []
    for s in sorted(sizes):
        below += len(sizes[s])
        if s != below:
            raise _Refused(_not_subtree(q, s, below, sizes, n), exact=len(sizes) == 1 and s == 2 < below)
        out.append(sizes[s])
    return out


def assemble(tasks: Sequence[Sequence[int]], spines: Sequence[tuple[int, Sequence[int]] | None]) -> Tree:
    """The tree of a pivot search: task t's pivot joined, in turn, with the trees of its sibling tasks.

    A task without a spine (None or past the list: a single leaf) is that leaf; a task's siblings
    come after it.
    """
    built: list[Tree] = [0] * len(tasks)
    for t in range(len(tasks) - 1, -1, -1):
        spine = spines[t] if t < len(spines) else None
        q, kids = spine if spine is not None else (tasks[t][0], [])
        node: Tree = q
        for k in kids:
            node = (node, built[k])
        built[t] = node
    return built[0]


def _not_subtree(q: int, s: int, below: int, sizes: dict[int, list[int]], n: int) -> str:
    """The evidence of a pivot's sizes that no binary tree has."""
    if len(sizes) == 1 and s == 2 and below > 2:
        return (
            f"cancellation comes back exact: with +M at leaf {q}, -M at any of {below - 1} other leaves "
            f"returns all {n - 2} other units, as if {q} were added first to each of them: the sum is not "
            "rounded to the format at every addition (a wider accumulator, or one rounding of the whole sum)"
        )
    leaves = sorted(sizes[s])
    shown = ", ".join(map(str, leaves[:8])) + (", ..." if len(leaves) > 8 else "")
    if s == 2:
        return _exact_group([q, *leaves], n)
    return (
        f"the probes of leaf {q} say the subtree joining it with leaves {shown} holds {s} leaves, "
        f"but {below} leaves lie within it: not one binary tree (a fused addition of more than two terms, "
        "or a sum that is not a tree in the format)"
    )


def _reveal_basic(probes: _Probes) -> Tree:
    """FPRev's basic algorithm: every pair probed, leaves joined bottom-up by increasing subtree size."""
    n = probes.n
    L = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            L[i, j] = L[j, i] = probes.size(i, j)
    root = _join_by_size(L)
    if not np.array_equal(_sizes_of(root, n), L):
        raise _Refused(_basic_evidence(L, n), exact=bool(np.all(L[~np.eye(n, dtype=bool)] == 2)) and n > 2)
    return root


def _join_by_size(L: NDArray[np.int64]) -> Tree:
    """Clusters merged level by level: the pairs of size s join the clusters they connect."""
    n = L.shape[0]
    owner = list(range(n))  # leaf -> its cluster's id
    nodes: dict[int, Any] = {i: i for i in range(n)}
    iu, ju = np.triu_indices(n, 1)
    for s in np.unique(L[iu, ju]):
        pick = L[iu, ju] == s
        links: dict[int, set[int]] = {}
        for i, j in zip(iu[pick].tolist(), ju[pick].tolist(), strict=True):
            a, b = owner[i], owner[j]
            if a != b:
                links.setdefault(a, set()).add(b)
                links.setdefault(b, set()).add(a)
        for comp in _components(links):
            new = min(comp)
            merged = tuple(nodes.pop(c) for c in sorted(comp))
            nodes[new] = merged
            for leaf in range(n):
                if owner[leaf] in comp:
                    owner[leaf] = new
    if len(nodes) != 1:
        raise _Refused("the probes leave the leaves in more than one tree")
    return next(iter(nodes.values()))  # type: ignore[no-any-return]


def _components(links: dict[int, set[int]]) -> list[set[int]]:
    seen: set[int] = set()
    out = []
    for start in links:
        if start in seen:
            continue
        comp, stack = set(), [start]
        while stack:
            c = stack.pop()
            if c not in comp:
                comp.add(c)
                stack.extend(links[c] - comp)
        seen |= comp
        out.append(comp)
    return out


def _leaf_sets(root: Any) -> list[tuple[list[list[int]], int]]:
    """Every inner node (any number of children) as (its children's leaves, its size), without recursion."""
    out: list[tuple[list[list[int]], int]] = []
    order: list[Any] = []
    stack = [root]
    while stack:
        t = stack.pop()
        if not isinstance(t, int):
            order.append(t)
            stack.extend(t)
    leaves: dict[int, list[int]] = {}
    for t in reversed(order):
        kids = [[c] if isinstance(c, int) else leaves[id(c)] for c in t]
        leaves[id(t)] = [v for k in kids for v in k]
        out.append((kids, len(leaves[id(t)])))
    return out


def _sizes_of(root: Any, n: int) -> NDArray[np.int64]:
    """L of a tree: the size of the smallest subtree joining each pair."""
    L = np.zeros((n, n), dtype=np.int64)
    for kids, size in _leaf_sets(root):
        for a in range(len(kids)):
            for b in range(a + 1, len(kids)):
                L[np.ix_(kids[a], kids[b])] = size
                L[np.ix_(kids[b], kids[a])] = size
    return L


def _basic_evidence(L: NDArray[np.int64], n: int) -> str:
    off = L[~np.eye(n, dtype=bool)]
    if np.all(off == 2) and n > 2:
        return (
            f"cancellation comes back exact: every probe (+M, -M at any two of {n} leaves) returns all "
            f"{n - 2} other units: the sum is not rounded to the format at every addition (a wider accumulator)"
        )
    links: dict[int, set[int]] = {}
    for i, j in zip(*np.nonzero(np.triu(L == 2, 1)), strict=True):
        links.setdefault(int(i), set()).add(int(j))
        links.setdefault(int(j), set()).add(int(i))
    groups: list[set[int]] = sorted((g for g in _components(links) if len(g) > 2), key=len)
    if groups:
        return _exact_group(sorted(groups[-1]), n)
    return "the probed subtree sizes are not those of any tree (a sum that is not a tree in the format)"


def _exact_group(leaves: Sequence[int], n: int) -> str:
    """The evidence of k > 2 leaves that cancel exactly with each other: a fused k-term addition."""
    shown = ", ".join(map(str, leaves[:8])) + (", ..." if len(leaves) > 8 else "")
    return (
        f"leaves {shown} cancel exactly with each other (+M at one, -M at another returns all {n - 2} other "
        f"units): these {len(leaves)} terms are summed exactly before any rounding to the format (a fused "
        f"{len(leaves)}-term addition, or a part of the tree summed in a wider format); no binary tree in the "
        "format explains it, and no plan can (a plan's trees are binary, with one accumulator format)"
    )


def _multiway(root: Any) -> str | None:
    """The evidence of a node of more than two children (FPRev's fused multi-term addition), if any."""
    wide = [(len(kids), size) for kids, size in _leaf_sets(root) if len(kids) > 2]
    if not wide:
        return None
    k, size = max(wide)
    return (
        f"{len(wide)} node(s) add more than two terms at once (the widest: {k} terms, {size} leaves): "
        "a fused multi-term addition, not a binary tree in the format"
    )


def canonical(root: Tree) -> Tree:
    """The same tree with every node's children ordered by their smallest leaf (addition commutes)."""

    def combine(a: tuple[int, Tree], b: tuple[int, Tree]) -> tuple[int, Tree]:
        return (a[0], (a[1], b[1])) if a[0] < b[0] else (b[0], (b[1], a[1]))

    out: tuple[int, Tree] = fold(root, lambda i: (i, i), combine)
    return out[1]


def _key(plan: Plan) -> tuple[bytes, bytes]:
    """Equal for two plans exactly when their trees are equal up to commutativity (compared flat: trees are deep)."""
    c = Plan(plan.name, plan.n, canonical(plan.root))
    leaves = np.array(c.leaves(), dtype=np.int64)
    return leaves.tobytes(), c.depths()[leaves].tobytes()


def _candidates(n: int) -> list[str]:
    """The project's plan texts a revealed tree over n leaves is compared with."""
    ks = sorted({*range(2, min(n, 16) + 1), *(2**e for e in range(5, n.bit_length()))})
    fixed = [f for f in ("sequential", "reverse", "pairwise", "numpy", "rd", "linear") if f in FAMILIES]
    return fixed + [f"kary:{k}" for k in ks if k < n] + [f"blocked:{k}" for k in ks if k < n]


def match_family(plan: Plan) -> list[str]:
    """The plan texts of the project's families (``sequential``, ``numpy``, ``kary:4``, ...) whose tree is
    ``plan``'s, up to commutativity; empty when none is."""
    key = _key(plan)
    out = []
    for text in _candidates(plan.n):
        other = parse(text, plan.n)
        if isinstance(other, Plan) and _key(other) == key:
            out.append(text)
    return out


def tree_text(plan: Plan) -> str:
    """The plan as the text :func:`fpreduce.plans.parse` (and ``fpreduce run``) reads: ``((0,1),2)``."""
    return str(fold(plan.root, str, lambda a, b: f"({a},{b})"))


def _random_inputs(f: Format, n: int, count: int, rng: np.random.Generator) -> Any:
    """(count, n) values of ``f`` in its storage dtype, one input per row.

    A third normal, a third heavy-tailed (binades spread), a third cancelling.
    """
    X = rng.standard_normal((count, n))  # a row per input; only the rows of each kind are drawn for it
    hi = min(20, math.floor(math.log2(f.max_finite / (4 * n))))
    lo = max(hi - 40, f.emin + 1)
    heavy = X[1::3]
    heavy[...] = np.copysign(np.exp2(rng.uniform(lo, hi, size=heavy.shape)), heavy)
    cancel = X[2::3]
    mirror = -cancel[:, rng.permutation(n)] * (1 + 2.0**-8 * rng.standard_normal(cancel.shape))
    np.copyto(cancel, mirror, where=rng.random(cancel.shape) >= 0.5)
    native = X.astype(as_native(np.zeros(1), f).dtype)  # numpy's and ml_dtypes' casts: values of the format
    if format_name(native.dtype) != f.name:  # a format without a dtype of its own (tf32)
        native = as_native(round_to(X, f), f)
    return np.ascontiguousarray(native)


_KINDS = ("normal", "heavy-tailed", "cancelling")


def _verify(
    fn: Callable[[Any], Any],
    plan: Plan,
    f: Format,
    a: Format,
    count: int,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int, str]:
    """(inputs checked, differing, evidence): ``fn`` against ``plan`` through :func:`reduce` on random inputs;
    ``progress(checked, count)`` after each block of inputs.

    The first 64 inputs are summed twice by ``fn``: a function whose bits vary between calls
    is no fixed tree, and the check stops there.
    """
    n, differing, first = plan.n, 0, ""
    chunk = max(1, min(count, _BLOCK_CELLS // n))
    for start in range(0, count, chunk):
        rows = _random_inputs(f, n, min(chunk, count - start), rng)
        got = np.array([call_scalar(fn, r.copy()) for r in rows])  # (a function may write its input)
        if (wider := _not_in(got, f)) is not None:
            return rows.shape[0], rows.shape[0], wider
        if start == 0:
            again = np.array([call_scalar(fn, r.copy()) for r in rows[:64]])
            if (varies := _differ(again, got[: again.size])).any():
                j = int(np.flatnonzero(varies)[0])
                return (
                    again.size,
                    int(varies.sum()),
                    (
                        f"{int(varies.sum())} of {again.size} inputs summed twice gave different bits "
                        f"(input {j}: {got[j]!r}, then {again[j]!r}): the function varies between calls"
                    ),
                )
        want = np.asarray(reduce(rows.T, plan, input=f, accumulate=a, output=f), dtype=np.float64)
        bad = _differ(got, want)
        if bad.any() and not first:
            j = int(np.flatnonzero(bad)[0])
            first = f"first: input {start + j} ({_KINDS[j % 3]}): fn gave {got[j]!r}, the plan {want[j]!r}"
        differing += int(bad.sum())
        if progress is not None:
            progress(start + rows.shape[0], count)
    if differing:
        first = f"{differing} of {count} random inputs differ from the probed tree (the data decide); {first}"
    return count, differing, first


def _not_in(got: NDArray[np.float64], f: Format) -> str | None:
    """The evidence of a result that is no value of ``f`` (the function returns a wider result), if any."""
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = np.asarray(round_to(got, f), dtype=np.float64)
    off = _differ(rounded, got)
    if not off.any():
        return None
    j = int(np.flatnonzero(off)[0])
    return (
        f"{int(off.sum())} of {got.size} results are no {f.name} value (input {j}: {got[j]!r}): "
        f"the function returns a result wider than {f.name}"
    )


def _differ(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.bool_]:
    return (a.view(np.uint64) != b.view(np.uint64)) & ~(np.isnan(a) & np.isnan(b))


def revelation(
    fn: Callable[[Any], Any],
    n: int,
    *,
    format: str | Format = "fp32",
    accumulate: str | Format | None = None,
    method: str = "fast",
    verify: int = 10_000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Revelation:
    """Reveal the tree ``fn`` sums ``n`` values of ``format`` along, and verify it on ``verify`` random inputs.

    Args:
        fn: a 1-D array of ``n`` values of the format's storage dtype (float32,
            float16, ml_dtypes' bfloat16, ...) -> the reduced scalar (a number, 0-d
            array or tensor).
        n: number of summands (1 .. 2**p: :func:`probe_scale`).
        format: the format of the inputs, the result and (by default) every partial sum.
        accumulate: the format of the partial sums, when not ``format``. Left out, and
            cancellation comes back exact in ``format``, the wider accumulators of
            :data:`WIDER` are probed in turn (verdict ``wider accumulator``).
        method: ``fast`` (pivots, about n log n calls at most on balanced trees) or
            ``basic`` (all n (n-1) / 2 pairs).
        verify: random inputs (normal, heavy-tailed, cancelling) to check the plan on.
        seed: the pivots' and the random inputs' seed.
        progress: ``progress(checked, verify)`` as inputs are verified, and ``progress(0, verify)`` now
            and then while probing (a heartbeat); each accumulator tried counts again. Never printed here.

    Returns:
        A :class:`Revelation`: the verdict, the plan (a tree found), the evidence and counts.

    Raises:
        InvalidArgument: bad arguments, or ``fn`` raised, returned no scalar, or does
            not sum (n units do not give n units).
    """
    f = get_format(format)
    if method not in METHODS:
        raise unknown_name("reveal method", method, METHODS)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise InvalidArgument(f"n must be an integer, got {n!r}")
    if isinstance(verify, bool) or not isinstance(verify, (int, np.integer)) or verify < 1:
        raise InvalidArgument(f"verify must be a positive number of random inputs, got {verify!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgument(f"seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    first, exact = _attempt(fn, int(n), f, get_format(accumulate or f), method, int(verify), rng, progress)
    if not exact or accumulate is not None:
        return first
    calls, notes = first.calls, []
    for wide in (get_format(w) for w in WIDER):
        if wide.precision <= f.precision:
            continue
        try:
            found, exact = _attempt(fn, int(n), f, wide, method, int(verify), rng, progress)
        except InvalidArgument as e:  # no probe of this n reaches that accumulator
            notes.append(str(e))
            break
        calls += found.calls
        if found.plan is not None:
            why = f"{first.evidence}. Summed in {wide.name} and rounded once to {f.name}: {found.evidence}"
            return replace(found, verdict="wider accumulator", evidence=why, calls=calls)
        if not exact:
            notes.append(f"in {wide.name}: {found.evidence}")
            break
        notes.append(f"cancellation is exact in {wide.name} too")
    else:  # exact in every accumulator: is it one rounding of the exact sum?
        checked, differing = fused_check(lambda X: [call_scalar(fn, r.copy()) for r in X.T], int(n), f, verify, rng)
        notes.append(fused_note(checked, differing))
        first = replace(first, fused=differing == 0)
    return replace(first, evidence="; ".join([first.evidence, *notes]), calls=calls)


def fused_check(fn: Callable[[Any], Any], n: int, f: Format, count: int, rng: np.random.Generator) -> tuple[int, int]:
    """(checked, differing): ``fn`` (an (n, E) array -> E results) against one rounding of each column's exact sum."""
    X = _random_inputs(f, n, count, rng).T
    got = np.asarray(fn(X.copy()), dtype=np.float64)
    want = np.asarray(reduce(X, "sequential", input=f, accumulate=f, algorithm="exact"), dtype=np.float64)
    return count, int(_differ(got, want).sum())


def fused_note(checked: int, differing: int) -> str:
    """The evidence sentence of :func:`fused_check`."""
    if differing:
        return f"nor is it one rounding of the exact sum ({differing} of {checked} random inputs differ)"
    return (
        f"one rounding of the exact sum explains it: 0 of {checked} random inputs differ from "
        "fr.reduce(X, plan, algorithm='exact') (a fused addition of all terms; a plan's trees are binary, "
        "so a fused node of fewer terms inside a tree has no plan)"
    )


def _attempt(
    fn: Callable[[Any], Any],
    n: int,
    f: Format,
    a: Format,
    method: str,
    verify: int,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Revelation, bool]:
    """One reveal with partial sums in ``a``, then its verification; and whether cancellation came back exact."""
    probes = _Probes(fn, n, f, a, None if progress is None else lambda: progress(0, verify))
    t0 = time.perf_counter()
    total = probes.value(probes.base.copy())
    if total != n * probes.unit:
        raise InvalidArgument(f"the function does not sum its inputs: {n} values {probes.unit!r} gave {total!r}")
    base = Revelation(
        n, f.name, "not a binary tree", None, "", probes.unit, probes.big, 0, 0.0, method=method, accumulate=a.name
    )
    try:
        root = 0 if n == 1 else _reveal_fast(probes, rng) if method == "fast" else _reveal_basic(probes)
        if (wide := _multiway(root)) is not None:
            raise _Refused(wide)
    except _Refused as e:
        return replace(base, evidence=str(e), calls=probes.calls, probe_seconds=_since(t0)), e.exact
    probed = replace(base, calls=probes.calls, probe_seconds=_since(t0))
    plan = Plan("tree", n, canonical(root))
    t1 = time.perf_counter()
    checked, differing, what = _verify(fn, plan, f, a, verify, rng, progress)
    done = replace(probed, checked=checked, differing=differing, verify_seconds=_since(t1))
    if differing:
        return replace(done, verdict="no fixed tree", evidence=what), False
    ok = f"0 of {checked} random inputs (normal, heavy-tailed, cancelling) differ in any bit"
    return replace(done, verdict="tree", plan=plan, evidence=ok), False


def _since(t0: float) -> float:
    return time.perf_counter() - t0


def reveal(
    fn: Callable[[Any], Any],
    n: int,
    *,
    format: str | Format = "fp32",
    accumulate: str | Format | None = None,
    method: str = "fast",
    verify: int = 10_000,
    seed: int = 0,
) -> Plan:
    """The plan ``fn`` sums ``n`` values of ``format`` along, verified bit for bit (see :func:`revelation`).

    ``reduce(X, plan, input=format, accumulate=format)[j] == fn(X[:, j])`` on every input
    checked (``accumulate=accumulate, output=format`` when ``accumulate`` is given).

    >>> def left_fold(x):
    ...     s = x[0]
    ...     for v in x[1:]:
    ...         s = s + v
    ...     return s
    >>> reveal(left_fold, 5, verify=100).draw()
    '((((0+1)+2)+3)+4)'

    Raises:
        NotATree: no binary tree in the format (or ``accumulate``) explains ``fn``
            (``.revelation`` has the evidence, and a wider accumulator's plan if one does).
        InvalidArgument: as :func:`revelation`.
    """
    found = revelation(fn, n, format=format, accumulate=accumulate, method=method, verify=verify, seed=seed)
    if found.plan is None or found.accumulate != get_format(accumulate or format).name:
        raise NotATree(found)
    return found.plan


@dataclass(frozen=True)
class Region:
    """A run of consecutive sizes ``n`` that one explanation covers (a row of the hazard map).

    Attributes:
        first, last: the sizes (inclusive) of the run, among those swept (or the values of the knob
            swept: threads, batch rows, ranks).
        verdict, accumulate: as :class:`Revelation`'s, the same at every size of the run (``no fixed
            tree`` also when the inputs added by :func:`confirm_regions` differ from a revealed tree).
        family: the project's plan family every size's tree is (``numpy``, ``sequential``, ...),
            or ``""``: an explicit tree (one per size) or none; over a knob at one size
            (:func:`knob_map`), ``tree 1``, ``tree 2``, ...: one tree no family names.
        sizes: how many sizes were revealed in the run; calls: their probe calls together.
        checked: random inputs (a collective's: elements) on which the run's revealed trees were run
            against the black box, in all: each size's own check plus ``extra``; differing: of them,
            those with other bits.
        extra: of ``checked``, the inputs :func:`confirm_regions` added at the run's first and last
            sizes once the regions were known (0: its sizes' own checks reached the target).
    """

    first: int
    last: int
    verdict: str
    accumulate: str
    family: str
    sizes: int
    calls: int
    checked: int = 0
    differing: int = 0
    extra: int = 0


#: What a hazard map saw at one value: (value, verdict, accumulator, families, probe calls, inputs
#: checked, differing).
Seen = tuple[int, str, str, Sequence[str], int, int, int]

#: Random inputs every region of a hazard map with a tree is verified on in all (the issue's 10^4).
REGION_VERIFY = 10_000


def confirm_regions(
    found: Sequence[Region], check: Callable[[int, int], tuple[int, int]], *, target: int = REGION_VERIFY
) -> list[Region]:
    """The regions, each with a tree verified on at least ``target`` random inputs in all.

    A hazard map checks each value it reveals on a few inputs (``verify``, 1000 by default); once
    the regions are known, a region whose values checked fewer than ``target`` in all has its
    first and last values' revealed trees run again against the black box on the rest (split
    between the two): ``check(value, count) -> (checked, differing)`` runs the tree revealed at
    ``value`` on ``count`` more random inputs. A region where any of them differ becomes
    ``no fixed tree`` (the data decide), with its counts. Regions with no tree (``not a binary
    tree``, ``no fixed tree``) are left as they are.
    """
    out = []
    for r in found:
        need = target - r.checked
        if need <= 0 or r.verdict not in ("tree", "wider accumulator"):
            out.append(r)
            continue
        at = [r.first] if r.first == r.last else [r.first, r.last]
        extra = differing = 0
        for k, value in enumerate(at):
            left = max(0, need - extra)
            if left:
                c, d = check(value, -(-left // (len(at) - k)))
                extra, differing = extra + c, differing + d
        verdict = r.verdict if differing == 0 else "no fixed tree"
        out.append(
            replace(r, verdict=verdict, checked=r.checked + extra, differing=r.differing + differing, extra=extra)
        )
    return out


def hazard_map(
    fn: Callable[[Any], Any],
    sizes: Sequence[int],
    *,
    format: str | Format = "fp32",
    verify: int = 1000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    region_verify: int = REGION_VERIFY,
) -> list[Region]:
    """Reveal ``fn`` at every size of ``sizes`` (ascending) and group the sizes one explanation covers.

    A new region starts where the verdict, the accumulator or the plan family changes: where
    the library's tree changes with ``n`` (a determinism hazard: the same data, summed as part
    of a longer or shorter vector, gives other bits). Each size's tree is checked on ``verify``
    random inputs, then each region's on ``region_verify`` in all (:func:`confirm_regions`: more
    at its first and last sizes). ``progress(done, len(sizes))`` after each size (never printed here).

    >>> [(r.first, r.last, r.family) for r in hazard_map(lambda x: x.sum(), range(1, 11), verify=10)]
    [(1, 10, 'numpy')]
    """
    ns = [int(n) for n in sizes]
    if not ns or ns != sorted(set(ns)):
        raise InvalidArgument(f"sizes must be distinct and ascending, got {list(sizes)[:8]}")
    seen: list[Seen] = []
    plans: dict[int, Revelation] = {}
    for n in ns:
        found = revelation(fn, n, format=format, verify=verify, seed=seed)
        fams = match_family(found.plan) if found.plan is not None else []
        seen.append((n, found.verdict, found.accumulate, fams or [""], found.calls, found.checked, found.differing))
        plans[n] = found
        if progress is not None:
            progress(len(seen), len(ns))
    return confirm_regions(
        regions(seen), lambda n, count: _check_more(fn, plans[n], count, [seed, 1 + ns.index(n)]), target=region_verify
    )


def _check_more(fn: Callable[[Any], Any], found: Revelation, count: int, stream: list[int]) -> tuple[int, int]:
    """(checked, differing): ``found``'s plan against ``fn`` on ``count`` more random inputs (drawn from a
    stream of their own: the seed and the place of the value swept, not the inputs the value was first checked on)."""
    assert found.plan is not None  # (confirm_regions checks regions with a tree only)
    rng = np.random.default_rng(stream)
    f, a = get_format(found.format), get_format(found.accumulate)
    checked, differing, _ = _verify(fn, found.plan, f, a, count, rng)
    return checked, differing


def knob_map(
    fn_at: Callable[[int], Callable[[Any], Any]],
    values: Sequence[int],
    n: int,
    *,
    format: str | Format = "fp32",
    verify: int = 1000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    region_verify: int = REGION_VERIFY,
) -> list[Region]:
    """Reveal ``fn_at(v)`` at one size ``n`` for every value ``v`` (ascending) of a knob that leaves the
    summands alone (threads, a matmul's batch rows) and group the values one tree covers.

    At one ``n`` two values share a region only when their trees are the same up to commutativity:
    its family's name when the project has one, else ``tree 1``, ``tree 2``, ... numbered as first
    seen (a tree no family names). A new region is a determinism hazard: the same summands give
    other bits when only the knob changed. Each value is checked on ``verify`` random inputs, each
    region on ``region_verify`` in all (:func:`confirm_regions`). ``progress(done, len(values))``
    after each value.

    >>> def box(batch):  # a left fold for one row, pairwise for more
    ...     return (lambda x: np.cumsum(x)[-1]) if batch == 1 else (lambda x: x.sum())
    >>> [(r.first, r.last, r.family) for r in knob_map(box, [1, 8, 64], 10, verify=10)]
    [(1, 1, 'sequential'), (8, 64, 'numpy')]
    """
    vs = [int(v) for v in values]
    if not vs or vs != sorted(set(vs)):
        raise InvalidArgument(f"the values swept must be distinct and ascending, got {list(values)[:8]}")
    trees: dict[tuple[bytes, bytes], str] = {}
    seen: list[Seen] = []
    plans: dict[int, Revelation] = {}
    for v in vs:
        found = revelation(fn_at(v), n, format=format, verify=verify, seed=seed)
        labels: list[str] = [""]
        if found.plan is not None:
            labels = match_family(found.plan) or [trees.setdefault(_key(found.plan), f"tree {len(trees) + 1}")]
        seen.append((v, found.verdict, found.accumulate, labels, found.calls, found.checked, found.differing))
        plans[v] = found
        if progress is not None:
            progress(len(seen), len(vs))
    return confirm_regions(
        regions(seen),
        lambda v, count: _check_more(fn_at(v), plans[v], count, [seed, 1 + vs.index(v)]),
        target=region_verify,
    )


def regions(seen: Sequence[Seen]) -> list[Region]:
    """Sizes (ascending) with what each showed (:data:`Seen`) grouped into regions: from each size on, the
    family that covers the longest run of one verdict and accumulator (the run's calls, inputs checked and
    differing added up)."""
    out: list[Region] = []
    i = 0
    while i < len(seen):  # greedy: the family that covers the longest run from here
        _, verdict, acc, fams, *_ = seen[i]
        best, end = fams[0], i + 1
        for fam in fams:
            j = i + 1
            while j < len(seen) and tuple(seen[j][1:3]) == (verdict, acc) and fam in seen[j][3]:
                j += 1
            if j > end:
                best, end = fam, j
        run = seen[i:end]
        calls, checked, differing = (sum(r[4] for r in run), sum(r[5] for r in run), sum(r[6] for r in run))
        out.append(Region(run[0][0], run[-1][0], verdict, acc, best, len(run), calls, checked, differing))
        i = end
    return out

"""Reveal a collective: the per-chunk trees of a black-box all-reduce of N ranks, verified bit for bit.

``collective_revelation(fn, ranks, elements, format=...)``: ``fn`` takes an ``(N, E)`` array of
the format's storage dtype (row r: rank r's buffer) and returns the ``(E,)`` result. Every
element carries its own masked probe (:mod:`fpreduce.analysis.reveal`: units everywhere, ``+M``
at rank i and ``-M`` at rank j in that element), so one call probes E pairs at once:

1. **Rows** (N - 1 calls): every element probes the same pivot rank ``q`` against each other
   rank: the sizes of ``q``'s ancestors in that element's tree. Consecutive elements whose rows
   agree form a *run* (a candidate chunk: a ring's chunks, Rabenseifner's blocks, NCCL's two
   trees show as different rows).
2. **Runs** (a few calls): each run continues the pivot search of
   :func:`~fpreduce.analysis.reveal.revelation` on its own, its pending probes spread over its
   elements, each probe repeated on every element the run has free. Elements of one run that
   answer one probe differently split the run into single elements, each revealed alone (a
   tree that changes inside a chunk costs calls, never a wrong tree).
3. **The plan**: one of the project's families whose per-element trees are the runs' (``ring:gloo``,
   ``rabenseifner``, ``tree:nccl:2``, ``rd``, ...), else a
   :class:`~fpreduce.plans.SegmentedPlan` whose :class:`~fpreduce.plans.Split` cuts the elements
   at the runs' edges, else one chunk per element.
4. **Verification**: the plan by :func:`fpreduce.reduce` against ``fn`` on random ``(N, E)``
   inputs (normal, heavy-tailed, cancelling elements) until ``verify`` elements are checked: the
   verdict is ``tree`` only with 0 differing; the first call is made twice (a function that
   varies between calls is no fixed tree).

A ring of N ranks on E >= N^2 elements takes N + 1 calls here (the rows reveal each chunk's fold
at once); balanced trees (rd, Rabenseifner) take N + log2(N) or so.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.analysis.reveal import (
    REGION_VERIFY,
    WIDER,
    Region,
    Seen,
    Verdict,
    _differ,
    _key,
    _not_in,
    _random_inputs,
    _Refused,
    assemble,
    canonical,
    confirm_regions,
    fused_check,
    fused_note,
    match_family,
    probe_scale,
    regions,
    siblings,
)
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.engine import reduce
from fpreduce.core.formats import Format, as_native, get_format
from fpreduce.plans import AnyPlan, Plan, SegmentedPlan, Split, hier, linear, nccl_tree, rabenseifner, rd, ring
from fpreduce.plans.ompi import default_plan

__all__ = [
    "CollectiveRevelation",
    "Run",
    "call_vector",
    "collective_revelation",
    "explicit_plan",
    "families",
    "hazard_map",
    "ranks_map",
    "reveal_collective",
]

#: Plans of one chunk per element are built up to this many elements (a tree that changes everywhere).
MAX_CHUNKS = 1 << 16


@dataclass(frozen=True)
class Run:
    """Consecutive elements ``start .. stop - 1`` that one tree (``plan``) sums."""

    start: int
    stop: int
    plan: Plan


@dataclass(frozen=True, eq=False)
class CollectiveRevelation:
    """What a collective reveal found and how it was checked.

    Attributes:
        ranks, elements, format: N, E and the format of every value.
        verdict: as :class:`~fpreduce.analysis.reveal.Revelation`'s.
        plan: the plan that explains every element (a family's, a SegmentedPlan, or one tree), or None.
        runs: the revealed trees by consecutive elements (adjacent equal trees merged).
        families: the project's plan texts whose per-element trees are the runs', up to commutativity.
        evidence: the probe or the input that decided the verdict.
        unit, big: the probes' summand and mask.
        calls: calls of ``fn`` to reveal; probe_seconds: their time.
        checked, differing: elements verified and, of them, those with other bits than the plan;
            verify_calls, verify_seconds: the calls and time that took.
        accumulate: the format of the plan's partial sums.
        fused: one rounding of each element's exact sum explains ``fn`` (as
            :class:`~fpreduce.analysis.reveal.Revelation`'s).
    """

    ranks: int
    elements: int
    format: str
    verdict: Verdict
    plan: AnyPlan | None
    runs: tuple[Run, ...]
    families: tuple[str, ...]
    evidence: str
    unit: float
    big: float
    calls: int
    probe_seconds: float
    checked: int = 0
    differing: int = 0
    verify_calls: int = 0
    verify_seconds: float = 0.0
    accumulate: str = ""
    fused: bool = False


def call_vector(fn: Callable[[Any], Any], X: Any, elements: int) -> NDArray[np.float64]:
    """``fn(X)`` as a float64 vector of ``elements`` values (numpy arrays, torch tensors, lists).

    Raises:
        InvalidArgument: ``fn`` raised, or returned no vector of ``elements`` numbers.
    """
    try:
        out = fn(X)
    except Exception as e:  # the black box's own failure, whatever it is: one line
        raise InvalidArgument(f"the function raised {type(e).__name__}: {e}") from None
    if hasattr(out, "detach"):
        out = out.detach().cpu().double().numpy()
    try:
        a = np.asarray(out).astype(np.float64)
    except (TypeError, ValueError):
        raise InvalidArgument(f"the function must return {elements} numbers, got {type(out).__name__}") from None
    if a.shape != (elements,):
        raise InvalidArgument(f"the function must return a vector of {elements} elements, got shape {a.shape}")
    return a


class _Probes:
    """``fn`` under per-element masked probes: the sizes of the subtrees that join each element's pair."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        ranks: int,
        elements: int,
        f: Format,
        a: Format,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self.fn, self.ranks, self.elements, self.tick = fn, ranks, elements, tick
        self.unit, self.big = probe_scale(f, ranks, a)
        self.base = as_native(np.full((ranks, elements), self.unit), f)
        self.calls = 0

    def sizes(self, X: Any) -> NDArray[np.int64]:
        """L per element (N where an element holds no probe) from ``fn``'s counts of the other units (``tick()``
        after each call: a heartbeat for progress)."""
        self.calls += 1
        if self.tick is not None:
            self.tick()
        v = call_vector(self.fn, X, self.elements)
        count = v / self.unit
        bad = ~(np.isfinite(count) & (count == np.round(count)) & (count >= 0) & (count <= self.ranks))
        if bad.any():
            e = int(np.flatnonzero(bad)[0])
            raise _Refused(f"element {e} returned {v[e]!r}, not a count of units {self.unit!r}")
        return self.ranks - count.astype(np.int64)

    def probe(self, pairs: Sequence[tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]]) -> NDArray[np.int64]:
        """One call: +M at rank ``q``, -M at rank ``j`` in element ``e``, for each (e, q, j) arrays given."""
        X = self.base.copy()
        for e, q, j in pairs:
            X[q, e] = self.big
            X[j, e] = -self.big
        return self.sizes(X)


class _Unit:
    """The pivot search of one run of elements (``reveal``'s, its probes spread over the run)."""

    def __init__(self, start: int, stop: int, pivot: int, row: dict[int, list[int]], n: int, rng: Any) -> None:
        self.start, self.stop, self.n, self.rng = start, stop, n, rng
        self.tasks: list[list[int]] = [list(range(n))]
        self.spines: list[tuple[int, list[int]] | None] = [None]
        self.pivot: dict[int, int] = {0: pivot}
        self.seen: dict[int, dict[int, list[int]]] = {0: row}
        self.need: dict[int, int] = {0: 0}
        self.queue: deque[tuple[int, int]] = deque()
        self._close(0)

    def _open(self, t: int) -> None:
        group = self.tasks[t]
        if len(group) < 2:
            return
        q = group[int(self.rng.integers(len(group)))]
        self.pivot[t], self.seen[t], self.need[t] = q, {}, len(group) - 1
        self.queue.extend((t, j) for j in group if j != q)

    def _close(self, t: int) -> None:
        kids = []
        for sib in siblings(self.pivot[t], self.seen[t], self.n):
            kids.append(len(self.tasks))
            self.tasks.append(sib)
            self.spines.append(None)
            self._open(kids[-1])
        self.spines[t] = (self.pivot[t], kids)

    def take(self) -> list[tuple[int, int, int]]:
        """The probes of this call (task, pivot, other), at most one per element of the run."""
        out: list[tuple[int, int, int]] = []
        while self.queue and len(out) < self.stop - self.start:
            t, j = self.queue.popleft()
            out.append((t, self.pivot[t], j))
        return out

    def answer(self, t: int, j: int, size: int) -> None:
        self.seen[t].setdefault(size, []).append(j)
        self.need[t] -= 1
        if self.need[t] == 0:
            self._close(t)

    def plan(self) -> Plan:
        return Plan("tree", self.n, canonical(assemble(self.tasks, self.spines)))


def _rows(pr: _Probes, q: int) -> NDArray[np.int64]:
    """(N, E) sizes: row j is every element's probe of pivot ``q`` against rank ``j`` (row q unused)."""
    rows = np.zeros((pr.ranks, pr.elements), dtype=np.int64)
    everywhere = np.arange(pr.elements)
    for j in range(pr.ranks):
        if j != q:
            rows[j] = pr.probe([(everywhere, np.full_like(everywhere, q), np.full_like(everywhere, j))])
    return rows


def _unit(start: int, stop: int, q: int, rows: NDArray[np.int64], rng: Any) -> _Unit:
    n = rows.shape[0]
    row: dict[int, list[int]] = {}
    for j in range(n):
        if j != q:
            row.setdefault(int(rows[j, start]), []).append(j)
    try:
        return _Unit(start, stop, q, row, n, rng)
    except _Refused as e:
        raise _Refused(f"element {start}: {e}", exact=e.exact) from None


def _search(pr: _Probes, rng: np.random.Generator) -> list[Run]:
    """The runs of elements and their trees (raises _Refused with the first element no tree explains)."""
    n, E = pr.ranks, pr.elements
    q = int(rng.integers(n))
    rows = _rows(pr, q) if n > 1 else np.zeros((1, E), dtype=np.int64)
    starts = [0, *(np.flatnonzero(np.any(rows[:, 1:] != rows[:, :-1], axis=0)) + 1).tolist(), E]
    units = [_unit(a, b, q, rows, rng) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    while any(u.queue for u in units):
        work = [(u, u.take()) for u in units if u.queue]
        pairs, picks = [], []
        for u, probes in work:
            k = np.arange(u.stop - u.start) % len(probes)
            qs, js = np.array([p[1] for p in probes]), np.array([p[2] for p in probes])
            pairs.append((np.arange(u.start, u.stop), qs[k], js[k]))
            picks.append(k)
        L = pr.probe(pairs)
        split: list[_Unit] = []
        for (u, probes), k in zip(work, picks, strict=True):
            got = L[u.start : u.stop]
            try:
                for idx, (t, _, j) in enumerate(probes):
                    seen = got[k == idx]
                    if (seen != seen[0]).any():
                        raise _Refused(f"elements {u.start}..{u.stop - 1} disagree")
                    u.answer(t, j, int(seen[0]))
            except _Refused as e:
                if u.stop - u.start == 1:
                    raise _Refused(f"element {u.start}: {e}", exact=e.exact) from None
                split.append(u)
        for u in split:  # a tree changes inside the run: its elements one by one, from their rows
            at = units.index(u)
            units[at : at + 1] = [_unit(e, e + 1, q, rows, rng) for e in range(u.start, u.stop)]
    return _merged(units)


def _merged(units: Sequence[_Unit]) -> list[Run]:
    out: list[Run] = []
    for u in units:
        p = u.plan()
        if out and _key(out[-1].plan) == _key(p):
            out[-1] = Run(out[-1].start, u.stop, out[-1].plan)
        else:
            out.append(Run(u.start, u.stop, p))
    return out


def _candidates(n: int, f: Format, elements: int | None = None) -> dict[str, AnyPlan]:
    """The project's collective plans over n ranks (gloo's ring sized for the format's bytes, named
    ``ring:gloo`` where it cuts ``elements`` as the plan text's 4-byte ring does; with ``elements``, also
    Open MPI's own choice for that message, ``ompi:default``)."""
    item = _item_bytes(f)
    out: dict[str, AnyPlan] = {"rd": rd(n), "linear": linear(n), "rabenseifner": rabenseifner(n)}
    for conv in ("nccl", "mpich", "ompi"):
        out[f"ring:{conv}"] = ring(n, conv)
    glo = ring(n, "gloo", item_bytes=item)  # gloo cuts segments by bytes: the text's 4-byte ring, where it cuts alike
    alike = item == 4 or (
        elements is not None and glo.bounds(elements).tolist() == ring(n, "gloo").bounds(elements).tolist()
    )
    out["ring:gloo" if alike else f"ring:gloo (item_bytes={item})"] = glo
    for g in range(1, n + 1):
        if n % g == 0:
            out[f"tree:nccl:{g}"] = nccl_tree(n, g)
            out[f"hier:{g}"] = hier(n, g)
    if elements is not None and n >= 2:
        with contextlib.suppress(InvalidArgument):  # a choice no plan models (nonoverlapping at N >= 128)
            out["ompi:default"] = default_plan(n, elements, item)[2]
    return out


def _item_bytes(f: Format) -> int:
    """Bytes of one element of ``f`` in its storage dtype (gloo sizes its ring's segments by bytes)."""
    return int(as_native(np.zeros(1), f).dtype.itemsize)


def _explains(plan: AnyPlan, runs: Sequence[Run], E: int) -> bool:
    """Whether every element's tree under ``plan`` (at E elements) is its run's, up to commutativity."""
    if isinstance(plan, Plan):
        return all(_key(r.plan) == _key(plan) for r in runs)
    if not isinstance(plan, SegmentedPlan):
        return False
    b = plan.bounds(E)
    i = 0
    for c in range(len(plan.trees)):
        lo, hi = int(b[c]), int(b[c + 1])
        if lo == hi:
            continue
        want = _key(plan.trees[c])
        while runs[i].stop <= lo:
            i += 1
        k = i
        while k < len(runs) and runs[k].start < hi:
            if _key(runs[k].plan) != want:
                return False
            k += 1
    return True


def families(runs: Sequence[Run], ranks: int, elements: int, format: str | Format = "fp32") -> list[str]:
    """The project's plan texts (one tree's families, then the collectives') that explain the runs."""
    found = match_family(runs[0].plan) if len(runs) == 1 else []
    f = get_format(format)
    known = _candidates(ranks, f, elements)
    return found + [t for t, p in known.items() if t not in found and _explains(p, runs, elements)]


def explicit_plan(runs: Sequence[Run], ranks: int, elements: int, format: str | Format = "fp32") -> AnyPlan:
    """A plan of the runs' trees: one tree, a SegmentedPlan whose Split cuts at the runs' edges, or a chunk
    per element.

    Raises:
        InvalidArgument: no Split cuts there and the elements are more than :data:`MAX_CHUNKS`.
    """
    if len(runs) == 1:
        return runs[0].plan
    f = get_format(format)
    item = _item_bytes(f)
    cuts = {r.start for r in runs[1:]}
    for k in range(2, min(elements, 4 * ranks) + 1):
        kinds = [Split("even"), Split("ceil"), Split("gloo", item_bytes=item), Split("horovod")]
        kinds += [Split("halving")] if k & (k - 1) == 0 else []
        for split in kinds:
            b = np.concatenate([[0], np.cumsum(split.sizes(elements, k))])
            if cuts <= set(b.tolist()):
                trees = [_run_at(runs, min(int(lo), elements - 1)).plan for lo in b[:-1]]
                return SegmentedPlan(f"revealed:{split.kind}", ranks, tuple(trees), split)
    if elements > MAX_CHUNKS:
        raise InvalidArgument(f"the trees change at {len(cuts)} places no split of the project cuts at")
    trees = [_run_at(runs, e).plan for e in range(elements)]
    return SegmentedPlan("revealed:elements", ranks, tuple(trees), Split("even"))


def _run_at(runs: Sequence[Run], e: int) -> Run:
    return next(r for r in runs if r.start <= e < r.stop)


def _verify(
    fn: Callable[[Any], Any],
    plan: AnyPlan,
    f: Format,
    a: Format,
    shape: tuple[int, int],
    count: int,
    rng: Any,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int, int, str]:
    """(elements checked, differing, calls, evidence): ``fn`` against ``plan`` on random (N, E) inputs;
    ``progress(elements checked, of the calls' elements)`` after each call."""
    n, E = shape
    calls = max(1, math.ceil(count / E))
    differing, first = 0, ""
    for c in range(calls):
        X = np.ascontiguousarray(_random_inputs(f, n, E, rng).T)
        got = call_vector(fn, X.copy(), E)
        if (wider := _not_in(got, f)) is not None:
            return E, E, c + 1, wider
        if c == 0 and (varies := _differ(call_vector(fn, X.copy(), E), got)).any():
            e = int(np.flatnonzero(varies)[0])
            return (
                E,
                int(varies.sum()),
                2,
                (
                    f"{int(varies.sum())} of {E} elements summed twice gave different bits (element {e}): "
                    "the function varies between calls"
                ),
            )
        want = np.asarray(reduce(X, plan, input=f, accumulate=a, output=f), dtype=np.float64)
        bad = _differ(got, want)
        if bad.any() and not first:
            e = int(np.flatnonzero(bad)[0])
            first = f"first: call {c}, element {e}: fn gave {got[e]!r}, the plan {want[e]!r}"
        differing += int(bad.sum())
        if progress is not None:
            progress((c + 1) * E, calls * E)
    if differing:
        first = f"{differing} of {calls * E} random elements differ from the probed trees (the data decide); {first}"
    return calls * E, differing, calls + 1, first


def collective_revelation(
    fn: Callable[[Any], Any],
    ranks: int,
    elements: int,
    *,
    format: str | Format = "fp32",
    accumulate: str | Format | None = None,
    verify: int = 10_000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> CollectiveRevelation:
    """Reveal the per-element trees an all-reduce ``fn`` of ``ranks`` rows sums along, and verify them.

    Args:
        fn: an (N, E) array of the format's storage dtype (row r: rank r's buffer) -> the (E,)
            result (an array, tensor or list of numbers).
        ranks, elements: N (1 .. 2**p of the format) and E (>= 1).
        format, accumulate, seed: as :func:`~fpreduce.analysis.reveal.revelation` (a wider
            accumulator is tried when cancellation comes back exact and ``accumulate`` is left out).
        verify: elements to check the plan on (random inputs, whole calls of E elements).
        progress: ``progress(checked, of)`` as elements are verified (and ``progress(0, of)`` after each probe
            call: a heartbeat); each accumulator tried counts again. Never printed here.

    Returns:
        A :class:`CollectiveRevelation`.

    Raises:
        InvalidArgument: bad arguments; ``fn`` raised, returned no (E,) vector, or does not sum.

    >>> import fpreduce as fr
    >>> ring = fr.plans.parse("ring:gloo", 4)
    >>> found = collective_revelation(lambda X: fr.reduce(X, ring), 4, 16, verify=64)
    >>> found.verdict, found.families[:1], found.calls
    ('tree', ('ring:gloo',), 5)
    """
    f = get_format(format)
    for what, v in (("ranks", ranks), ("elements", elements), ("verify", verify)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(f"{what} must be a positive integer, got {v!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgument(f"seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    shape = (int(ranks), int(elements))
    first, exact = _attempt(fn, shape, f, get_format(accumulate or f), int(verify), rng, progress)
    if not exact or accumulate is not None:
        return first
    calls, notes = first.calls, []
    for wide in (get_format(w) for w in WIDER if get_format(w).precision > f.precision):
        try:
            found, exact = _attempt(fn, shape, f, wide, int(verify), rng, progress)
        except InvalidArgument as e:
            notes.append(str(e))
            break
        calls += found.calls
        if found.plan is not None:
            why = f"{first.evidence}. Summed in {wide.name} and rounded once to {f.name}: {found.evidence}"
            return replace(found, verdict="wider accumulator", evidence=why, calls=calls)
        notes.append(f"in {wide.name}: {found.evidence}")
        if not exact:
            break
    else:  # exact in every accumulator: is it one rounding of each element's exact sum?
        E = shape[1]
        checked, differing = fused_check(_by_calls(fn, E), shape[0], f, E * max(1, math.ceil(verify / E)), rng)
        notes.append(fused_note(checked, differing))
        first = replace(first, fused=differing == 0)
    return replace(first, evidence="; ".join([first.evidence, *notes]), calls=calls)


def _by_calls(fn: Callable[[Any], Any], E: int) -> Callable[[Any], NDArray[np.float64]]:
    """``fn`` over (N, k E) arrays, E columns per call."""

    def many(X: Any) -> NDArray[np.float64]:
        return np.concatenate([call_vector(fn, X[:, c : c + E].copy(), E) for c in range(0, X.shape[1], E)])

    return many


def _attempt(
    fn: Callable[[Any], Any],
    shape: tuple[int, int],
    f: Format,
    a: Format,
    verify: int,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[CollectiveRevelation, bool]:
    """One reveal with partial sums in ``a``, then its verification; and whether cancellation came back exact."""
    of = max(1, math.ceil(verify / shape[1])) * shape[1]  # (the elements _verify checks: whole calls)
    pr = _Probes(fn, shape[0], shape[1], f, a, None if progress is None else lambda: progress(0, of))
    t0 = time.perf_counter()
    total = call_vector(fn, pr.base.copy(), shape[1])
    pr.calls += 1
    if (total != shape[0] * pr.unit).any():
        e = int(np.flatnonzero(total != shape[0] * pr.unit)[0])
        raise InvalidArgument(
            f"the function does not sum its rows: {shape[0]} values {pr.unit!r} gave {total[e]!r} at element {e}"
        )
    base = CollectiveRevelation(
        *shape, f.name, "not a binary tree", None, (), (), "", pr.unit, pr.big, 0, 0.0, accumulate=a.name
    )
    try:
        runs = _search(pr, rng)
    except _Refused as e:
        return replace(base, evidence=str(e), calls=pr.calls, probe_seconds=time.perf_counter() - t0), e.exact
    names = families(runs, *shape, f)
    known = _candidates(shape[0], f, shape[1])
    plan = next((known[t] for t in names if t in known), None) or explicit_plan(runs, *shape, f)
    seconds = time.perf_counter() - t0
    probed = replace(base, runs=tuple(runs), families=tuple(names), calls=pr.calls, probe_seconds=seconds)
    t1 = time.perf_counter()
    checked, differing, vcalls, what = _verify(fn, plan, f, a, shape, verify, rng, progress)
    seconds = time.perf_counter() - t1
    done = replace(probed, checked=checked, differing=differing, verify_calls=vcalls, verify_seconds=seconds)
    if differing:
        return replace(done, verdict="no fixed tree", evidence=what), False
    ok = f"0 of {checked} random elements (normal, heavy-tailed, cancelling) differ in any bit"
    return replace(done, verdict="tree", plan=plan, evidence=ok), False


def reveal_collective(
    fn: Callable[[Any], Any],
    ranks: int,
    elements: int,
    *,
    format: str | Format = "fp32",
    accumulate: str | Format | None = None,
    verify: int = 10_000,
    seed: int = 0,
) -> AnyPlan:
    """The plan an all-reduce ``fn`` follows, verified bit for bit (see :func:`collective_revelation`).

    Raises:
        InvalidArgument: as :func:`collective_revelation`, or no binary tree in the format
            (or ``accumulate``) explains ``fn`` (the message has the verdict and evidence).
    """
    found = collective_revelation(fn, ranks, elements, format=format, accumulate=accumulate, verify=verify, seed=seed)
    if found.plan is None or found.accumulate != get_format(accumulate or format).name:
        raise InvalidArgument(f"{found.verdict}: {found.evidence}")
    return found.plan


def hazard_map(
    fn: Callable[[Any], Any],
    ranks: int,
    sizes: Sequence[int],
    *,
    format: str | Format = "fp32",
    verify: int = 1000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    region_verify: int = REGION_VERIFY,
) -> list[Region]:
    """Reveal the all-reduce ``fn`` at every element count of ``sizes`` (ascending) and group the counts
    one explanation covers: where the library's trees change with the message size (a size-dependent
    fallback or algorithm choice: the same data, sent in a longer or shorter message, gives other bits).

    ``fn`` takes (ranks, E) arrays of any E of ``sizes``. A region's family is a collective plan of the
    project whose per-element trees are those revealed at every size of the region. Each count's plan is
    checked on ``verify`` random elements (whole calls), each region's on ``region_verify`` in all
    (:func:`~fpreduce.analysis.reveal.confirm_regions`: more at its first and last counts).
    ``progress(done, len(sizes))`` after each element count (never printed here).
    """
    es = [int(e) for e in sizes]
    if not es or es != sorted(set(es)) or es[0] < 1:
        raise InvalidArgument(f"sizes must be distinct, ascending and positive, got {list(sizes)[:8]}")
    seen: list[Seen] = []
    plans: dict[int, CollectiveRevelation] = {}
    for e in es:
        found = collective_revelation(fn, ranks, e, format=format, verify=verify, seed=seed)
        seen.append((e, found.verdict, found.accumulate, _labels(found), found.calls, found.checked, found.differing))
        plans[e] = found
        if progress is not None:
            progress(len(seen), len(es))
    return confirm_regions(
        regions(seen), lambda e, count: _check_more(fn, plans[e], count, [seed, 1 + es.index(e)]), target=region_verify
    )


def _check_more(
    fn: Callable[[Any], Any], found: CollectiveRevelation, count: int, stream: list[int]
) -> tuple[int, int]:
    """(elements checked, differing): ``found``'s plan against ``fn`` on at least ``count`` more random elements
    (whole calls, from a stream of their own: the seed and the place of the value swept)."""
    assert found.plan is not None  # (confirm_regions checks regions with a tree only)
    f, a = get_format(found.format), get_format(found.accumulate)
    shape = (found.ranks, found.elements)
    checked, differing, _, _ = _verify(fn, found.plan, f, a, shape, count, np.random.default_rng(stream))
    return checked, differing


def ranks_map(
    open_at: Callable[[int], contextlib.AbstractContextManager[Callable[[Any], Any]]],
    ranks: Sequence[int],
    elements: int,
    *,
    format: str | Format = "fp32",
    verify: int = 1000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    region_verify: int = REGION_VERIFY,
) -> list[Region]:
    """Reveal an all-reduce of ``elements`` elements on every number of ranks N of ``ranks`` (ascending)
    and group the N one explanation covers: where the library changes its algorithm with the world size
    (an elastic job that loses a rank sums the same gradients along another tree).

    ``open_at(N)`` is a context manager that gives the all-reduce of N ranks (a live group, launched
    once per N: :class:`fpreduce.backends.live.LiveAllReduce`). A region's family is a collective plan
    of the project that explains every N of the region (Open MPI's own choice, ``ompi:default``, only
    where no named algorithm does: it explains every N by construction and would hide the switch). Each N's
    plan is checked on ``max(verify, region_verify)`` random elements while its group is open (starting a
    group costs seconds, a call milliseconds: opening one again to top a region up cost more than checking
    every N on the region's whole target), so every region has at least ``region_verify``.
    ``progress(done, len(ranks))`` after each N.

    >>> import fpreduce as fr
    >>> from contextlib import nullcontext
    >>> def open_at(n):  # a library that rings up to 4 ranks and doubles recursively beyond
    ...     plan = fr.plans.parse("ring:gloo" if n <= 4 else "rd", n)
    ...     return nullcontext(lambda X: fr.reduce(X, plan))
    >>> [(r.first, r.last, r.family) for r in ranks_map(open_at, range(3, 7), 36, verify=36, region_verify=36)]
    [(3, 4, 'ring:gloo'), (5, 6, 'rd')]
    """
    ns = [int(n) for n in ranks]
    if not ns or ns != sorted(set(ns)) or ns[0] < 1:
        raise InvalidArgument(f"ranks must be distinct, ascending and positive, got {list(ranks)[:8]}")
    seen: list[Seen] = []
    each = max(verify, region_verify)
    for n in ns:
        with open_at(n) as fn:
            found = collective_revelation(fn, n, elements, format=format, verify=each, seed=seed)
        seen.append((n, found.verdict, found.accumulate, _labels(found), found.calls, found.checked, found.differing))
        if progress is not None:
            progress(len(seen), len(ns))
    return regions(seen)


def _labels(found: CollectiveRevelation) -> list[str]:
    """The families a hazard map may name a revealed collective by: the project's collective plans first,
    ``ompi:default`` only when no named algorithm explains it (else it hides where the algorithm changes)."""
    known = _candidates(found.ranks, get_format(found.format), found.elements)
    named = [t for t in found.families if t in known]
    specific = [t for t in named if t != "ompi:default"]
    return specific or named or list(found.families) or [""]

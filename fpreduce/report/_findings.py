"""The findings of a run in words: one paragraph each, every number computed from its files.

Every sentence compares like with like: an arm's divergence is measured against the arm
it names in ``compare_to`` (its fixed-order twin by default), in the wider of the two
output formats (said so when they differ); run-to-run variability is the arm against
itself relaunched with an independently seeded order; errors are normwise and backward
errors against the exact sum, which compare across formats; a claim that one setting
beats another is made only for two arms that differ in that setting alone, and its verb
follows the numbers. Numbers are decimal with three significant digits (exact values
as ``float.hex`` are in the report's appendix). NaN/Inf in the metrics are counted
and left out of statistics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import get_format
from fpreduce.core.metrics import backward_bounds
from fpreduce.plans import parse
from fpreduce.run.config import OrderPolicy
from fpreduce.run.rundir import Results

#: what shapes an arm's sum, in summary.json's words (output: the format of the result)
KEYS = ("order", "input", "accumulate", "output", "rounding", "algorithm", "average")


def num(v: float) -> str:
    """A decimal with three significant digits (``n/a`` for NaN)."""
    return "n/a" if v is None or math.isnan(v) else f"{v:.3g}"


def pct(v: float) -> str:
    """A fraction as a percentage with three significant digits; never "100%" for less than all.

    >>> pct(0.6284), pct(1.0), pct(0.99996), pct(0.0)
    ('62.8%', '100%', '99.996%', '0%')
    """
    if v is None or math.isnan(v):
        return "n/a"
    for digits in (3, 4, 5, 6):
        text = f"{100 * v:.{digits}g}"
        if v == 1 or text != "100":
            return f"{text}%"
    return ">99.9999%"


def fin(a: NDArray[np.float64]) -> NDArray[np.float64]:
    return a[np.isfinite(a)]


def median(run: Results, arm: str, col: str) -> float:
    v = fin(run.column(arm, col))
    return float(np.median(v)) if v.size else math.nan


def mean(run: Results, arm: str, col: str) -> float:
    v = fin(run.column(arm, col))
    return float(np.mean(v)) if v.size else math.nan


def arm_of(run: Results, name: str) -> dict[str, Any]:
    return next(a for a in run.arms if a["name"] == name)


def partner(run: Results, a: dict[str, Any]) -> dict[str, Any]:
    """The arm ``a`` is compared with (runs before ``compare_to``: the reference arm)."""
    name = a.get("compare_to") or run.reference
    return next((b for b in run.arms if b["name"] == name), arm_of(run, run.reference))


def out_format(a: dict[str, Any]) -> str:
    return str(a.get("output") or a.get("accumulate") or "fp32")


def is_fixed(a: dict[str, Any]) -> bool:
    return str(a.get("order", "")).startswith("fixed:")


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys of :data:`KEYS` in which two arms differ (``output`` only when it differs)."""
    return [k for k in KEYS if _val(a, k) != _val(b, k)]


def _val(a: dict[str, Any], k: str) -> str:
    return out_format(a) if k == "output" else str(a.get(k, ""))


def is_twin(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``b`` is a fixed-order arm with ``a``'s arithmetic (another arm than ``a``)."""
    return a["name"] != b["name"] and is_fixed(b) and differences(a, b) in ([], ["order"])


def pair_label(run: Results, a: dict[str, Any]) -> str:
    """``B vs A (its fixed-order twin)``, ``F vs A (not its twin: input fp32 vs bf16; compared in fp32)``."""
    b = partner(run, a)
    if is_twin(a, b):
        what = "its fixed-order twin"
    else:
        diff = [k for k in differences(a, b) if k != "order"]
        what = "not its twin: " + ", ".join(f"{k} {_val(a, k)} vs {_val(b, k)}" for k in diff)
    oa, ob = out_format(a), out_format(b)
    if oa != ob:
        wide = a.get("compared_in") or max((oa, ob), key=lambda f: get_format(f).precision)
        what += f"; compared in {wide}, the wider output format"
    return f"{a['name']} vs {b['name']} ({what})"


def status(run: Results) -> str | None:
    """``INCOMPLETE RUN: k of n steps`` for an unfinished run, else None."""
    s = run.summary
    done = s.get("steps_done", len(run.column(run.reference, "step")))
    return None if s.get("complete", False) else f"INCOMPLETE RUN: {done} of {s.get('steps', '?')} steps"


def paragraphs(run: Results) -> list[str]:
    """The findings of a loaded run (:func:`fpreduce.report.report.findings`), one paragraph each."""
    return [p for _, group in groups(run) for p in group]


def groups(run: Results) -> list[tuple[str, list[str]]]:
    """The findings by topic: (heading, paragraphs), empty topics left out."""
    s, banner = run.summary, status(run)
    done = [
        f"{banner}; every number below covers only the completed steps."
        if banner
        else f"The run completed all {s.get('steps_done', s.get('steps', '?'))} configured steps.",
        *([] if run.metrics else ["metrics.csv holds no step yet: there is nothing to measure."]),
    ]
    topics = [
        ("The run", done),
        ("Run to run: the same arm relaunched", _reproducibility(run)),
        ("Against the compare_to arm", _divergence(run)),
        ("Error against the exact sum", _errors(run)),
        ("Bounds", _bounds(run)),
        ("One setting changed, all else equal", _pair_findings(run)),
        ("Training", _training(run)),
    ]
    return [(t, g) for t, g in topics if g]


def _worst(run: Results, name: str, col: str) -> tuple[NDArray[np.float64], int, int]:
    """(finite values, index of the largest, its step) of an arm's column."""
    v, st = run.column(name, col), run.column(name, "step")
    ok = np.isfinite(v)
    v, st = v[ok], st[ok]
    w = int(np.argmax(v)) if v.size else 0
    return v, w, int(st[w]) if v.size else -1


def _reproducibility(run: Results) -> list[str]:
    fixed: list[str] = []
    same: list[str] = []
    out: list[str] = []
    unknown: list[str] = []
    for a in run.arms:
        name = a["name"]
        v, w, step = _worst(run, name, "rerun_diff_frac")
        if not v.size:
            unknown.append(name)
        elif not np.any(v > 0):
            (fixed if is_fixed(a) else same).append(name)
        else:
            u = fin(run.column(name, "rerun_ulp_max"))
            most = num(float(u.max()) if u.size else math.nan)
            out.append(
                f"{name} ({a.get('order')}): a relaunch with an independently seeded order changed bits at "
                f"{int(np.sum(v > 0))} of {v.size} steps, a mean {pct(float(np.mean(v)))} of elements per step "
                f"(median {pct(float(np.median(v)))}, worst {pct(float(v[w]))} at step {step}), by up to {most}"
                f" ulps of {out_format(a)}: not reproducible run to run."
            )
    steps = max((fin(run.column(a["name"], "rerun_diff_frac")).size for a in run.arms), default=0)
    head = []
    if fixed:
        head.append(
            f"Run-to-run: {', '.join(fixed)} {'has' if len(fixed) == 1 else 'have'} a fixed order, so a relaunch "
            f"repeats {'its' if len(fixed) == 1 else 'their'} bits by construction (re-run columns 0)."
        )
    if same:
        head.append(
            f"{', '.join(same)}: the order changes every step, yet a relaunch with an independently seeded order "
            f"gave identical bits at all {steps} steps: reproducible run to run."
        )
    if unknown:
        head.append(f"{', '.join(unknown)}: run-to-run variability not measured (no re-run columns in this run).")
    return head + out


def _divergence(run: Results) -> list[str]:
    out = []
    for a in run.arms:
        b = partner(run, a)
        d, w, step = _worst(run, a["name"], "diff_frac")
        if b["name"] == a["name"] or not d.size:
            continue
        label = pair_label(run, a)
        if not np.any(d > 0):
            out.append(f"{label}: bits identical at all {d.size} steps.")
            continue
        st = run.column(a["name"], "step")[np.isfinite(run.column(a["name"], "diff_frac"))]
        u = fin(run.column(a["name"], "ulp_max"))
        wide = a.get("compared_in") or out_format(a)
        ulps = (
            f"; the largest distance per step had median {num(float(np.median(u)))} and worst "
            f"{num(float(u.max()))} ulps of {wide}"
            if u.size
            else ""
        )
        out.append(
            f"{label}: bits differed at {int(np.sum(d > 0))} of {d.size} steps, the first at step "
            f"{int(st[np.argmax(d > 0)])}: a mean {pct(float(np.mean(d)))} of elements per step (median "
            f"{pct(float(np.median(d)))}, worst {pct(float(d[w]))} at step {step}){ulps}."
        )
    return out


def _errors(run: Results) -> list[str]:
    out = []
    for a in run.arms:
        name, o = a["name"], out_format(a)
        norm = fin(run.column(name, "err_norm"))
        if norm.size:
            bwd, ulp = fin(run.column(name, "err_backward")), fin(run.column(name, "err_max_ulp"))
            fc = fin(run.column(name, "frac_correct"))
            out.append(
                f"{name} ({a.get('input')} inputs, {a.get('accumulate')} accumulator, {o} output): normwise error "
                f"||y - s|| / ||s|| median {num(float(np.median(norm)))} per step (range {num(float(norm.min()))} "
                f"to {num(float(norm.max()))}); largest backward error max |y - s| / sum |x| "
                f"{num(float(bwd.max()) if bwd.size else math.nan)}; "
                f"{pct(float(np.mean(fc)) if fc.size else math.nan)} of elements correctly rounded; largest "
                f"error {num(float(ulp.max()) if ulp.size else math.nan)} ulps of {o}."
            )
        nf = fin(run.column(name, "nonfinite"))
        if nf.size and nf.sum() > 0:
            out.append(
                f"{name} produced NaN or Inf in {int(nf.sum())} element results ({int(np.sum(nf > 0))} steps); "
                "they are left out of the error statistics."
            )
    return out


def depth(order: str, n: int) -> int | None:
    """Additions on the longest leaf-to-root path of an order policy with ``n`` workers (None if unknown)."""
    try:
        policy = OrderPolicy.parse(order)
        if policy.kind in ("arrival", "atomic", "random_tree"):
            return n - 1  # a chain; a random tree is at most as deep
        return int(np.max(parse(policy.plan, n).depths()))
    except (InvalidArgument, ValueError):
        return None


def _bounds(run: Results) -> list[str]:
    """Measured backward errors against the deterministic and probabilistic bounds of plain sums to nearest."""
    n = run.summary.get("workers")
    if not isinstance(n, int) or n < 2:
        return []
    groups: dict[tuple[int, str, str], list[str]] = {}
    skipped = []
    for a in run.arms:
        bwd = fin(run.column(a["name"], "err_backward"))
        d = depth(str(a.get("order")), n)
        plain = (a.get("algorithm"), a.get("average"), a.get("rounding")) == ("plain", "none", "nearest_even")
        if not bwd.size:
            continue
        if not plain or d is None:
            skipped.append(a["name"])
            continue
        groups.setdefault((d, str(a.get("accumulate")), out_format(a)), []).append(a["name"])
    out = []
    for (d, acc, o), names in groups.items():
        b = backward_bounds(d, acc)
        extra = get_format(o).unit_roundoff if o != acc else 0.0  # one more rounding, to the output format
        det = None if b["deterministic"] is None else extra + (1 + extra) * b["deterministic"]
        pb = None if b["probabilistic"] is None else extra + (1 + extra) * b["probabilistic"]
        last = f", then rounded once to {o} (+u of {o})" if extra else ""
        parts = [
            f"Bounds for d = {d} additions per term with {acc} accumulation{last}: "
            + (
                f"the backward error can never exceed gamma_d = {num(det)}"
                if det is not None
                else "the worst-case bound gamma_d is not informative (d u >= 1)"
            )
            + (
                f"; it exceeds {b['lam']:g} sqrt(d) u = {num(pb)} with probability at most "
                f"{num(1 - b['probability'])} (independent rounding errors)"
                if pb is not None and b["probability"] is not None
                else "; the probabilistic bound is not informative here"
            )
        ]
        meas = []
        for name in names:
            m = float(fin(run.column(name, "err_backward")).max())
            verdict = (
                "above the worst-case bound"
                if det is not None and m > det
                else "above the probabilistic bound"
                if pb is not None and m > pb
                else "within the bounds"
                if det is not None or pb is not None
                else "no informative bound"
            )
            meas.append(f"{name} {num(m)} ({verdict})")
        out.append(parts[0] + ". Measured largest backward error: " + "; ".join(meas) + ".")
    if skipped:
        out.append(
            f"No bound is stated for {', '.join(skipped)}: the bounds above cover plain summation to nearest "
            "without averaging."
        )
    return out


def _compare(lo: float, hi: float) -> str:
    """``lower`` / ``higher`` / ``about the same`` for a change from ``lo`` to ``hi``, with the ratio."""
    if math.isnan(lo) or math.isnan(hi):
        return "could not be compared"
    if lo == hi:
        return "unchanged"
    if lo == 0:
        return "higher (from exactly 0)"
    if hi == 0:
        return "lower (down to exactly 0)"
    r = hi / lo
    word = "about the same" if abs(r - 1) < 0.01 else "lower" if r < 1 else "higher"
    return f"{word} (x{r:#.3g})"


def _pair_findings(run: Results) -> list[str]:
    """Two arms that differ in one setting only (accumulator, algorithm or order): what changing it did."""
    out = []
    arms = run.arms
    for i, a in enumerate(arms):
        for b in arms[i + 1 :]:
            diff = differences(a, b)
            if diff == ["accumulate", "output"] and all(out_format(x) == x.get("accumulate") for x in (a, b)):
                diff = ["accumulate"]  # the output follows the accumulator in both
            if len(diff) != 1 or diff[0] not in ("accumulate", "algorithm", "order"):
                continue
            key = diff[0]
            if (
                key == "accumulate"
                and get_format(str(a["accumulate"])).precision > get_format(str(b["accumulate"])).precision
            ):
                a, b = b, a  # the narrower accumulator first
            out.append(_pair(run, a, b, key))
    return out


def _pair(run: Results, a: dict[str, Any], b: dict[str, Any], key: str) -> str:
    what = {"accumulate": "accumulator", "algorithm": "algorithm", "order": "order"}[key]
    ea, eb = median(run, a["name"], "err_norm"), median(run, b["name"], "err_norm")
    text = (
        f"Changing the {what} from {a.get(key)} to {b.get(key)} ({a['name']} -> {b['name']}, all else equal): "
        f"median normwise error {num(ea)} -> {num(eb)}, {_compare(ea, eb)}"
    )
    pa, pb = partner(run, a), partner(run, b)
    if key != "order":
        if is_twin(a, pa) and is_twin(b, pb):
            da, db = mean(run, a["name"], "diff_frac"), mean(run, b["name"], "diff_frac")
            text += (
                f"; mean fraction of elements differing from the fixed-order twin {pct(da)} ({a['name']} vs "
                f"{pa['name']}) -> {pct(db)} ({b['name']} vs {pb['name']}), {_compare(da, db)}"
            )
        elif not (is_fixed(a) and is_fixed(b)):
            lacking = [f"{x['name']} is compared with {p['name']}" for x, p in ((a, pa), (b, pb)) if not is_twin(x, p)]
            text += f"; their divergence is not set side by side ({', '.join(lacking)}, not a fixed-order twin)"
        if not (is_fixed(a) or is_fixed(b)):
            ra, rb = mean(run, a["name"], "rerun_diff_frac"), mean(run, b["name"], "rerun_diff_frac")
            text += f"; mean fraction changed by a relaunch {pct(ra)} -> {pct(rb)}, {_compare(ra, rb)}"
    return text + "."


def _training(run: Results) -> list[str]:
    out: list[str] = []
    if not fin(run.column(run.reference, "loss")).size:
        return out
    for a in run.arms:
        b = partner(run, a)
        name, other = a["name"], b["name"]
        loss, lb, pd = run.column(name, "loss"), run.column(other, "loss"), run.column(name, "param_dist")
        steps, pf = run.column(name, "step"), run.column(name, "param_diff_frac")
        k = min(len(loss), len(lb), len(pd))
        if name == other or k == 0:
            continue
        first = a.get("first_param_divergence_step")
        if first is None and np.any(pf > 0):
            first = int(steps[np.argmax(pf > 0)])
        la, lr = float(loss[k - 1]), float(lb[k - 1])
        if first is None:
            out.append(
                f"Training, {pair_label(run, a)}: the weights stayed bitwise identical at all {k} steps "
                f"(final loss {la:.6g} for both)."
            )
            continue
        out.append(
            f"Training, {pair_label(run, a)}: the weights first differed bitwise at step {first}; after the "
            f"last step ({int(steps[k - 1])}) the relative parameter distance was {num(float(pd[k - 1]))} and the "
            f"loss differed by {num(la - lr)} ({name} {la:.6g} vs {other} {lr:.6g})."
        )
    return out


def headline(run: Results) -> list[str]:
    """One to three sentences before the findings: does the order matter here, how much, and what removes it,
    from the arms whose order changes (their relaunches and their comparisons)."""
    moving = [a for a in run.arms if not is_fixed(a)]
    if not moving or not run.metrics:
        return ["This run has no arm whose order changes, so it cannot say whether the order matters."]
    rerun = {a["name"]: mean(run, a["name"], "rerun_diff_frac") for a in moving}
    vs = {a["name"]: mean(run, a["name"], "diff_frac") if is_twin(a, partner(run, a)) else math.nan for a in moving}
    hit = [a for a in moving if rerun[a["name"]] > 0 or vs[a["name"]] > 0]
    if not hit:
        names = ", ".join(a["name"] for a in moving)
        return [
            f"The order does not matter here: {names} change their order every step, yet a relaunch repeats "
            "their bits at every step"
            + (" and they match their fixed-order twins." if any(vs[a["name"]] == 0 for a in moving) else ".")
        ]
    w = max(hit, key=lambda a: (np.nan_to_num(vs[a["name"]]), rerun[a["name"]]))
    u = fin(run.column(w["name"], "ulp_max" if vs[w["name"]] > 0 else "rerun_ulp_max"))
    how = (
        f"changes the bits of a mean {pct(vs[w['name']])} of the elements per step against its fixed-order twin "
        f"{partner(run, w)['name']}"
        if vs[w["name"]] > 0
        else f"gives other bits in a mean {pct(rerun[w['name']])} of the elements per relaunch"
    )
    far = f", by up to {num(float(u.max()))} ulps of {w.get('compared_in') or out_format(w)}" if u.size else ""
    again = f", and a relaunch changes {pct(rerun[w['name']])}" if vs[w["name"]] > 0 and rerun[w["name"]] > 0 else ""
    out = [f"The order matters here: {w['name']} ({w.get('order')}) {how}{far}{again}."]
    cures = [a for a in moving if a not in hit and rerun[a["name"]] == 0]
    if cures:
        said = [
            f"{a['name']} ({', '.join(f'{k} {_val(a, k)}' for k in differences(a, w)) or 'the same settings'})"
            for a in cures
        ]
        out.append(
            f"What removes it: {', '.join(said)}: the order still changes every step, yet a relaunch repeats "
            f"{'its' if len(cures) == 1 else 'their'} bits"
            + (" and it matches its fixed-order twin" if len(cures) == 1 and vs[cures[0]["name"]] == 0 else "")
            + "."
        )
    else:
        fixed = [a["name"] for a in run.arms if is_fixed(a)]
        out.append(
            "No arm whose order changes removes it: only a fixed order"
            + (f" ({', '.join(fixed)})" if fixed else "")
            + " gives the same bits at every launch."
        )
    less = [a for a in hit if a is not w and _share(a, vs, rerun) < _share(w, vs, rerun) / 10]
    if less:
        said = [
            f"{a['name']} ({', '.join(f'{k} {_val(a, k)}' for k in differences(a, w)) or 'the same settings'}) "
            f"to {pct(_share(a, vs, rerun))}"
            for a in less
        ]
        out.append(f"What reduces it from {pct(_share(w, vs, rerun))} of the elements per step: {', '.join(said)}.")
    return out


def _share(a: dict[str, Any], vs: dict[str, float], rerun: dict[str, float]) -> float:
    """The headline's measure of an arm: its mean fraction differing from its twin, else changed by a relaunch."""
    v = vs[a["name"]]
    return v if not math.isnan(v) else rerun[a["name"]]

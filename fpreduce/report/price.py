"""The price of determinism on one page: time and numerics of each training mode (``fpreduce price``).

A pure function of a study directory (its ``price.json``, read through
:func:`fpreduce.run.rundir.read_study`). Every sentence is computed from the rows it
describes (:func:`findings`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fpreduce.report._figure import legend, new_figure, save_figures, series_style
from fpreduce.report.pdf import Doc, draw_png, render
from fpreduce.run import rundir

__all__ = ["findings", "plot_price", "table", "write_price_report"]

Row = Mapping[str, Any]


#: price.json's names before issue 25: the metrics are fractions of weights, not of bits
_OLD_NAMES = {"bits_vs_reference": "weights_differ_ref", "rerun_bits": "weights_differ_rerun"}
#: a stale mode whose final loss is within this of the reference's (relative) paid nothing for staleness
FREE = 0.05
LITERATURE = (
    "When is asynchrony free? Asynchronous SGD keeps synchronous SGD's O(1/sqrt(K)) rate over K iterations, a "
    "linear speed-up, while the number of workers stays below about sqrt(K) (Lian et al., NeurIPS 2015). Asynchrony "
    "acts on SGD like an added momentum term that grows with the degree of asynchrony, so momentum has to be tuned "
    "to it (Mitliagkas et al., 2016); stale gradients make a learning rate that converges hard to find, and a "
    "learning rate modulated by each gradient's staleness keeps synchronous SGD's rate (Zhang et al., IJCAI 2016). "
    "A barrier over the first M of N gradients (backup workers; m_sync here) avoids the asynchronous noise while it "
    "skips the slowest workers: it converged faster and to better test accuracy than asynchronous SGD in Chen et "
    "al. (2016)."
)


def _secs(v: float | None) -> str:
    return "never" if v is None or math.isnan(v) else f"{v:.2f} s"


def _reached(r: Row) -> bool:
    t = r["time_to_target_s"]
    return t is not None and not math.isnan(t)


def _reach(r: Row) -> str:
    return f"reaches the target after {_secs(r['time_to_target_s'])}" if _reached(r) else "never reaches the target"


def _share(f: float) -> str:
    """A fraction of the weights in words: 'every weight', 'no weight', else a percentage of them."""
    return "every weight" if f == 1 else "no weight" if f == 0 else f"{pct(f)} of the weights"


def rows_of(doc_rows: Sequence[Row]) -> list[dict[str, Any]]:
    """price.json's rows, an older study's metric names read as today's."""
    return [{"idle_fraction": math.nan} | {_OLD_NAMES.get(k, k): v for k, v in r.items()} for r in doc_rows]


def target_sentence(ref: Row, target: float, *, given: bool) -> str:
    """What the target loss is and where it comes from."""
    if given:
        return f"The target loss is {target:.4g} (price.target_loss); 'to target' is the simulated time to reach it."
    return (
        f"The target loss is {target:.4g}: 1.2 x the final loss of {ref['mode']} (the reference), "
        f"{ref['final_loss']:.4g}; 'to target' is the simulated time until a mode's loss first reaches it."
    )


def pct(f: float | None) -> str:
    """A fraction as a percentage that never rounds to 0% or 100% unless it is exactly that."""
    if f is None or not math.isfinite(f):
        return "n/a"
    if 0 < f < 0.0005:
        return "<0.1%"
    return ">99.9%" if 0.9995 <= f < 1 else f"{f:.1%}"


def twin_of(r: Row, rows: Sequence[Row]) -> Row:
    """The mode a stale mode is judged against: ``local:H`` for ``local_async:H`` (the same local steps behind a
    barrier) when the study has it and it converged, else the reference (the first row)."""
    kind, _, h = str(r["mode"]).partition(":")
    twin = next((q for q in rows if kind == "local_async" and q["mode"] == f"local:{h}"), None)
    return twin if twin is not None and math.isfinite(twin["final_loss"] or math.nan) else rows[0]


def staleness_verdict(r: Row, rows: Sequence[Row]) -> str | None:
    """Whether a mode with stale updates paid for them: its final loss against its barrier twin's
    (:func:`twin_of`) after the same number of gradients (None: the mode's updates are never stale)."""
    if not r["staleness_max"]:
        return None
    ref = twin_of(r, rows)
    loss, base = r["final_loss"], ref["final_loss"]
    ok = base is not None and loss is not None and math.isfinite(base) and math.isfinite(loss) and base > 0
    rel = loss / base - 1 if ok else math.inf
    head = f"{r['mode']}'s updates are {r['staleness_mean']:.1f} updates stale on average"
    whose = f"{ref['mode']}'s" + (" (the reference)" if ref is rows[0] else " (its barrier twin)")
    if rel <= FREE and _reached(r):
        return (
            f"Staleness is free here: {head}, yet after the same number of gradients its loss is {loss:.4g} against "
            f"{whose} {base:.4g} ({rel:+.1%}), so it keeps its {ref['step_s'] / r['step_s']:.2f}x speed per step "
            f"against {ref['mode']} and {_reach(r)}."
        )
    end = "diverges (its loss is not finite)" if loss is None or not math.isfinite(loss) else f"ends at loss {loss:.4g}"
    end = f"diverges (loss {loss:.3g}, over 100x)" if ok and rel > 99 else end
    more = f" ({rel:+.1%})" if math.isfinite(rel) and rel <= 99 else ""
    return (
        f"Staleness costs here: {head}; after the same number of gradients it {end} against {whose} "
        f"{base:.4g}{more} and {_reach(r)} ({ref['mode']}: {_secs(ref['time_to_target_s'])})."
    )


def findings(rows: Sequence[Row], target: float, *, given: bool = False) -> list[str]:
    """Sentences comparing each mode with the reference (the first row), computed from the rows; ``given``: the
    target loss is the config's, not 1.2 x the reference's final loss."""
    ref, out = rows[0], []
    if not math.isfinite(target):
        out.append(
            f"{ref['mode']} (the reference) ends with loss {ref['final_loss']:.3g}: training diverged, so there is "
            "no target loss to reach (lower source.lr, or give price.target_loss)."
        )
    else:
        out.append(target_sentence(ref, target, given=given))
    out.append(
        f"{ref['mode']} (the reference) takes {ref['step_s'] * 1e3:.1f} ms per step, {_reach(ref)}{_idle(ref)}; "
        "relaunched with other timings it gives "
        + (
            "the same bits."
            if ref["weights_differ_rerun"] == 0
            else f"other bits in {_share(ref['weights_differ_rerun'])}."
        )
    )
    for r in rows[1:]:
        out.append(_mode_sentence(r, ref))
    out += [v for v in (staleness_verdict(r, rows) for r in rows[1:]) if v]
    return out


def _idle(r: Row, ref: Row | None = None) -> str:
    """'; its workers are idle x% of the time (the reference's: y%)', or nothing for a study without it."""
    f = r["idle_fraction"]
    if f is None or not math.isfinite(f):
        return ""
    return f"; its workers are idle {pct(f)} of the time" + (
        f" (the reference's: {pct(ref['idle_fraction'])})" if ref else ""
    )


def _mode_sentence(r: Row, ref: Row) -> str:
    faster = ref["step_s"] / r["step_s"]
    speed = f"{faster:.2f}x the reference's steps per second" if faster >= 1 else f"{1 / faster:.2f}x slower per step"
    repro = "reproducible (a relaunch gives the same bits)"
    if r["weights_differ_rerun"] > 0:
        f = r["weights_differ_rerun"]
        repro = f"not reproducible: a relaunch changes at least one bit of {_share(f)}"
    f = r["weights_differ_ref"]
    which = "every one of its final weights differs" if f == 1 else "none of its final weights differs"
    which = which if f in (0, 1) else f"{pct(f)} of its final weights differ"
    s = f"{r['mode']}: {speed}; {_reach(r)}; {repro}; {which} from the reference's in at least one bit"
    s += f" (relative distance {r['distance_vs_reference']:.2g})"
    s += _idle(r, ref)
    if r["staleness_max"]:
        s += f"; gradients are {r['staleness_mean']:.1f} updates stale on average (at most {r['staleness_max']})"
    return s + "."


def table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table ('differ': the fraction of the final weights with at least one bit
    different; 'idle': the fraction of the workers' time not computing)."""
    from fpreduce.base.texttable import table as render

    head = ["mode", "ms/step", "to target", "final loss", "differ vs ref", "differ on rerun", "stale", "idle"]
    body = [
        [r["mode"], f"{r['step_s'] * 1e3:.1f}", _secs(r["time_to_target_s"]), f"{r['final_loss']:.4g}"]
        + [pct(r["weights_differ_ref"]), pct(r["weights_differ_rerun"]), f"{r['staleness_mean']:.1f}"]
        + [pct(r["idle_fraction"])]
        for r in rows
    ]
    return render(head, body, align="l")


TABLE_KEY = (
    "differ vs ref / on rerun: the fraction of the final weights that differ in at least one bit from the "
    "reference's / from a relaunch's; stale: mean staleness (updates); idle: the fraction of the workers' time "
    "spent not computing."
)


def plot_price(
    traces: Mapping[str, Mapping[str, list[Any]]],
    target: float,
    out_dir: Path,
    *,
    title: str,
    idle: Mapping[str, float] | None = None,
    workers: int = 0,
) -> list[Path]:
    """``price.png|pdf``: loss against simulated time and against steps; staleness histograms. ``load.png|pdf``
    (when the traces have their ``computing`` curves, ``idle`` the modes' idle fractions and ``workers`` N):
    per mode, the workers computing and waiting over simulated time."""

    def build():  # type: ignore[no-untyped-def]
        fig, (ax, bx, cx) = new_figure(title, f"dashed: the target loss {target:.3g}", 1, 3)
        entries = []
        for i, (m, tr) in enumerate(traces.items()):
            style: dict[str, Any] = series_style(i)
            style["markevery"] = max(1, len(tr["time"]) // 8)
            if i == 0:  # the reference: wide and pale, so a mode drawn on top of it stays visible
                style.update(lw=5, alpha=0.35)
            (line,) = ax.plot(tr["time"], tr["loss"], **style)
            bx.plot(np.arange(1, len(tr["loss"]) + 1), tr["loss"], **style)
            entries.append((line, m))
            stale = tr.get("staleness", [])
            if max(stale, default=0) > 0:
                cx.hist(stale, bins=np.arange(max(stale) + 2) - 0.5, color=style["color"], alpha=0.6)
        for a, xl in ((ax, "simulated time (s)"), (bx, "step (N gradients each)")):
            a.set_yscale("log")
            a.axhline(target, ls="--", color="0.4", lw=0.9)
            a.set_xlabel(xl)
            a.set_ylabel("loss (fixed evaluation batch)")
            a.grid(True)
        cx.set_xlabel("staleness (updates)")
        cx.set_ylabel("gradients")
        cx.set_title("staleness of the applied gradients", fontsize=9)
        if not cx.patches:
            cx.text(0.5, 0.5, "no mode with stale gradients", ha="center", va="center", transform=cx.transAxes)
        legend(fig, entries)
        return fig

    builders = {"price": build}
    if idle is not None and workers and all("computing" in tr for tr in traces.values()):
        builders["load"] = lambda: _load_figure(traces, idle, workers, title)
    return save_figures(out_dir, builders, ("png", "pdf"))


def _load_figure(traces: Mapping[str, Mapping[str, list[Any]]], idle: Mapping[str, float], n: int, title: str):  # type: ignore[no-untyped-def]
    """One panel per mode: workers computing (its colour) and waiting (grey) in equal bins of its run."""
    sub = "the mean number of the N workers computing a gradient in each bin; the rest wait (barrier, network, server)"
    fig, axes = new_figure(title.replace("The price of determinism", "The load over time"), sub, len(traces), 1)
    fig.set_size_inches(9.0, 1.2 + 1.25 * len(traces))
    entries = []
    for i, (ax, (m, tr)) in enumerate(zip(axes, traces.items(), strict=True)):
        busy = np.asarray(tr["computing"], np.float64)
        edges = np.linspace(0.0, tr["time"][-1], busy.size + 1)
        c = series_style(i)["color"]
        comp = ax.stairs(busy, edges, fill=True, color=c, alpha=0.8, baseline=0)
        wait = ax.stairs(np.full(busy.size, float(n)), edges, fill=True, color="0.85", baseline=busy)
        ax.set_ylim(0, n * 1.02)
        ax.set_title(
            f"{m}: idle {pct(idle[m])} of the workers' time ({n * (1 - idle[m]):.1f} of {n} computing on average)",
            fontsize=9,
            loc="left",
        )
        ax.set_ylabel("workers")
        if i == 0:
            entries += [(wait, "waiting")]
        entries.append((comp, f"computing ({m})"))
    for ax in axes[1:]:
        ax.sharex(axes[0])
    axes[-1].set_xlabel("simulated time (s)")
    legend(fig, entries)
    return fig


def write_price_report(study_dir: str | Path) -> list[Path]:
    """``figures/price.png|pdf`` and ``report.pdf`` of a price study directory, from its ``price.json``."""
    out = Path(study_dir)
    doc = rundir.read_study(out, "price")
    cfg, rows, target = doc["config"], rows_of(doc["rows"]), float(doc["target_loss"])
    sp, cm = cfg["price"], cfg["compute"]
    idle = {r["mode"]: r["idle_fraction"] for r in rows if "idle_fraction" in r}
    figs = plot_price(
        doc["traces"],
        target,
        out / "figures",
        title=f"The price of determinism: {sp['name']}",
        idle=idle if len(idle) == len(rows) else None,
        workers=int(sp["workers"]),
    )
    png = {f.stem: f for f in figs if f.suffix == ".png"}

    def body(d: Doc) -> None:
        d.new_page()
        d.heading(f"The price of determinism: {sp['name']}")
        d.text(
            f"{sp['workers']} workers train the same MLP from the same weights on the same batches for "
            f"{sp['steps']} steps of {sp['workers']} gradients each; gradients in {sp['input']}, summed in "
            f"{sp['accumulate']} with {sp['plan']} (sync, local) or in arrival order (sync:arrival, m_sync), master "
            f"weights in {sp['master']}. Compute: {cm['step'] * 1e3:g} ms per gradient, speeds spread "
            f"{cm['spread']:g}, {cm['jitter']} jitter {cm['scale']:g}, stragglers {cm['straggler_prob']:g}; "
            f"learning rate {cfg['source']['lr']:g}. Each mode is relaunched with other timings (same data, same "
            "weights): 'differ on rerun' is what that changes."
        )
        d.text(table(rows), mono=True, size=7.5)
        d.text(TABLE_KEY, size=8)
        d.y += 0.1
        for s in findings(rows, target, given=float(sp.get("target_loss", 0) or 0) > 0):
            d.text("- " + s)
        if any(r["staleness_max"] for r in rows):
            d.text(LITERATURE, size=9)
        d.figure_page(
            draw_png(png["price"]),
            "Left: loss against simulated time; middle: against steps; right: how stale the applied gradients were.",
        )
        if "load" in png:
            d.figure_page(
                draw_png(png["load"]),
                "The load a barrier causes: per mode, how many of the workers compute (colour) and how many wait "
                "(grey) over the simulated clock, averaged over short bins. A barrier's workers finish their "
                "gradients at different times and wait together for the slowest (idle spikes every step); "
                "asynchronous modes let each worker go on at once (a smoother load).",
            )

    render(out / "report.pdf", f"fpreduce price: {sp['name']}", body)
    return [*figs, out / "report.pdf"]

"""Training on one clock (fpreduce.run.clock) and the price of determinism (run.price, report.price, cli)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.cli import main
from fpreduce.core.timing import Profile
from fpreduce.report.price import findings
from fpreduce.run.clock import ComputeModel, parse_mode, simulate
from fpreduce.run.model import ModelSource, ModelSpec
from fpreduce.run.price import load_of, price, price_config_from_dict

SPEC = ModelSpec(hidden=16, inputs=8, outputs=4, batch_per_worker=4)
FREE = Profile(alpha=0.0, beta=1e-30, gamma=0.0)  # communication costs nothing
EVEN = ComputeModel(step=1.0, spread=0.0, jitter="none")


def _src(n: int) -> ModelSource:
    return ModelSource(SPEC, workers=n, seed=3)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)


def test_sync_with_a_fixed_order_ignores_the_timing() -> None:
    kw = {"steps": 6, "input": "bf16", "accumulate": "bf16", "compute": ComputeModel(spread=0.5, scale=0.5)}
    a = simulate(_src(8), parse_mode("sync", 8), seed=0, **kw)
    b = simulate(_src(8), parse_mode("sync", 8), seed=1, **kw)
    assert (_bits(a.params) == _bits(b.params)).all()
    assert a.time != b.time  # the timing did change
    c = simulate(_src(8), parse_mode("sync:arrival", 8), seed=0, **kw)
    d = simulate(_src(8), parse_mode("sync:arrival", 8), seed=1, **kw)
    assert c.orders_changed > 0
    assert (_bits(c.params) != _bits(d.params)).any()  # another launch, other arrival orders, other bits


def test_first_n_of_n_is_the_arrival_barrier() -> None:
    kw = {"steps": 5, "input": "bf16", "accumulate": "bf16", "seed": 4}
    a = simulate(_src(6), parse_mode("sync:arrival", 6), **kw)
    b = simulate(_src(6), parse_mode("m_sync:6", 6), **kw)
    assert (_bits(a.params) == _bits(b.params)).all()


def test_async_with_equal_speeds_and_free_messages_has_a_known_staleness() -> None:
    """All N start together and arrive together: applied in rank order, stale 0..N-1, then N-1 forever."""
    n = 5
    tr = simulate(_src(n), parse_mode("async", n), steps=4, compute=EVEN, profile=FREE)
    assert tr.staleness == [*range(n), *([n - 1] * (3 * n))]
    assert tr.time == [1.0, 2.0, 3.0, 4.0]


def test_async_is_seeded_and_its_time_increases() -> None:
    kw = {"steps": 5, "compute": ComputeModel(spread=0.3, scale=0.3, straggler_prob=0.2)}
    a = simulate(_src(4), parse_mode("async", 4), seed=2, **kw)
    b = simulate(_src(4), parse_mode("async", 4), seed=2, **kw)
    assert (_bits(a.params) == _bits(b.params)).all()
    assert a.time == b.time
    assert np.all(np.diff(a.time) > 0)
    assert len(a.staleness) == 5 * 4


def test_local_sgd_is_reproducible_and_one_barrier_per_round() -> None:
    kw = {"steps": 6, "compute": EVEN, "profile": FREE}
    a = simulate(_src(4), parse_mode("local:3", 4), seed=0, **kw)
    b = simulate(_src(4), parse_mode("local:3", 4), seed=9, **kw)
    assert (_bits(a.params) == _bits(b.params)).all()
    assert a.time == [3.0, 3.0, 3.0, 6.0, 6.0, 6.0]  # two rounds of three steps, free all-reduce


@pytest.mark.parametrize(
    ("text", "n", "match"),
    [
        ("async", 1, "at least 2"),
        ("m_sync:9", 8, "1..8"),
        ("local:0", 4, "H >= 1"),
        ("lokal:2", 4, "did you mean"),
        ("m_sync:x", 4, "integer"),
    ],
    ids=["async-1", "m-too-big", "h-zero", "typo", "not-int"],
)
def test_bad_modes(text: str, n: int, match: str) -> None:
    with pytest.raises(fr.InvalidArgument, match=match):
        parse_mode(text, n)


def _row(mode: str, **kw: float) -> dict[str, object]:
    base = {
        "step_s": 0.1,
        "time_to_target_s": 1.0,
        "final_loss": 0.2,
        "weights_differ_ref": 0.0,
        "distance_vs_reference": 0.0,
        "weights_differ_rerun": 0.0,
        "staleness_mean": 0.0,
        "staleness_max": 0,
        "idle_fraction": 0.5,
    }
    return {"mode": mode, **base, **kw}


def test_findings_flip_with_the_numbers() -> None:
    ref = _row("sync")
    target, repro = findings([ref, _row("local:4", step_s=0.05, weights_differ_ref=1.0)], 0.3)[::2]
    assert "The target loss is 0.3: 1.2 x the final loss of sync (the reference), 0.2" in target
    assert "(price.target_loss)" in findings([ref], 0.3, given=True)[0]
    assert "2.00x the reference's steps per second" in repro
    assert "reproducible (a relaunch gives the same bits)" in repro
    assert "every one of its final weights differs from the reference's in at least one bit" in repro
    assert "idle 50.0% of the time (the reference's: 50.0%)" in repro
    slow = _row("async", step_s=0.2, weights_differ_rerun=0.5, staleness_mean=3.0, staleness_max=7, idle_fraction=0.1)
    flaky = findings([ref, slow], 0.3)[2]
    assert "2.00x slower per step" in flaky
    assert "a relaunch changes at least one bit of 50.0% of the weights" in flaky
    assert "3.0 updates stale on average (at most 7)" in flaky
    assert "idle 10.0% of the time" in flaky
    never = findings([ref, _row("m_sync:2", time_to_target_s=float("nan"))], 0.3)[2]
    assert "never reaches the target" in never


def test_the_staleness_verdict_flips_with_the_loss() -> None:
    ref, stale = _row("sync"), {"staleness_mean": 15.0, "staleness_max": 40}
    free = findings([ref, _row("async", final_loss=0.205, **stale)], 0.3)[-1]
    assert free.startswith("Staleness is free here: async's updates are 15.0 updates stale")
    assert "(+2.5%)" in free
    costly = findings([ref, _row("async", final_loss=0.3, time_to_target_s=float("nan"), **stale)], 0.3)[-1]
    assert costly.startswith("Staleness costs here:")
    assert "(+50.0%) and never reaches the target" in costly
    gone = findings([ref, _row("local_async:4", final_loss=float("inf"), **stale)], 0.3)[-1]
    assert "diverges (its loss is not finite)" in gone
    assert not any(s.startswith("Staleness") for s in findings([ref, _row("m_sync:2")], 0.3))


def test_price_rows_follow_their_definitions() -> None:
    cfg = price_config_from_dict(
        {"price": {"workers": 4, "steps": 4, "modes": ["sync", "sync:arrival", "async"]}, "source": {"hidden": 8}}
    )
    rows, traces = price(cfg)
    assert [r.mode for r in rows] == ["sync", "sync:arrival", "async"]
    assert rows[0].weights_differ_ref == 0.0  # the reference against itself
    assert rows[0].weights_differ_rerun == 0.0  # fixed order: a relaunch gives the same bits
    assert rows[2].staleness_max > 0
    for r, tr in zip(rows, traces.values(), strict=True):
        assert r.step_s == pytest.approx(tr.time[-1] / 4)
        assert r.final_loss == tr.loss[-1]
        busy = sum(min(b, tr.time[-1]) - min(a, tr.time[-1]) for a, b in tr.computing)  # computing, clipped at the end
        assert r.idle_fraction == pytest.approx(1 - busy / (4 * tr.time[-1]))
        curve, idle = load_of(tr, 4, 50)
        assert idle == r.idle_fraction
        assert curve.max() <= 4 + 1e-9
        assert curve.mean() == pytest.approx(4 * (1 - idle))  # the bins integrate the same compute seconds
    assert rows[0].idle_fraction > 0 < rows[1].idle_fraction  # a barrier waits for the slowest
    assert rows[2].idle_fraction < rows[0].idle_fraction  # async goes on at once


def test_price_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command end to end, in this process (``python -m fpreduce.cli`` is run by other tests): the JSON
    on stdout, the PDF report, and a misspelt mode as one line with a hint."""
    cfg = tmp_path / "p.toml"
    cfg.write_text('[price]\nworkers = 4\nsteps = 3\nmodes = ["sync", "async"]\n[source]\nhidden = 8\n')
    argv = ["price", str(cfg), "--json", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["mode"] for row in doc["rows"]] == ["sync", "async"]
    assert (tmp_path / "out" / "report.pdf").read_bytes().startswith(b"%PDF")
    cfg.write_text('[price]\nmodes = ["asynk"]\n')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error:")
    assert len(err.strip().splitlines()) == 1
    assert "did you mean 'async'" in err


def test_async_local_sgd_with_equal_speeds_has_a_known_staleness_and_differs_from_local() -> None:
    """Every worker's H-step delta arrives together: applied in rank order (stale 0..N-1, then N-1)."""
    n = 4
    tr = simulate(_src(n), parse_mode("local_async:2", n), steps=6, compute=EVEN, profile=FREE)
    assert tr.staleness == [*range(n), *([n - 1] * (2 * n))]
    assert tr.time == [2.0, 2.0, 4.0, 4.0, 6.0, 6.0]  # a round of H = 2 gradients per worker every 2 s
    sync_local = simulate(_src(n), parse_mode("local:2", n), steps=6, compute=EVEN, profile=FREE)
    assert (_bits(tr.params) != _bits(sync_local.params)).any()  # stale deltas are not the averaged ones
    with pytest.raises(fr.InvalidArgument, match="at least 2"):
        parse_mode("local_async:2", 1)


def test_price_formats_accept_the_names_people_write() -> None:
    cfg = price_config_from_dict({"price": {"input": "bfloat16", "accumulate": "float32", "master": "float64"}})
    assert (cfg.spec.input, cfg.spec.accumulate, cfg.spec.master) == ("bf16", "fp32", "fp64")
    with pytest.raises(fr.InvalidArgument, match=r"price.input: unknown format 'bfloat17'; did you mean 'bf16'"):
        price_config_from_dict({"price": {"input": "bfloat17"}})

"""Speed-up curves (fpreduce.analysis.scaling): laws of the model and the scale config."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.analysis import scaling as sc
from fpreduce.analysis.scaling import format_table, rows_as_dicts, scaling
from fpreduce.core.timing import Profile
from fpreduce.run.scale import load_scale_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "scaling.toml"
NODE = Profile(alpha=5e-6, beta=1 / 12.5e9, gamma=0.0, alpha_intra=1e-6, beta_intra=1 / 150e9, gpus_per_node=8)


@given(
    st.sampled_from(["ring", "rd", "rabenseifner", "linear", "hier:2"]),
    st.sampled_from([2, 4, 6, 8, 16, 24]),
    st.floats(1e-3, 10.0),
    st.floats(1.01, 100.0),
)
def test_speedup_grows_with_the_compute_share(plan: str, n: int, compute: float, factor: float) -> None:
    """More compute per byte communicated: closer to the ideal N, never above it."""
    lo = scaling([n], [plan], compute=compute, nbytes=1e7, profile=NODE)[0]
    hi = scaling([n], [plan], compute=compute * factor, nbytes=1e7, profile=NODE)[0]
    assert lo.speedup <= hi.speedup <= n
    assert math.isclose(hi.efficiency, hi.speedup / n)
    assert math.isclose(hi.step_s, hi.compute_s + hi.comm_s)


def test_example_reproduces_eight_and_ten() -> None:
    cfg = load_scale_config(EXAMPLE)
    rows = scaling(cfg.workers, cfg.plans, compute=cfg.compute, nbytes=cfg.nbytes, profile=cfg.profile)
    ring = {r.workers: r.speedup for r in rows if r.plan == "ring"}
    assert 7.5 < ring[8] < 8.0
    assert 9.5 < ring[16] < 10.5
    hier = {r.workers: r.speedup for r in rows if r.plan == "hier:8"}
    assert set(hier) == {8, 16, 32, 64}  # hier:8 needs N divisible by 8
    # its 8 shards share the node's one NIC (issue 25): ahead of the ring at 16, behind it from 32
    assert [round(hier[n], 1) for n in (16, 32, 64)] == [11.7, 13.4, 12.7]
    assert hier[16] > ring[16]
    assert hier[64] < ring[64]
    text = EXAMPLE.read_text()  # the example states its topology, and what its comments quote holds
    assert "gpus_per_node = 8" in text
    assert "nics_per_node = 1" in text
    assert [round(ring[64], 1), round({r.workers: r.speedup for r in rows if r.plan == "rd"}[16], 1)] == [17.6, 4.4]
    wide = scaling(
        [16, 32, 64], ["hier:8"], compute=cfg.compute, nbytes=cfg.nbytes, profile=replace(cfg.profile, nics_per_node=8)
    )
    assert [round(r.speedup, 1) for r in wide] == [14.7, 25.3, 37.8]  # a NIC per GPU: the shards do not share
    assert all(r.busbw <= r.busbw_bound for r in rows)
    table = format_table(rows)
    assert table.count("\n") == len(rows) + 1
    assert rows_as_dicts(rows[:1])[0]["busbw"] == float("inf")  # N = 1: no communication


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[scale]\nworkrs = [1]\n", "did you mean 'workers'"),
        ("[scael]\n", "did you mean 'scale'"),
        ("[scale]\ncompute = 0\n", "compute"),
        ("[scale]\nplans = ['rign']\n", "did you mean 'ring'"),
        ("[cluster]\nbandwidth = -1\n", "bandwidth"),
        ("[scale]\nworkers = [0]\n", "workers"),
        ("[scale\n", "malformed TOML"),
    ],
    ids=["key-typo", "table-typo", "zero-compute", "plan-typo", "negative-bandwidth", "zero-workers", "bad-toml"],
)
def test_bad_scale_config(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(fr.InvalidArgument, match=match):
        load_scale_config(p)


def test_scale_command_writes_table_json_figures_and_report(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "s"
    r = subprocess.run(
        [sys.executable, "-m", "fpreduce.cli", "scale", str(EXAMPLE), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # one JSON object, nothing else on stdout
    ring = {row["workers"]: row["speedup"] for row in doc["rows"] if row["plan"] == "ring"}
    assert 9.5 < ring[16] < 10.5
    assert {p.name for p in (out / "figures").iterdir()} == {"speedup.png", "speedup.pdf"}
    assert (out / "report.pdf").read_bytes().startswith(b"%PDF")
    assert json.loads((out / "scale.json").read_text())["rows"] == doc["rows"]
    bad = subprocess.run(
        [sys.executable, "-m", "fpreduce.cli", "scale", str(tmp_path / "missing.toml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("fpreduce: error:")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_findings_follow_the_numbers() -> None:
    from fpreduce.report.scaling import findings

    rows = scaling([1, 8, 16], ["ring"], compute=0.4, nbytes=1e8, profile=NODE)
    text = findings(rows)[0]
    assert "10.0x on 16 workers" in text
    assert "falls below 80% at N = 16" in text
    fast = scaling([1, 8, 16], ["ring"], compute=400.0, nbytes=1e8, profile=NODE)  # compute dominates
    assert "stays at or above 80% up to N = 16" in findings(fast)[0]
    hier = scaling([8, 16, 32, 64], ["hier:8", "ring"], compute=0.4, nbytes=1e8, profile=NODE)
    said = findings(hier)
    assert "peaks at N = 32 (13.5x)" in said[0]
    assert "of the 14.1 GB/s its links allow" in said[0]
    assert said[-1] == "Fastest point: ring on 64 workers, 17.7x."


def test_cluster_text_states_the_topology() -> None:
    from fpreduce.report.scaling import cluster_text

    text = cluster_text(NODE)
    assert "nodes of 8 workers" in text
    assert "1 NIC of 12.5 GB/s per node" in text
    assert "8 shards sent across together move at 1.56 GB/s each" in text
    assert "3 NICs of 12.5 GB/s per node" in cluster_text(replace(NODE, nics_per_node=3))
    assert cluster_text(Profile()).startswith("Cluster: one worker per node; 1 NIC of 12.5 GB/s per node")


def test_a_foreign_directory_is_never_written(tmp_path: Path) -> None:
    from fpreduce.run import rundir

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(fr.InvalidArgument, match="not a fpreduce scale study directory"):
        rundir.write_study(foreign, "scale", {"rows": []})
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    rundir.write_study(tmp_path / "s", "scale", {"rows": [1]})
    rundir.write_study(tmp_path / "s", "scale", {"rows": [2]})  # a study is rewritten
    assert json.loads((tmp_path / "s" / "scale.json").read_text())["rows"] == [2]
    with pytest.raises(fr.InvalidArgument, match=r"scale\.json: name: required"):  # (and read through its schema)
        rundir.read_study(tmp_path / "s", "scale")


def test_a_reader_that_stops_early_is_no_error(tmp_path: Path) -> None:
    """`fpreduce scale | head -1`: the closed pipe ends the command quietly with status 0."""
    import subprocess
    import sys

    cfg = tmp_path / "big.toml"  # a table far larger than a pipe's buffer, so that printing hits the closed pipe
    plans = ["ring", "rd", "rabenseifner", "linear", "sequential", "pairwise"]
    cfg.write_text(f"[scale]\nworkers = {list(range(1, 201))}\nplans = {plans}\n")  # 1200 rows, ~100 KB
    p = subprocess.Popen(
        [sys.executable, "-m", "fpreduce.cli", "scale", str(cfg), "--print-only"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    assert p.stdout is not None
    assert p.stderr is not None
    assert p.stdout.read(10) == b"plan      "
    p.stdout.close()  # like head: stop reading
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=60) == 0
    assert err == ""


def test_scale_prints_algbw_and_busbw_over_message_sizes(tmp_path: Path, monkeypatch, capsys) -> None:
    """`fpreduce scale --bytes 1M,16M --print-only`: nccl-tests' columns, one row per size; nothing written."""
    from fpreduce.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["scale", "--bytes", "1M,16M", "--print-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["plan", "N", "bytes"]
    assert "algbw GB/s  busbw GB/s" in lines[0]
    assert {line.split()[2] for line in lines[2:-1]} == {"1M", "16M"}
    assert {line.split()[-1] for line in lines[2:-1]} == {"closed"}  # the default plans all have closed forms
    assert lines[-1] == f"comm: closed form for {len(lines) - 3} of {len(lines) - 3} points " + (
        "(the event timeline equals it at N <= 64 on every family, tested)"
    )
    assert not list(tmp_path.iterdir())
    assert main(["scale", "--bytes", "1Q", "--print-only"]) == 2
    assert capsys.readouterr().err == "fpreduce: error: --bytes: '1Q' is not a size such as 1M, 256K, 1G or 4096\n"
    assert main(["scale", "--bytes", "4K,64K", "--no-report", "--out", "s"]) == 0  # scale.json only, as price
    assert sorted(p.name for p in (tmp_path / "s").iterdir() if not p.name.startswith(".")) == ["scale.json"]


# bounded work (issue 26): closed forms where the timeline would grow with N^2, the timeline's messages capped

_TEXTS = ["sequential", "reverse", "pairwise", "kary:3", "blocked:4", "numpy", "ring", "ring:gloo", "ring:ompi"]
_TEXTS += ["rd", "rabenseifner", "linear", "atomic", "hier:{g}", "tree:nccl:{g}"]


def _real_end(text: str, n: int, nbytes: float, pr: Profile) -> float:
    from fpreduce.core import timing
    from fpreduce.plans import parse

    return timing.timeline(parse(text, n), n, nbytes, pr).end


@example("tree:nccl:{g}", 24, 8, 1, 1e6, 1e-6)  # the timeline: no closed form
@example("rd", 24, 8, 1, 1e6, 1e-6)  # the timeline: uneven steps over nodes
@example("rabenseifner", sc.TESTED_N, 8, 2, 1e6, 1e-6)  # closed: steps of the same kind
@example("hier:{g}", 48, 3, 1, 1e6, 1e-6)
@given(
    st.sampled_from(_TEXTS),
    st.integers(1, sc.TESTED_N),
    st.sampled_from([1, 2, 3, 4, 8]),
    st.integers(1, 4),
    st.floats(0, 1e9),
    st.floats(1e-7, 1e-5),
)
def test_scale_takes_the_closed_form_only_where_it_is_the_timeline(
    text: str, n: int, g: int, nics: int, nbytes: float, alpha: float
) -> None:
    """Every family on N <= TESTED_N: a point marked closed never runs the timeline and equals the real
    plan's timeline; a point marked timeline simulates exactly ``events`` messages."""
    from unittest import mock

    from fpreduce.core import timing

    text = text.format(g=g)
    pr = replace(NODE, alpha=alpha, gamma=1e-11, gpus_per_node=g, nics_per_node=nics)
    s = sc.shape(text, n)
    if s is None:
        return
    real = _real_end(text, n, nbytes, pr)
    if sc.model(s, pr) == sc.CLOSED:
        with mock.patch.object(timing, "timeline", side_effect=AssertionError("closed form expected")):
            got = sc.scaling([n], [text], compute=1.0, nbytes=nbytes, profile=pr)[0]
    else:
        got = sc.scaling([n], [text], compute=1.0, nbytes=nbytes, profile=pr)[0]
        from fpreduce.plans import parse

        assert sc.events(s) == len(timing.timeline(parse(text, n), n, nbytes, pr).messages)
    assert got.model == sc.model(s, pr)
    assert math.isclose(got.comm_s, real, rel_tol=1e-12, abs_tol=1e-18), (got.comm_s, real)


@pytest.mark.parametrize("text", [*_TEXTS[:-2], "hier:1", "hier:3", "hier:8", "tree:nccl:2", "tree:nccl:6"])
def test_shape_passes_and_fails_as_the_plan_built_on_n(text: str) -> None:
    """The plan is never built on N: its shape must accept exactly the N the builders accept, with their name."""
    from fpreduce.base.errors import InvalidArgument
    from fpreduce.plans import parse

    for n in range(1, 37):
        s = sc.shape(text, n)
        try:
            name = parse(text, n).name
        except InvalidArgument:
            assert s is None, (text, n)
        else:
            assert s == sc.PlanShape(name, n), (text, n)


@pytest.mark.parametrize("text", ["hier:0", "kary:1", "tree:nccl:x", "ring:foo", "blocked:0", "hier:"])
def test_bad_parameters_have_no_shape(text: str) -> None:
    assert all(sc.shape(text, n) is None for n in (1, 6, 1 << 20))


def test_a_million_workers_answer_from_closed_forms() -> None:
    """N = 2^20, 2^30 and 10^9 (beyond the old cap of 4096 and its 75 s): every point a closed form, in ms."""
    plans = ["ring", "hier:8", "rd", "rabenseifner", "linear", "pairwise"]
    rows = sc.scaling([1, 1 << 20, 1 << 30], plans, compute=0.4, nbytes=1e8, profile=NODE)
    assert {r.model for r in rows} == {sc.CLOSED}
    big = {r.plan: r for r in rows if r.workers == 1 << 20}
    assert set(big) == set(plans)
    # the ring's steps cross the NIC (one flow per node): 2 (N-1) (alpha + n/N beta), an independent formula
    n = 1 << 20
    assert math.isclose(big["ring"].comm_s, 2 * (n - 1) * (5e-6 + 1e8 / n / 12.5e9))
    assert math.isclose(big["linear"].comm_s, 2 * (7 * (1e-6 + 1e8 / 150e9) + (n - 8) * (5e-6 + 1e8 / 12.5e9)))
    assert "closed form for 17 of 17 points" in sc.model_note(rows)  # hier:8 has no N = 1
    odd = sc.scaling([10**9], ["ring", "hier:8", "linear"], compute=0.4, nbytes=1e8, profile=NODE)
    assert [r.model for r in odd] == [sc.CLOSED] * 3


def test_a_timeline_too_long_is_refused_up_front_naming_the_key(tmp_path: Path, capsys, monkeypatch) -> None:
    """The cap counts the timeline's messages before any point runs (here lowered to 1000 to stay cheap)."""
    from fpreduce.base.errors import InvalidArgument
    from fpreduce.cli import main

    monkeypatch.setattr(sc, "MAX_EVENTS", 1000)
    with pytest.raises(InvalidArgument, match=r"workers: tree:nccl:8 on 256 workers has no closed form"):
        sc.scaling([8, 256], ["ring", "tree:nccl:8"], compute=0.4, nbytes=1e8, profile=NODE)
    rows = sc.scaling([8, 248], ["tree:nccl:8", "ring"], compute=0.4, nbytes=1e8, profile=NODE)  # 988 messages
    assert [r.model for r in rows] == [sc.TIMELINE, sc.TIMELINE, sc.CLOSED, sc.CLOSED]
    assert sc.model_note(rows) == (
        "comm: closed form for 2 of 4 points (the event timeline equals it at N <= 64 on every family, tested); "
        "event timeline (no closed form) for tree:nccl:8"
    )
    assert sc.scaling([1 << 20], ["ring"], compute=0.4, nbytes=1e8, profile=NODE)[0].model == sc.CLOSED
    with pytest.raises(InvalidArgument, match=r"plan 'hier:1024': G \(workers per node\) at most 512"):
        sc.scaling([1024], ["hier:1024"], compute=0.4, nbytes=1e8)  # checked before its plan of 1024 is built
    (tmp_path / "s.toml").write_text('[scale]\nworkers = [600]\nplans = ["ring", "tree:nccl:8"]\n')
    assert main(["scale", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error: "), err
    assert "s.toml: scale.workers: tree:nccl:8 on 600 workers has no closed form" in err, err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()

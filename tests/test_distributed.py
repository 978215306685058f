"""Issue 17: a run split over ranks by element ranges, and a sweep on MPI ranks, give the single process's bits.

Without MPI: the shares of K ranks computed one after the other and merged give the rows
of a single run byte for byte (any K, more ranks than chunks included), and the merged
median is ``np.median``'s. Under ``mpirun -np 2`` and ``-np 3`` on loopback: metrics.csv
byte-identical and summary.json identical but for times and the ``distributed`` table
(synthetic with ring, atomic and stochastic arms; a file source), a failing rank (one
line on rank 0, the directory a resumable run), and a sweep on mpi4py.futures workers
(identical sweep.csv, resumed). Most use a chunk of 1024 elements (patched on every
rank) so that a few thousand elements make several chunks; one uses the real width.
If ``CI`` is set and Open MPI or mpi4py is missing, the MPI tests fail instead of skipping.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _backends import require

import fpreduce as fr
from fpreduce.backends import BackendError, distributed
from fpreduce.run import rundir, runner, split
from fpreduce.run.config import load_config
from fpreduce.run.runner import check_run, run_experiment
from fpreduce.run.sweep import run_sweep

ARMS = """
[[arms]]
name = "A"
order = "fixed:ring:nccl"
input = "bf16"
accumulate = "fp32"

[[arms]]
name = "B"
order = "shuffle:ring:nccl"
input = "bf16"
accumulate = "bf16"

[[arms]]
name = "C"
order = "atomic"
input = "bf16"
accumulate = "fp32"

[[arms]]
name = "S"
order = "fixed:pairwise"
input = "fp16"
accumulate = "fp16"
rounding = "stochastic"
average = "predivide"
"""


def _config(workers: int, elements: int, steps: int, source: str = "", arms: str = ARMS) -> str:
    src = source or f'kind = "synthetic"\nelements = {elements}\ndist = "lognormal"'
    return f'[experiment]\nname = "d"\nsteps = {steps}\nworkers = {workers}\nseed = 7\n\n[source]\n{src}\n{arms}'


SMALL_WIDTH = 1024
PATCH = f"""
import sys
import fpreduce.run.runner as runner
import fpreduce.run.split as split
runner.chunk_width = split.chunk_width = lambda workers: {SMALL_WIDTH}
{{extra}}
from fpreduce.cli import main
commands, argv = [], sys.argv[1:]
while "--then" in argv:  # several commands in the same ranks, one after the other
    commands.append(argv[: argv.index("--then")])
    argv = argv[argv.index("--then") + 1 :]
sys.exit(next((code for code in map(main, [*commands, argv]) if code), 0))
"""
FAIL_AT_STEP_1 = """
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 1:
    share = split.compute_share
    def failing(cfg, source, arms, step, *rest):
        if step == 1:
            raise OSError("disk on fire")
        return share(cfg, source, arms, step, *rest)
    split.compute_share = failing
"""
DIE_AT_STEP_1 = FAIL_AT_STEP_1.replace('raise OSError("disk on fire")', "import os; os._exit(9)")
FAIL_AT_CHECK = """
from mpi4py import MPI
import fpreduce.backends.distributed as d
from fpreduce.base.errors import InvalidArgument
if MPI.COMM_WORLD.Get_rank() == 1:
    def failing(cfg, share=None):
        raise InvalidArgument("/data/g.npy: no such file or directory")
    d.check_run = failing
"""


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "chunk_width", lambda workers: SMALL_WIDTH)
    monkeypatch.setattr(split, "chunk_width", lambda workers: SMALL_WIDTH)


def _stable(d: Path) -> dict[str, Any]:
    """summary.json without what may differ between a split and a single run: the times, the date it was written
    (two runs may straddle a minute) and the ranks."""
    s = json.loads((d / "summary.json").read_text())
    return {k: v for k, v in s.items() if not k.endswith("_time_s") and k not in ("distributed", "date")}


def _same_run(single: Path, split_dir: Path) -> None:
    assert (split_dir / "metrics.csv").read_bytes() == (single / "metrics.csv").read_bytes()
    assert _stable(split_dir) == _stable(single)
    assert (split_dir / "config.toml").read_bytes() == (single / "config.toml").read_bytes()


def _split_rows(cfg_path: Path, ranks: int) -> list[dict[str, Any]]:
    """The rows of a run whose steps are computed as ``ranks`` shares, one after the other, and merged."""
    cfg = load_config(cfg_path)
    source = check_run(cfg)
    arms = [split.rank_arms(cfg, source) for _ in range(ranks)]
    times = dict.fromkeys(("engine", "source", "exact", "metrics"), 0.0)
    rows: list[dict[str, Any]] = []
    for step in range(cfg.experiment.steps):
        got = [
            split.compute_share(cfg, source, arms[r], step, times, *split.span(cfg, source, r, ranks))
            for r in range(ranks)
        ]
        shares = [s for _, s in got]
        buckets = split.median_buckets(shares)
        meds = split.medians(shares, buckets, [split.low_counts(st, buckets) for st, _ in got])
        split.record(cfg, source, arms[0], step, split.merge(cfg, shares, meds), rows)
    return rows


# --- without MPI ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("small_chunks")
def test_shares_merge_to_the_single_run(tmp_path: Path) -> None:
    cfg = tmp_path / "d.toml"
    cfg.write_text(_config(8, 3 * SMALL_WIDTH + 517, 2))
    run_experiment(cfg, tmp_path / "one")
    want = (tmp_path / "one" / "metrics.csv").read_bytes()
    for ranks in (1, 2, 3, 6):  # 6 ranks, 4 chunks: two ranks have nothing to do
        d = tmp_path / f"k{ranks}"
        d.mkdir()
        rundir.write_metrics(d, _split_rows(cfg, ranks))
        assert (d / "metrics.csv").read_bytes() == want, ranks


MODEL = '[experiment]\nname = "m"\nsteps = 3\nworkers = 8\nseed = 2\n'
MODEL += '[source]\nkind = "model"\nhidden = 8\ninputs = 4\noutputs = 2\n'


def test_training_parts_join_to_the_single_run(tmp_path: Path) -> None:
    """A model's gradient: K ranks reduce element ranges, rank 0 joins them, measures and updates."""
    cfg_path = tmp_path / "m.toml"
    cfg_path.write_text(MODEL + ARMS)
    run_experiment(cfg_path, tmp_path / "one")
    cfg = load_config(cfg_path)
    source = check_run(cfg)
    ranks = source.elements + 2  # two ranks without an element
    arms = [split.rank_arms(cfg, source) for _ in range(ranks)]
    times = dict.fromkeys(("engine", "source", "exact", "metrics"), 0.0)
    rows: list[dict[str, Any]] = []
    for step in range(cfg.experiment.steps):
        for r in range(1, ranks):  # rank 0's parameters, as it sends them
            for a, a0 in zip(arms[r], arms[0], strict=True):
                a.params, a.state = a0.params, a0.state
        parts = [
            split.reduce_part(cfg, source, arms[r], step, times, *split.span(cfg, source, r, ranks))
            for r in range(ranks)
        ]
        split.train_step(cfg, source, arms[0], step, rows, times, split.join_parts(parts))
    d = tmp_path / "k"
    d.mkdir()
    rundir.write_metrics(d, rows)
    assert (d / "metrics.csv").read_bytes() == (tmp_path / "one" / "metrics.csv").read_bytes()


def test_span_covers_whole_chunks() -> None:
    cfg = load_config(None)
    source = check_run(cfg)
    w = runner.chunk_width(cfg.experiment.workers)
    spans = [split.span(cfg, source, r, 3) for r in range(3)]
    assert spans[0][0] == 0
    assert spans[-1][1] == source.elements
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert all(lo % w == 0 for lo, _ in spans)


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 1001])
def test_merged_median_is_numpys(n: int) -> None:
    rng = np.random.default_rng(n)
    v = np.abs(rng.standard_normal(n)).astype(np.float32) * rng.choice([1e-30, 1.0, 1e30], n).astype(np.float32)
    v[rng.random(n) < 0.2] = 0.0
    v[rng.random(n) < 0.1] = v[0]  # ties
    if n > 7:
        v[-1] = np.inf
    cuts = np.sort(rng.integers(0, n + 1, 3))
    parts = np.split(v, cuts)

    class _St:  # what low_counts reads of a step
        def __init__(self, p: np.ndarray) -> None:
            self.err = [type("E", (), {"rels": [p]})()]

    shares = []
    for p in parts:
        u = p.view(np.uint32)
        top = np.bincount(u >> np.uint32(16), minlength=1 << 16)[None]
        counts = np.zeros((1, 10), dtype=np.int64)
        counts[0, 4] = p.size
        shares.append(split.Share(np.empty((0, 1, 9)), counts, np.empty((1, 5)), np.empty(0), top, np.array([False])))
    b = split.median_buckets(shares)
    got = split.medians(shares, b, [split.low_counts(_St(p), b) for p in parts])  # type: ignore[arg-type]
    assert got == [float(np.median(v))]


# --- under mpirun ---------------------------------------------------------------------------------


def _patched(tmp_path: Path, extra: str = "") -> str:
    p = tmp_path / "rank.py"
    p.write_text(PATCH.format(extra=extra))
    return str(p)


@pytest.mark.usefixtures("small_chunks", "numpy_ranks")
def test_mpirun_3_ranks_synthetic_and_file_equal_one_process(tmp_path: Path) -> None:
    """The shares' messages and merge under mpirun, synthetic and file sources: the kernels over element
    ranges are test_shares_merge_to_the_single_run's (in process), and under mpirun the training and
    real-chunk-width tests' (their ranks keep the kernels)."""
    require("mpi")
    workers, elements = 8, 4 * SMALL_WIDTH + 300
    syn = tmp_path / "syn.toml"
    syn.write_text(_config(workers, elements, 2))
    g = np.random.default_rng(3).standard_normal((2, workers, elements)).astype(np.float32) * 1e-3
    np.save(tmp_path / "g.npy", g)
    fil = tmp_path / "file.toml"
    fil.write_text(_config(workers, elements, 2, f'kind = "file"\npath = "{tmp_path / "g.npy"}"'))
    commands: list[str] = []
    for cfg in (syn, fil):  # both runs in one launch: the ranks' start-up (imports, kernels) paid once
        run_experiment(cfg, tmp_path / f"one-{cfg.stem}")
        commands += ["--then"] * bool(commands)
        commands += ["run", str(cfg), "--distributed", "--out", str(tmp_path / f"three-{cfg.stem}"), "--quiet"]
        commands += ["--no-report"]
    text = distributed.launch([_patched(tmp_path), *commands], 3, timeout=120)
    assert text.count("wrote") == 2
    for cfg in (syn, fil):
        out = tmp_path / f"three-{cfg.stem}"
        _same_run(tmp_path / f"one-{cfg.stem}", out)
        dist = json.loads((out / "summary.json").read_text())["distributed"]
        assert dist["ranks"] == 3
        assert sum(dist["elements"]) == elements


def test_mpirun_3_ranks_training(tmp_path: Path) -> None:
    """Training: the reduction split, the update on rank 0 (its parameters sent every step)."""
    require("mpi")
    cfg = tmp_path / "m.toml"
    cfg.write_text(MODEL + ARMS)
    run_experiment(cfg, tmp_path / "one")
    out = tmp_path / "three"
    program = ["-m", "fpreduce.cli", "run", str(cfg), "--distributed", "--out", str(out), "--quiet", "--no-report"]
    distributed.launch(program, 3, timeout=120)
    _same_run(tmp_path / "one", out)


def test_mpirun_2_ranks_real_chunk_width(tmp_path: Path) -> None:
    """The real chunk width (65,536 elements at 64 workers): two chunks, one per rank."""
    require("mpi")
    cfg = tmp_path / "d.toml"
    cfg.write_text(_config(64, 65536 + 3000, 1, arms=ARMS[: ARMS.index('[[arms]]\nname = "S"')]))
    run_experiment(cfg, tmp_path / "one")
    out = tmp_path / "two"
    distributed.launch(
        ["-m", "fpreduce.cli", "run", str(cfg), "--distributed", "--out", str(out), "--quiet", "--no-report"], 2
    )
    _same_run(tmp_path / "one", out)
    assert json.loads((out / "summary.json").read_text())["distributed"]["elements"] == [65536, 3000]


@pytest.fixture
def numpy_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks take the numpy paths (FPREDUCE_NO_JIT=1 in mpirun's environment: no numba import and no
    kernel loads, ~2x less start-up a rank): what fails, stops and resumes is the run's, not a kernel's; the
    single run it is compared with keeps this process's kernels (the same bits, tests/test_routes.py)."""
    monkeypatch.setenv("FPREDUCE_NO_JIT", "1")


def _two_step_run(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """(config, run directory, the `fpreduce run --distributed` arguments) of a 2-step, 3-chunk run."""
    require("mpi")
    cfg = tmp_path / "d.toml"
    cfg.write_text(_config(8, 3 * SMALL_WIDTH, 2))
    out = tmp_path / "run"
    return cfg, out, ["run", str(cfg), "--distributed", "--out", str(out), "--quiet", "--no-report"]


@pytest.mark.usefixtures("small_chunks", "numpy_ranks")
def test_a_failing_rank_stops_the_run_in_one_line(tmp_path: Path) -> None:
    cfg, out, args = _two_step_run(tmp_path)
    with pytest.raises(BackendError) as e:
        distributed.launch([_patched(tmp_path, FAIL_AT_CHECK), *args], 2, timeout=120)
    assert "fpreduce: error: rank 1: /data/g.npy: no such file or directory" in str(e.value)
    assert not out.exists()  # nothing written before every rank's checks pass
    with pytest.raises(BackendError) as e:
        distributed.launch([_patched(tmp_path, FAIL_AT_STEP_1), *args], 2, timeout=120)
    assert "fpreduce: error: rank 1 failed at step 1: OSError: disk on fire" in str(e.value)
    s = json.loads((out / "summary.json").read_text())
    assert (s["complete"], s["steps_done"]) == (False, 1)  # the checkpoint of step 0, nothing half-written
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
    distributed.launch([_patched(tmp_path), *args, "--resume"], 2, timeout=120)
    run_experiment(cfg, tmp_path / "one")
    _same_run(tmp_path / "one", out)


@pytest.mark.usefixtures("small_chunks", "numpy_ranks")
def test_a_killed_rank_ends_the_job_and_leaves_the_last_checkpoint(tmp_path: Path) -> None:
    _, out, args = _two_step_run(tmp_path)
    with pytest.raises(BackendError, match="rank 1 failed first"):
        distributed.launch([_patched(tmp_path, DIE_AT_STEP_1), *args], 2, timeout=120)
    s = json.loads((out / "summary.json").read_text())
    assert (s["complete"], s["steps_done"]) == (False, 1)
    assert sorted(p.name for p in out.iterdir()) == [
        ".fpreduce.lock",
        "config.toml",
        "metrics.csv",
        "state.npz",
        "summary.json",
    ]


SWEEP = """
[experiment]
name = "sw"
steps = 2
seed = 1

[source]
kind = "synthetic"
elements = 3000

[sweep]
workers = [4, 8]
plans = ["sequential", "ring:nccl"]
formats = ["bf16:bf16", "bf16:fp32"]
"""


def test_sweep_on_mpi_workers_resumes_with_the_same_table(tmp_path: Path) -> None:
    require("mpi")
    cfg = tmp_path / "sw.toml"
    cfg.write_text(SWEEP)
    seen: list[tuple[str, str]] = []
    run_sweep(cfg, tmp_path / "local", jobs=1, progress=lambda d, t, name, how, s: seen.append((name, how)))
    assert len(seen) == 8
    assert {h for _, h in seen} == {"ran"}
    want = (tmp_path / "local" / "sweep.csv").read_bytes()
    d = tmp_path / "mpi"
    shutil.copytree(tmp_path / "local", d)
    points = rundir.point_dirs(d)
    for p in points[:3]:  # interrupted before these points (and the table) were written
        shutil.rmtree(p)
    (d / "sweep.csv").unlink()
    program = ["-m", "mpi4py.futures", "-m", "fpreduce.cli", "sweep", str(cfg), "--out", str(d)]
    text = distributed.launch([*program, "--executor", "mpi", "--resume", "--no-report"], 2, timeout=120)
    assert (d / "sweep.csv").read_bytes() == want
    assert text.count(": ran (") == 3
    assert text.count(": done (") == 5
    assert "[8/8]" in text


def test_llm_example_and_layouts() -> None:
    """examples/llm-gradient.toml loads: TinyLlama-1.1B's parameter count, N = 64; a layout's slice is the whole's."""
    from fpreduce.run import _layouts
    from fpreduce.run.sources import SyntheticSpec, open_source

    cfg = load_config(Path(__file__).parent.parent / "examples" / "llm-gradient.toml")
    assert cfg.experiment.workers >= 64
    assert cfg.source.elements == _layouts.total("tinyllama-1.1b") == 1_100_048_384  # type: ignore[union-attr]
    assert _layouts.total("llama-2-7b") == 6_738_415_616
    spec = SyntheticSpec(layout="tinyllama-1.1b", elements=70_000_000)
    src = open_source(spec, workers=2, seed=1)
    lo, hi = 65_535_990, 65_536_010  # across the embedding's end
    whole = src.gradients(0, lo=lo - 30_000, hi=hi + 30_000)
    assert np.array_equal(src.gradients(0, lo=lo, hi=hi), whole[:, 30_000:30_020])
    with pytest.raises(fr.InvalidArgument, match=r"source\.elements"):
        SyntheticSpec(layout="tinyllama-1.1b", elements=1_100_048_385)
    with pytest.raises(fr.InvalidArgument, match="source.layout"):
        SyntheticSpec(layout="llama-3")


def test_cli_refuses_both_kinds_of_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fpreduce.cli import main

    assert main(["run", "--distributed", "--backend", "mpi", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "--distributed splits the elements over ranks" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    cfg = tmp_path / "sw.toml"
    cfg.write_text(SWEEP)
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "s"), "--resume", "--force"]) == 2
    assert "give one of them" in capsys.readouterr().err

"""``fpreduce run CONFIG --backend mpi`` on real Open MPI ranks (fpreduce.backends.mpi_run).

Two real launches (N = 4 ring, N = 5 Rabenseifner) plus error paths; each mpirun takes
a few seconds. If ``CI`` is set and Open MPI or mpi4py is missing, the tests fail
instead of skipping.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _backends import require

import fpreduce as fr
from fpreduce import plans
from fpreduce.backends import BackendError, mpi, mpi_run
from fpreduce.core.engine import reduce
from fpreduce.core.rounding import round_to
from fpreduce.run.config import load_config
from fpreduce.run.policies import plan_for, shuffle_permutation
from fpreduce.run.runner import run_experiment
from fpreduce.run.sources import open_source

RING = """
[experiment]
name = "mpi-ring"
steps = 3
workers = 4
seed = 5

[source]
kind = "synthetic"
elements = 257

[[arms]]
name = "A"
order = "fixed:ring:ompi"
input = "fp32"
accumulate = "fp32"

[[arms]]
name = "B"
order = "shuffle:ring:ompi"
input = "fp32"
accumulate = "fp32"

[[arms]]
name = "C"
order = "shuffle:ring:ompi"
input = "bf16"
accumulate = "bf16"
"""

RABENSEIFNER = """
[experiment]
name = "mpi-rab"
steps = 2
workers = 5
seed = 2

[source]
kind = "synthetic"
dist = "lognormal"
elements = 64

[[arms]]
name = "A"
order = "fixed:rabenseifner"
input = "fp64"
accumulate = "fp64"

[[arms]]
name = "B"
order = "shuffle:rabenseifner"
input = "fp32"
accumulate = "fp32"

[[arms]]
name = "ring"
order = "fixed:ring:ompi"
input = "fp32"
accumulate = "fp32"

[[arms]]
name = "arrival"
order = "arrival"
input = "fp32"
accumulate = "fp32"
"""


def _write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m fpreduce.cli ...`` as a singleton MPI process (no mpirun)."""
    return subprocess.run(
        [sys.executable, "-m", "fpreduce.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **mpi._ENV, **(env or {})},
        check=False,
    )


# --- without MPI ---------------------------------------------------------------------------------


def test_resolve_algorithm() -> None:
    assert mpi_run.resolve_algorithm("ring:ompi") == "ring"
    assert mpi_run.resolve_algorithm("rd") == "recursive_doubling"
    assert mpi_run.resolve_algorithm("rabenseifner") == "rabenseifner"
    assert mpi_run.resolve_algorithm("linear") == "basic_linear"
    assert mpi_run.resolve_algorithm("4") == "ring"
    assert mpi_run.resolve_algorithm("segmented_ring") == "segmented_ring"
    with pytest.raises(fr.InvalidArgument, match="mpi algorithm"):
        mpi_run.resolve_algorithm("ring:nccl")


def test_classify(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, RABENSEIFNER))
    modes = {m.name: m for m in mpi_run.classify(cfg, "rabenseifner", 64)}
    assert modes["A"].real
    assert modes["A"].dtype == "fp64"
    assert modes["B"].real
    assert modes["B"].dtype == "fp32"
    assert not modes["ring"].real
    assert "needs algorithm ring" in modes["ring"].note
    assert not modes["arrival"].real
    assert "no Open MPI counterpart" in modes["arrival"].note
    # a size-dependent fallback (M < 2^floor(log2 N): basic_linear) makes the arm emulated-only
    small = {m.name: m for m in mpi_run.classify(cfg, "rabenseifner", 3)}
    assert not small["A"].real
    assert "basic_linear" in small["A"].note
    ring = {m.name: m for m in mpi_run.classify(load_config(_write(tmp_path, RING)), "ring", 257)}
    assert ring["A"].real
    assert ring["B"].real
    assert not ring["C"].real
    assert "bf16" in ring["C"].note


def test_shuffle_permutation_is_plan_for(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, RING))
    arm = cfg.arms[1]
    for step in range(4):
        p = plan_for(cfg, arm, step)
        q = plans.parse("ring:ompi", 4).relabel(shuffle_permutation(cfg, arm, step))
        X = np.random.default_rng(step).standard_normal((4, 50)).astype(np.float32)
        assert np.array_equal(
            reduce(X, p, input="fp32", accumulate="fp32"), reduce(X, q, input="fp32", accumulate="fp32")
        )


def test_no_real_csv_reads_empty(tmp_path: Path) -> None:
    assert mpi_run.load_real(tmp_path) == []


def test_default_backend_writes_no_real_csv(tmp_path: Path) -> None:
    run_experiment(load_config(_write(tmp_path, RING)), tmp_path / "run")
    assert not (tmp_path / "run" / "real.csv").exists()
    assert "backend" not in json.loads((tmp_path / "run" / "summary.json").read_text())


# --- singleton MPI (no mpirun): errors -----------------------------------------------------------


def test_wrong_number_of_ranks_singleton(tmp_path: Path) -> None:
    require("mpi")
    r = _cli(["run", str(_write(tmp_path, RING)), "--backend", "mpi", "--out", str(tmp_path / "run")])
    assert r.returncode == 2, r.stderr
    assert "experiment.workers = 4 but this MPI job has 1 rank(s)" in r.stderr
    assert "mpirun -np 4" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


def test_launcher_and_option_disagree(tmp_path: Path) -> None:
    require("mpi")
    cfg = _write(tmp_path, RING.replace("workers = 4", "workers = 1"))
    r = _cli(
        ["run", str(cfg), "--backend", "mpi", "--mpi-algorithm", "ring:ompi", "--out", str(tmp_path / "r")],
        env={"OMPI_MCA_coll_tuned_allreduce_algorithm": "3"},
    )
    assert r.returncode == 2
    assert "forces coll_tuned_allreduce_algorithm=3 (recursive_doubling)" in r.stderr


def test_training_source_refused(tmp_path: Path) -> None:
    require("mpi")
    text = RING.replace('kind = "synthetic"\nelements = 257', 'kind = "model"').replace("workers = 4", "workers = 1")
    r = _cli(["run", str(_write(tmp_path, text)), "--backend", "mpi", "--out", str(tmp_path / "r")])
    assert r.returncode == 2
    assert "source kind 'model'" in r.stderr


# --- real runs under mpirun ----------------------------------------------------------------------


def _by_arm(rows: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        out.setdefault(str(r["arm"]), []).append(r)
    return out


def test_every_arm_says_whether_it_runs_for_real() -> None:
    """`--backend mpi` is loud: a line per arm, and an error when no arm touches the real library."""
    cfg = load_config(None)  # the default: bf16 arms and arrival orders, none of them Open MPI's
    modes = mpi_run.classify(cfg, "ring", 16384)
    assert not any(m.real for m in modes)
    lines = mpi_run.describe(modes, "ring")
    assert len(lines) == len(cfg.arms)
    assert all(ln.startswith(f"arm {a.name}: emulated only: ") for ln, a in zip(lines, cfg.arms, strict=True))
    with pytest.raises(fr.InvalidArgument, match=r"no arm can run on the real library \(A: formats bf16->bf16->bf16"):
        mpi_run.require_real(modes, allow_emulated=False)
    mpi_run.require_real(modes, allow_emulated=True)  # the explicit opt-out
    mpi_run.require_real([*modes, mpi_run.ArmMode("R", True, "ring:ompi", "fp32", "")], allow_emulated=False)


BF16_ONLY = """
[experiment]
name = "mpi-bf16"
steps = 2
workers = 2
[source]
kind = "synthetic"
elements = 64
[[arms]]
name = "A"
order = "fixed:ring:ompi"
input = "bf16"
accumulate = "bf16"
"""


def test_no_real_arm_is_an_error_under_mpirun(tmp_path: Path) -> None:
    require("mpi")
    cfg = _write(tmp_path, BF16_ONLY)
    with pytest.raises(BackendError, match="no arm can run on the real library"):
        mpi_run.launch(cfg, tmp_path / "run", timeout=120)
    assert not (tmp_path / "run").exists()  # refused before anything is written
    text = mpi_run.launch(cfg, tmp_path / "run", args=["--allow-emulated", "--no-report"], timeout=120)
    assert "fpreduce: --backend mpi: arm A: emulated only: formats bf16->bf16->bf16" in text
    assert fr.load_run(tmp_path / "run").summary["mpi"]["arms"]["A"]["real"] is False


def test_ring_run_is_bit_exact(tmp_path: Path) -> None:
    require("mpi")
    cfg_path = _write(tmp_path, RING)
    out = tmp_path / "run"
    text = mpi_run.launch(cfg_path, out, algorithm="ring:ompi", args=["--no-report"], timeout=120)
    assert "fpreduce: --backend mpi: arm A: real MPI_Allreduce (ring, plan ring:ompi, fp32)" in text
    assert "fpreduce: --backend mpi: arm C: emulated only: formats bf16->bf16->bf16" in text
    res = fr.load_run(out)
    assert res.complete
    assert res.summary["backend"] == "mpi"
    info = res.summary["mpi"]
    assert info["ranks"] == 4
    assert info["algorithm"] == "ring"
    assert info["coll_tuned_allreduce_algorithm"] == 4
    assert info["arms"]["A"]["real"]
    assert info["arms"]["B"]["real"]
    assert not info["arms"]["C"]["real"]
    assert info["arms"]["A"]["min_real_agree"] == 1.0
    assert info["arms"]["B"]["ranks_agree"] is True
    rows = _by_arm(mpi_run.load_real(out))
    assert sorted(rows) == ["A", "B", "C"]
    for arm in ("A", "B"):
        assert [r["step"] for r in rows[arm]] == [0, 1, 2]
        assert all(r["real_agree"] == 1.0 and r["ranks_agree"] == 1.0 for r in rows[arm]), rows[arm]
    assert all(math.isnan(float(r["real_agree"])) for r in rows["C"])  # type: ignore[arg-type]
    # rank 0 wrote the same run directory as the emulated runner
    emu = tmp_path / "emulated"
    run_experiment(load_config(cfg_path), emu)
    assert (out / "metrics.csv").read_text() == (emu / "metrics.csv").read_text()
    assert (out / "config.toml").read_text() == (emu / "config.toml").read_text()
    # the shuffled arm really re-ranked (B differs from A), and the Split key direction matters:
    # relabelling by the inverse permutation would have given other bits
    assert np.nanmax(res.metrics["B"]["diff_frac"]) > 0
    cfg = load_config(cfg_path)
    X = open_source(cfg.source, workers=4, seed=5).gradients(0)
    perm = shuffle_permutation(cfg, cfg.arms[1], 0)
    ring = plans.parse("ring:ompi", 4)
    Xr = round_to(X, "fp32")
    y = reduce(Xr, ring.relabel(perm), input="fp32", accumulate="fp32")
    y_inv = reduce(Xr, ring.relabel(np.argsort(perm)), input="fp32", accumulate="fp32")
    assert not np.array_equal(y, y_inv)


def test_rabenseifner_fp64_and_emulated_arms(tmp_path: Path) -> None:
    require("mpi")
    out = tmp_path / "run"
    text = mpi_run.launch(
        _write(tmp_path, RABENSEIFNER), out, algorithm="rabenseifner", args=["--no-report"], timeout=120
    )
    assert text.count("fpreduce 0") == 1  # only rank 0 prints
    res = fr.load_run(out)
    arms = res.summary["mpi"]["arms"]
    assert arms["A"]["dtype"] == "fp64"
    assert arms["B"]["dtype"] == "fp32"
    assert not arms["ring"]["real"]
    assert not arms["arrival"]["real"]
    rows = _by_arm(mpi_run.load_real(out))
    for arm in ("A", "B"):
        assert [r["real_agree"] for r in rows[arm]] == [1.0, 1.0]
        assert [r["ranks_agree"] for r in rows[arm]] == [1.0, 1.0]
    for arm in ("ring", "arrival"):
        assert all(math.isnan(float(r["real_agree"])) for r in rows[arm])  # type: ignore[arg-type]


def test_wrong_number_of_ranks_under_mpirun(tmp_path: Path) -> None:
    require("mpi")
    with pytest.raises(BackendError, match=r"experiment.workers = 4 but this MPI job has 3 rank\(s\)"):
        mpi_run.launch(_write(tmp_path, RING), tmp_path / "run", np_=3, timeout=120)
    assert not (tmp_path / "run").exists()

import json

import numpy as np
import pytest

from fpreduce.cli import main
from fpreduce.metrics import ulp_distance

SMALL = ["--set", "experiment.workers=4", "--set", "source.elements=64", "--steps", "3", "--quiet"]


def test_run_writes_complete_run_dir(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), *SMALL]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True
    assert summary["workers"] == 4
    assert summary["steps_done"] == 3
    lines = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(lines) == 1 + 3 * len(summary["arms"])
    assert (out / "report.pdf").read_bytes().startswith(b"%PDF")
    assert any(p.suffix == ".png" and p.stat().st_size > 1000 for p in (out / "figures").iterdir())
    printed = capsys.readouterr().out
    assert "wrote" in printed
    assert "B-fp32acc" in printed


def test_run_is_reproducible(tmp_path):
    main(["run", "--out", str(tmp_path / "a"), *SMALL, "--no-report"])
    main(["run", "--out", str(tmp_path / "b"), *SMALL, "--no-report"])
    for name in ("metrics.csv", "config.toml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["run", "--set", "arms.A.input=bf61"], "did you mean 'bf16'"),
        (["run", "--set", "experiment.workers=0"], ">= 1"),
        (["run", "--set", "experiment.stpes=3"], "did you mean 'steps'"),
        (["run", "missing.toml"], "cannot read config"),
        (["plot", "nowhere"], "no such run directory"),
        (["report", "nowhere"], "nowhere"),
        (["sum", "1,x"], "comma-separated"),
        (["sum", "missing.npy"], "cannot read"),
        (["sum", "1,2", "--plans", "pairwize"], "did you mean 'pairwise'"),
    ],
)
def test_bad_input_is_one_line_error(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_sum_reports_distinct_orders(capsys):
    assert main(["sum", "1,1e-8,-1,3e-9", "--accumulate", "bf16", "--orders", "40"]) == 0
    out = capsys.readouterr().out
    assert "exact sum" in out
    assert "distinct results" in out


def test_ulp_distance_exact_across_zero():
    a = np.array([2.0**-133, -(2.0**-133), 1.0], dtype=np.float32)
    b = np.array([-(2.0**-133), 2.0**-133, 1.0078125], dtype=np.float32)
    assert ulp_distance(a, b, "bf16").tolist() == [2, 2, 1]

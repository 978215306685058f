import json

import numpy as np
import pytest

from fpreduce.cli import main
from fpreduce.metrics import ulp_distance


def test_run_writes_complete_run_dir(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["run", "--out", str(out), "--workers", "8", "--elements", "256", "--steps", "3"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True
    assert summary["config"]["workers"] == 8
    lines = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(lines) == 4
    assert (out / "figures" / "ab.png").stat().st_size > 1000
    assert (out / "report.pdf").read_bytes().startswith(b"%PDF")
    # bf16 A vs B really differ at every step
    assert summary["steps_with_any_difference"] == 3
    assert "wrote" in capsys.readouterr().out


def test_run_is_reproducible(tmp_path):
    args = ["--workers", "4", "--elements", "64", "--steps", "2"]
    main(["run", "--out", str(tmp_path / "a"), *args])
    main(["run", "--out", str(tmp_path / "b"), *args])
    a = (tmp_path / "a" / "metrics.csv").read_bytes()
    assert a == (tmp_path / "b" / "metrics.csv").read_bytes()
    pa = (tmp_path / "a" / "report.pdf").read_bytes()
    assert pa == (tmp_path / "b" / "report.pdf").read_bytes()
    main(["run", "--out", str(tmp_path / "ring"), "--plan", "ring:nccl", *args])
    assert json.loads((tmp_path / "ring" / "summary.json").read_text())["config"]["plan"] == "ring:nccl"



def test_fp32_accumulator_differs_less(tmp_path):
    common = ["--workers", "16", "--elements", "512", "--steps", "2"]
    main(["run", "--out", str(tmp_path / "a"), *common])
    main(["run", "--out", str(tmp_path / "b"), *common, "--accumulate", "fp32"])
    lo = json.loads((tmp_path / "b" / "summary.json").read_text())["median_frac_bits_differ"]
    hi = json.loads((tmp_path / "a" / "summary.json").read_text())["median_frac_bits_differ"]
    assert lo < hi


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["run", "--input", "bf61"], "did you mean 'bf16'"),
        (["run", "--workers", "0"], "positive"),
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

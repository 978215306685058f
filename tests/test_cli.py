import json

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.cli import main
from fpreduce.core.metrics import ulp_steps

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
        (["sum", "1,2,3", "--seed", "-5", "--rounding", "stochastic"], "--seed must be >= 0"),  # issue 26
        (["sum", "1,2,3", "--orders", "5", "--seed", "-1"], "--seed must be >= 0"),
        (["calibrate", "--sizes", "abc"], "--sizes: 'abc' is not an integer"),
        (["calibrate", "--sizes", "1,4,16", "--reps", "0"], "--reps must be >= 1"),
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


def test_sum_explains_each_plans_route(tmp_path, capsys):
    """``--explain``: the route each plan takes, as fr.explain decides it, in words and in JSON."""
    np.save(tmp_path / "g.npy", np.random.default_rng(2).standard_normal((8, 4000)).astype(np.float32))
    args = ["sum", str(tmp_path / "g.npy"), "--input", "bf16", "--accumulate", "bf16", "--plans", "sequential,ring"]
    assert main([*args, "--rounding", "up", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "route:   wide_left" in out
    assert "route:   ring_rows" in out
    assert "why:" in out
    assert main([*args, "--explain", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    routes = [p["route"]["route"] for p in doc["plans"]]
    X = fr.round_to(np.load(tmp_path / "g.npy"), "bf16")
    assert routes == [fr.explain(X, p, input="bf16", accumulate="bf16").route.value for p in ("sequential", "ring")]
    assert main([*args]) == 0
    assert "route:" not in capsys.readouterr().out  # only when asked


def test_ulp_distance_exact_across_zero():
    a = np.array([2.0**-133, -(2.0**-133), 1.0], dtype=np.float32)
    b = np.array([-(2.0**-133), 2.0**-133, 1.0078125], dtype=np.float32)
    assert ulp_steps(a, b, "bf16").tolist() == [2, 2, 1]


def test_sum_refuses_bad_files(tmp_path, capsys):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "three.npy", np.zeros((2, 2, 2)))
    np.save(tmp_path / "nan.npy", np.array([1.0, np.nan, 2.0]))
    np.save(tmp_path / "ints.npy", np.arange(4))
    for name, msg in [
        ("obj.npy", "pickled"),
        ("three.npy", "shape (N,) or (N, d)"),
        ("nan.npy", "NaN/Inf"),
        ("ints.npy", "float array"),
    ]:
        assert main(["sum", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert msg in err, err
        assert len(err.strip().splitlines()) == 1


def test_sum_of_a_matrix_and_algorithms(tmp_path, capsys):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "g.npy", rng.standard_normal((8, 50)).astype(np.float32))
    assert (
        main(
            [
                "sum",
                str(tmp_path / "g.npy"),
                "--accumulate",
                "bf16",
                "--plans",
                "sequential,ring:gloo",
                "--algorithm",
                "binned",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "correctly rounded" in out.splitlines()[1]  # the table's header
    assert [line.split()[-1] for line in out.splitlines()[3:5]] == ["100.0%", "100.0%"]


def test_unwritable_output_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["run", "--out", str(tmp_path / "file" / "run"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err or "not a directory" in err.lower()
    assert "Traceback" not in err

"""Issue 26 items 5, 7, 8: inputs rounded before any check, bounded work, loopback-only MPI launches."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fpreduce.base.errors import InvalidArgument
from fpreduce.cli import main
from fpreduce.run.sources import FileSource, FileSpec


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *msgs: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error: "), err
    assert len(err.strip().splitlines()) == 1, err
    for m in msgs:
        assert m in err, err
    return err


# item 5: the inputs are rounded to their format before any check


def test_sum_inputs_overflowing_their_format_with_both_signs_is_an_error_not_nan(capsys):
    one_line_error(capsys, ["sum", "1e308,1e308,-1e308"], "overflow fp32", "value [0] = 1e+308", "inf - inf")


def test_sum_an_input_overflowing_its_format_is_said_beside_the_exact_sum(capsys):
    assert main(["sum", "1e40,1", "--input", "fp16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert doc["input_overflow"]["count"] == 1
    assert doc["input_overflow"]["first"] == 0
    assert doc["exact"] is None
    assert doc["exact_nonfinite"] == "inf"
    assert main(["sum", "1e308,1"]) == 0
    assert "overflow: 1 input overflows fp32" in capsys.readouterr().out


def test_sum_nan_and_inf_given_as_values_are_still_refused(capsys):
    one_line_error(capsys, ["sum", "1,inf"], "value [1] is inf")


def test_a_float64_source_beyond_float32_is_refused_not_inf(tmp_path, capsys):
    a = np.random.default_rng(0).standard_normal((2, 4, 16))
    a[1, 2, 5] = 1e300
    np.save(tmp_path / "big.npy", a)
    argv = ["run", "--source", str(tmp_path / "big.npy"), "--out", str(tmp_path / "r"), "--no-report", "--quiet"]
    one_line_error(capsys, argv, "big.npy: step 1: 1 float64 gradient value(s) overflow float32", "element 5")


# item 7: bounded work


@pytest.mark.parametrize("per_step", [False, True])
def test_a_source_truncated_while_a_run_reads_it_is_an_error_not_sigbus(tmp_path, per_step):
    a = np.ones((3, 4, 4096), dtype=np.float32)
    if per_step:
        (tmp_path / "g").mkdir()
        for s in range(3):
            np.save(tmp_path / "g" / f"step_{s:06d}.npy", a[s])
        path, victim = tmp_path / "g", tmp_path / "g" / "step_000002.npy"
    else:
        np.save(tmp_path / "g.npy", a)
        path = victim = tmp_path / "g.npy"
    src = FileSource(FileSpec(str(path)), workers=4)
    assert src.gradients(0).shape == (4, 4096)
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size - 4096)
    with pytest.raises(InvalidArgument, match="truncated"):
        src.gradients(2)

"""The replication scripts (replications/*.py) at small n: the published claims hold as laws.

* harmonic series: fp16 stops growing at 7.0859375, the first term lost being n = 513;
  bf16 at 5.0625, n = 65 (Higham's published numbers, exactly); fp32 at 15.403683,
  n = 2097152 (about 2.1e6) runs in the script (a second), not here.
* recursive fp32 summation: the backward error of [0,1] data is of the order of
  sqrt(n) u (between 0.05 and 5 times it) and below lam sqrt(n) u, and [-1,1] data's
  is far smaller (Higham & Mary 2019).
* fp16/bf16: round to nearest stagnates (error above 1/2 once n E[x] passes 2**p),
  stochastic rounding stays within lam sqrt(n) u (Connolly, Higham & Mary 2021).
* FABsum's error does not grow with n and stays within its bound where the bound is
  informative, while the recursive sum's grows past it (Blanchard, Higham & Mary 2020).
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent / "replications"


def load(name):
    sys.path.insert(0, str(ROOT))
    try:
        spec = importlib.util.spec_from_file_location(f"replication_{name}", ROOT / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT))
    return mod


def test_harmonic_series_stagnates_where_published():
    rows = {r["format"]: r for r in load("harmonic").run(2048, formats=("fp16", "bf16", "tf32"))}
    assert rows["fp16"]["value"] == 7.0859375
    assert rows["fp16"]["stagnates_at_n"] == 513
    assert rows["fp16"]["last_change_n"] == 512
    assert rows["bf16"]["value"] == 5.0625
    assert rows["bf16"]["stagnates_at_n"] == 65
    assert rows["tf32"]["value"] == 7.0859375  # fp16's precision, fp32's range: the same sum


def test_harmonic_series_keeps_growing_with_stochastic_rounding():
    rows = load("harmonic").run(4096, formats=("fp16",), sr_seed=1)
    assert rows[0]["sr_value"] > 7.5  # H_4096 = 8.89; RN is stuck at 7.0859375


def test_recursive_backward_error_is_sqrt_n_u_for_01_and_flat_for_symmetric_data():
    rows = load("recursive_backward_error").run([2**10, 2**14], trials=4, seed=1)
    for r in rows:
        assert 0.05 * r["sqrt_n_u"] < r["unit_mean"] < 5 * r["sqrt_n_u"]
        assert r["unit_max"] < r["n_u"]
        assert r["sym_mean"] < r["unit_mean"] / 5
    assert rows[1]["sym_mean"] < 20 * 2.0**-24  # O(u): does not grow like sqrt(n)


@pytest.mark.parametrize(("fmt", "n"), [("fp16", 2**14), ("bf16", 2**12)])
def test_round_to_nearest_stagnates_and_stochastic_rounding_does_not(fmt, n):
    r = load("stochastic_stagnation").run(fmt, [n], columns=2, seed=3)[0]
    assert r["rn"] > 0.5
    assert r["sr"] < 5 * r["sqrt_n_u"]
    assert r["sr"] < r["rn"] / 5


def test_stagnation_is_where_half_an_ulp_of_the_sum_exceeds_every_term():
    """bf16 (p = 8): the RN sum of U[0,1] terms stops at 256 (ulp 2), after about 256 / 0.5 terms; never before."""
    stops = load("stochastic_stagnation").stagnation("bf16", 2**11, columns=2, seed=0)
    for k, v in stops:
        assert v == 256.0
        assert 400 < k < 640  # 512 terms on average: the sum of k terms of mean 0.5


def test_fabsum_error_is_flat_in_n_and_within_its_bound():
    rows = load("fabsum_error").run([2**8, 2**12, 2**14], columns=2, seed=2)
    for r in rows[:2]:  # m u < 1: the first-order bound is informative
        assert r["fab_kahan"] < r["bound_fab"]
        assert r["fab_fp32"] < r["bound_fab"]
    assert rows[-1]["bound_fab"] is None  # m = 512 block sums, m u = 2: Kahan's O(m u^2) term is not negligible
    assert rows[-1]["recursive"] > 10 * rows[-1]["fab_kahan"]
    assert rows[-1]["fab_kahan"] < 4 * max(rows[0]["fab_kahan"], 2.0**-9)  # no growth with n (64x more terms)
    assert np.isclose(rows[0]["bound_fab"], 33 * 2.0**-8)


def test_every_script_runs_from_the_command_line_help():
    for name in ("harmonic", "recursive_backward_error", "stochastic_stagnation", "fabsum_error"):
        with pytest.raises(SystemExit) as e:
            load(name).main(["--help"])
        assert e.value.code == 0

"""Calibration of the cost model on Open MPI: the fit recovers a known profile; a real run fits and loads."""

from __future__ import annotations

import itertools
import os
import re
import tomllib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.backends import calibrate as cal
from fpreduce.backends import mpi
from fpreduce.core.timing import Profile, cost


@given(
    st.integers(2, 16),
    st.floats(1e-7, 1e-4),
    st.floats(1e-12, 1e-8),
    st.floats(1e-12, 1e-8),
)
def test_fit_recovers_a_profile_from_its_own_times(n: int, alpha: float, beta: float, gamma: float) -> None:
    """Times made by the model are fitted back to the model's constants, with zero prediction error."""
    true = Profile(alpha=alpha, beta=beta, gamma=gamma)
    times = {a: {b: cost(p, n, b, true) for b in (4.0, 4e3, 4e5, 4e7)} for a, p in cal.PLANS.items()}
    c = cal.fit(n, times)
    np.testing.assert_allclose([c.profile.alpha, c.profile.beta, c.profile.gamma], [alpha, beta, gamma], rtol=1e-6)
    assert all(f.error < 1e-6 for f in c.fits)
    assert all(f.own_error < 1e-6 for f in c.fits)


def test_fit_rejects_bad_times() -> None:
    with pytest.raises(fr.InvalidArgument, match="not positive"):
        cal.fit(2, {"ring": {8.0: 0.0, 80.0: 1e-5, 800.0: 2e-5}})
    with pytest.raises(fr.InvalidArgument, match="did you mean 'ring'"):
        cal.fit(2, {"rign": {8.0: 1e-5}})
    with pytest.raises(fr.InvalidArgument, match="np >= 2"):
        cal.calibrate(1)


def test_real_calibration_runs_and_its_profile_loads(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A small real run through the command: the fit completes, its [cluster] table reads back (no timing asserted);
    into a pipe, its progress lines count the (algorithm, size) timings to the last."""
    try:
        mpi.check_available()
    except fr.InvalidArgument as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but Open MPI is missing: {e}")
        pytest.skip(str(e))
    from fpreduce.cli import _progress, main

    ticks = itertools.count(0, 10.0)  # every look at the clock 10 s later: a line every other poll
    monkeypatch.setattr(_progress, "clock", lambda: next(ticks))
    out = tmp_path / "profile.toml"
    args = ["calibrate", "--np", "2", "--algorithms", "ring,recursive_doubling,basic_linear"]
    assert main([*args, "--sizes", "1,1024,65536", "--reps", "2", "-o", str(out)]) == 0
    printed, err = (text.splitlines() for text in capsys.readouterr())
    lines = [line for line in err if line.startswith("fpreduce calibrate: ")]
    assert lines[-1].startswith("fpreduce calibrate: 9/9 timings (100%), ")
    assert " done in " in lines[-1]
    counts = [int(re.findall(r"^fpreduce calibrate: (\d+)/9 timings \(\d+%\), ", line)[0]) for line in lines]
    assert counts == sorted(counts), "3 algorithms x 3 sizes, counted up"
    assert printed[0].split()[0] == "algorithm"  # the one table formatter's header and rule, then a row each
    assert set(printed[1]) == {"-"}
    assert [ln.split()[0] for ln in printed[2:5]] == ["ring", "recursive_doubling", "basic_linear"]
    table = tomllib.loads(out.read_text())["cluster"]
    loaded = Profile.from_dict(table)
    assert loaded.gpus_per_node == 2
    assert loaded.name == "openmpi-shm-np2"
    assert set(table) == {"name", "alpha", "beta", "gamma", "alpha_intra", "beta_intra", "gpus_per_node"}


def test_a_fit_that_misses_by_more_than_a_quarter_is_warned() -> None:
    """The warning follows the prediction errors: one per algorithm over 25%, none at or under it."""
    true = Profile(alpha=1e-5, beta=1e-9, gamma=1e-10)
    times = {a: {b: cost(p, 4, b, true) for b in (4.0, 4e3, 4e5, 4e7)} for a, p in cal.PLANS.items()}
    assert cal.misses(cal.fit(4, times)) == []  # the model's own times: no miss
    times["ring"] = {b: t * (3.0 if b > 1e5 else 0.3) for b, t in times["ring"].items()}  # no alpha-beta line
    said = cal.misses(cal.fit(4, times))
    worst = {f.algorithm: f.error for f in cal.fit(4, times).fits}
    assert [w.split(" with ")[0] for w in said] == [
        f"the fitted profile predicts {a}" for a, e in worst.items() if e > 0.25
    ]
    assert said
    assert all(f"{worst[w.split()[4]]:.0%} (over 25%;" in w for w in said)
    assert cal.misses(cal.fit(4, times), limit=max(worst.values())) == []

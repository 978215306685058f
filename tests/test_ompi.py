"""``ompi:default``: Open MPI 4.1's own all-reduce choice (fpreduce.plans.ompi), against real Open MPI.

The real runs force nothing (``fpreduce.backends.mpi.DEFAULT``): one ``mpirun`` per (N, dtype) with
every size on both sides of each switch of the fixed rules. The full ladder, N = 2..8 up to 2^22
elements, is ``scripts/verify_matrix.py --default`` (docs/verification.md).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _backends import require

import fpreduce as fr
from fpreduce.backends import mpi
from fpreduce.backends._common import bits, compare, make_inputs
from fpreduce.cli import main
from fpreduce.plans import by_message, parse
from fpreduce.plans.ompi import ALGORITHMS, default_plan, fixed_decision

ITEM = {"fp32": 4, "fp64": 8}


def switches(n: int, item: int, top: int) -> list[int]:
    """Every M <= ``top`` whose message (M x ``item`` bytes) gets another algorithm than M - 1's, and N
    (where the ring stops falling back to recursive doubling)."""
    alg = [fixed_decision(n, m * item) for m in range(top + 1)]
    return [m for m in range(1, top + 1) if alg[m] != alg[m - 1]] + [n]


@pytest.mark.parametrize(("n", "dtype"), [(3, "fp64"), (4, "fp32")], ids=["N3-fp64", "N4-fp32"])
def test_default_is_what_open_mpi_runs_on_both_sides_of_every_switch(n: int, dtype: str) -> None:
    require("mpi")
    item = ITEM[dtype]
    sizes = sorted({s for m in switches(n, item, (1 << 18) // item) for s in (m - 1, m)} - {0})
    assert len(sizes) >= 4  # the rules switch at several sizes here
    cases = [make_inputs(n, m, dtype, 5) for m in sizes]
    outs = mpi.run_allreduce(cases, mpi.DEFAULT, timeout=120)
    plans_seen = set()
    contrast = {"rd": fr.plans.rd(n), "ring:ompi": fr.plans.ring(n, "ompi")}
    for X, o in zip(cases, outs, strict=True):
        c = compare(X, o, dtype, mpi.expected_plan(mpi.DEFAULT, n, X.shape[1], dtype), contrast)
        assert c.ranks_agree
        assert c.differing == 0, f"M={c.elements}: {c.differing} elements differ from {c.plan} ({c.note})"
        plans_seen.add(c.plan)
        if c.plan == "ring:ompi" and c.elements >= 100:
            assert c.contrast["rd"] > 0  # where the rules pick the ring, recursive doubling would be caught
    y = fr.reduce(cases[-1], "ompi:default", accumulate=dtype)  # the plan by name, sized from X itself
    assert np.array_equal(bits(y), bits(outs[-1][0]))
    assert "rd" in plans_seen
    assert ("ring:ompi" in plans_seen) == (n < 4)


def test_default_is_sized_by_the_whole_message_and_its_datatype() -> None:
    X = make_inputs(3, 2048, "fp32", 1)  # 8192 bytes at N = 3: recursive doubling; its first half alone: the ring
    whole = fr.reduce(X, "ompi:default")
    piece = fr.reduce(X[:, :1024], "ompi:default", offset=0, total=2048)
    alone = fr.reduce(X[:, :1024], "ompi:default")
    assert np.array_equal(bits(piece), bits(whole[:1024]))
    assert np.array_equal(bits(whole), bits(fr.reduce(X, "rd")))
    assert np.array_equal(bits(alone), bits(fr.reduce(X[:, :1024], "ring:ompi")))
    assert not np.array_equal(bits(alone), bits(piece))
    D = make_inputs(3, 1000, "fp64", 1)  # 8000 bytes of doubles: the ring; the same count of floats: 4000, rd
    assert default_plan(3, 1000, 8)[:2] == ("ring", "ring:ompi")
    assert default_plan(3, 1000, 4)[:2] == ("recursive_doubling", "rd")
    y64 = fr.reduce(D, "ompi:default", accumulate="fp64")
    assert np.array_equal(bits(y64), bits(fr.reduce(D, "ring:ompi", accumulate="fp64")))
    assert not np.array_equal(bits(y64), bits(fr.reduce(D, "rd", accumulate="fp64")))


def test_noncommutative_rules_keep_to_the_algorithms_that_support_it() -> None:
    # the source: "ring, segmented ring, and rabenseifner do not support non-commutative operations"
    picked = {
        fixed_decision(n, b, commutative=False) for n in range(1, 5000, 7) for b in (0, 1 << 11, 1 << 17, 1 << 24)
    }
    assert picked <= {"basic_linear", "nonoverlapping", "recursive_doubling"}
    assert set(picked) >= {"basic_linear", "nonoverlapping", "recursive_doubling"}
    assert set(ALGORITHMS) >= {fixed_decision(n, 1 << k) for n in range(1, 5000, 13) for k in range(30)}


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: parse("ompi:default", 3), "needs the element count"),
        (lambda: parse("ompi:defualt", 3, elements=4, item_bytes=4), "did you mean 'ompi:default'"),
        (lambda: parse("ompi:default", 200, elements=10, item_bytes=4), "nonoverlapping"),
        (lambda: fixed_decision(3, -1), "message bytes"),
    ],
    ids=["no-message", "typo", "not-modelled", "negative-bytes"],
)
def test_bad_ompi_plans_say_why(call, match: str) -> None:
    with pytest.raises(fr.InvalidArgument, match=match):
        call()
    assert by_message(" ompi:default")
    assert not by_message("ring:ompi")


def test_cli_sum_and_verify_name_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sum", "1,2e-8,3,-3", "--plans", "ompi:default,ring:ompi", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "ompi:default" in json.dumps(doc)
    require("mpi")
    assert main(["verify", "--backend", "mpi", "--np", "3", "--elements", "5000", "--json"]) == 0  # fp32, 20000 B
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"] == "default"
    assert out["ok"]
    case = out["cases"][0]
    assert (case["plan"], case["differing"]) == ("ring:ompi", 0)
    assert "-> ring" in case["note"]
    assert case["contrast"]["rd"] > 0

"""Real collectives vs the emulation: Open MPI (mpi4py), bit for bit (gloo: test_backends_gloo.py).

Every launch runs all sizes of a (backend, N, algorithm) cell at once (one ``mpirun``),
cached for the module. If ``CI`` is set and a backend is missing, the tests fail
instead of skipping. (Two files, so that the two test processes share the launches.)
"""

from __future__ import annotations

import functools
import shutil
import sys

import pytest
from _backends import require

import fpreduce as fr
from fpreduce.backends import BackendError, CaseResult, VerifyResult, algorithms, experiment_b, mpi, verify
from fpreduce.backends._common import compare, make_inputs
from fpreduce.plans.ompi import segment_count

SIZES = (1, 3, 7, 64, 1000)  # M < N, M not divisible by N, and larger
MPI_CELLS = [(n, a) for a in ("ring", "rabenseifner", "recursive_doubling") for n in (2, 3, 4, 5, 8)] + [
    (n, a) for a in ("basic_linear", "nonoverlapping", "segmented_ring") for n in (3, 5)
]  # the full N = 2..8 matrix is scripts/verify_matrix.py (docs/verification.md)


@functools.cache
def _mpi_cell(n: int, algorithm: str) -> tuple[CaseResult, ...]:
    cases = [make_inputs(n, m, "fp32", 11) for m in SIZES]
    res = mpi.run_allreduce(cases, algorithm, timeout=120)
    return tuple(
        compare(X, outs, "fp32", mpi.expected_plan(algorithm, n, X.shape[1], "fp32"), mpi.contrast_plans(n))
        for X, outs in zip(cases, res, strict=True)
    )


# --- the matrix --------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "algorithm"), MPI_CELLS, ids=[f"{a}-N{n}" for n, a in MPI_CELLS])
def test_mpi_allreduce_is_bit_exact(n: int, algorithm: str) -> None:
    require("mpi")
    for c in _mpi_cell(n, algorithm):
        assert c.ranks_agree, f"M={c.elements}: ranks got different bits"
        assert c.differing == 0, f"M={c.elements}: {c.differing} elements differ from {c.plan} ({c.note})"


@pytest.mark.parametrize(
    ("n", "algorithm", "other"),
    [
        (5, "ring", "rd"),
        (5, "rabenseifner", "ring:ompi"),
        (5, "recursive_doubling", "linear"),
        (8, "ring", "ring:nccl"),
        (3, "basic_linear", "rd"),
        (5, "segmented_ring", "linear"),
        (5, "nonoverlapping", "rabenseifner"),
    ],
)
def test_mpi_other_plans_differ(n: int, algorithm: str, other: str) -> None:
    require("mpi")
    big = _mpi_cell(n, algorithm)[-1]
    assert big.elements == 1000
    assert big.contrast[other] > 0


def test_mpi_fallbacks_are_what_the_source_says() -> None:
    assert mpi.expected_plan("ring", 5, 3, "fp32")[0] == "rd"
    assert mpi.expected_plan("ring", 5, 5, "fp32")[0] == "ring:ompi"
    assert mpi.expected_plan("rabenseifner", 5, 3, "fp32")[0] == "linear"
    assert mpi.expected_plan("rabenseifner", 5, 4, "fp32")[0] == "rabenseifner"
    name, _, note = mpi.expected_plan("segmented_ring", 4, 63, "fp32", segment_bytes=64)
    assert (name, "plain ring" in note) == ("ring:ompi", True)  # 63 < 4 * 16
    assert mpi.expected_plan("segmented_ring", 4, 64, "fp32", segment_bytes=64)[2] == ""
    assert segment_count(0, 4, 100) == 100  # segment size 0: no segmentation (plain ring)
    assert segment_count(10, 4, 100) == 2  # 2 items, remainder 2 B is not > half an item
    assert segment_count(11, 4, 100) == 3  # remainder 3 B > 2 B rounds up
    assert segment_count(400, 4, 100) == 100  # a segment not below the message: the whole message


# --- verify() ----------------------------------------------------------------------------------


def test_verify_mpi_end_to_end() -> None:
    require("mpi")
    calls: list[tuple[int, int]] = []
    r = verify("mpi", 5, "rabenseifner", "fp64", 10, 4, progress=lambda done, total: calls.append((done, total)))
    assert isinstance(r, VerifyResult)
    assert r.ok
    assert r.cases[0].plan == "rabenseifner"
    assert "0 of 10 elements differ" in r.summary()
    assert "OK: bit-exact" in r.summary()
    # progress: 5 ranks reaching the all-reduce, 5 results, then the plan and each contrast emulated
    plans = 1 + len(r.cases[0].contrast)
    assert {total for _, total in calls} == {2 * 5 + plans}
    assert calls[0] == (0, 2 * 5 + plans)
    done = [d for d, _ in calls]
    assert done == sorted(done), "the count never goes back"
    assert done[-plans:] == list(range(2 * 5 + 1, 2 * 5 + plans + 1)), "one tick per plan emulated, to the end"
    assert all(d <= 2 * 5 for d in done[:-plans]), "while the ranks run: at most 2 per rank"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "nccl", "np": 2}, "unknown backend"),
        ({"backend": "mpi", "np": 2, "algorithm": "rign"}, "did you mean 'ring'"),
        ({"backend": "mpi", "np": 2, "dtype": "bf16"}, "no fp16/bf16 MPI datatype"),
        ({"backend": "gloo", "np": 1}, "np must be an integer in 2..64"),
        ({"backend": "gloo", "np": 2, "elements": 0}, "elements must be"),
        ({"backend": "gloo", "np": 2, "seed": -1}, "seed must be"),
    ],
)
def test_verify_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(fr.InvalidArgument, match=match):
        verify(**kwargs)  # type: ignore[arg-type]


def test_missing_mpi_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(fr.InvalidArgument, match="apt-get install -y openmpi-bin"):
        verify("mpi", 2, "ring")
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    if shutil.which("mpirun") and shutil.which("ompi_info"):
        with pytest.raises(fr.InvalidArgument, match="pip install"):
            mpi.check_available()


def test_missing_torch_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(fr.InvalidArgument, match=r"pip install torch==2\.13\.0"):
        verify("gloo", 2)


def test_algorithms_lists() -> None:
    assert algorithms("mpi") == (
        "default",
        "basic_linear",
        "nonoverlapping",
        "recursive_doubling",
        "ring",
        "segmented_ring",
        "rabenseifner",
    )
    assert algorithms("gloo") == ("ring",)


# --- faults ------------------------------------------------------------------------------------


def test_mpi_dead_rank_is_named() -> None:
    require("mpi")
    X = make_inputs(3, 10, "fp32", 0)
    with pytest.raises(BackendError, match="rank 1 failed first"):
        mpi.run_allreduce([X], "ring", fault="die:1", timeout=60)


# --- Experiment B on real processes ------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner"])
def test_mpi_reranking_with_comm_split_stays_bit_exact(algorithm: str) -> None:
    require("mpi")
    steps = experiment_b.reranking(5, algorithm, steps=4, elements=200, seed=7)
    assert all(s.ranks_agree and s.differing == 0 for s in steps), steps
    assert any(s.differing_unrelabelled > 0 for s in steps)  # the re-ranking really changed the sums


def test_mpi_adapt_reduce_sums_in_arrival_order() -> None:
    """Rank 0 folds its own buffer, then each child's as it arrives: some sequential order."""
    require("mpi")
    r = experiment_b.arrival_order(4, steps=6, elements=128, seed=5)
    assert r.possible > 1  # the orders are distinguishable
    assert r.explained, r.orders


def test_a_failed_launchers_output_keeps_its_cause_and_its_exception():
    """mpirun prints the cause at the top and the rank's exception at the bottom: both must reach the error."""
    from fpreduce.backends._common import excerpt

    text = "\n".join(
        ["prterun was unable to launch the specified application", "-" * 40]
        + [f"detail line {i}" for i in range(20)]
        + ["Traceback (most recent call last):", "  File x", "ValueError: bad bucket", "=" * 40]
    )
    one = excerpt(text)
    assert "\n" not in one
    assert one.startswith("ValueError: bad bucket")  # the error line first
    assert "prterun was unable to launch" in one  # the head is kept
    assert "detail line 10" not in one  # the middle is not
    assert "----" not in one
    assert "====" not in one
    assert excerpt("a\nb") == "a | b"

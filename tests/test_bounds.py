"""Issue 26 items 5, 7, 8: inputs rounded before any check, bounded work, loopback-only MPI launches."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from fpreduce.analysis.scaling import scaling
from fpreduce.base.errors import InvalidArgument
from fpreduce.cli import main
from fpreduce.run.sources import FileSource, FileSpec


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *msgs: str) -> str:
    assert main(argv) == 2
    err = "".join(x for x in capsys.readouterr().err.splitlines(True) if not x.startswith("fpreduce: compiling"))
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


def test_sum_orders_is_capped(capsys):
    one_line_error(capsys, ["sum", "1,2,3", "--orders", str(10**9)], "--orders 1000000000 x 3 values", "at most")


def test_price_workers_is_capped_up_front(tmp_path, capsys):
    (tmp_path / "p.toml").write_text("[price]\nworkers = 1000000000\n")
    one_line_error(
        capsys, ["price", str(tmp_path / "p.toml"), "--out", str(tmp_path / "o")], "price.workers", "<= 4096"
    )
    assert not (tmp_path / "o").exists()


# item 8: loopback-only MPI launches, a loud warning for an mpirun that is not contained

LOOPBACK_FLAGS = "--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"


def test_sweep_executor_mpi_spawns_with_loopback_transports(monkeypatch):
    from fpreduce.backends import distributed

    btl, oob = (f"OMPI_MCA_{k}" for k in distributed.LOOPBACK_MCA)
    for k in (btl, oob, "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # stop before MPI_Init: what matters is the env it would see
    with pytest.raises(InvalidArgument, match="mpi4py"):
        distributed.mpi_pool(1)
    assert os.environ[btl] == "lo"
    assert os.environ[oob] == "lo"
    monkeypatch.setenv(btl, "eth0")  # the user's own setting is kept
    with pytest.raises(InvalidArgument):
        distributed.mpi_pool(1)
    assert os.environ[btl] == "eth0"


def test_distributed_under_an_uncontained_mpirun_warns_with_the_mca_settings(monkeypatch):
    from fpreduce.backends import distributed, mpi

    job = {"OMPI_COMM_WORLD_SIZE": "2"}
    assert distributed.listener_warning({}, ["lo", "eth0"]) is None  # not under mpirun
    assert distributed.listener_warning(job, ["lo"]) is None  # a private network namespace
    lo = {f"OMPI_MCA_{k}": "lo" for k in distributed.LOOPBACK_MCA}
    assert distributed.listener_warning({**job, **lo}, ["lo", "eth0"]) is None
    shm = {"OMPI_MCA_btl": "self,vader", "OMPI_MCA_oob_tcp_if_include": "lo"}
    assert distributed.listener_warning({**job, **shm}, ["lo", "eth0"]) is None
    loud = distributed.listener_warning({**job, "OMPI_MCA_btl": "^openib"}, ["lo", "eth0"])
    assert loud is not None
    assert LOOPBACK_FLAGS in loud
    assert "eth0" in loud

    class Comm:
        def Get_rank(self) -> int:  # noqa: N802 - mpi4py's name
            return 0

        def Get_size(self) -> int:  # noqa: N802
            return 2

    monkeypatch.setattr(distributed, "listener_warning", lambda: loud)
    with pytest.warns(mpi.ExposedListenerWarning, match="LISTENERS NOT CONTAINED"):
        distributed.DistributedRun(None, Comm())  # type: ignore[arg-type]


def test_scale_workers_is_capped_up_front_with_its_own_key(tmp_path, capsys):
    """10^4 and 10^9 workers answer from closed forms (tests/test_scaling.py); beyond 2^30 is refused."""
    (tmp_path / "s.toml").write_text(f"[scale]\nworkers = [{(1 << 30) + 1}]\n")
    argv = ["scale", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o")]
    one_line_error(capsys, argv, "scale.workers", str(1 << 30))
    with pytest.raises(InvalidArgument, match=f"workers: at most {1 << 30}"):
        scaling([(1 << 30) + 1], ["ring"], compute=0.1, nbytes=1 << 20)
    rows = scaling([10000, 10**9], ["ring"], compute=0.1, nbytes=1 << 20)
    assert [r.workers for r in rows] == [10000, 10**9]


@pytest.mark.parametrize(("cmd", "keys"), [("scale", "scale.workers"), ("price", "price.workers")])
def test_out_of_memory_names_the_commands_own_keys(tmp_path, capsys, monkeypatch, cmd, keys):
    from fpreduce.run import price as price_module
    from fpreduce.run import scale as scale_module

    def oom(*_: object, **__: object) -> None:
        raise MemoryError

    if cmd == "scale":
        monkeypatch.setattr(scale_module, "load_scale_config", oom)
    else:
        monkeypatch.setattr(price_module, "load_price_config", oom)
    (tmp_path / "c.toml").write_text(f"[{cmd}]\n")
    assert main([cmd, str(tmp_path / "c.toml"), "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert keys in err, err
    assert "source.elements" not in err, err


def test_arms_are_capped_up_front(tmp_path, capsys):
    (tmp_path / "c.toml").write_text("".join(f'[[arms]]\nname = "a{i}"\n' for i in range(100_000)))
    argv = ["run", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o"), "--quiet"]
    one_line_error(capsys, argv, "arms: at most 256 [[arms]] entries, got 100000")
    assert not (tmp_path / "o").exists()

"""Issue 13: no run lost, mixed or half-written; every bad input a one-line error.

Each F-number of the issue has its reproducer here (the fault tests, kill -9, Ctrl-C,
two runs at once and a full disk, are in tests/test_faults.py; F1 in tests/test_exact.py,
F11 in tests/test_fpflags.py). "Untouched" is checked byte for byte on every file.
"""

from __future__ import annotations

import json
import shutil
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpreduce.base.errors import InvalidArgument
from fpreduce.cli import main
from fpreduce.run import config as C
from fpreduce.run import rundir, sources

SMALL = ["--set", "experiment.workers=4", "--set", "source.elements=64", "--steps", "3", "--quiet", "--no-report"]


def files(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (relative path -> bytes), the lock file aside."""
    keep = [p for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".fpreduce.lock"]
    return {str(p.relative_to(d)): p.read_bytes() for p in keep}


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *msgs: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error: "), err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for m in msgs:
        assert m in err, err
    return err


@pytest.fixture(scope="module")
def complete_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("template") / "run"
    assert main(["run", "--out", str(d), *SMALL[:-1]]) == 0
    return d


@pytest.fixture
def complete(complete_template: Path, tmp_path: Path) -> Path:
    """A complete run with its figures and report (a copy of one made once)."""
    d = tmp_path / "run"
    shutil.copytree(complete_template, d)
    assert (d / "report.pdf").is_file()
    assert (d / "figures").is_dir()
    return d


# ----------------------------------------------------------------------------- F2: names are names


@pytest.mark.parametrize(
    "name", ["..", ".", "", "a/b", "..\\x", "A\nB", "tab\there", "nul\x00", "rtl\u202eoverride", "x" * 101]
)
def test_f2_experiment_names_are_names(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    Path("metrics.csv").write_text("keep\n")
    Path("report.pdf").write_bytes(b"%PDF-1.4 mine")
    before = files(tmp_path)
    one_line_error(capsys, ["run", "--set", f"experiment.name={json.dumps(name)}", *SMALL], "experiment.name")
    assert files(tmp_path) == before


def test_f2_arm_names_too(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[arms]]\nname = "A\\nB"\n')
    one_line_error(capsys, ["run", str(cfg), "--out", str(tmp_path / "r"), *SMALL], "arms[].name", "'A\\nB'")
    assert not (tmp_path / "r").exists()


# ----------------------------------------------------------------------------- F3, F3b, F5: nothing lost


BAD_SOURCES = {
    "missing file": ('[source]\nkind = "file"\npath = "nope.npy"\n', "no such file"),
    "steps": ('[source]\nkind = "file"\npath = "{g}"\n', "steps"),
    "memory": ("[source]\nelements = 1000000000000\n", "needs about"),
    "plan": ('[[arms]]\nname = "A"\norder = "fixed:ring:nccl:3"\n', "arms.A.order"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
@pytest.mark.parametrize("force", [False, True], ids=["", "force"])
def test_f3_a_failing_run_leaves_the_earlier_complete_run_untouched(complete, tmp_path, capsys, case, force):
    g = tmp_path / "g.npy"
    np.save(g, np.ones((2, 4, 8), np.float32))
    text, msg = BAD_SOURCES[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[experiment]\nworkers = 4\nsteps = 3\n" + text.format(g=g))
    before = files(complete)
    one_line_error(capsys, ["run", str(cfg), "--out", str(complete), *(["--force"] if force else [])], msg)
    assert files(complete) == before


def test_f3b_a_run_stopped_before_its_first_step_can_be_rerun_or_resumed(complete, capsys):
    """A directory left with only config.toml (stopped before the first checkpoint; an
    older fpreduce left it so) no longer blocks anything."""
    for p in complete.iterdir():
        if p.name != "config.toml" and p.is_file():
            p.unlink()
    for p in (complete / "figures").iterdir():
        p.unlink()
    (complete / "figures").rmdir()
    assert rundir.inspect_run_dir(complete).holds == "started"
    assert main(["run", "--out", str(complete), "--resume", "--quiet", "--no-report"]) == 0
    assert rundir.load_run(complete).complete
    for p in complete.iterdir():
        if p.name != "config.toml" and p.is_file():
            p.unlink()
    assert main(["run", "--out", str(complete), *SMALL]) == 0  # rerun, no --force needed: nothing to lose
    capsys.readouterr()


def test_f3b_a_new_run_is_readable_before_its_first_step(tmp_path, monkeypatch):
    """The empty checkpoint written before step 0: config.toml, a header-only metrics.csv, a
    0-step summary.json and state.npz: a run stopped there is readable and resumable."""
    import fpreduce.run.runner as R
    from fpreduce.run.resume import open_dir

    cfg = C.load_config(None, ["experiment.workers=4", "source.elements=64"])
    d = tmp_path / "r"
    real = R._checkpoint

    def stop_after_the_first(d_, cfg_, rows, arms, steps_done, *args, **kw):  # type: ignore[no-untyped-def]
        real(d_, cfg_, rows, arms, steps_done, *args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(R, "_checkpoint", stop_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        R.run_experiment(cfg, d)
    run = rundir.load_run(d)
    assert run.summary["steps_done"] == 0
    assert run.summary["complete"] is False
    assert run.metrics == {}
    assert int(rundir.read_state(d)["steps_done"]) == 0
    assert rundir.inspect_run_dir(d).holds == "incomplete"
    assert open_dir(d, cfg, resume=True)[1] == 0  # resumable, from step 0


@pytest.mark.parametrize(
    "summary",
    [b'{"complete": true}', b"[]", b"[1, 2]", b'{"arms": [', b"\xff\xfe", b'{"arms": [{"name": "A"}]}'],
    ids=["complete-only", "empty-list", "list", "truncated", "not-utf8", "no-order"],
)
@pytest.mark.parametrize("resume", [False, True], ids=["out", "resume"])
def test_f4bc_f5_a_directory_with_a_foreign_summary_is_not_a_run(tmp_path, capsys, summary, resume):
    d = tmp_path / "x"
    d.mkdir()
    (d / "config.toml").write_text(C.to_toml(C.load_config(None, SMALL[1:4:2])))
    (d / "summary.json").write_bytes(summary)
    (d / "metrics.csv").write_text("mine\n")
    (d / "report.pdf").write_bytes(b"%PDF-1.4 not ours")
    before = files(d)
    err = one_line_error(capsys, ["run", "--out", str(d), *SMALL, *(["--resume"] if resume else [])], "summary.json")
    assert "choose another --out" in err or "not a" in err
    assert files(d) == before


def test_f4c_metrics_csv_not_utf8(complete, capsys):
    """A metrics.csv with a non-UTF-8 byte: ``report``/``plot`` say so in one line; ``--resume``
    of such an incomplete run cannot use its rows, so it starts over (the same bits)."""
    with open(complete / "metrics.csv", "ab") as f:
        f.write(b"0,A,\xff\n")
    one_line_error(capsys, ["report", str(complete), "-o", str(complete / "r2.pdf")], "metrics.csv", "cannot read")
    one_line_error(capsys, ["plot", str(complete)], "metrics.csv", "cannot read")
    s = json.loads((complete / "summary.json").read_text())
    s["complete"] = False
    (complete / "summary.json").write_text(json.dumps(s))
    assert main(["run", "--out", str(complete), "--resume", "--quiet", "--no-report"]) == 0
    assert rundir.load_run(complete).complete


def test_f5_a_directory_with_other_files_is_never_written(complete, tmp_path, capsys):
    (complete / "notes.txt").write_text("mine")
    before = files(complete)
    for extra in ([], ["--force"], ["--resume"]):
        one_line_error(capsys, ["run", "--out", str(complete), *SMALL, *extra], "not a fpreduce run directory")
    assert files(complete) == before
    (tmp_path / "afile").write_text("x")
    one_line_error(capsys, ["run", "--out", str(tmp_path / "afile"), *SMALL], "not a directory")


# ----------------------------------------------------------------------------- --force, report -o, sweeps


def test_replacing_a_complete_run_needs_force(complete, capsys):
    before = files(complete)
    one_line_error(capsys, ["run", "--out", str(complete), *SMALL[:-2], "--steps", "2"], "complete run (3 steps)")
    assert files(complete) == before
    assert main(["run", "--out", str(complete), *SMALL[:-2], "--steps", "2", "--quiet", "--no-report", "--force"]) == 0
    run = rundir.load_run(complete)
    assert run.summary["steps"] == 2
    assert not (complete / "report.pdf").exists()  # the old run's report and figures went with it
    assert not (complete / "figures").exists()


def test_resume_and_force_together_are_refused_and_os_junk_is_not_foreign(complete, capsys):
    one_line_error(capsys, ["run", "--out", str(complete), "--resume", "--force"], "give one of them")
    (complete / ".DS_Store").write_bytes(b"\0")
    assert main(["run", "--out", str(complete), *SMALL, "--force"]) == 0
    assert (complete / ".DS_Store").read_bytes() == b"\0"  # not ours: left alone


def test_an_incomplete_run_needs_resume_or_force(complete, capsys):
    s = json.loads((complete / "summary.json").read_text())
    s.update(complete=False, steps_done=2)
    (complete / "summary.json").write_text(json.dumps(s))
    one_line_error(capsys, ["run", "--out", str(complete), *SMALL], "incomplete run (2 of 3 steps)", "--resume")
    assert main(["run", "--out", str(complete), *SMALL, "--force"]) == 0


def test_report_o_never_overwrites_a_file_that_is_not_a_report(complete, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("precious")
    other = tmp_path / "paper.pdf"
    other.write_bytes(b"%PDF-1.5\n/Creator (LaTeX)\n")
    for target, msg in ((notes, "not a fpreduce report"), (other, "not a fpreduce report"), (tmp_path, "directory")):
        one_line_error(capsys, ["report", str(complete), "-o", str(target)], msg)
    assert notes.read_text() == "precious"
    assert other.read_bytes() == b"%PDF-1.5\n/Creator (LaTeX)\n"
    shutil.copy(complete / "report.pdf", tmp_path / "r.pdf")
    old = (tmp_path / "r.pdf").stat().st_mtime_ns
    assert main(["report", str(complete), "-o", str(tmp_path / "r.pdf")]) == 0  # an earlier report is replaced
    assert rundir.is_report(tmp_path / "r.pdf")
    assert (tmp_path / "r.pdf").stat().st_mtime_ns != old


SWEEP = """
[experiment]
name = "{name}"
steps = 2
[source]
elements = 64
[sweep]
workers = {workers}
plans = ["sequential"]
formats = ["bf16:bf16"]
"""


def test_sweeps_default_to_their_own_directory_and_plot_and_report_work_there(tmp_path, monkeypatch, capsys):
    from fpreduce.run.sweep import run_sweep

    monkeypatch.chdir(tmp_path)
    Path("one.toml").write_text(SWEEP.format(name="one", workers="[2, 4]"))
    Path("two.toml").write_text(SWEEP.format(name="two", workers="[2]"))
    assert run_sweep("one.toml") == Path("runs/one/sweep.csv")
    assert run_sweep("two.toml") == Path("runs/two/sweep.csv")  # was runs/sweep for both: the first one lost
    one, two = Path("runs/one"), Path("runs/two")
    assert len(rundir.read_sweep(one)) == 4
    assert len(rundir.read_sweep(two)) == 2
    before = files(one)
    one_line_error(capsys, ["sweep", "one.toml"], "holds a sweep", "--force")
    assert files(one) == before
    assert main(["plot", str(one)]) == 0
    assert "sweep.png" in capsys.readouterr().out
    assert main(["report", str(one)]) == 0
    assert rundir.is_report(one / "report.pdf")
    Path("one.toml").write_text(SWEEP.format(name="one", workers="[4]"))  # a smaller grid, forced
    run_sweep("one.toml", force=True)
    assert {p.name for p in rundir.point_dirs(one)} == {"n4-sequential-bf16-bf16"}
    assert not (one / "points" / "n2-sequential-bf16-bf16").exists()
    assert not (one / "report.pdf").exists()  # the old sweep's report went with its table
    one_line_error(capsys, ["sweep", "one.toml", "--out", str(one / "points" / "n4-sequential-bf16-bf16")], "sweep")
    one_line_error(capsys, ["sweep", "one.toml", "--out", "one.toml"], "not a directory")


# ----------------------------------------------------------------------------- F4: one-line errors


def test_f4a_config_not_utf8(tmp_path, capsys):
    bad = tmp_path / "b.toml"
    bad.write_bytes(b"\xff\xfe")
    one_line_error(capsys, ["run", str(bad)], "b.toml", "not UTF-8", "0xff")
    one_line_error(capsys, ["sweep", str(bad)], "not UTF-8")
    (tmp_path / "t.toml").write_text("experiment = 3\n")
    one_line_error(capsys, ["run", str(tmp_path / "t.toml"), "--set", "experiment.steps=2"], "must be a table")


def _damaged_sources(tmp_path: Path) -> dict[str, Path]:
    g = np.ones((3, 4, 10), np.float32)
    np.savez(tmp_path / "g.npz", grads=g)
    raw = (tmp_path / "g.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    np.savez_compressed(tmp_path / "z.npz", grads=np.random.default_rng(0).standard_normal((3, 4, 100)))
    raw = bytearray((tmp_path / "z.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "z.npz") as z:
        info = z.infolist()[0]
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 40
    raw[start : start + 64] = bytes(64)  # damaged compressed data
    (tmp_path / "bad-deflate.npz").write_bytes(bytes(raw))
    np.save(tmp_path / "g.npy", g)
    raw = (tmp_path / "g.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:-7])
    (tmp_path / "empty.npy").write_bytes(b"")
    steps = tmp_path / "steps"
    steps.mkdir()
    for t in range(3):
        np.save(steps / f"step_{t:06d}.npy", g[t])
    (steps / "step_000002.npy").write_bytes((steps / "step_000002.npy").read_bytes()[:-4])
    return {n: tmp_path / n for n in ("cut.npz", "bad-deflate.npz", "cut.npy", "empty.npy")} | {"steps": steps}


def test_f4d_damaged_gradient_files_are_one_line_errors_before_anything_is_written(tmp_path, capsys):
    for name, path in _damaged_sources(tmp_path).items():
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[experiment]\nworkers = 4\nsteps = 3\n[source]\nkind = "file"\npath = "{path}"\n')
        one_line_error(capsys, ["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"], str(path))
        assert not (tmp_path / "out").exists(), name


def test_f4e_sum_of_empty_or_odd_arrays(tmp_path, capsys):
    np.save(tmp_path / "e.npy", np.zeros((3, 0)))
    np.save(tmp_path / "z.npy", np.zeros((0,)))
    np.savez(tmp_path / "a.npz", x=np.ones(3))
    (tmp_path / "zip.npy").write_bytes((tmp_path / "a.npz").read_bytes())
    (tmp_path / "nothing.npy").write_bytes(b"")
    one_line_error(capsys, ["sum", str(tmp_path / "e.npy")], "(3, 0)")
    one_line_error(capsys, ["sum", str(tmp_path / "z.npy")], "non-empty")
    one_line_error(capsys, ["sum", str(tmp_path / "zip.npy")], "zip.npy")
    one_line_error(capsys, ["sum", str(tmp_path / "nothing.npy")], "nothing.npy")


def test_f4f_memory_is_estimated_before_anything_runs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r"
    err = one_line_error(capsys, ["run", "--out", str(out), "--set", "source.elements=1000000000000"], "needs about")
    assert "TiB of memory" in err
    assert "available" in err
    assert not out.exists()
    monkeypatch.setattr(sources, "machine_memory", lambda: (8 << 30, 16 << 30))
    argv = ["run", "--out", str(out), "--set", "experiment.workers=1000000"]
    argv += ["--set", 'arms.A.order="atomic"']  # no plan of 10^6 workers to build first
    err = one_line_error(capsys, argv, "1000000 workers", "8.0 GiB available (16.0 GiB total)")
    assert not out.exists()


def test_memory_estimate_grows_with_what_the_run_keeps():
    src = sources.open_source(sources.SyntheticSpec(elements=1 << 20), workers=16, seed=0)
    base = sources.memory_needed(src, arms=4, inputs=1, width=1 << 18)
    assert sources.memory_needed(src, arms=8, inputs=1, width=1 << 18) > base
    assert sources.memory_needed(src, arms=4, inputs=3, width=1 << 18) > base
    assert sources.memory_needed(src, arms=4, inputs=1, width=1 << 16) < base
    big = sources.open_source(sources.SyntheticSpec(elements=1 << 24), workers=16, seed=0)
    assert sources.memory_needed(big, arms=4, inputs=1, width=1 << 18) > base
    avail, total = sources.machine_memory()
    assert avail is not None
    assert total is not None
    assert 0 < avail <= total
    with pytest.raises(InvalidArgument, match="needs about"):
        sources.check_memory(total + 1, "this")
    sources.check_memory(1, "this")


# ----------------------------------------------------------------------------- F7: TOML written by a real writer


def _ok_name(s: str) -> bool:
    try:
        C.check_name("k", s)
    except InvalidArgument:
        return False
    return True


names = st.text(min_size=1, max_size=12).filter(_ok_name)
finite = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def configs(draw) -> C.Config:  # type: ignore[no-untyped-def]
    arm_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    d = {
        "experiment": {
            "name": draw(names),
            "steps": draw(st.integers(1, 2**40)),
            "workers": draw(st.integers(1, 64)),
            "seed": draw(st.integers(0, 2**63 - 1)),
        },
        "arrival": {"base": draw(finite), "spread": draw(finite.map(abs)), "scale": draw(finite.map(abs))},
        "arms": [
            {"name": n, "order": draw(st.sampled_from(["fixed:sequential", "arrival", "atomic", "shuffle:pairwise"]))}
            for n in arm_names
        ],
    }
    if draw(st.booleans()):
        d["source"] = {"kind": "file", "path": draw(st.text(min_size=1))}  # any text: quotes, controls, ...
    else:
        d["source"] = {"outlier_scale": draw(finite), "decay": draw(finite.map(abs)), "dist": "lognormal"}
    return C.from_dict(d)


@settings(max_examples=150, deadline=None)
@given(configs())
def test_f7_config_toml_round_trips_for_any_names_and_values(cfg):
    text = C.to_toml(cfg)
    assert C.from_dict(tomllib.loads(text)) == cfg
    assert C.to_toml(C.from_dict(tomllib.loads(text))) == text
    assert C.diff(cfg, cfg) == []


def test_f7_odd_arm_names_run_and_read_back(tmp_path, capsys):
    odd = ["A \"quoted\", 'x'", "é€ 名 #x", "x.y", "[t]=1"]
    cfg = tmp_path / "c.toml"
    cfg.write_text("".join(f"[[arms]]\nname = {json.dumps(n)}\n" for n in odd))
    d = tmp_path / "r"
    assert main(["run", str(cfg), "--out", str(d), *SMALL, "--set", "arms.x.y.accumulate=fp32"]) == 0
    run = rundir.load_run(d)
    assert [a["name"] for a in run.arms] == odd
    assert list(run.metrics) == odd
    assert run.arm("x.y")["accumulate"] == "fp32"
    assert C.from_dict(tomllib.loads(run.config_text or "")) == C.load_config(d / "config.toml")
    capsys.readouterr()


def test_f7_the_diff_names_the_keys():
    a = C.load_config(None)
    b = C.load_config(None, ["experiment.seed=3", "arms.B.accumulate=fp32"])
    assert C.diff(a, b) == ["experiment.seed: 0 -> 3", "arms: settings differ"]


# ----------------------------------------------------------------------------- a config without [[arms]]


def test_a_config_without_arms_runs_the_default_arms(tmp_path, capsys):
    """The README says every key is optional: without [[arms]] a config runs the default's
    arms (A fixed vs B arrival in bf16, both again with an fp32 accumulator, B binned), the
    comparison the tool is about, on the config's own source."""
    default = C.default_config()
    assert C.from_dict({}).arms == default.arms
    assert C.load_config(None, ["arms.B.input=fp16"]).arms[1].input == "fp16"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[experiment]\nname = "mine"\nsteps = 2\nworkers = 4\n[source]\nelements = 64\n')
    arms = {a.name: a for a in C.load_config(cfg, ["arms.B-binned.algorithm=kahan"]).arms}
    assert arms["B-binned"].algorithm == "kahan"
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet", "--no-report"]) == 0
    assert [a["name"] for a in rundir.load_run(tmp_path / "r").arms] == [a.name for a in default.arms]
    with pytest.raises(InvalidArgument, match="at least one"):
        C.from_dict({"arms": []})  # an explicit empty list is still an error
    capsys.readouterr()


# ----------------------------------------------------------------------------- F12


def test_f12_mpirun_outside_a_network_namespace_warns_loudly(monkeypatch, tmp_path, capsys):
    from fpreduce.backends import mpi

    monkeypatch.setattr(mpi, "_netns", lambda: ())
    with pytest.warns(mpi.ExposedListenerWarning, match="0.0.0.0"):
        argv = mpi.mpirun_argv(2, "ring", tmp_path)
    assert argv[0] == "mpirun"
    assert argv[argv.index("oob_tcp_if_include") + 1] == "lo"
    assert argv[argv.index("btl") + 1] == "self,vader"
    monkeypatch.setattr(mpi, "_netns", lambda: ("unshare", "-n"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        argv = mpi.mpirun_argv(2, "ring", tmp_path)
    assert argv[:3] == ["unshare", "-n", "mpirun"]

    def exposed(*a, **k):  # the CLI prints the library's warning as one line
        warnings.warn(mpi.EXPOSED, mpi.ExposedListenerWarning, stacklevel=2)
        raise InvalidArgument("stop here")

    import fpreduce.backends as B

    monkeypatch.setattr(B, "verify", exposed)
    assert main(["verify", "--backend", "mpi", "--np", "2"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("fpreduce: warning: mpirun runs without a private network namespace")
    assert err[1] == "fpreduce: error: stop here"

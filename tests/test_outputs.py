"""Issue 26: every command keeps its files to itself, and writes standard JSON only.

One owner of output directories (``run.rundir``: ``out_dir``, ``holds``, ``claim``,
``lock``, ``file_target``) serves every command that writes; each test below runs one
body against every command it applies to. JSON is parsed strictly (a bare NaN or
Infinity is an error) from every ``--json`` output and every JSON file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jsonfile
from fpreduce.cli import main
from fpreduce.plans import ring
from fpreduce.run import _files, rundir

RUN_CFG = "[experiment]\nname = {name}\nworkers = 4\nsteps = 2\n[source]\nelements = 64\n"
SWEEP_CFG = RUN_CFG + '[sweep]\nworkers = [2]\nplans = ["sequential"]\nformats = ["bf16:bf16"]\n'
SCALE_CFG = '[scale]\nname = {name}\nworkers = [1, 2]\nplans = ["ring"]\n'
PRICE_CFG = '[price]\nname = {name}\nworkers = 2\nsteps = 2\nmodes = ["sync"]\n[source]\nhidden = 4\nlr = {lr}\n'
FOREIGN = b"%PDF-1.4 a report someone else wrote\n"


def strict(text: str) -> object:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (as JSON.parse, jq and serde do)."""

    def refuse(name: str) -> object:
        raise ValueError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def files(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (relative path -> bytes), lock files aside."""
    keep = [p for p in sorted(d.rglob("*")) if p.is_file() and p.name != _files.LOCK_FILE]
    return {str(p.relative_to(d)): p.read_bytes() for p in keep}


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *msgs: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("fpreduce: warning:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("fpreduce: error: "), err
    for m in msgs:
        assert m in err, err
    return err


def _recording(d: Path) -> Path:
    """A two-step gloo recording by hand (as tests/test_replay.py's, smaller)."""
    rng = np.random.default_rng(0)
    world, m = 3, 5
    (d / "grads").mkdir(parents=True)
    (d / "real").mkdir()
    for t in range(2):
        X = rng.standard_normal((world, m)).astype(np.float32)
        np.save(d / f"grads/step_{t:06d}.npy", X)
        np.save(d / f"real/step_{t:06d}.npy", fr.reduce(X, ring(world, "gloo"), input="fp32", average="ddp"))
    layout = [{"index": 0, "elements": m, "start": 0, "params": [{"name": "w", "shape": [m], "offset": 0}]}]
    manifest = {
        "format": "fpreduce-ddp-recording",
        "version": 1,
        "world_size": world,
        "backend": "gloo",
        "dtype": "fp32",
        "torch": "none",
        "average": "ddp",
        "steps": 2,
        "elements": m,
        "layouts": [layout],
        "step_layout": [0, 0],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("made") / "run"
    (d.parent / "c.toml").write_text(RUN_CFG.format(name='"r"'))
    assert main(["run", str(d.parent / "c.toml"), "--out", str(d), "-q", "--no-report"]) == 0
    return d


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace: the command runs in ``ws/a/b``; ``ws`` is watched for writes outside the folder."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    return tmp_path


# every command that makes an output directory: argv for (its config's name, --out or None)
def _writer(cmd: str, cfg: str, *extra: str) -> Callable[[str, str | None], list[str]]:
    def argv(name: str, out: str | None) -> list[str]:
        Path("c.toml").write_text(cfg.format(name=json.dumps(name), lr="0.05"))
        return [cmd, "c.toml", *extra, *(["--out", out] if out else [])]

    return argv


def _replay(name: str, out: str | None) -> list[str]:
    rec = Path("rec")
    if not rec.exists():
        _recording(rec)
    return ["replay", str(rec), "--no-report", "--json", *(["--out", out] if out else [])]


MAKERS = {
    "run": _writer("run", RUN_CFG, "-q", "--no-report"),
    "sweep": _writer("sweep", SWEEP_CFG, "-q", "--no-report"),
    "scale": _writer("scale", SCALE_CFG),
    "price": _writer("price", PRICE_CFG, "--no-report"),
    "replay": _replay,
}
NAMED = ("run", "sweep", "scale", "price")  # those whose config names their directory


@pytest.mark.parametrize("cmd", NAMED)
@pytest.mark.parametrize("name", ["../../x", "ABS", "a/b", ".."])
def test_a_configs_name_is_a_plain_name(ws: Path, capsys: pytest.CaptureFixture[str], cmd: str, name: str) -> None:
    name = str(ws / "abs") if name == "ABS" else name
    argv = MAKERS[cmd](name, None)
    before = files(ws)
    one_line_error(capsys, argv, "must be a plain name", "name")
    assert files(ws) == before
    assert sorted(p.name for p in ws.iterdir()) == ["a"]


@contextlib.contextmanager
def spying_writes(monkeypatch: pytest.MonkeyPatch, d: Path) -> Iterator[list[tuple[str, bool]]]:
    """Every file renamed into place under ``d`` (every atomic write), and whether ``d``'s lock was held then."""
    seen: list[tuple[str, bool]] = []
    real = os.replace

    def replace(src: str, dst: str) -> None:
        p = Path(dst).resolve()
        if p.is_relative_to(d.resolve()):
            seen.append((str(p.relative_to(d.resolve())), _files.held(d)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    yield seen


@pytest.mark.parametrize("cmd", sorted(MAKERS))
def test_a_command_writes_its_folder_only_under_its_lock_and_replaces_it_only_with_force(
    ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cmd: str
) -> None:
    out = ws / "a" / "b" / "D"
    argv = MAKERS[cmd]("n", str(out))
    with spying_writes(monkeypatch, out) as seen:
        assert main(argv) in (0, 1), capsys.readouterr().err  # (replay: 1 = not bit-exact)
    assert seen
    assert all(locked for _, locked in seen), seen
    written = files(ws)
    assert all(k.startswith("a/b/D/") or k in ("a/b/c.toml",) or k.startswith("a/b/rec/") for k in written)
    before = files(out)
    one_line_error(capsys, argv, str(out), "--force")
    assert files(out) == before
    assert main([*argv, "--force"]) in (0, 1)


@pytest.mark.parametrize("cmd", ["plot", "report"])
def test_figures_and_reports_are_drawn_under_the_runs_lock(
    complete_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cmd: str
) -> None:
    d = tmp_path / "run"
    shutil.copytree(complete_run, d)
    with spying_writes(monkeypatch, d) as seen:
        assert main([cmd, str(d)]) == 0
    assert seen
    assert all(locked for _, locked in seen), seen


# every command with an --out (or -o) that a foreign file could sit in: argv, and the file to plant
def _foreign_cases() -> dict[str, Callable[[Path], tuple[list[str], Path]]]:
    def dir_case(cmd: str) -> Callable[[Path], tuple[list[str], Path]]:
        return lambda d: (MAKERS[cmd]("n", str(d)), d / "report.pdf")

    cases = {cmd: dir_case(cmd) for cmd in MAKERS}
    cases["calibrate"] = lambda d: (["calibrate", "--sizes", "1,4,16", "-o", str(d / "c.toml")], d / "c.toml")
    return cases


FOREIGN_CASES = _foreign_cases()


@pytest.mark.parametrize("cmd", [*sorted(FOREIGN_CASES), "report"])
@pytest.mark.parametrize("force", [False, True], ids=["", "force"])
def test_a_file_no_fpreduce_command_wrote_is_never_replaced(
    ws: Path, complete_run: Path, capsys: pytest.CaptureFixture[str], cmd: str, force: bool
) -> None:
    d = ws / "a" / "b" / "D"
    d.mkdir()
    if cmd == "report":
        shutil.copytree(complete_run, ws / "run")
        argv, planted = ["report", str(ws / "run"), "-o", str(d / "r.pdf")], d / "r.pdf"
    else:
        argv, planted = FOREIGN_CASES[cmd](d)
    if force and cmd in MAKERS:  # (report -o and calibrate -o have no --force: they never replace foreign files)
        argv = [*argv, "--force"]
    planted.write_bytes(FOREIGN)
    before = files(ws)
    one_line_error(capsys, argv, "not a fpreduce")
    assert files(ws) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["calibrate", "--sizes", "1,4,16", "-o", "{missing}/c.toml"],
        ["report", "{run}", "-o", "{missing}/r.pdf"],
    ],
    ids=["calibrate", "report"],
)
def test_a_file_output_never_creates_directories(
    ws: Path, complete_run: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    shutil.copytree(complete_run, ws / "run")
    args = [a.format(missing=ws / "no" / "such", run=ws / "run") for a in argv]
    one_line_error(capsys, args, "is not a directory")
    assert not (ws / "no").exists()


def test_an_out_thousands_of_directories_deep_is_one_line(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26's reproducer: an ``--out`` 2,000 directories deep was a RecursionError of 7,000 lines."""
    deep = ws / "/".join(["d"] * 2000)
    argv = ["run", "--out", str(deep), "-q", "--no-report", "--set", "experiment.steps=1", "--set", "source.elements=8"]
    one_line_error(capsys, argv, "cannot write to")
    assert not (ws / "d").exists()  # (a command that fails leaves no directory it made)


@contextlib.contextmanager
def locked_by_another_process(d: Path) -> Iterator[None]:
    d.mkdir(parents=True, exist_ok=True)
    code = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
    code += "fcntl.flock(fd, fcntl.LOCK_EX); print(1, flush=True); time.sleep(120)"
    p = subprocess.Popen([sys.executable, "-c", code, str(d / _files.LOCK_FILE)], stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == b"1"
        yield
    finally:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


@pytest.mark.parametrize("cmd", [*sorted(MAKERS), "plot", "report"])
def test_a_folder_another_process_writes_is_refused(
    ws: Path, complete_run: Path, capsys: pytest.CaptureFixture[str], cmd: str
) -> None:
    d = ws / "a" / "b" / "D"
    if cmd in ("plot", "report"):
        shutil.copytree(complete_run, d)
        argv = [cmd, str(d)]
    else:
        argv = [*MAKERS[cmd]("n", str(d)), "--force"]
    with locked_by_another_process(d):
        before = files(d)
        one_line_error(capsys, argv, "in use by another fpreduce process")
        assert files(d) == before


# ----------------------------------------------------------------------------- standard JSON


def _big_recording() -> None:
    np.save("big.npy", np.full((2, 4, 8), 60000, np.float32))  # sums overflow fp16


JSON_CASES: dict[str, tuple[list[str], Callable[[], None] | None]] = {
    "sum": (["sum", "1e40,1", "--input", "fp16", "--json"], None),
    "sum-matrix": (["sum", "m.npy", "--input", "fp16", "--accumulate", "fp16", "--json"], None),
    "scale": (["scale", "c.toml", "--json", "--out", "S"], None),
    "price": (["price", "c.toml", "--json", "--no-report", "--out", "P"], None),
    "run": (["run", "--source", "big.npy", "--out", "R", "--json", "-q", "--no-report"], _big_recording),
    "show": (["show", "R", "--json"], _big_recording),
    "replay": (["replay", "rec", "--out", "Y", "--json", "--no-report"], None),
    "list": (["list", "formats", "--json"], None),
}


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_every_json_output_and_file_is_standard_json(ws: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    argv, setup = JSON_CASES[case]
    cfg = SCALE_CFG.format(name='"s"') if case == "scale" else PRICE_CFG.format(name='"p"', lr=1e30)
    Path("c.toml").write_text(cfg)
    np.save("m.npy", np.array([[65504.0, 1.0], [65504.0, 2.0]]))
    _recording(Path("rec"))
    if setup is not None:
        setup()
    if case == "show":
        assert main(["run", "--source", "big.npy", "--out", "R", "-q", "--no-report"]) == 0
        capsys.readouterr()
    assert main(argv) in (0, 1)
    out = capsys.readouterr().out
    docs = [strict(out), *(strict(p.read_text()) for p in ws.rglob("*.json") if "rec" not in p.parts)]
    assert docs
    if case in ("sum", "sum-matrix", "scale", "price"):  # these hold non-finite numbers: null, with why
        assert jsonfile.SUFFIX in out


def test_price_with_a_diverging_learning_rate_writes_its_study(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("c.toml").write_text(PRICE_CFG.format(name='"p"', lr=1e30))
    assert main(["price", "c.toml", "--no-report"]) == 0
    doc = rundir.read_study(Path("runs/p"), "price")
    assert math.isnan(doc["target_loss"]) or math.isinf(doc["target_loss"])  # read back as the number it was
    strict(Path("runs/p/price.json").read_text())


def test_json_writer_round_trips_non_finite_numbers_and_says_which() -> None:
    doc = {
        "a": math.inf,
        "b": [1.0, math.nan, [-math.inf, 2]],
        "c": {"x": np.float32("inf"), "y": None},
        "d": np.array([1.0, -np.inf]),
        "e": "nan",
    }
    text = jsonfile.dumps(doc)
    clean = strict(text)
    assert clean["a"] is None
    assert clean["a_nonfinite"] == "inf"
    assert clean["b_nonfinite"] == {"1": "nan", "2/0": "-inf"}
    assert clean["c"] == {"x": None, "x_nonfinite": "inf", "y": None}
    back = jsonfile.loads(text)
    assert back["a"] == math.inf
    assert math.isnan(back["b"][1])
    assert back["b"][2] == [-math.inf, 2]
    assert back["c"] == {"x": math.inf, "y": None}
    assert back["d"] == [1.0, -math.inf]
    assert back["e"] == "nan"
    assert jsonfile.loads('{"v": NaN}')["v"] != jsonfile.loads('{"v": NaN}')["v"]  # older files still read
    assert strict(jsonfile.dumps([math.nan, 1])) == [None, 1]  # a top-level list: null alone
    with pytest.raises(ValueError, match="nested too deeply"):
        jsonfile.loads("[" * 100_000 + "]" * 100_000)

"""Progress in every log: off a terminal, plain lines with what is done, the rate and the time left (and a long
kernel compile says it is alive); on a terminal one bar; -q silences them."""

import itertools
import re
import time
import types

import pytest

from fpreduce.base import jit
from fpreduce.cli import _progress, main

PRICE = '[price]\nname = "p"\nworkers = 2\nsteps = 4\nmodes = ["sync", "async"]\n[source]\nhidden = 4\n'
LINE = re.compile(r"^fpreduce price: \d+/32 gradients \(\d+%\), [\d.]+ gradients/s, about [\d.]+ (s|min|h) left$")


@pytest.fixture
def fast_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every look at the clock is 10 s later; a line every 15 s is then a line every other call."""
    ticks = itertools.count(0, 10.0)
    monkeypatch.setattr(_progress, "clock", lambda: next(ticks))


def test_a_pipe_gets_plain_progress_lines(tmp_path, capsys, fast_clock) -> None:
    (tmp_path / "p.toml").write_text(PRICE)
    assert main(["price", str(tmp_path / "p.toml"), "--no-report", "--out", str(tmp_path / "o")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fpreduce price:")]
    assert len(err) >= 3
    assert all(LINE.match(line) for line in err[:-1]), err
    assert re.match(r"^fpreduce price: 32/32 gradients \(100%\), .* done in [\d.]+ (s|min|h)$", err[-1])
    assert "\r" not in "".join(err)  # no bar drawn into a file


def test_quiet_silences_them(tmp_path, capsys, fast_clock) -> None:
    (tmp_path / "p.toml").write_text(PRICE)
    assert main(["price", str(tmp_path / "p.toml"), "--no-report", "--out", str(tmp_path / "o"), "-q"]) == 0
    assert capsys.readouterr().err == ""
    _progress.silence(False)


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["scale", "--print-only"], ("fpreduce scale", 28, "points")),  # 7 workers x 4 plans
        (["reveal", "numpy.sum", "--sweep", "1:6", "--verify", "4"], ("fpreduce reveal --sweep", 6, "sizes")),
        (["reveal", "numpy.sum", "--n", "1100", "--verify", "500"], ("fpreduce reveal", 500, "inputs")),
        (["run", "--steps", "6", "--set", "source.elements=64", "--no-report"], ("fpreduce", 6, "steps")),
        (
            ["sweep", "examples/sweep-ring.toml", "--set", "sweep.workers=[2]", "--set", "experiment.steps=1"]
            + ["--set", "source.elements=64", "--no-report"],
            ("fpreduce sweep", 6, "points"),  # 3 plans x 2 formats
        ),
    ],
    ids=["scale", "reveal-sweep", "reveal", "run", "sweep"],
)
def test_commands_say_how_far_they_are(argv, what, tmp_path, capsys, fast_clock) -> None:
    """Off a terminal a plain line every ~15 s (here every other unit), counting up to a last line; -q: none.
    (A reveal's probes come before its count of inputs verified: heartbeat lines, the time so far.)"""
    prefix, total, units = what
    if argv[0] in ("run", "sweep"):
        argv = [*argv, "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"{prefix}: ")]
    line = re.compile(
        rf"^{prefix}: (\d+)/{total} {units} \(\d+%\), [\d.]+ {units}/s, "
        r"(about .* left|done in .*|.* so far, time left not known yet)$"
    )
    done = [int(m.group(1)) for text in err if (m := line.match(text))]
    assert len(done) == len(err) >= 3, err
    assert done == sorted(done)
    assert re.search(rf"{total}/{total} .*, done in [\d.]+ (s|min|h)$", err[-1]), "a last line at the end"
    if argv[0] in ("run", "sweep"):
        return  # (-q is one switch, cli._progress.silence: checked on the cheap commands)
    assert main([*argv, "-q"]) == 0
    assert capsys.readouterr().err == ""
    _progress.silence(False)


def test_a_short_count_says_nothing(capsys, monkeypatch) -> None:
    monkeypatch.setattr(_progress, "clock", lambda: 0.0)
    bar = _progress.Bar("step", desc="run")
    for i in range(1, 6):
        bar(i, 5)
    assert capsys.readouterr().err == ""


def test_a_wait_gets_heartbeat_lines_and_an_ended_count_says_nothing_more(capsys, fast_clock) -> None:
    """A count that repeats its done so far (ranks starting up) still gets a line every ~15 s, with the time it
    has taken; the last poll of an ended count draws nothing new."""
    bar = _progress.Bar("task", desc="verify")
    for done in (0, 0, 0, 0, 3, 6, 6, 6):
        bar(done, 6)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "fpreduce verify: 0/6 tasks (0%), 0 tasks/s, 20 s so far, time left not known yet"
    assert err[1] == "fpreduce verify: 3/6 tasks (50%), 0.075 tasks/s, about 40 s left"  # 3 in 40 s: 3 more in 40
    assert err[2] == "fpreduce verify: 6/6 tasks (100%), 0.12 tasks/s, done in 50 s"
    assert len(err) == 3


def test_a_terminal_gets_one_bar_in_ascii_under_no_color(capsys, monkeypatch) -> None:
    monkeypatch.setattr(_progress, "interactive", lambda: True)
    monkeypatch.setenv("NO_COLOR", "1")
    bar = _progress.Bar("timing", desc="calibrate")
    for done in (0, 0, 2, 4, 4, 4):
        bar(done, 4)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, "one bar, closed once: the polls after the end draw no second bar"
    assert "4/4" in err
    assert "#" in err
    assert not set(err) & set("▏▎▍▌▋▊▉█"), "NO_COLOR: an ASCII bar"


@pytest.mark.skipif(not jit.AVAILABLE, reason="numba not installed (or FPREDUCE_NO_JIT)")
def test_a_long_compile_says_it_is_alive_then_that_it_ended(capsys, monkeypatch) -> None:
    """numba's compile event held open (as a long compile does): the notice, a line every EVERY seconds, one at
    its end; no process, no real compile."""
    from numba.core import event

    jit.numba()  # (its listener installed)
    monkeypatch.setattr(jit, "EVERY", 0.01)
    monkeypatch.setattr(jit, "_QUIET", [False])
    monkeypatch.delenv("FPREDUCE_QUIET", raising=False)  # (another test's -q)

    def fold() -> None: ...

    fold.__module__ = "fpreduce.a_test_group"
    data = {"dispatcher": types.SimpleNamespace(py_func=fold)}
    event.start_event("numba:compile", data=data)
    err = ""
    try:
        for _ in range(3000):  # until a line came (the thread's own pace; nothing timed is asserted)
            err += capsys.readouterr().err
            if "still compiling" in err:
                break
            time.sleep(0.01)
    finally:
        event.end_event("numba:compile", data=data)
    lines = (err + capsys.readouterr().err).splitlines()
    assert lines[0].startswith("fpreduce: compiling kernels for fpreduce.a_test_group (once, cached in ")
    assert all(
        re.fullmatch(
            r"fpreduce: still compiling kernels for fpreduce\.a_test_group: \d+ s so far "
            r"\(\d+ compiled before it in this process\)",
            line,
        )
        for line in lines[1:-1]
    ), lines
    assert len(lines) >= 3
    assert re.fullmatch(r"fpreduce: compiled kernels for fpreduce\.a_test_group in \d+ s", lines[-1])
    monkeypatch.setattr(jit, "EVERY", 3600.0)
    event.start_event("numba:compile", data=data)  # a compile ended before its first line: no line at all
    event.end_event("numba:compile", data=data)
    assert capsys.readouterr().err == ""


def test_a_collective_reveal_counts_its_probes_then_the_elements_it_verifies() -> None:
    """reveal gloo|mpi --n E (one live group) in the library: a heartbeat (0, of) per probe call, then the
    elements verified call by call up to (of, of); the CLI draws it as every other count (Bar). No ranks here."""
    import fpreduce as fr
    from fpreduce.analysis.reveal_collective import collective_revelation

    ring = fr.plans.parse("ring:gloo", 4)
    seen: list[tuple[int, int]] = []
    found = collective_revelation(lambda X: fr.reduce(X, ring), 4, 16, verify=100, progress=lambda *c: seen.append(c))
    assert found.verdict == "tree"
    beats = [c for c in seen if c[0] == 0]
    assert len(beats) == found.calls - 1  # every probe call but the first (the plain sum, before the probes)
    assert seen[len(beats) :] == [(16 * k, 112) for k in range(1, 8)]  # 100 elements: 7 whole calls of 16

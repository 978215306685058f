"""The command as scripts and people use it: --source, --json, show, list, names, help."""

import argparse
import json
import re

import numpy as np
import pytest

from fpreduce.cli import build_parser, main
from fpreduce.core.formats import FORMATS
from fpreduce.plans import FAMILIES
from fpreduce.run.config import load_config
from fpreduce.run.rundir import load_run


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Gradients as a user dumps them: (steps, workers, elements) float32, 3 workers."""
    d = tmp_path_factory.mktemp("rec")
    g = np.random.default_rng(5).normal(size=(4, 3, 200)).astype(np.float32)
    np.save(d / "my-grads.npy", g)
    return d / "my-grads.npy"


def test_run_source_takes_workers_steps_and_name_from_the_file(recording, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--source", str(recording), "--out", str(out), "--no-report", "--quiet"]) == 0
    s = load_run(out).summary
    assert (s["workers"], s["steps"], s["elements"], s["name"]) == (3, 4, 200, "my-grads")
    assert s["source"] == "file"
    assert "3 workers, 4 steps, source file" in capsys.readouterr().out


def test_run_source_lets_steps_and_set_win(recording):
    cfg = load_config(None, ["experiment.steps=2"], source=recording)
    assert (cfg.experiment.workers, cfg.experiment.steps) == (3, 2)


def test_run_source_errors_name_the_file(tmp_path, capsys):
    bad = tmp_path / "g.npy"
    np.save(bad, np.zeros((2, 3), np.float32))  # 2-D: not (steps, workers, elements)
    assert main(["run", "--source", str(bad), "--out", str(tmp_path / "r")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("fpreduce: error: ")
    assert str(bad) in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_set_source_kind_starts_a_fresh_source_table(recording):
    """Switching kind drops the default synthetic keys (once: 'source.dist: unknown key')."""
    cfg = load_config(None, ["source.kind=file", f"source.path={recording}", "experiment.workers=3"])
    assert cfg.source.kind == "file"
    with pytest.raises(Exception, match="dist"):  # a key of another kind is still refused
        load_config(None, ["source.kind=file", f"source.path={recording}", "source.dist=normal"])


@pytest.mark.parametrize(
    ("written", "canonical"),
    [("bfloat16", "bf16"), ("float32", "fp32"), ("HALF", "fp16"), ("torch.bfloat16", "bf16"), ("np.float16", "fp16")],
)
def test_config_formats_accept_aliases_and_store_the_canonical_name(written, canonical):
    cfg = load_config(None, [f"arms.A.accumulate={written}"])
    assert cfg.arms[0].accumulate == canonical


def test_run_json_is_one_object_and_nothing_else(recording, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--source", str(recording), "--out", str(out), "--no-report", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # the whole stdout parses: nothing else printed there
    assert doc["run"] == str(out)
    assert doc["summary"] == load_run(out).summary
    assert str(out / "metrics.csv") in doc["files"]


def test_sum_validates_before_printing(capsys):
    assert main(["sum", "1,2,3", "--accumulate", "bfloat17"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "did you mean 'bf16'" in captured.err
    assert main(["sum", "1,2,3", "--plans", "sequential,kary:1"]) == 2
    assert capsys.readouterr().out == ""


def test_sum_json_matches_the_text(capsys):
    argv = ["sum", "1,1e-8,-1,3e-8", "--accumulate", "bfloat16", "--plans", "sequential,reverse", "--orders", "6"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["accumulate"] == "bf16"  # the canonical name
    assert [r["plan"] for r in doc["plans"]] == ["sequential", "reverse"]
    assert sum(doc["orders"]["counts"]) == 6
    assert main(argv) == 0
    text = capsys.readouterr().out
    for r in doc["plans"]:
        assert r["hex"] in text


def test_list_names_every_format_and_family(capsys):
    assert main(["list", "formats", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(FORMATS)
    assert "bfloat16" in next(r for r in rows if r["name"] == "bf16")["aliases"]
    assert main(["list", "plans", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == list(FAMILIES)
    assert main(["list", "plans"]) == 0
    text = capsys.readouterr().out
    assert all(f in text for f in FAMILIES)


def test_every_spelling_list_formats_shows_is_accepted(capsys):
    """Issue 27: the "also written" column and --json's spellings, each accepted as a format (and by sum)."""
    from fpreduce.core.formats import format_name

    assert main(["list", "formats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines[0].index("also written")
    for ln in lines[1 : 1 + len(FORMATS)]:
        name, written = ln.split()[0], [w.strip() for w in ln[start:].split(",")]
        assert name in FORMATS
        assert written
        for w in written:
            assert format_name(w) == name, w
            assert format_name(w.replace("np.", "numpy.")) == name, w
    assert main(["list", "formats", "--json"]) == 0
    for r in json.loads(capsys.readouterr().out):
        assert all(format_name(w) == r["name"] for w in r["spellings"])
    assert main(["sum", "1,2,3", "--input", "torch.bfloat16", "--accumulate", "numpy.float16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["input"], doc["accumulate"]) == ("bf16", "fp16")
    assert main(["sum", "1,2,3", "--input", "torch.float8_e4m3fnuz"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error: ")
    assert len(err.strip().splitlines()) == 1


def test_show_prints_the_runs_table_without_running(recording, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--source", str(recording), "--out", str(out), "--no-report", "--quiet"]) == 0
    table = capsys.readouterr().out.split("\n", 1)[1].rsplit("wrote", 1)[0]
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert table.strip() in shown
    assert "complete" in shown
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before
    assert main(["show", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == load_run(out).summary
    assert main(["show", str(tmp_path / "none")]) == 2


def test_no_bar_is_drawn_when_output_is_not_a_terminal(recording, tmp_path, capsys):
    assert main(["run", "--source", str(recording), "--out", str(tmp_path / "r"), "--no-report"]) == 0  # (no bar in it)
    assert "\r" not in capsys.readouterr().err


def _actions(parser: argparse.ArgumentParser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from ((name, b) for _, b in _actions(sp))
        else:
            yield parser.prog, a


def test_every_option_and_command_has_help():
    missing = [(cmd, a.dest) for cmd, a in _actions(build_parser()) if not a.help]
    assert missing == []
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert all(c.help for c in sub._choices_actions)


def test_every_command_has_a_description_and_examples_that_parse():
    import shlex

    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert p.description, name
        assert p.epilog.startswith("examples:\n"), name
        help_text = p.format_help()
        examples = [line.strip() for line in help_text.split("examples:\n")[1].splitlines() if line.strip()]
        assert examples, name
        for e in examples:
            argv = shlex.split(e)
            assert argv[:2] == ["fpreduce", name], e
            ap.parse_args(argv[1:])  # (a bad example exits here)


def test_flags_of_one_name_mean_one_thing():
    """--no-report skips figures and the PDF in every command; -q silences progress in every command."""
    seen: dict[str, set[str]] = {}
    for cmd, a in _actions(build_parser()):
        for flag in a.option_strings:
            seen.setdefault(flag, set()).add(f"{cmd}: {a.help}")
    assert all(h.split(": ", 1)[1].startswith("skip figures and the PDF report") for h in seen["--no-report"])
    assert len(seen["--no-report"]) >= 5
    assert all("no progress" in h for h in seen["-q"]), seen["-q"]
    assert all(h.split(": ", 1)[1].startswith("print ") and "JSON" in h for h in seen["--json"]), seen["--json"]
    assert all(h.endswith("and nothing else") for h in seen["--json"]), "stdout holds the JSON alone (issue 27)"
    assert all(re.search(r": replace a .* already in --out$", h) for h in seen["--force"]), seen["--force"]
    assert len({h.split(": ", 1)[1] for h in seen["--threads"]}) == 1
    assert all("seed" in h and "default" in h for h in seen["--seed"]), seen["--seed"]
    assert {h.split(":")[0] for h in seen["--seed"]} >= {"run", "sweep", "price", "replay", "sum", "verify", "reveal"}
    assert all("ranks" in h for h in seen["--np"]), seen["--np"]
    assert [h.split(":")[0] for h in seen["--output"]] == ["sum"], "--output is a format (reduce's output=)"
    assert all("directory" in h for h in seen["--out"]), seen["--out"]  # a file is -o (report, calibrate)
    assert {h.split(":")[0] for h in seen["-o"]} == {"report", "calibrate"}, seen["-o"]


def test_comparing_arms_that_average_differently_is_warned_and_the_example_does_not():
    cfg = load_config("examples/file-source.toml", [])
    assert cfg.warnings() == []
    bad = load_config("examples/file-source.toml", ["arms.B-bf16.average=none"])
    assert any("B-bf16" in w and "averaging" in w for w in bad.warnings())


def test_file_source_example_runs_on_a_recording(recording, tmp_path, capsys):
    argv = ["run", "examples/file-source.toml", "--source", str(recording), "--out", str(tmp_path / "r")]
    assert main([*argv, "--no-report", "--quiet"]) == 0
    s = load_run(tmp_path / "r").summary
    assert s["workers"] == 3
    assert s["name"] == "my-run"
    b = next(a for a in s["arms"] if a["name"] == "B-fp64acc")
    assert b["mean_diff_frac"] == 0.0  # 3 fp32 normal(0,1) values sum exactly in fp64: any order, same bits


def test_compare_says_identical_then_names_the_first_differing_step(recording, tmp_path, capsys):
    base = ["run", "--source", str(recording), "--no-report", "--quiet"]
    for name, extra in (("a", []), ("b", []), ("c", ["--set", "experiment.seed=3"])):
        assert main([*base, "--out", str(tmp_path / name), *extra]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["identical"] is True
    assert all(r["identical"] and r["steps_differing"] == 0 for r in same["arms"])
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "c"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    by = {r["arm"]: r for r in doc["arms"]}
    assert by["A"]["identical"] is True  # a fixed order ignores the seed
    assert by["B"]["identical"] is False  # arrival order: another seed, other bits
    assert by["B"]["first_differing_step"] == 0
    assert doc["config_differences"] == ["experiment.seed: 0 -> 3"]
    assert 1 <= by["B"]["steps_differing"] <= 4  # steps whose arrival orders happen to agree have equal bits
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "c")]) == 1
    assert "DIFFER" in capsys.readouterr().out


def test_run_source_accepts_a_recordings_own_directory(tmp_path, capsys):
    """fpreduce.torch.Recorder writes REC/manifest.json and REC/grads/: REC itself is a source."""
    rec = tmp_path / "my-rec"
    (rec / "grads").mkdir(parents=True)
    (rec / "manifest.json").write_text("{}")
    g = np.random.default_rng(2).normal(size=(2, 3, 50)).astype(np.float32)
    for t in range(2):
        np.save(rec / "grads" / f"step_{t:06d}.npy", g[t])
    out = tmp_path / "run"
    assert main(["run", "--source", str(rec), "--out", str(out), "--no-report", "--quiet"]) == 0
    s = load_run(out).summary
    assert (s["name"], s["workers"], s["steps"]) == ("my-rec", 3, 2)
    np.save(tmp_path / "whole.npy", g)
    assert main(["run", "--source", str(tmp_path / "whole.npy"), "--out", str(tmp_path / "w"), "--no-report"]) == 0
    a, b = load_run(out).metrics, load_run(tmp_path / "w").metrics
    assert all(np.array_equal(a[arm]["digest"], b[arm]["digest"]) for arm in a)  # the same gradients, the same bits


def test_the_backends_take_the_spellings_too(capsys):
    """Issue 27: verify --dtype and reveal --format (the live ranks' dtype) take a format as people write it;
    a format the backend cannot sum is still one line with its choices. Nothing is launched."""
    from fpreduce.backends._common import backend_dtype
    from fpreduce.backends.gloo import DTYPES as GLOO
    from fpreduce.backends.mpi import DTYPES as MPI

    assert backend_dtype("gloo", "torch.bfloat16", GLOO) == "bf16"
    assert backend_dtype("gloo", "np.float16", GLOO) == "fp16"
    assert backend_dtype("mpi", np.dtype("float64"), MPI) == "fp64"
    assert main(["verify", "--backend", "mpi", "--np", "2", "--dtype", "torch.bfloat16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "fpreduce: error: unknown mpi dtype (Open MPI 4 has no fp16/bf16 MPI datatype) 'torch.bfloat16' "
        "(choices: fp32, fp64)"
    )
    assert main(["reveal", "numpy.sum", "--n", "4", "--verify", "2", "--format", "torch.float16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "fp16"


def test_seed_is_a_flag_of_run_sweep_and_price_too(tmp_path, capsys):
    """Issue 27: --seed N is --set experiment.seed=N (run, sweep) and price.seed (price); a negative one is one
    line naming --seed, before any work."""
    from fpreduce.cli._experiment import _overrides, _run_config
    from fpreduce.run.sweep import load_sweep_config

    args = build_parser().parse_args(["run", "--seed", "3", "--set", "experiment.workers=4"])
    assert _run_config(args).experiment.seed == 3
    args = build_parser().parse_args(["sweep", "examples/sweep-ring.toml", "--seed", "7"])
    assert {c.experiment.seed for c in load_sweep_config(args.config, _overrides(args))[1]} == {7}
    for argv in (["run"], ["sweep", "examples/sweep-ring.toml"], ["price"]):
        assert main([*argv, "--seed", "-1", "--out", str(tmp_path / "x")]) == 2
        assert capsys.readouterr().err == "fpreduce: error: --seed must be >= 0, got -1\n"
    assert not (tmp_path / "x").exists()

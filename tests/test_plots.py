import csv
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from fpreduce.base.errors import InvalidArgument
from fpreduce.report.plots import FIGSIZE, arm_label, plot_run, plot_sweep
from fpreduce.run.rundir import read_metrics, read_summary, read_sweep

COLUMNS = (
    "step",
    "arm",
    "elements",
    "nonfinite",
    "err_max_rel",
    "err_mean_rel",
    "err_median_rel",
    "err_max_ulp",
    "frac_correct",
    "diff_frac",
    "ulp_max",
    "ulp_mean",
    "rel_l2",
    "loss",
    "param_dist",
    "param_diff_frac",
)
NAN = float("nan")


def _arm(name, order, inp, acc, **extra):
    return {
        "name": name,
        "order": order,
        "input": inp,
        "accumulate": acc,
        "output": acc,
        "rounding": "nearest_even",
        "algorithm": "plain",
        "average": "none",
        "reproducible": True,
        "first_divergence_step": None,
        "first_param_divergence_step": None,
        **extra,
    }


def write_run(
    d: Path, *, steps=30, arms=("A", "B", "B-fp32"), training=False, zero_arm=None, nan_arm=None, complete=True, seed=0
):
    """A synthetic run directory per docs/run-format.md (values look like a bf16 A vs B run)."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    specs = {
        "A": ("fixed:sequential", "bf16", "bf16", 1.0),
        "B": ("arrival", "bf16", "bf16", 1.0),
        "B-fp32": ("arrival", "bf16", "fp32", 1e-4),
        "C": ("atomic", "fp16", "fp16", 0.3),
    }
    rows, loss0 = [], 2.0
    for s in range(steps):
        for a in arms:
            order, inp, acc, scale = specs[a]
            ref = a == arms[0]
            err = 10 ** rng.uniform(-3, -2) * scale
            diff = 0.0 if ref else min(1.0, 0.6 * scale * rng.uniform(0.8, 1.0))
            ulp_max = 0 if ref else int(rng.integers(1, 9))
            i = arms.index(a)
            pdist = 0.0 if ref or s < 2 + 3 * i else 1e-7 * (1.2 + 0.1 * i) ** s
            row = {
                "step": s,
                "arm": a,
                "elements": 4096,
                "nonfinite": 0,
                "err_max_rel": err,
                "err_mean_rel": err / 20,
                "err_median_rel": err / 30,
                "err_max_ulp": 2.0,
                "frac_correct": 0.9,
                "diff_frac": diff,
                "ulp_max": ulp_max,
                "ulp_mean": diff * 1.2,
                "rel_l2": diff * 1e-3,
                "loss": loss0 * 0.97**s * (1 + pdist) if training else NAN,
                "param_dist": pdist if training else NAN,
                "param_diff_frac": (0.0 if pdist == 0 else 0.4) if training else NAN,
            }
            if a == zero_arm:
                row.update(err_max_rel=0.0, err_mean_rel=0.0, diff_frac=0.0, ulp_max=0, ulp_mean=0.0)
            if a == nan_arm:
                row.update({c: NAN for c in COLUMNS[4:]})
            rows.append(row)
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([repr(float(r[c])) if isinstance(r[c], float) else r[c] for c in COLUMNS])
    edges = [0, 1, 2, 3, 5, 9, 17, 33, 65, 129]
    arm_objs = []
    for i, a in enumerate(arms):
        order, inp, acc, _ = specs[a]
        counts = (
            [steps * 4096] + [0] * 9
            if i == 0
            else [2000 * steps, 1500 * steps, 400 * steps, 150 * steps, 40 * steps, 6 * steps, 0, 0, 0, 0]
        )
        arm_objs.append(
            _arm(
                a,
                order,
                inp,
                acc,
                ulp_hist={"edges": edges, "counts": counts},
                first_param_divergence_step=(2 + 3 * i if training and i else None),
            )
        )
    summary = {
        "format": 1,
        "name": "ab-bf16" + ("-train" if training else ""),
        "complete": complete,
        "steps": steps if complete else steps + 10,
        "steps_done": steps,
        "workers": 32,
        "elements": 4096,
        "source": "model" if training else "synthetic",
        "seed": 0,
        "reference": arms[0],
        "arms": arm_objs,
    }
    (d / "summary.json").write_text(json.dumps(summary, indent=1))
    (d / "config.toml").write_text("[experiment]\nname = 'x'\n")
    return d


def write_sweep(d: Path, workers=(2, 4, 8, 16, 32, 64)):
    d.mkdir(parents=True, exist_ok=True)
    cols = ("workers", "plan", "input", "accumulate", "arm", "mean_err_rel", "max_err_rel", "mean_diff_frac", "max_ulp")
    lines = [",".join(cols)]
    for plan, inp, acc, e0 in (
        ("ring", "bf16", "bf16", 1e-3),
        ("tree", "bf16", "bf16", 5e-4),
        ("ring", "bf16", "fp32", 1e-7),
    ):
        for arm in ("A", "B"):
            for n in workers:
                diff = 0.0 if arm == "A" else min(0.9, 0.05 * n**0.5 * (1 if acc == "bf16" else 1e-3))
                ulp = 0 if arm == "A" else max(1, int(n**0.5))
                lines.append(f"{n},{plan},{inp},{acc},{arm},{e0 * n**0.5!r},{e0 * 8 * n**0.5!r},{diff!r},{ulp}")
    (d / "sweep.csv").write_text("\n".join(lines) + "\n")
    return d


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# ----------------------------------------------------------------------------- reading


def test_load_metrics_groups_by_arm_sorted_by_step(tmp_path):
    run = write_run(tmp_path / "r", steps=4)
    m = read_metrics(run)
    assert list(m) == ["A", "B", "B-fp32"]
    assert m["B"]["step"].dtype == np.int64
    assert m["B"]["step"].tolist() == [0, 1, 2, 3]
    assert np.isnan(m["A"]["loss"]).all()
    assert (m["A"]["diff_frac"] == 0).all()
    assert read_metrics(run / "metrics.csv").keys() == m.keys()


def test_load_metrics_sorts_steps_and_keeps_last_duplicate(tmp_path):
    p = tmp_path / "metrics.csv"
    p.write_text("step,arm,x\n2,A,3.0\n0,A,1.0\n1,A,2.0\n2,A,4.0\n")
    m = read_metrics(p)
    assert m["A"]["step"].tolist() == [0, 1, 2]
    assert m["A"]["x"].tolist() == [1.0, 2.0, 4.0]


@pytest.mark.parametrize("tail", ["3,A,1.", "3,A", "3,A,1.5,"], ids=["no-newline", "short", "long"])
def test_load_metrics_ignores_truncated_last_row(tmp_path, tail):
    p = tmp_path / "metrics.csv"
    p.write_text("step,arm,x\n0,A,1.0\n1,A,2.0\n" + tail + ("" if tail == "3,A,1." else "\n"))
    assert read_metrics(p)["A"]["x"].tolist() == [1.0, 2.0]


def test_load_metrics_rejects_malformed_middle_row(tmp_path):
    p = tmp_path / "metrics.csv"
    p.write_text("step,arm,x\n0,A,1.0\n1,A,oops\n2,A,3.0\n")
    with pytest.raises(InvalidArgument, match="line 3"):
        read_metrics(p)


def test_arm_label():
    a = _arm("B", "arrival", "bf16", "fp32", algorithm="kahan")
    assert arm_label(a, reference="A") == "B: arrival bf16→fp32 [kahan]"
    assert arm_label(a, reference="B").endswith("(reference)")


# ----------------------------------------------------------------------------- bad input


def test_missing_directory(tmp_path):
    with pytest.raises(InvalidArgument, match="no such run directory"):
        plot_run(tmp_path / "nope")


def test_foreign_directory_names_metrics(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InvalidArgument, match=r"metrics\.csv not found: is .* a fpreduce run directory\?"):
        plot_run(tmp_path)


def test_missing_summary(tmp_path):
    run = write_run(tmp_path / "r", steps=2)
    (run / "summary.json").unlink()
    with pytest.raises(InvalidArgument, match=r"summary\.json not found"):
        plot_run(run)


@pytest.mark.parametrize(
    ("text", "match"), [("{", "not a readable JSON"), ('{"arms": 3}', "arms: expected an array, got 3")]
)
def test_bad_summary(tmp_path, text, match):
    run = write_run(tmp_path / "r", steps=2)
    (run / "summary.json").write_text(text)
    with pytest.raises(InvalidArgument, match=match):
        read_summary(run)


def test_foreign_csv_and_empty_run(tmp_path):
    (tmp_path / "metrics.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InvalidArgument, match="not a fpreduce metrics.csv"):
        read_metrics(tmp_path)
    run = write_run(tmp_path / "r", steps=2)
    (run / "metrics.csv").write_text(",".join(COLUMNS) + "\n")
    with pytest.raises(InvalidArgument, match="no complete step"):
        plot_run(run)


def test_bad_formats(tmp_path):
    run = write_run(tmp_path / "r", steps=2)
    with pytest.raises(InvalidArgument, match="figure formats"):
        plot_run(run, formats=("jpg",))


def test_sweep_missing(tmp_path):
    with pytest.raises(InvalidArgument, match=r"sweep\.csv not found"):
        plot_sweep(tmp_path)
    (tmp_path / "sweep.csv").write_text("workers,plan\n2,ring\n")
    with pytest.raises(InvalidArgument, match="missing column"):
        plot_sweep(tmp_path)


# ----------------------------------------------------------------------------- figures


def test_synthetic_run_figures(tmp_path):
    run = write_run(tmp_path / "r")
    paths = plot_run(run)
    names = sorted(p.name for p in paths)
    assert names == sorted(f"{s}.{e}" for s in ("error", "divergence", "ulp_hist") for e in ("png", "pdf"))
    for p in paths:
        assert p.parent == run / "figures"
        assert p.stat().st_size > 5000
    sizes = {_png_size(p) for p in paths if p.suffix == ".png"}
    assert sizes == {(round(FIGSIZE[0] * 150), round(FIGSIZE[1] * 150))}
    assert not [p for p in (run / "figures").iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.fixture(scope="module")
def training_run(tmp_path_factory):
    """A training run rendered once in every format: (run dir, {file name: bytes})."""
    run = write_run(tmp_path_factory.mktemp("train") / "r", training=True, steps=12)
    return run, {p.name: p.read_bytes() for p in plot_run(run, formats=("png", "pdf", "svg"))}


def test_training_run_figures(training_run):
    run, files = training_run
    assert set(files) == {
        f"{s}.{e}" for s in ("error", "divergence", "ulp_hist", "training") for e in ("png", "pdf", "svg")
    }
    assert sorted(p.name for p in (run / "figures").iterdir()) == sorted(files)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": 1},
        {"steps": 1, "training": True},
        {"arms": ("A",)},
        {"arms": ("A",), "training": True, "steps": 1},
        {"zero_arm": "B-fp32"},
        {"nan_arm": "B"},
        {"nan_arm": "B", "training": True, "steps": 3},
        {"arms": ("A", "B"), "zero_arm": "B"},
        {"complete": False, "arms": ("A", "C")},
    ],
    ids=[
        "1-step",
        "1-step-training",
        "1-arm",
        "1-arm-1-step-training",
        "zero-arm",
        "nan-arm",
        "nan-arm-training",
        "all-zero",
        "incomplete",
    ],
)
def test_degenerate_runs_do_not_crash(tmp_path, kwargs):
    run = write_run(tmp_path / "r", **kwargs)
    paths = plot_run(run, formats=("png",))
    assert {_png_size(p) for p in paths} == {(round(FIGSIZE[0] * 150), round(FIGSIZE[1] * 150))}


def test_no_histograms(tmp_path):
    run = write_run(tmp_path / "r", steps=3)
    s = json.loads((run / "summary.json").read_text())
    for a in s["arms"]:
        a["ulp_hist"] = None
    (run / "summary.json").write_text(json.dumps(s))
    assert (run / "figures" / "ulp_hist.png") in plot_run(run, formats=("png",))


def test_inf_and_nonfinite_counts(tmp_path):
    run = write_run(tmp_path / "r", steps=5)
    lines = (run / "metrics.csv").read_text().splitlines()
    row = lines[3].split(",")
    for col, value in (("ulp_max", "inf"), ("err_max_rel", "inf"), ("nonfinite", "3")):
        row[COLUMNS.index(col)] = value
    lines[3] = ",".join(row)
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    assert np.isinf(read_metrics(run)["B-fp32"]["ulp_max"][0])
    assert len(plot_run(run, formats=("png",))) == 3


def test_partial_last_line_is_plotted(tmp_path):
    run = write_run(tmp_path / "r", steps=5)
    with open(run / "metrics.csv", "a") as f:
        f.write("5,A,4096,0,0.00")
    plot_run(run, formats=("png",))


def test_outputs_are_byte_identical(training_run):
    run, first = training_run
    again = {p.name: p.read_bytes() for p in plot_run(run, formats=("png", "pdf", "svg"))}
    assert again == first
    assert b"CreationDate" not in first["error.pdf"]
    assert b"<dc:date>" not in first["error.svg"]


@pytest.mark.slow  # a second process; test_outputs_are_byte_identical checks reruns in-process
def test_outputs_identical_across_processes(training_run, tmp_path):
    """Another interpreter, hash seed, working directory, run directory and MPLBACKEND."""
    _, here = training_run
    other = write_run(tmp_path / "copy", training=True, steps=12)
    env = {**os.environ, "PYTHONHASHSEED": "12345", "MPLBACKEND": "svg"}
    code = "import sys; from fpreduce.report.plots import plot_run; plot_run(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(other)], check=True, env=env, cwd=tmp_path, timeout=600)
    there = {p.name: p.read_bytes() for p in (other / "figures").iterdir()}
    assert there == {k: v for k, v in here.items() if not k.endswith(".svg")}


def test_png_text_metadata_is_fixed(training_run):
    png = training_run[1]["error.png"]
    pos, chunks = 8, []
    while pos < len(png):
        n = int.from_bytes(png[pos : pos + 4], "big")
        kind = png[pos + 4 : pos + 8]
        if kind == b"tEXt":
            chunks.append(png[pos + 8 : pos + 8 + n])
        elif kind == b"zTXt":
            key, rest = png[pos + 8 : pos + 8 + n].split(b"\0", 1)
            chunks.append(key + b"\0" + zlib.decompress(rest[1:]))
        pos += 12 + n
    assert any(c.startswith(b"Title\0fpreduce error") for c in chunks)
    assert not any(c.startswith(b"Creation Time") for c in chunks)


def test_sweep_figure(tmp_path):
    d = write_sweep(tmp_path / "s")
    paths = plot_sweep(d)
    assert {p.name for p in paths} == {"sweep.png", "sweep.pdf"}
    assert _png_size(d / "figures" / "sweep.png") == (round(FIGSIZE[0] * 150), round(FIGSIZE[1] * 150))
    again = (d / "figures" / "sweep.png").read_bytes()
    plot_sweep(d)
    assert (d / "figures" / "sweep.png").read_bytes() == again


def test_sweep_zeros_nan_and_one_arm(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "sweep.csv").write_text(
        "workers,plan,input,accumulate,arm,mean_err_rel,max_err_rel,mean_diff_frac,max_ulp\n"
        "2,ring,bf16,fp32,A,0.0,0.0,nan,0.0\n4,ring,bf16,fp32,A,0.0,1e-7,nan,0.0\n"
    )
    assert plot_sweep(d, formats=("png",)) == [d / "figures" / "sweep.png"]


def test_sweep_with_several_data_distributions(tmp_path):
    d = write_sweep(tmp_path / "s")
    rows = (d / "sweep.csv").read_text().splitlines()
    head = rows[0].replace("plan,", "plan,dist,")
    body = [r.replace(",bf16,", f",{dist},bf16,", 1) for dist in ("normal", "lognormal") for r in rows[1:]]
    (d / "sweep.csv").write_text("\n".join([head, *body]) + "\n")
    assert {r["dist"] for r in read_sweep(d)} == {"normal", "lognormal"}
    assert plot_sweep(d, formats=("png",)) == [d / "figures" / "sweep.png"]


def test_sweep_single_n_and_truncated(tmp_path):
    d = write_sweep(tmp_path / "s", workers=(8,))
    with open(d / "sweep.csv", "a") as f:
        f.write("16,ring,bf16")
    assert plot_sweep(d, formats=("png",)) == [d / "figures" / "sweep.png"]


# ----------------------------------------------------------------------------- pairs, fractions, many series

MANY = """
[experiment]
name = "many"
steps = 2
workers = 8
seed = 2
[source]
kind = "synthetic"
elements = 600
"""
_ORDERS = ("fixed:sequential", "arrival", "shuffle:pairwise", "atomic", "random_tree", "fixed:pairwise")


@pytest.fixture(scope="module")
def many_run(tmp_path_factory):
    """A real run with 13 arms: bf16 and fp16 arms with every order policy, and an fp32 arm compared across formats."""
    import tomllib

    from fpreduce.run import config as cf
    from fpreduce.run.runner import run_experiment

    text = MANY + "".join(
        f'[[arms]]\nname = "{f}-{i}"\norder = "{o}"\ninput = "{f}"\naccumulate = "{f}"\n'
        for f in ("bf16", "fp16")
        for i, o in enumerate(_ORDERS)
    )
    text += '[[arms]]\nname = "F"\norder = "arrival"\ninput = "fp32"\naccumulate = "fp32"\ncompare_to = "bf16-0"\n'
    d = tmp_path_factory.mktemp("many") / "run"
    run_experiment(cf.from_dict(tomllib.loads(text)), d)
    return d


def test_series_styles_tell_70_series_apart():
    from fpreduce.report._figure import series_style

    styles = {(s["color"], s["marker"]) for s in map(series_style, range(70))}
    assert len(styles) == 70


def test_divergence_figure_is_per_pair_on_linear_percent_axes(many_run):
    from matplotlib.ticker import PercentFormatter

    from fpreduce.report import plots

    run = plots._read_run(many_run)
    fig = plots._fig_divergence(run)
    a1, a2 = fig.axes
    for ax in (a1, a2):
        assert ax.get_yscale() == "linear"
        lo, hi = ax.get_ylim()
        assert -0.05 <= lo <= 0
        assert 1 <= hi <= 1.05
        assert isinstance(ax.yaxis.get_major_formatter(), PercentFormatter)
    # the pair panel draws the arms compared with another arm, not those compared with themselves
    assert len(a1.get_lines()) == len(run.pairs()) == 13 - 2  # bf16-0 and fp16-0 are their groups' references
    # the relaunch panel draws the arms whose order changes (a fixed order repeats its bits by construction)
    moving = [a for a in run.arms if not str(run.info[a]["order"]).startswith("fixed:")]
    assert 0 < len(moving) < 13
    styles = [(ln.get_color(), ln.get_marker()) for ln in a2.get_lines()]
    assert len(set(styles)) == len(styles) == len(moving)  # every series distinguishable: colour and marker
    fixed = [a for a in run.arms if a not in moving]
    assert any(t.get_text() == f"not drawn: {', '.join(fixed)} (fixed order: 0 by construction)" for t in a2.texts)
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("bf16-1 vs bf16-0:") for t in texts)
    assert any(t.startswith("fp16-5 vs fp16-0:") for t in texts)  # a tree against its chain twin
    assert any(t.startswith("F vs bf16-0 (in fp32):") for t in texts)  # across output formats: said so


def test_ulp_histogram_is_per_pair_with_shares_in_words(many_run, tmp_path):
    from fpreduce.report import plots

    run = plots._read_run(many_run)
    (ax,) = (fig := plots._fig_ulp_hist(run)).axes
    assert ax.get_yscale() == "linear"
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(texts) == len(run.pairs())
    assert all(" vs " in t for t in texts)
    assert not [t for t in ax.texts if t.get_text().endswith("%")]  # 11 pairs: too many bars to label
    few = plots._read_run(write_run(tmp_path / "few"))  # two pairs (an older run: both against A)
    (ax,) = (fig := plots._fig_ulp_hist(few)).axes
    labels = [t.get_text() for t in ax.texts if t.get_text()]
    assert "49%" in labels  # 2000 of 4096 elements at distance 0: the share of every non-empty bin in words
    assert "0.15%" in labels  # 6 of 4096, readable however small on a linear axis
    assert [t.get_text().split(":")[0] for t in fig.legends[0].get_texts()] == ["B vs A", "B-fp32 vs A (in fp32)"]


def test_sweep_slopes_only_on_the_error_panel_and_fractions_linear(tmp_path):
    from fpreduce.report import plots
    from fpreduce.report._sweep_plot import fig_sweep

    d = write_sweep(tmp_path / "sw")
    rows = read_sweep(d)
    fig = fig_sweep(rows, "sw", "")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    units = list(dict.fromkeys(r["accumulate"] for r in rows))
    err, ulps, (diff, rerun) = shown[0], shown[1 : 1 + len(units)], shown[1 + len(units) :]
    assert [ax.get_ylabel() for ax in ulps] == [f"ulps of {u} to compare_to" for u in units]  # one unit per axis
    grey = [ln for ln in err.get_lines() if ln.get_color() == "0.5"]
    assert len(grey) == 2  # sqrt(N) and N reference slopes
    for ax in (*ulps, diff, rerun):
        assert not [ln for ln in ax.get_lines() if ln.get_color() == "0.5"]
    for ax in (diff, rerun):
        assert ax.get_yscale() == "linear"
        assert ax.get_ylim()[1] <= 1.05
    assert plots.plot_sweep(d)

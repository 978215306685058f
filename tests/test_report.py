import csv
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from fpreduce.base.errors import InvalidArgument
from fpreduce.report.report import findings, write_report, write_sweep_report
from fpreduce.run import rundir

COLS = (
    "step",
    "arm",
    "elements",
    "nonfinite",
    "err_norm",
    "err_backward",
    "err_max_rel",
    "err_mean_rel",
    "err_median_rel",
    "err_max_ulp",
    "frac_correct",
    "diff_frac",
    "ulp_max",
    "ulp_mean",
    "rel_l2",
    "rerun_diff_frac",
    "rerun_ulp_max",
    "loss",
    "param_dist",
    "param_diff_frac",
)
#: the columns of runs written before compare_to, re-runs and normwise errors
LEGACY = tuple(c for c in COLS if c not in ("err_norm", "err_backward", "rerun_diff_frac", "rerun_ulp_max"))
ARMS = [
    {"name": "A", "order": "fixed:sequential", "input": "bf16", "accumulate": "bf16", "output": "bf16"},
    {"name": "B", "order": "arrival", "input": "bf16", "accumulate": "bf16", "output": "bf16"},
    {"name": "A-fp32acc", "order": "fixed:sequential", "input": "bf16", "accumulate": "fp32", "output": "bf16"},
    {"name": "B-fp32acc", "order": "arrival", "input": "bf16", "accumulate": "fp32", "output": "bf16"},
    {"name": "R-ring", "order": "shuffle:ring:nccl", "input": "fp16", "accumulate": "fp16", "output": "fp16"},
    {
        "name": "B-kahan",
        "order": "arrival",
        "input": "bf16",
        "accumulate": "bf16",
        "output": "bf16",
        "algorithm": "kahan",
    },
]
TWIN = {"A": "A", "B": "A", "A-fp32acc": "A-fp32acc", "B-fp32acc": "A-fp32acc", "R-ring": "A", "B-kahan": "A"}


def _row(step: int, i: int, arm: dict, rng: np.random.Generator, training: bool) -> dict:
    """One made-up metrics row: fixed arms reproducible, the fp32 accumulator exact against its twin."""
    scale = 1e-3 if arm["accumulate"] == "fp32" else 1.0
    fixed = arm["order"].startswith("fixed:")
    ref = TWIN[arm["name"]] == arm["name"]
    loss = 1.0 / (1 + step) + (0 if ref else 1e-4 * i * step) if training else float("nan")
    return {
        "step": step,
        "arm": arm["name"],
        "elements": 4096,
        "nonfinite": 0,
        "err_norm": scale * rng.uniform(3e-3, 5e-3),
        "err_backward": scale * rng.uniform(1e-2, 2e-2),
        "err_max_rel": scale * rng.uniform(0.01, 0.1),
        "err_mean_rel": scale * rng.uniform(1e-3, 2e-3),
        "err_median_rel": scale * 1e-3,
        "err_max_ulp": 3.0,
        "frac_correct": 0.9,
        "diff_frac": 0.0 if ref or scale < 1 else rng.uniform(0.2, 0.6),
        "ulp_max": 0.0 if ref or scale < 1 else float(rng.integers(1, 9)),
        "ulp_mean": 0.0 if ref else 0.5,
        "rel_l2": 0.0 if ref else 1e-3,
        "rerun_diff_frac": 0.0 if fixed or scale < 1 else rng.uniform(0.2, 0.6),
        "rerun_ulp_max": 0.0 if fixed or scale < 1 else float(rng.integers(1, 9)),
        "loss": loss,
        "param_dist": (0.0 if ref or step < 2 or scale < 1 else 1e-7 * 2.0**step) if training else float("nan"),
        "param_diff_frac": (0.0 if ref or step < 2 or scale < 1 else 0.5) if training else float("nan"),
    }


def make_run(
    path: Path, *, training: bool, steps: int, done: int, seed: int = 1, workers: int = 16, legacy: bool = False
) -> Path:
    """A synthetic run directory in the docs/run-format.md layout (numbers are made up; ``legacy``: as
    written before compare_to, re-runs and normwise errors)."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    rows = [_row(step, i, arm, rng, training) for step in range(done) for i, arm in enumerate(ARMS)]
    cols = LEGACY if legacy else COLS
    with open(path / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([repr(r[c]) if isinstance(r[c], float) else r[c] for c in cols])
    arms = []
    for i, a in enumerate(ARMS):
        entry = {
            "rounding": "nearest_even",
            "algorithm": "plain",
            "average": "none",
            **a,
            "compare_to": TWIN[a["name"]],
            "compared_in": a["output"],
            "reproducible": a["order"].startswith("fixed:") or a["accumulate"] == "fp32",
            "first_divergence_step": None if TWIN[a["name"]] == a["name"] else 0,
            "first_param_divergence_step": (2 if a["name"] in ("B", "R-ring", "B-kahan") else None)
            if training
            else None,
            "mean_diff_frac": 0.1,
            "max_ulp": 8,
            "mean_err_rel": 1e-3,
            "max_err_rel": 0.1,
            "ulp_hist": {"edges": [0, 1, 2, 3, 5, 9], "counts": [10, 5, 3, 2, 1, 0]},
        }
        if legacy:
            for k in ("compare_to", "compared_in"):
                del entry[k]
            entry["reproducible"] = True if i == 0 else None
        arms.append(entry)
    summary = {
        "format": 1,
        "name": "synthetic-ab" if not training else "train-ab",
        "complete": done == steps,
        "steps": steps,
        "steps_done": done,
        "workers": workers,
        "elements": 4096,
        "source": "model" if training else "synthetic",
        "seed": 0,
        "reference": "A",
        "versions": {"fpreduce": "0.1.0", "numpy": "2.4.0", "python": "3.11.7"},
        "arms": arms,
    }
    (path / "summary.json").write_text(json.dumps(summary, indent=1))
    (path / "config.toml").write_text(
        f'[experiment]\nname = "x"\nsteps = {steps}\nworkers = {workers}\n'
        + "".join(f'\n[[arms]]\nname = "{a["name"]}"\norder = "{a["order"]}"\n' for a in ARMS)
    )
    return path


def pdf_pages(data: bytes) -> list[str]:
    """The strings drawn on each page of a matplotlib PDF (decompressed content streams, TJ/Tj
    operands joined; a page's stream is the only one with text operators)."""
    pages = []
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            s = zlib.decompress(m.group(1))
        except zlib.error:
            s = m.group(1)
        out = []
        for t in re.finditer(rb"\[(.*?)\]\s*TJ|\((.*?)(?<!\\)\)\s*Tj", s, re.S):
            parts = re.findall(rb"\(((?:\\.|[^\\)])*)\)", t.group(1)) if t.group(1) is not None else [t.group(2)]
            raw = b"".join(re.sub(rb"\\(.)", rb"\1", p, flags=re.S) for p in parts)
            two_byte = len(raw) % 2 == 0 and raw[::2].strip(b"\x00") == b""  # Type 42: 2-byte codes
            out.append(raw.decode("utf-16-be" if two_byte and raw else "latin-1"))
        if out:
            pages.append("\n".join(out))
    return pages


def pdf_text(data: bytes) -> str:
    return "\n".join(pdf_pages(data))


@pytest.fixture
def synth(tmp_path):
    return make_run(tmp_path / "synth", training=False, steps=10, done=10)


@pytest.fixture
def train_incomplete(tmp_path):
    return make_run(tmp_path / "train", training=True, steps=20, done=7, seed=2)


def read_metrics(run):
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return {
        a["name"]: {c: np.array([float(r[c]) for r in rows if r["arm"] == a["name"]]) for c in rows[0] if c != "arm"}
        for a in ARMS
    }


def test_report_is_byte_identical_on_rerun(synth, tmp_path):
    p1 = write_report(synth)
    assert p1 == synth / "report.pdf"
    first = p1.read_bytes()
    assert first.startswith(b"%PDF")
    p2 = write_report(synth, out=tmp_path / "again.pdf")
    assert p2.read_bytes() == first
    assert sorted(x.name for x in synth.iterdir()) == [
        "config.toml",
        "metrics.csv",
        "report.pdf",
        "summary.json",
    ]  # no temp file left


@pytest.mark.slow  # a second process; test_report_is_byte_identical_on_rerun checks reruns in-process
def test_report_ignores_the_callers_matplotlib_settings_and_hash_seed(synth, tmp_path):
    import matplotlib

    first = write_report(synth).read_bytes()
    with matplotlib.rc_context({"font.size": 20, "lines.linewidth": 5, "pdf.fonttype": 3}):
        assert write_report(synth, out=tmp_path / "styled.pdf").read_bytes() == first
    code = "import sys; from fpreduce.report.report import write_report; write_report(sys.argv[1], sys.argv[2])"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(synth), str(tmp_path / "other.pdf")], check=True, env=env)
    assert (tmp_path / "other.pdf").read_bytes() == first


def test_incomplete_banner_on_first_page(train_incomplete):
    pages = pdf_pages(write_report(train_incomplete).read_bytes())
    assert "INCOMPLETE RUN: 7 of 20 steps" in pages[0]
    assert "page 1" in pages[0]


def test_complete_run_has_no_banner(synth):
    text = pdf_text(write_report(synth).read_bytes())
    assert "INCOMPLETE" not in text
    assert "fpreduce report: synthetic-ab" in text


HEX = re.compile(r"0x[0-9a-f]\.[0-9a-f]+p[-+]\d+")


def test_findings_quote_numbers_computed_from_the_data(synth):
    m = read_metrics(synth)
    f = "\n".join(findings(synth))
    d = m["B"]["diff_frac"]
    assert (
        f"B vs A (its fixed-order twin): bits differed at 10 of 10 steps, the first at step 0: a mean "
        f"{100 * np.mean(d):.3g}% of elements per step (median {100 * np.median(d):.3g}%, worst {100 * d.max():.3g}% "
        f"at step {int(np.argmax(d))})"
    ) in f
    u = m["B"]["ulp_max"]
    assert f"median {np.median(u):.3g} and worst {u.max():.3g} ulps of bf16" in f
    assert "B-fp32acc vs A-fp32acc (its fixed-order twin): bits identical at all 10 steps." in f
    for arm in ("A", "B", "B-fp32acc"):
        e = m[arm]["err_norm"]
        assert f"{arm} (" in f
        assert f"median {np.median(e):.3g} per step (range {e.min():.3g} to {e.max():.3g})" in f
        assert f"max |y - s| / sum |x| {m[arm]['err_backward'].max():.3g};" in f
    r = m["B"]["rerun_diff_frac"]
    relaunch = "B (arrival): a relaunch with an independently seeded order changed bits at 10 of 10 steps, a mean"
    assert f"{relaunch} {100 * np.mean(r):.3g}% of elements per step (median {100 * np.median(r):.3g}%" in f
    assert "A, A-fp32acc have a fixed order, so a relaunch repeats their bits by construction" in f
    eb, ef = np.median(m["B"]["err_norm"]), np.median(m["B-fp32acc"]["err_norm"])
    assert (
        f"Changing the accumulator from bf16 to fp32 (B -> B-fp32acc, all else equal): median normwise error "
        f"{eb:.3g} -> {ef:.3g}, lower (x{ef / eb:#.3g}); mean fraction of elements differing from the fixed-order "
        f"twin {100 * np.mean(d):.3g}% (B vs A) -> 0% (B-fp32acc vs A-fp32acc), lower (down to exactly 0)"
    ) in f
    assert "Changing the algorithm from plain to kahan (B -> B-kahan, all else equal)" in f
    assert "Training" not in f
    assert not HEX.search(f), "hex floats belong in the appendix, not in the prose"
    text = pdf_text(write_report(synth).read_bytes())
    assert f"{100 * np.median(d):.3g}%" in text  # the findings are on the page, not just returned
    assert float(np.median(m["B"]["err_norm"])).hex() in text  # exact values in Appendix C


def _swap(run: Path, col: str, a: str, b: str) -> None:
    """Exchange the values of one column between two arms, step by step (a doctored run: the claims must flip)."""
    with open(run / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    va = [r[col] for r in rows if r["arm"] == a]
    vb = [r[col] for r in rows if r["arm"] == b]
    ia, ib = iter(vb), iter(va)
    for r in rows:
        if r["arm"] == a:
            r[col] = next(ia)
        elif r["arm"] == b:
            r[col] = next(ib)
    with open(run / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def test_pair_claims_flip_when_the_data_flip(synth):
    before = "\n".join(findings(synth))
    assert "from bf16 to fp32 (B -> B-fp32acc, all else equal): median normwise error" in before
    assert "-> 0% (B-fp32acc vs A-fp32acc), lower (down to exactly 0)" in before
    _swap(synth, "diff_frac", "B", "B-fp32acc")  # now the fp32 accumulator diverges from its twin, B does not
    _swap(synth, "err_norm", "B", "B-fp32acc")
    after = "\n".join(findings(synth))
    m = read_metrics(synth)
    eb, ef = np.median(m["B"]["err_norm"]), np.median(m["B-fp32acc"]["err_norm"])
    assert f"median normwise error {eb:.3g} -> {ef:.3g}, higher (x{ef / eb:#.3g})" in after
    assert "0% (B vs A) -> " in after
    assert "(B-fp32acc vs A-fp32acc), higher (from exactly 0)" in after


def test_bounds_are_shown_only_where_informative(tmp_path):
    small = "\n".join(findings(make_run(tmp_path / "n16", training=False, steps=3, done=3)))
    head = "Bounds for d = 15 additions per term with bf16 accumulation:"
    assert f"{head} the backward error can never exceed gamma_d = 0.0622" in small
    assert "it exceeds 5 sqrt(d) u = 0.0788 with probability at most 0.000123" in small
    assert "(within the bounds)" in small
    assert "No bound is stated for B-kahan" in small
    big = "\n".join(findings(make_run(tmp_path / "n4096", training=False, steps=3, done=3, workers=4096)))
    assert (
        "Bounds for d = 4095 additions per term with fp16 accumulation: the worst-case bound gamma_d is not informative"
        in big
    )
    from fpreduce.core.metrics import backward_bounds

    b = backward_bounds(4095, "fp16")
    assert b["probabilistic"] is not None
    assert b["probability"] is not None
    assert (
        f"it exceeds 5 sqrt(d) u = {b['probabilistic']:.3g} with probability at most {1 - b['probability']:.3g}" in big
    )
    assert (
        "Bounds for d = 4095 additions per term with bf16 accumulation: the worst-case bound gamma_d is not "
        "informative (d u >= 1); the probabilistic bound is not informative here" in big
    )


def test_a_measurement_above_a_bound_is_said_so(synth):
    lines = (synth / "metrics.csv").read_text().splitlines()
    head = lines[0].split(",")
    i = next(i for i, ln in enumerate(lines) if ln.split(",")[1] == "B")
    cells = lines[i].split(",")
    cells[head.index("err_backward")] = "0.07"  # above 5 sqrt(15) u? no: 0.0788; above gamma_15 = 0.0622: yes
    lines[i] = ",".join(cells)
    (synth / "metrics.csv").write_text("\n".join(lines) + "\n")
    assert "B 0.07 (above the worst-case bound)" in "\n".join(findings(synth))


def test_training_findings(train_incomplete):
    m = read_metrics(train_incomplete)
    f = "\n".join(findings(train_incomplete))
    assert "INCOMPLETE RUN: 7 of 20 steps" in f
    assert "Training, B vs A (its fixed-order twin): the weights first differed bitwise at step 2" in f
    assert f"relative parameter distance was {m['B']['param_dist'][-1]:.3g}" in f
    assert f"loss differed by {m['B']['loss'][-1] - m['A']['loss'][-1]:.3g}" in f
    assert "Training, B-fp32acc vs A-fp32acc (its fixed-order twin): the weights stayed bitwise identical" in f


def test_runs_written_before_compare_to_still_read(tmp_path):
    """Old run directories: no compare_to (every arm against the first), no re-run or normwise columns."""
    run = make_run(tmp_path / "old", training=False, steps=4, done=4, legacy=True)
    f = "\n".join(findings(run))
    assert "run-to-run variability not measured" in f
    assert "B-fp32acc vs A (not its twin: accumulate fp32 vs bf16)" in f
    assert write_report(run).read_bytes().startswith(b"%PDF")


def test_figures_from_the_plot_module_are_embedded(synth):
    from matplotlib.figure import Figure

    (synth / "figures").mkdir()
    fig = Figure(figsize=(4, 3))
    fig.add_subplot().plot([1, 2, 3])
    fig.savefig(synth / "figures" / "error.png", dpi=50)
    data = write_report(synth).read_bytes()
    assert b"/Subtype /Image" in data
    assert "Error of each arm's result against the exact sum, per step" in pdf_text(data)


def test_long_config_and_many_arms_paginate(synth):
    (synth / "config.toml").write_text("".join(f"key_{i} = {i}\n" for i in range(300)))
    text = pdf_text(write_report(synth).read_bytes())
    assert "key_0 = 0" in text
    assert "key_299 = 299" in text


def test_sweep_report(tmp_path):
    d = tmp_path / "sweep"
    d.mkdir()
    lines = [
        "workers,plan,input,accumulate,arm,compare_to,mean_err_norm,mean_err_rel,max_err_rel,mean_diff_frac,max_ulp"
    ]
    for n in (2, 4, 8, 16, 32):
        for plan in ("ring:nccl", "pairwise"):
            lines.append(f"{n},{plan},bf16,bf16,B,A,{1e-3 * n**0.5!r},{1e-3 * n!r},{1e-2 * n!r},0.4,{n}")
    lines.append("32,sequential,bf16,bf16,B,A,0.001,0.001,0.01,0.4,2")
    lines.append("64,sequential,bf16,bf16,B,A,0.002,0.001,0.01,0.4,2")  # two points: no exponent
    (d / "sweep.csv").write_text("\n".join(lines) + "\n")
    p = write_sweep_report(d)
    data = p.read_bytes()
    assert write_sweep_report(d, out=tmp_path / "b.pdf").read_bytes() == data
    text = pdf_text(data)
    assert "B: ring:nccl bf16->bf16: error grows like N^0.50 over N = 2..32 (5 points, R^2 = 1.00)." in text
    assert "B: sequential bf16->bf16: 2 positive point(s): no exponent" in text  # ("fitted": an fi ligature)


def test_sweep_exponent_caveats(tmp_path):
    from fpreduce.report._sweep_report import fit_slope

    d = tmp_path / "sweep"
    d.mkdir()
    lines = ["workers,plan,input,accumulate,arm,mean_err_rel,max_err_rel,mean_diff_frac,max_ulp"]  # an older sweep
    for n, e in ((2, 1e-10), (4, 5e-10), (8, 2e-10), (16, 3e-9)):
        lines.append(f"{n},ring:nccl,bf16,fp32,B,{e!r},{e!r},0.4,{n}")
    (d / "sweep.csv").write_text("\n".join(lines) + "\n")
    text = pdf_text(write_sweep_report(d).read_bytes())
    k, r2 = fit_slope(np.array([2.0, 4, 8, 16]), np.array([1e-10, 5e-10, 2e-10, 3e-9]))
    assert f"error grows like N^{k:.2f} over N = 2..16 (4 points, R^2 = {r2:.2f}); a poor" in text
    assert "do not follow one power law" in text
    assert "of fp32: most sums are exact" in text  # (line breaks: the text is wrapped)
    assert "mean relative error (this sweep" in text  # it predates normwise errors


@pytest.mark.parametrize(
    ("remove", "msg"),
    [
        (None, "no such run directory"),
        ("summary.json", "summary.json is missing"),
        ("metrics.csv", "metrics.csv is missing"),
    ],
)
def test_bad_run_dirs(synth, tmp_path, remove, msg):
    target = tmp_path / "nope" if remove is None else synth
    if remove:
        (synth / remove).unlink()
    with pytest.raises(InvalidArgument, match=msg):
        write_report(target)


def test_interrupted_before_the_first_step(tmp_path):
    run = make_run(tmp_path / "r", training=True, steps=5, done=0)
    assert (run / "metrics.csv").read_text().count("\n") == 1  # header only
    text = pdf_text(write_report(run).read_bytes())
    assert "INCOMPLETE RUN: 0 of 5 steps" in text


def test_nonfinite_results_are_reported(synth):
    lines = (synth / "metrics.csv").read_text().splitlines()
    head = lines[0].split(",")
    for i in [i for i, ln in enumerate(lines) if ln.split(",")[1] == "B"][:2]:  # arm B at steps 0 and 1
        cells = lines[i].split(",")
        cells[head.index("nonfinite")] = "3"
        cells[head.index("err_max_rel")] = "nan"
        lines[i] = ",".join(cells)
    (synth / "metrics.csv").write_text("\n".join(lines) + "\n")
    (synth / "config.toml").unlink()
    f = "\n".join(findings(synth))
    assert "B produced NaN or Inf in 6 element results (2 steps)" in f
    m = read_metrics(synth)
    assert f"largest error {np.nanmax(m['B']['err_max_ulp']):.3g} ulps" in f  # NaN left out, not propagated
    assert "config.toml not found" in pdf_text(write_report(synth).read_bytes())


def test_foreign_dir(tmp_path):
    d = tmp_path / "foreign"
    d.mkdir()
    (d / "summary.json").write_text('{"hello": 1}')
    (d / "metrics.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InvalidArgument, match="not a fpreduce run summary"):
        write_report(d)
    (d / "summary.json").write_text('{"arms": [{"name": "A", "order": "fixed:sequential", "input": "bf61"}]}')
    with pytest.raises(InvalidArgument, match="arms\\[0\\].accumulate: expected string, got None"):
        write_report(d)
    (d / "summary.json").write_text('{"arms": [{"name": "A", "order": "x", "input": "bf61", "accumulate": "fp32"}]}')
    with pytest.raises(InvalidArgument, match="did you mean 'bf16'"):
        write_report(d)
    (d / "summary.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        write_report(d)
    with pytest.raises(InvalidArgument, match="sweep.csv is missing"):
        write_sweep_report(d)


# --- claims on real runs, and their flips -------------------------------------------------------------

REAL = """
[experiment]
name = "claims"
steps = 2
workers = {n}
seed = 3
[source]
kind = "synthetic"
elements = 2000
[[arms]]
name = "A"
order = "fixed:sequential"
[[arms]]
name = "B"
order = "arrival"
[[arms]]
name = "T"
order = "fixed:pairwise"
[[arms]]
name = "A32"
order = "fixed:sequential"
accumulate = "fp32"
output = "bf16"
[[arms]]
name = "B32"
order = "arrival"
accumulate = "fp32"
output = "bf16"
[[arms]]
name = "F"
order = "arrival"
input = "fp32"
accumulate = "fp32"
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    import tomllib

    from fpreduce.run import config as cf
    from fpreduce.run.runner import run_experiment

    d = tmp_path_factory.mktemp("real") / "run"
    run_experiment(cf.from_dict(tomllib.loads(REAL.format(n=64))), d)
    return d


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run, tmp_path / "copy"))


def test_fp32_accumulation_reduces_divergence_against_its_twin_and_the_claim_flips(real_run, tmp_path):
    m = rundir.read_metrics(real_run)
    assert np.all(m["B32"]["diff_frac"] == 0)  # 64 bf16 values summed in fp32, rounded once: every order agrees
    assert np.all(m["B"]["diff_frac"] > 0.2)
    f = "\n".join(findings(real_run))
    assert "(B vs A) -> 0% (B32 vs A32), lower (down to exactly 0)" in f
    assert "mean fraction changed by a relaunch" in f
    run = _copy(real_run, tmp_path)
    _swap(run, "diff_frac", "B", "B32")
    flipped = "\n".join(findings(run))
    assert "0% (B vs A) -> " in flipped
    assert "(B32 vs A32), higher (from exactly 0)" in flipped


def test_a_tree_beats_a_chain_on_error_and_the_claim_flips(real_run, tmp_path):
    m = rundir.read_metrics(real_run)
    ea, et = np.median(m["A"]["err_norm"]), np.median(m["T"]["err_norm"])
    assert et < ea  # depth 6 against 63
    claim = (
        "Changing the order from fixed:sequential to fixed:pairwise (A -> T, all else equal): "
        f"median normwise error {ea:.3g} -> {et:.3g}, lower"
    )
    assert claim in "\n".join(findings(real_run))
    run = _copy(real_run, tmp_path)
    _swap(run, "err_norm", "A", "T")
    assert f"median normwise error {et:.3g} -> {ea:.3g}, higher" in "\n".join(findings(run))


def test_pairs_across_output_formats_are_labelled(real_run):
    from fpreduce.report.tables import summary_table
    from fpreduce.run.rundir import load_run

    f = "\n".join(findings(real_run))
    assert (
        "F vs A (not its twin: input fp32 vs bf16, accumulate fp32 vs bf16, output fp32 vs bf16; compared in fp32, "
        "the wider output format)"
    ) in f
    table = summary_table(load_run(real_run))
    assert "A (in fp32)" in table
    assert next(line for line in table.splitlines() if line.startswith("T ")).split()[:4] == [
        "T",
        "fixed:pairwise",
        "bf16->bf16",
        "A",
    ]


def test_headline_answers_from_the_data_and_flips(synth):
    from fpreduce.report._findings import headline
    from fpreduce.run.rundir import load_run

    said = headline(load_run(synth, config_required=False))
    m = read_metrics(synth)
    worst = "B"  # the order-changing arm that differs from its fixed-order twin (R-ring, B-kahan: not twins)
    assert said[0].startswith(f"The order matters here: {worst} (arrival)")
    assert f"a mean {float(np.mean(m[worst]['diff_frac'])) * 100:.3g}% of the elements per step" in said[0]
    assert said[1].startswith("What removes it: B-fp32acc (accumulate fp32)")

    def doctor(arms: tuple[str, ...], value: str) -> None:
        with open(synth / "metrics.csv") as fh:
            rows = list(csv.DictReader(fh))
        for r in rows:
            if r["arm"] in arms:
                r["diff_frac"] = r["rerun_diff_frac"] = value
        with open(synth / "metrics.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)

    doctor(("B-fp32acc",), "0.001")  # the fp32 accumulator now only reduces it: no cure left
    reduced = headline(load_run(synth, config_required=False))
    assert reduced[1].startswith("No arm whose order changes removes it: only a fixed order (A, A-fp32acc)")
    share = f"{float(np.mean(m['B']['diff_frac'])) * 100:.3g}%"
    assert reduced[2] == f"What reduces it from {share} of the elements per step: B-fp32acc (accumulate fp32) to 0.1%."
    doctor(("B", "R-ring", "B-kahan", "B-fp32acc"), "0.0")  # no order-changing arm differs any more: it flips
    flipped = headline(load_run(synth, config_required=False))
    assert flipped[0].startswith("The order does not matter here: B, B-fp32acc, R-ring, B-kahan change their order")
    assert len(flipped) == 1


def test_sweep_headline_follows_the_rows():
    from fpreduce.report._sweep_report import headline

    def row(n: int, acc: str, arm: str, diff: float) -> dict:
        return {"workers": n, "plan": "ring", "dist": "normal", "input": "bf16", "accumulate": acc, "arm": arm} | {
            "compare_to": "A",
            "mean_diff_frac": diff,
        }

    rows = [
        row(n, acc, arm, (d * n) if arm == "B" else 0.0)
        for n in (2, 8)
        for acc, d in (("bf16", 0.1), ("fp32", 1e-4))
        for arm in ("A", "B")
    ]
    said = headline(rows)
    assert said[0] == (
        "The order matters here: up to 80% of the elements per step differ from the compare_to arm "
        "(B vs A, ring bf16->bf16, N = 8)."
    )
    assert said[1] == "Other accumulators: with fp32 at most 0.08% (B vs A, ring bf16->fp32, N = 8)."
    flat = [{**r, "mean_diff_frac": 0.0} for r in rows]
    assert headline(flat) == ["The order does not matter here: no arm's bits differ from its compare_to arm at any N."]

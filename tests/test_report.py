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

COLS = (
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
ARMS = [
    {"name": "A", "order": "fixed:sequential", "input": "bf16", "accumulate": "bf16", "output": "bf16"},
    {"name": "B", "order": "arrival", "input": "bf16", "accumulate": "bf16", "output": "bf16"},
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


def make_run(path: Path, *, training: bool, steps: int, done: int, seed: int = 1) -> Path:
    """A synthetic run directory in the docs/run-format.md layout (numbers are made up)."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    rows = []
    for step in range(done):
        for i, arm in enumerate(ARMS):
            scale = 1e-3 if arm["accumulate"] == "fp32" else 1.0
            ref = i == 0
            loss = 1.0 / (1 + step) + (0 if ref else 1e-4 * i * step) if training else float("nan")
            rows.append(
                {
                    "step": step,
                    "arm": arm["name"],
                    "elements": 4096,
                    "nonfinite": 0,
                    "err_max_rel": scale * rng.uniform(0.01, 0.1),
                    "err_mean_rel": scale * rng.uniform(1e-3, 2e-3),
                    "err_median_rel": scale * 1e-3,
                    "err_max_ulp": 3.0,
                    "frac_correct": 0.9,
                    "diff_frac": 0.0 if ref else scale * rng.uniform(0.2, 0.6),
                    "ulp_max": 0.0 if ref else float(rng.integers(1, 9)),
                    "ulp_mean": 0.0 if ref else 0.5,
                    "rel_l2": 0.0 if ref else 1e-3,
                    "loss": loss,
                    "param_dist": (0.0 if ref or step < 2 else 1e-7 * 2.0**step) if training else float("nan"),
                    "param_diff_frac": (0.0 if ref or step < 2 else 0.5) if training else float("nan"),
                }
            )
    with open(path / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLS)
        for r in rows:
            w.writerow([repr(r[c]) if isinstance(r[c], float) else r[c] for c in COLS])
    arms = []
    for i, a in enumerate(ARMS):
        arms.append(
            {
                "rounding": "nearest_even",
                "algorithm": "plain",
                "average": "none",
                **a,
                "reproducible": True if i == 0 else None,
                "first_divergence_step": None if i == 0 else 0,
                "first_param_divergence_step": (None if i == 0 else 2) if training else None,
                "mean_diff_frac": 0.1,
                "max_ulp": 8,
                "mean_err_rel": 1e-3,
                "max_err_rel": 0.1,
                "ulp_hist": {"edges": [0, 1, 2, 3, 5, 9], "counts": [10, 5, 3, 2, 1, 0]},
            }
        )
    summary = {
        "format": 1,
        "name": "synthetic-ab" if not training else "train-ab",
        "complete": done == steps,
        "steps": steps,
        "steps_done": done,
        "workers": 16,
        "elements": 4096,
        "source": "model" if training else "synthetic",
        "seed": 0,
        "reference": "A",
        "versions": {"fpreduce": "0.1.0", "numpy": "2.4.0", "python": "3.11.7"},
        "arms": arms,
    }
    (path / "summary.json").write_text(json.dumps(summary, indent=1))
    (path / "config.toml").write_text(
        f'[experiment]\nname = "x"\nsteps = {steps}\nworkers = 16\n'
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
        a["name"]: {c: np.array([float(r[c]) for r in rows if r["arm"] == a["name"]]) for c in COLS if c != "arm"}
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


def test_findings_quote_numbers_computed_from_the_data(synth):
    m = read_metrics(synth)
    f = "\n".join(findings(synth))
    d = m["B"]["diff_frac"]
    assert f"({float(np.median(d)).hex()})" in f
    assert f"worst {100 * d.max():.3g}% at step {int(np.argmax(d))}" in f
    u = m["B"]["ulp_max"]
    assert f"median {np.median(u):g} and worst {u.max():g} ulps" in f
    for arm in ("A", "B", "B-fp32acc"):
        assert float(np.mean(m[arm]["err_mean_rel"])).hex() in f
        assert float(np.max(m[arm]["err_max_rel"])).hex() in f
    ratio = np.mean(m["B-fp32acc"]["err_mean_rel"]) / np.mean(m["B"]["err_mean_rel"])
    assert "from bf16 to fp32 (arm B -> B-fp32acc) multiplied the mean relative error by" in f
    assert float(ratio).hex() in f
    ratio = np.mean(m["B-kahan"]["err_mean_rel"]) / np.mean(m["B"]["err_mean_rel"])
    assert (
        "Changing the algorithm from plain to kahan (arm B -> B-kahan) multiplied the mean relative error "
        f"by {ratio:.3g} ({float(ratio).hex()})"
    ) in f
    assert "Reference arm A was bitwise reproducible" in f
    assert "Training" not in f
    text = pdf_text(write_report(synth).read_bytes())
    assert float(np.median(d)).hex() in text  # the findings are on the page, not just returned


def test_training_findings(train_incomplete):
    m = read_metrics(train_incomplete)
    f = "\n".join(findings(train_incomplete))
    assert "INCOMPLETE RUN: 7 of 20 steps" in f
    assert "arm B's weights first differed bitwise from A's at step 2" in f
    assert float(m["B"]["param_dist"][-1]).hex() in f
    assert float(m["B"]["loss"][-1] - m["A"]["loss"][-1]).hex() in f


def test_figures_from_the_plot_module_are_embedded(synth):
    from matplotlib.figure import Figure

    (synth / "figures").mkdir()
    fig = Figure(figsize=(4, 3))
    fig.add_subplot().plot([1, 2, 3])
    fig.savefig(synth / "figures" / "error.png", dpi=50)
    data = write_report(synth).read_bytes()
    assert b"/Subtype /Image" in data
    assert "Error against the exact sum per step" in pdf_text(data)


def test_long_config_and_many_arms_paginate(synth):
    (synth / "config.toml").write_text("".join(f"key_{i} = {i}\n" for i in range(300)))
    text = pdf_text(write_report(synth).read_bytes())
    assert "key_0 = 0" in text
    assert "key_299 = 299" in text


def test_sweep_report(tmp_path):
    d = tmp_path / "sweep"
    d.mkdir()
    lines = ["workers,plan,input,accumulate,arm,mean_err_rel,max_err_rel,mean_diff_frac,max_ulp"]
    for n in (2, 4, 8, 16, 32):
        for plan in ("ring:nccl", "pairwise"):
            lines.append(f"{n},{plan},bf16,bf16,B,{1e-3 * n**0.5!r},{1e-2 * n!r},0.4,{n}")
    (d / "sweep.csv").write_text("\n".join(lines) + "\n")
    p = write_sweep_report(d)
    data = p.read_bytes()
    assert write_sweep_report(d, out=tmp_path / "b.pdf").read_bytes() == data
    text = pdf_text(data)
    assert "B: ring:nccl bf16->bf16: mean error grows like N^0.50" in text


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
    assert "Arm B produced NaN or Inf in 6 element results (2 steps)" in f
    m = read_metrics(synth)
    assert float(np.nanmax(m["B"]["err_max_rel"])).hex() in f  # NaN left out, not propagated
    assert "config.toml not found" in pdf_text(write_report(synth).read_bytes())


def test_foreign_dir(tmp_path):
    d = tmp_path / "foreign"
    d.mkdir()
    (d / "summary.json").write_text('{"hello": 1}')
    (d / "metrics.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InvalidArgument, match="not a fpreduce run summary"):
        write_report(d)
    (d / "summary.json").write_text('{"arms": [{"name": "A", "order": "fixed:sequential", "input": "bf61"}]}')
    with pytest.raises(InvalidArgument, match="arms\\[0\\] has no 'accumulate'"):
        write_report(d)
    (d / "summary.json").write_text('{"arms": [{"name": "A", "order": "x", "input": "bf61", "accumulate": "fp32"}]}')
    with pytest.raises(InvalidArgument, match="did you mean 'bf16'"):
        write_report(d)
    (d / "summary.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        write_report(d)
    with pytest.raises(InvalidArgument, match="sweep.csv is missing"):
        write_sweep_report(d)

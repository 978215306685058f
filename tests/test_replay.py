"""Record a real DDP run and replay it bit for bit (``fpreduce.torch``, ``fpreduce replay``).

The real test: 3 processes (not a power of two) train a tiny MLP with DDP on CPU over gloo,
in fp32 and in bf16, recorded by ``fpreduce.torch.Recorder``; the replay must give the bits
of every recorded all-reduce (0 differing elements), and the recorder must not change the
training (a twin model under plain DDP). The same processes then run DDP's other scaling
paths (gradients kept as bucket views: divided in place; torch's fp16 and bf16 compress
hooks) beside plain twins, and try what ``attach`` refuses; last, rank 0 alone (a group of one)
checks the background writer: ``close()`` flushes a writer slowed down to lag behind, a failed
write is raised once, in one line. If ``CI`` is set and torch is missing, it fails. The
bad-input tests build recordings by hand (no torch needed).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.backends.replay import layer_rows, open_recording, replay, run_config
from fpreduce.base.errors import InvalidArgument
from fpreduce.cli import main
from fpreduce.plans import ring
from fpreduce.run.rundir import read_replay

ROOT = Path(__file__).resolve().parents[1]
N, STEPS = 3, 4


def _need_torch() -> None:
    try:
        import torch.distributed as dist
    except ImportError as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but torch is missing: {e}")
        pytest.skip(f"torch missing: {e}")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the 3 DDP ranks once for the module; the recordings and the wall time."""
    _need_torch()
    d = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    worker = [sys.executable, str(ROOT / "tests" / "ddp_record_worker.py"), str(d)]
    procs = [
        subprocess.Popen([*worker, str(r), str(N), str(STEPS)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for r in range(N)
    ]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for r, (p, (_, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, (
            f"rank {r} exited {p.returncode} (3: the recorder changed the training): {err[-2000:]!r}"
        )
    return {"dir": d, "seconds": time.perf_counter() - t0}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_real_ddp_replays_bit_exact(recorded: dict[str, Any], dtype: str) -> None:
    rec = open_recording(recorded["dir"] / f"rec-{dtype}")
    assert (rec.world, rec.backend, rec.dtype, rec.average, rec.steps) == (N, "gloo", dtype, "ddp", STEPS)
    names = {p["name"]: p["shape"] for b in rec.buckets(STEPS - 1) for p in b["params"]}
    assert names == {
        "0.weight": [20, 12],
        "0.bias": [20],
        "2.weight": [20, 20],
        "2.bias": [20],
        "4.weight": [3, 20],
    } | {"4.bias": [3]}
    assert rec.elements == 12 * 20 + 20 + 20 * 20 + 20 + 20 * 3 + 3
    assert len(rec.buckets(STEPS - 1)) == (2 if dtype == "fp32" else 1)  # gloo's ring runs per bucket
    res = replay(rec)
    sys.stderr.write(  # shown with -s: the figures of the closing note
        f"\n{dtype}: {res['elements']} elements over {res['steps']} steps, {N} ranks: {res['differ']} differ, "
        f"real_match {res['real_match']}; DDP run + recording {recorded['seconds']:.1f} s\n"
    )
    assert res["differ"] == 0
    assert res["real_match"] == 1.0
    assert res["verified"]
    assert [s["differ"] for s in res["per_step"]] == [0] * STEPS
    # another plan would not match every bit: the check has teeth
    other = replay(rec, "ring:nccl")
    assert not other["verified"]
    rows = layer_rows(rec)
    assert [r["differ_emulated"] for r in rows] == [0] * 6
    assert sum(r["differ_order"] + r["differ_relaunch"] + r["differ_world"] for r in rows) > 0


def test_a_wrapped_user_hook_replays_with_its_average(recorded: dict[str, Any]) -> None:
    rec = open_recording(recorded["dir"] / "rec-hook")
    assert (rec.steps, rec.average, rec.elements) == (2, "predivide", 12 * 5 + 5)  # steps=2 of 3 trained
    assert replay(rec)["differ"] == 0


def test_step_files_are_what_np_save_writes(recorded: dict[str, Any]) -> None:
    """The writer streams each rank's buckets into the file without joining them: the bytes are np.save's."""
    files = sorted(recorded["dir"].glob("rec-*/*/step_*.npy"))
    assert len(files) >= 4 * STEPS
    for f in files:
        buf = io.BytesIO()
        np.save(buf, np.load(f))
        assert f.read_bytes() == buf.getvalue(), f


def test_replay_cli_json_and_run_directory(recorded: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    out = recorded["dir"] / "run-bf16"
    assert main(["replay", str(recorded["dir"] / "rec-bf16"), "--json", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    doc = json.loads(stdout)  # one JSON object, nothing else
    assert doc["real_match"] == 1.0
    assert len(doc["per_step"]) == STEPS
    assert doc["run"] == str(out)
    assert {r["param"] for r in doc["layers"]} == {f"{i}.{k}" for i in (0, 2, 4) for k in ("weight", "bias")}
    for f in ("metrics.csv", "summary.json", "replay.json", "report.pdf", "figures/layers.png"):
        assert (out / f).is_file(), f
    summary = json.loads((out / "summary.json").read_text())
    assert [a["name"] for a in summary["arms"]] == ["A", "B", "A-fp32acc", "B-fp32acc"]
    kept = read_replay(out)
    assert kept is not None
    assert kept["differ"] == 0
    assert len(kept["rows"]) == 6


def test_kept_gradients_as_bucket_views_follow_ddp_in_place_division(recorded: dict[str, Any]) -> None:
    """gradient_as_bucket_view=True and zero_grad(set_to_none=False), fp32, N = 3: DDP copies times
    float32(1/3) in step 0, then divides in place; the twin under plain DDP kept every bit (the worker)."""
    rec = open_recording(recorded["dir"] / "rec-view")
    assert (rec.steps, rec.dtype, rec.wire, rec.hook) == (STEPS, "fp32", "fp32", "ddp default")
    assert rec.paths["copy"]["average"] == "ddp"
    assert rec.paths["in-place"]["average"] == "predivide"  # the CPU's div_ is a true division
    assert rec.bucket_paths(0) == ["copy"] * len(rec.buckets(0))
    assert rec.bucket_paths(1) == ["in-place"] * len(rec.buckets(1))
    mixed = [(b, names) for b, names in zip(rec.buckets(3), rec.bucket_paths(3), strict=True) if names != "in-place"]
    assert len(mixed) == 1  # step 3: 0.bias's gradient was set to None: copied, its bucket's others in place
    bucket, names = mixed[0]
    assert {p["name"]: n for p, n in zip(bucket["params"], names, strict=True)}["0.bias"] == "copy"
    assert set(names) == {"copy", "in-place"}
    res = replay(rec)
    assert res["differ"] == 0
    assert res["real_match"] == 1.0
    assert res["average"] == "ddp, predivide"
    assert set(res["paths"]) == {"copy", "in-place"}
    assert sum(p["elements"] for p in res["paths"].values()) == res["elements"]
    # multiplying where DDP divided would not match: the paths matter on this data
    as_one = dataclasses.replace(rec, paths={k: {**v, "average": "ddp"} for k, v in rec.paths.items()})
    assert replay(as_one)["differ"] > 0
    assert run_config(rec)["arms"][0]["average"] == "predivide"  # most elements were divided in place


def _bf16_compress_recording(d: Path, src: Path) -> Path:
    """A recording of the worker's bf16_compress_hook arithmetic (one step, one bucket), as the recorder
    would write it where DDP accepts the hook (CUDA and NCCL)."""
    (d / "grads").mkdir(parents=True)
    (d / "real").mkdir()
    X, y = np.load(src / "bf16c-grads.npy"), np.load(src / "bf16c-real.npy")
    np.save(d / "grads/step_000000.npy", X)
    np.save(d / "real/step_000000.npy", y)
    m = X.shape[1]
    manifest = {
        "format": "fpreduce-ddp-recording",
        "version": 2,
        "world_size": X.shape[0],
        "backend": "gloo",
        "dtype": "fp32",
        "hook": "bf16_compress_hook",
        "steps": 1,
        "elements": m,
        "paths": {"bf16_compress_hook": {"average": "predivide", "wire": "bf16"}},
        "layouts": [[{"index": 0, "elements": m, "start": 0, "params": [{"name": "w", "shape": [m], "offset": 0}]}]],
        "step_layout": [0],
        "path_sets": ["bf16_compress_hook"],
        "step_paths": [0],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def test_replay_cli_says_which_paths_ran(recorded: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    out = recorded["dir"] / "run-view"
    assert main(["replay", str(recorded["dir"] / "rec-view"), "--out", str(out), "--no-report"]) == 0
    text = capsys.readouterr().out
    assert "fp32, average ddp, predivide, 4 steps" in text
    assert "  path copy (" in text
    assert "  path in-place (" in text
    assert "divided by N in place (DDP's div_); emulated as average predivide" in text
    assert "averaged as predivide (the path of most elements)" in text
    assert "real_match = 1:" in text


@pytest.mark.parametrize("wire", ["fp16", "bf16"])
def test_compress_hooks_replay_bit_exact(recorded: dict[str, Any], tmp_path: Path, wire: str) -> None:
    """fp16_compress_hook under real DDP (the twin under plain DDP with the hook kept every bit);
    bf16_compress_hook, which DDP refuses without CUDA and NCCL, as its own arithmetic over gloo."""
    if wire == "fp16":
        rec = open_recording(recorded["dir"] / "rec-fp16c")
        assert rec.steps == STEPS
    else:
        rec = open_recording(_bf16_compress_recording(tmp_path / "rec", recorded["dir"]))
    assert (rec.dtype, rec.wire, rec.hook, rec.average) == ("fp32", wire, f"{wire}_compress_hook", "predivide")
    res = replay(rec)
    assert res["differ"] == 0
    assert res["real_match"] == 1.0
    # summed in fp32 instead, the bits would differ: the wire format is what the replay must know
    in_fp32 = dataclasses.replace(rec, paths={k: {**v, "wire": "fp32"} for k, v in rec.paths.items()})
    assert replay(in_fp32)["differ"] > 0
    assert {a["input"] for a in run_config(rec)["arms"]} == {wire}


def test_attach_refuses_what_the_replay_cannot_emulate(recorded: dict[str, Any]) -> None:
    said = json.loads((recorded["dir"] / "refusals.json").read_text())
    assert said["hook"].startswith("Recorder.attach: hook ")
    assert "my_hook is not supported" in said["hook"]
    assert "fp16_compress_hook" in said["hook"]  # what is supported
    assert "sparse gradients are not supported (0: Embedding(sparse=True)" in said["sparse"]
    assert said["bf16c"].startswith("Recorder.attach: DDP refuses bf16_compress_hook here: BF16 all reduce")
    assert all("\n" not in m for m in said.values())
    assert not (recorded["dir"] / "rec-refused-hook").exists()  # refused before anything was written


def test_close_flushes_every_step_bit_for_bit(recorded: dict[str, Any]) -> None:
    """The background writer lagging (its writes slowed), ``close()`` leaves every step on disk: each bucket
    the parameters' own gradients (a group of one rank), each file np.save's bytes."""
    said = json.loads((recorded["dir"] / "writer.json").read_text())
    assert said["after_close"] == 3, said
    rec = open_recording(recorded["dir"] / "writer" / "flushed")
    assert rec.steps == 3
    for t, grads in enumerate(said["grads"]):
        g = np.load(recorded["dir"] / "writer" / "flushed" / "grads" / f"step_{t:06d}.npy")
        real = np.load(recorded["dir"] / "writer" / "flushed" / "real" / f"step_{t:06d}.npy")
        layout = rec.layouts[rec.step_layout[t]]
        for bucket in layout:
            for p in bucket["params"]:
                at = bucket["start"] + p["offset"]
                want = np.array(grads[p["name"]], np.int32)
                assert np.array_equal(g[0, at : at + want.size].view(np.int32), want), (t, p["name"])
                assert np.array_equal(real[at : at + want.size].view(np.int32), want), (t, p["name"])
        for a, name in ((g, "grads"), (real, "real")):
            buf = io.BytesIO()
            np.save(buf, a)
            assert (recorded["dir"] / "writer" / "flushed" / name / f"step_{t:06d}.npy").read_bytes() == buf.getvalue()


def test_a_failed_write_is_raised_once_in_one_line(recorded: dict[str, Any]) -> None:
    said = json.loads((recorded["dir"] / "writer.json").read_text())
    raised = said["steps_raised"]
    assert raised[-1] is not None, raised
    assert all(r is None for r in raised[:-1]), raised  # the steps before it trained
    where = recorded["dir"] / "writer" / "failed"
    assert raised[-1].startswith(f"RecordingError: fpreduce.torch.Recorder: step 0 not written to {where}: ")
    assert "\n" not in raised[-1]
    assert "No such file or directory" in raised[-1]
    assert said["close_raised"] is None  # said once, at the step
    assert not (where / "real" / "step_000000.npy").exists()


# ----------------------------------------------------------------------------- recordings by hand


def _fake(
    d: Path, *, world: int = 3, backend: str = "gloo", steps: int = 2, rows: int | None = None, big: bool = False
) -> Path:
    """A recording as fpreduce.torch writes it, its real results computed by the model of ``backend``
    (``big``: values near float32's largest, summed without averaging, so that some orders overflow
    and others do not)."""
    rng = np.random.default_rng(0)
    m = 7
    layout = [{"index": 0, "elements": m, "start": 0, "params": [{"name": "w", "shape": [m], "offset": 0}]}]
    (d / "grads").mkdir(parents=True)
    (d / "real").mkdir()
    plan = ring(world, "gloo") if backend == "gloo" else ring(world, "nccl")
    for t in range(steps):
        X = (rng.standard_normal((world, m)) * 2.0 ** rng.integers(-6, 6, (world, m))).astype(np.float32)
        if big:
            X = np.float32(2.0**127) * np.sign(X) * np.float32(1.5)
        np.save(d / f"grads/step_{t:06d}.npy", X[: rows or world])
        y = fr.reduce(X, plan, input="fp32", accumulate="fp32", average="none" if big else "ddp")
        np.save(d / f"real/step_{t:06d}.npy", y)
    manifest = {
        "format": "fpreduce-ddp-recording",
        "version": 1,
        "world_size": world,
        "backend": backend,
        "dtype": "fp32",
        "torch": "none",
        "average": "none" if big else "ddp",
        "steps": steps,
        "elements": m,
        "layouts": [layout],
        "step_layout": [0] * steps,
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def test_replay_of_a_hand_made_recording(tmp_path: Path) -> None:
    rec = open_recording(_fake(tmp_path / "rec"))
    assert replay(rec)["real_match"] == 1.0
    cfg = run_config(rec)
    assert cfg["source"]["path"].endswith("grads")
    assert cfg["experiment"]["workers"] == 3


def test_overflow_in_some_orders_stays_json(tmp_path: Path) -> None:
    rec = open_recording(_fake(tmp_path / "rec", big=True))
    assert replay(rec)["real_match"] == 1.0
    rows = layer_rows(rec)
    assert max(r[f"ulp_max_{v}"] for r in rows for v in ("order", "relaunch", "world", "wide")) == 2.0**20
    json.dumps(rows, allow_nan=False)


def test_nccl_is_replayed_as_modelled(tmp_path: Path) -> None:
    d = _fake(tmp_path / "rec", backend="nccl", world=4)
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, "local_world_size": 2}))
    res = replay(open_recording(d))
    assert res["plan"] == "ring:nccl"
    assert res["verified"] is False
    assert res["real_match"] == 1.0
    assert list(res["contrast"]) == ["ring:gloo", "tree:nccl:2", "rd"]
    assert replay(open_recording(d), "tree:nccl:2")["plan"] == "tree:nccl:2"


def test_a_mismatch_is_counted_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _fake(tmp_path / "rec")
    real = np.load(d / "real/step_000001.npy")
    real[2] = np.nextafter(real[2], np.float32(np.inf))  # one element one ulp off
    np.save(d / "real/step_000001.npy", real)
    res = replay(open_recording(d))
    assert [s["differ"] for s in res["per_step"]] == [0, 1]
    assert main(["replay", str(d), "--out", str(tmp_path / "run"), "--no-report", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["real_match"] == 1 - 1 / 14
    assert doc["layers"][0]["differ_emulated"] == 1


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("manifest", "no manifest.json"),
        ("step", "truncated recording: real/step_000001.npy is missing"),
        ("world", "holds 2 ranks but the manifest says world_size = 3"),
        ("backend", "manifest.json: backend: 'mpi' is not modelled"),
        ("nothing", "no such recording directory"),
    ],
)
def test_bad_recordings_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], breakage: str, message: str
) -> None:
    d = tmp_path / "rec"
    if breakage != "nothing":
        _fake(d, rows=2 if breakage == "world" else None, backend="mpi" if breakage == "backend" else "gloo")
    if breakage == "manifest":
        (d / "manifest.json").unlink()
    elif breakage == "step":
        (d / "real/step_000001.npy").unlink()
    with pytest.raises(InvalidArgument, match=message):
        open_recording(d)
    assert main(["replay", str(d), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error: ")
    assert err.count("\n") == 1
    assert message in err
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hook": "my_hook"}, "manifest.json: hook: 'my_hook', which the replay cannot emulate"),
        (
            {"version": 2, "paths": {"copy": {"average": "ddp", "wire": "fp32"}}, "path_sets": ["ranks differ"]},
            "manifest.json: unknown path_sets[0] 'ranks differ' (choices: copy)",  # (a path 'paths' lacks)
        ),
        (
            {"version": 2, "paths": {"copy": {"average": "dd", "wire": "fp32"}}, "path_sets": ["copy"]},
            "manifest.json: paths.copy: average 'dd', wire 'fp32': not replayable",
        ),
    ],
)
def test_a_path_the_replay_cannot_emulate_gets_no_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    d = _fake(tmp_path / "rec")
    manifest = json.loads((d / "manifest.json").read_text())
    if "path_sets" in change:
        change = {**change, "step_paths": [0] * manifest["steps"]}
    (d / "manifest.json").write_text(json.dumps({**manifest, **change}))
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        open_recording(d)
    capsys.readouterr()  # the setup's output (a cold kernel cache's compile notice while _fake builds the recording)
    assert main(["replay", str(d), "--out", str(tmp_path / "run"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no ratio, no JSON
    assert err.startswith("fpreduce: error: ")
    assert err.count("\n") == 1
    assert message in err


def test_per_parameter_paths_of_a_hand_made_recording(tmp_path: Path) -> None:
    """A bucket whose parameters took different paths: each column averaged as its parameter's path."""
    d = _fake(tmp_path / "rec")
    m = json.loads((d / "manifest.json").read_text())
    m["layouts"][0][0]["params"] = [{"name": "w", "shape": [3], "offset": 0}, {"name": "b", "shape": [4], "offset": 3}]
    paths = {"copy": {"average": "ddp", "wire": "fp32"}, "in-place": {"average": "predivide", "wire": "fp32"}}
    m.update(version=2, paths=paths, path_sets=[[["copy", "in-place"]]], step_paths=[0, 0])
    for t in range(2):
        X = np.load(d / f"grads/step_{t:06d}.npy")
        y = fr.reduce(X, ring(3, "gloo"), input="fp32", accumulate="fp32", average="ddp")
        y[3:] = fr.reduce(X, ring(3, "gloo"), input="fp32", accumulate="fp32", average="predivide")[3:]
        np.save(d / f"real/step_{t:06d}.npy", y)
    (d / "manifest.json").write_text(json.dumps(m))
    rec = open_recording(d)
    res = replay(rec)
    assert res["differ"] == 0
    assert {k: v["elements"] for k, v in res["paths"].items()} == {"copy": 6, "in-place": 8}
    assert rec.main_average() == "predivide"
    assert replay(dataclasses.replace(rec, path_sets=["copy"]))["differ"] > 0  # one path for all would not match


def test_import_fpreduce_does_not_import_torch() -> None:
    code = "import sys, fpreduce, fpreduce.torch; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


# ----------------------------------------------------------------------------- a manifest is not trusted


def _set(path: str, value: Any) -> Any:
    """A mutation of the manifest: the key at ``path`` (dots; integers index lists) set to ``value``."""

    def change(m: dict[str, Any], d: Path) -> None:
        *head, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        node: Any = m
        for k in head:
            node = node[k]
        node[last] = value

    return change


def _two_params(m: dict[str, Any], d: Path) -> None:
    m["layouts"][0][0]["params"] = [{"name": "w", "shape": [3], "offset": 0}, {"name": "b", "shape": [4], "offset": 2}]


def _two_buckets(start: int, elements: int) -> Any:
    def change(m: dict[str, Any], d: Path) -> None:
        m["layouts"][0] = [
            {"index": 0, "elements": 4, "start": 0, "params": [{"name": "w", "shape": [4], "offset": 0}]},
            {
                "index": 1,
                "elements": elements,
                "start": start,
                "params": [{"name": "b", "shape": [elements], "offset": 0}],
            },
        ]

    return change


def _nested(m: dict[str, Any], d: Path) -> None:
    (d / "manifest.json").write_text('{"format": "fpreduce-ddp-recording", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")


def _short_file(m: dict[str, Any], d: Path) -> None:
    f = d / "grads/step_000001.npy"
    f.write_bytes(f.read_bytes()[:-20])


def _stray(name: str) -> Any:
    def change(m: dict[str, Any], d: Path) -> None:
        np.save(d / "grads" / name, np.zeros((3, 7), dtype=np.float32))

    return change


def _renumber(m: dict[str, Any], d: Path) -> None:
    for kind in ("grads", "real"):
        (d / kind / "step_000001.npy").rename(d / kind / "step_000005.npy")


_BROKEN = {
    "zero elements": (_set("elements", 0), "elements: must be in [1, 1099511627776], got 0"),
    "huge shape": (
        _set("layouts.0.0.params.0.shape", [2**40, 2**40]),
        "params[0].shape[0]: must be in [0, 7], got 1099511627776",
    ),
    "product too big": (
        _set("layouts.0.0.params.0.shape", [7, 7]),
        "layouts[0][0].params[0].shape: ends at 49, past the 7 elements of layouts[0][0].params",
    ),
    "negative start": (_set("layouts.0.0.start", -1), "layouts[0][0].start: must be in [0, 7], got -1"),
    "negative offset": (_set("layouts.0.0.params.0.offset", -5), "params[0].offset: must be in [0, 7], got -5"),
    "negative shape": (_set("layouts.0.0.params.0.shape", [-7]), "params[0].shape[0]: must be in [0, 7], got -7"),
    "bucket past the end": (_two_buckets(4, 5), "layouts[0][1].elements: ends at 9, past the 7 elements of layouts[0]"),
    "buckets overlapping": (_two_buckets(2, 3), "layouts[0][1].start: 2 overlaps the one before"),
    "bucket leaving a gap": (_two_buckets(5, 2), "leaves columns 4..4 uncovered"),
    "params overlapping": (_two_params, "params[1].offset: 2 overlaps the one before"),
    "bucket without params": (
        _set("layouts.0.0.params", []),
        "layouts[0][0].params: empty, expected at least one entry",
    ),
    "bucket missing params": (lambda m, d: m["layouts"][0][0].pop("params"), "layouts[0][0].params: required"),
    "layouts a dict": (_set("layouts", {"a": 1}), "layouts: expected an array, got {'a': 1}"),
    "layout a string": (_set("layouts.0", "bucket"), "layouts[0]: expected an array, got 'bucket'"),
    "bucket a number": (_set("layouts.0.0", 5), "layouts[0][0]: expected a table, got 5"),
    "world_size 1e400": (_set("world_size", "@1e400"), "world_size: expected integer, got inf"),
    "world_size 3.9": (_set("world_size", 3.9), "world_size: expected integer, got 3.9"),
    "world_size true": (_set("world_size", True), "world_size: expected integer, got True"),
    "steps a string": (_set("steps", "2"), "steps: expected integer, got '2'"),
    "step_layout too short": (_set("step_layout", [0]), "step_layout: 1 entries, expected steps = 2"),
    "step_layout out of range": (_set("step_layout", [0, 3]), "step_layout[1]: must be in [0, 0], got 3"),
    "deeply nested JSON": (_nested, "not readable JSON (nested too deeply)"),
    "step file 20 bytes short": (
        _short_file,
        "grads/step_000001.npy: 192 bytes, but its header's shape (3, 7) needs 212",
    ),
    "stray a.npy": (_stray("a.npy"), "grads/a.npy: not a step file"),
    "hidden .step_1.npy": (_stray(".step_1.npy"), "grads/.step_1.npy: not a step file"),
    "step past the last": (_stray("step_000002.npy"), "grads/step_000002.npy: beyond the manifest's steps = 2"),
    "numbering gap": (_renumber, "truncated recording: grads/step_000001.npy is missing (1 of the manifest's steps"),
}


@pytest.mark.parametrize("case", list(_BROKEN))
def test_a_broken_manifest_or_step_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Every manifest key and step file is checked before anything is read or counted (issue 26, item 3):
    each breakage is an InvalidArgument naming the file and the key, and `fpreduce replay` says it in
    one line, exit 2, with no JSON and nothing written."""
    change, message = _BROKEN[case]
    d = _fake(tmp_path / "rec")
    m = json.loads((d / "manifest.json").read_text())
    change(m, d)
    if case != "deeply nested JSON":
        (d / "manifest.json").write_text(json.dumps(m).replace('"@1e400"', "1e400"))  # JSON text, not Infinity
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        open_recording(d)
    capsys.readouterr()  # the setup's output (a cold kernel cache's compile notice while _fake builds the recording)
    assert main(["replay", str(d), "--out", str(tmp_path / "run"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("fpreduce: error: ")
    assert err.count("\n") == 1
    assert message in err
    assert not (tmp_path / "run").exists()


def test_non_npy_files_beside_the_steps_are_left_alone(tmp_path: Path) -> None:
    d = _fake(tmp_path / "rec")
    (d / "grads/.DS_Store").write_bytes(b"\0junk")
    (d / "real/notes.txt").write_text("x")
    assert replay(open_recording(d))["real_match"] == 1.0

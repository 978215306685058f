"""Every document fpreduce reads, fed bad: the count table of issue 26 (tracebacks, one-line errors, accepted).

Runs ``fpreduce.cli.main`` in this process on bad run, price and scale configs, ``--set`` overrides,
mutated ``summary.json`` files (``show``, ``compare``, ``report``), mutated replay manifests and step
files, and ``--source`` directories with strays. Each input is bad; each ends as one of:

* ``one-line``: exit 2, one line ``fpreduce: error: ...`` naming the key (and the file, for a document);
* ``one-line, key or file unnamed``: one line, but the key or the file is not in it;
* ``accepted``: exit 0 (a bad input that runs: a silently wrong or meaningless output);
* ``traceback``: an exception other than the one-line error escaped, or more than one line on stderr;
* ``runaway``: still running after 60 s.

Usage: ``FPREDUCE_NO_JIT=1 python3 scripts/bad_inputs.py [--list] [--no-report]`` (minutes; any fpreduce
version that has ``fpreduce.cli.main``: run it against an older checkout with ``PYTHONPATH``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from fpreduce.cli import main

INF, NAN = math.inf, math.nan
NESTED = {"a": {"b": {"c": 1}}}
#: bad values of an integer key >= 1, of a number > 0 (or >= 0), of a string naming one of a closed set
BAD_INT = [0, -1, 3.9, True, "4", INF, NAN, [1], NESTED]
BAD_NUM = [-1.0, True, "x", INF, NAN, [1.0], NESTED]
BAD_STR = [5, True, 1.5, ["x"], NESTED, "no-such-thing"]

RUN = {
    "experiment": {"name": "tiny", "steps": 2, "workers": 4, "seed": 0},
    "source": {"kind": "synthetic", "elements": 16},
    "arms": [{"name": "A", "order": "fixed:sequential"}, {"name": "B", "order": "shuffle:sequential"}],
}
PRICE = {
    "price": {"workers": 2, "steps": 2, "modes": ["sync", "async"]},
    "source": {"hidden": 4, "inputs": 4, "outputs": 2, "batch_per_worker": 2, "teacher_hidden": 4},
}
SCALE = {"scale": {"workers": [1, 2, 4], "plans": ["ring"]}}

Case = tuple[str, str, str, Callable[[Path], list[str]]]  # surface, what, the key the message names, argv maker


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    *head, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node: Any = d
    for k in head:
        node = node.setdefault(k, {}) if isinstance(node, dict) else node[k]
    if value is _DROP:
        del node[last]
    else:
        node[last] = value
    return d


_DROP = object()


def _toml(doc: dict[str, Any], cmd: list[str], name: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        p = tmp / name
        p.write_text(tomli_w.dumps(doc))
        return [cmd[0], str(p), *cmd[1:], "--out", str(tmp / "out")]

    return argv


def _config_cases() -> list[Case]:
    out: list[Case] = []
    run = ["run", "-q", "--no-report"]
    keyed = {
        "experiment.steps": BAD_INT,
        "experiment.workers": [*BAD_INT, 2**31, 2**53 + 1],
        "experiment.seed": [-1, 3.9, True, "0", INF, NAN, [0]],
        "experiment.name": [5, "", "../x", "/abs/x", "a/b", [1]],
        "source.elements": [*BAD_INT, 2**31],
        "source.noise": BAD_NUM,
        "source.dist": BAD_STR,
        "source.kind": BAD_STR,
        "source.sparsity": [1.5, -0.1, NAN, True],
        "source.outlier_worker": [-2, 1.5, True, INF],
        "arms.1.order": ["fixed:", "bogus", 5, "fixed:ring:99", "fixed:((0,1),(2,3)", ["fixed:ring"]],
        "arms.1.input": ["fp99", 5, True, NESTED],
        "arms.1.accumulate": ["fp99", 16, None],
        "arms.1.rounding": ["nearest", 5],
        "arms.1.algorithm": ["kahn", 0],
        "arms.1.average": ["meen", False],
        "arms.1.compare_to": ["Z", 0],
        "arms.1.name": [5, "A", "../x", ""],
        "arms.1.extra": [1],
        "arrival.base": BAD_NUM[1:],
        "arrival.spread": [-1.0, INF, NAN, "x"],
        "arrival.jitter": ["gauss", 3],
        "experiment.bogus": [1],
        "bogus": [{"a": 1}],
        "experiment": [5, [1, 2], "x"],
        "arms": [5, [5], [], {"name": "A"}],
    }
    for key, values in keyed.items():
        for v in values:
            if v is None:
                continue
            name = key.split(".")[-1] if key.startswith("arms.") else key
            out.append(("run config", f"{key} = {v!r}", name, _toml(_set(RUN, key, v), run, "c.toml")))
    out.append(
        (
            "run config",
            "source.path missing (kind file)",
            "source.path",
            _toml(_set(RUN, "source", {"kind": "file"}), run, "c.toml"),
        )
    )
    for s in (
        "experiment.steps=abc",
        "experiment.steps=1.5",
        "experiment.steps=0",
        "experiment.workers=true",
        "experiment.seed=inf",
        "source.elements=nan",
        "arms.B.input=fp99",
        "arms.Z.input=fp32",
        "experiment=5",
        "experiment.steps.x=1",
        "source.noise=-1",
        "arrival.scale=[1]",
    ):
        key = s.partition("=")[0]
        out.append(("--set override", s, key.split(".")[-1], _override(s)))
    return out


def _override(s: str) -> Callable[[Path], list[str]]:
    small = ["experiment.steps=2", "source.elements=16", "experiment.workers=4"]
    return lambda tmp: [
        "run",
        "-q",
        "--no-report",
        *[x for t in [*small, s] for x in ("--set", t)],
        "--out",
        str(tmp / "out"),
    ]


def _price_cases() -> list[Case]:
    out: list[Case] = []
    cmd = ["price", "--no-report"]
    keyed = {
        "price.workers": [*BAD_INT, 10**9],
        "price.steps": BAD_INT,
        "price.seed": [-1, 3.9, True, "0", INF],
        "price.modes": [[], [5], "sync", ["bogus"], ["sync", NESTED]],
        "price.plan": ["bogus", 5],
        "price.input": ["fp99", 5],
        "price.target_loss": [-1.0, NAN, INF, "x", True],
        "price.name": [5, "../x", "/abs/x", ""],
        "price.bogus": [1],
        "compute.step": [0.0, -1.0, NAN, INF, True, "x"],
        "compute.jitter": ["gauss", 1],
        "compute.straggler_prob": [2.0, -0.5, NAN],
        "cluster.bandwidth": [-1.0, 0.0, "x", True, INF],
        "cluster.alpha": [-1.0, NAN, INF, True, "x"],
        "cluster.gpus_per_node": [0, 3.9, True, -2],
        "cluster.bogus": [1],
        "source.lr": [-1.0, NAN, INF, True],
        "source.hidden": [0, 3.9, True, 10**12],
        "source.activation": ["sigmoidx", 1],
        "source.kind": ["synthetic"],
        "bogus": [{"a": 1}],
        "price": [5, [1]],
    }
    for key, values in keyed.items():
        for v in values:
            doc = _set({**PRICE, "compute": {}, "cluster": {}}, key, v)
            out.append(("price config", f"{key} = {v!r}", key.split(".")[-1], _toml(doc, cmd, "p.toml")))
    return out


def _scale_cases() -> list[Case]:
    out: list[Case] = []
    cmd = ["scale", "--no-report"]
    keyed = {
        "scale.workers": [[0], [3.9], [True], ["4"], 5, [[1]], [10**9], [-4], [], [INF]],
        "scale.plans": ["ring", [5], ["(0,1)"], ["bogus"], [], [NESTED]],
        "scale.compute": [0.0, -1.0, NAN, INF, "x", True, [1.0]],
        "scale.bytes": [-1.0, INF, NAN, "x", True, [1.0, -1.0], [], NESTED],
        "scale.elements": [-1, "x", 3.5, True, INF, [4]],
        "scale.bytes_per_element": ["ab", 0, -1, NAN, True],
        "scale.name": [5, "../x", "/abs/x", "", [1]],
        "scale.bogus": [1],
        "cluster.bandwidth": [-1.0, "x", True, INF],
        "cluster.beta": [-1.0, NAN, "x", True],
        "cluster.nics_per_node": [0, 1.5, True],
        "bogus": [{"a": 1}],
        "scale": [5],
    }
    for key, values in keyed.items():
        for v in values:
            if key == "scale.bytes_per_element":
                doc = _set(_set(SCALE, "scale.elements", 4), key, v)
            else:
                doc = _set({**SCALE, "cluster": {}}, key, v)
            out.append(("scale config", f"{key} = {v!r}", key.split(".")[-1], _toml(doc, cmd, "s.toml")))
    return out


#: the commands each bad summary.json is given to (``--no-report``: show and compare only; a report takes ~5 s)
SUMMARY_COMMANDS = ("show", "compare") if "--no-report" in sys.argv else ("show", "compare", "report")


def _summary_cases(run: Path) -> list[Case]:
    good = json.loads((run / "summary.json").read_text())
    muts: dict[str, Any] = {
        "arms": [[], 5, [5], NESTED, [{"name": "A"}]],
        "arms.0.name": [5, None, ["A"]],
        "arms.0.input": ["fp99", 5],
        "arms.0.output": ["fp99", 3],
        "arms.0.order": [5, None],
        "arms.0.mean_diff_frac": ["x", [1], NESTED, True, -1.0],
        "arms.0.max_ulp": ["x", NESTED, -1.0],
        "arms.0.reproducible": ["yes", 5],
        "arms.0.first_divergence_step": ["x", 1.5, -3],
        "arms.0.ulp_hist": [
            5,
            {"edges": [0, 1], "counts": "x"},
            {"edges": "x", "counts": [1]},
            {"edges": [0, 1], "counts": [1, 2, 3]},
        ],
        "arms.0.mean_err_norm": ["x", NESTED],
        "arms.0.final_loss": ["x"],
        "steps_done": ["x", -1, 1.5, True, None, NESTED],
        "steps": ["x", 0, 1.5],
        "complete": ["yes", 5],
        "workers": ["x", 0, 1.5],
        "elements": ["x", -5],
        "reference": [5, "Z"],
        "name": [5, NESTED],
        "wall_time_s": ["x", -1.0],
    }
    out: list[Case] = []
    for key, values in muts.items():
        for v in values:
            doc = _set(good, key, v)
            text = json.dumps(doc, allow_nan=True)
            for cmd in SUMMARY_COMMANDS:
                out.append(("summary.json", f"{cmd}: {key} = {v!r}", key.split(".")[-1], _summary_argv(run, text, cmd)))
    for what, text in (
        ("a list", "[1, 2]"),
        ("not JSON", "{arms"),
        ("deeply nested", "[" * 100_000 + "]" * 100_000),
        ("NaN", json.dumps({**good, "steps_done": NAN})),
        ("empty", ""),
    ):
        for cmd in SUMMARY_COMMANDS:
            out.append(("summary.json", f"{cmd}: {what}", "summary.json", _summary_argv(run, text, cmd)))
    return out


def _summary_argv(run: Path, text: str, cmd: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        d = tmp / "run"
        shutil.copytree(run, d)
        (d / "summary.json").write_text(text)
        if cmd == "compare":
            return ["compare", str(d), str(run)]
        if cmd == "report":
            return ["report", str(d), "-o", str(tmp / "r.pdf")]
        return ["show", str(d)]

    return argv


def _recording(d: Path, world: int = 3, steps: int = 2, m: int = 7) -> dict[str, Any]:
    """A small recording, its real results summed by gloo's ring model."""
    import fpreduce as fr
    from fpreduce.plans import ring

    rng = np.random.default_rng(0)
    (d / "grads").mkdir(parents=True)
    (d / "real").mkdir()
    for t in range(steps):
        X = (rng.standard_normal((world, m))).astype(np.float32)
        np.save(d / f"grads/step_{t:06d}.npy", X)
        np.save(
            d / f"real/step_{t:06d}.npy",
            fr.reduce(X, ring(world, "gloo"), input="fp32", accumulate="fp32", average="ddp"),
        )
    layout = [{"index": 0, "elements": m, "start": 0, "params": [{"name": "w", "shape": [m], "offset": 0}]}]
    return {
        "format": "fpreduce-ddp-recording",
        "version": 1,
        "world_size": world,
        "backend": "gloo",
        "dtype": "fp32",
        "torch": "none",
        "average": "ddp",
        "steps": steps,
        "elements": m,
        "layouts": [layout],
        "step_layout": [0] * steps,
    }


def _replay_cases(rec: Path) -> list[Case]:
    good = json.loads((rec / "manifest.json").read_text())
    muts: dict[str, Any] = {
        "world_size": [0, -1, 3.9, True, "3", 1e400, NAN, [3], NESTED, 2**40],
        "steps": [0, -1, 1.5, True, "2", 3, 10**12],
        "elements": [0, -1, 6.5, True, "7", 2**62],
        "backend": ["mpi", 5, None],
        "dtype": ["fp99", 5, "fp64"],
        "average": ["meen", 5],
        "hook": ["my_hook", 5],
        "local_world_size": [0, 1.5, 99, "x"],
        "layouts": [[], 5, {"a": 1}, [[]], ["bucket"], [[5]]],
        "layouts.0.0.start": [-1, 1, 1.0, True, "0"],
        "layouts.0.0.elements": [0, 8, 6, 7.0, "7"],
        "layouts.0.0.params": [[], 5, [5], [{"name": "w"}]],
        "layouts.0.0.params.0.shape": [[-7], [7.0], [2**40, 2**40], [7, 7], "7", [True] * 7, [[7]]],
        "layouts.0.0.params.0.offset": [-5, 1, 0.0, True, None],
        "layouts.0.0.params.0.name": [5, None],
        "step_layout": [[0], [0, 3], [0, -1], [0, 0.0], "0", [0, True]],
        "format": ["other", 5],
        "paths": [5, {"p": 5}, {"p": {"average": "ddp"}}, {"p": {"average": "x", "wire": "fp32"}}, {}],
        "path_sets": ["", [], ["nope"], [["p", "q"]], 5],
    }
    out: list[Case] = []
    for key, values in muts.items():
        for v in values:
            if v is None and key in ("backend", "layouts.0.0.params.0.offset", "layouts.0.0.params.0.name"):
                doc = _set(good, key, _DROP)
            else:
                doc = _set(good, key, v)
            if key == "paths":
                doc = {**doc, "path_sets": ["p"], "step_paths": [0, 0]}
            if key == "path_sets":  # (a version 2 manifest: its paths, and per step a set of them)
                doc = {**doc, "paths": {"p": {"average": "ddp", "wire": "fp32"}}, "step_paths": [0, 0]}
            text = json.dumps(doc, allow_nan=True).replace("Infinity", "1e400")
            out.append(("replay manifest", f"{key} = {v!r}", key.split(".")[-1], _replay_argv(rec, text)))
    out.append(
        (
            "replay manifest",
            "deeply nested",
            "manifest.json",
            _replay_argv(rec, '{"format": "fpreduce-ddp-recording", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        )
    )
    out.append(
        ("replay manifest", "NaN literal", "world_size", _replay_argv(rec, json.dumps({**good, "world_size": NAN})))
    )
    for what, change in _STEP_CHANGES.items():
        out.append(("recording step files", what, "step", _replay_argv(rec, json.dumps(good), change)))
    return out


def _short(d: Path) -> None:
    f = d / "grads/step_000001.npy"
    f.write_bytes(f.read_bytes()[:-20])


def _stray(name: str) -> Callable[[Path], None]:
    return lambda d: np.save(d / "grads" / name, np.zeros((3, 7), dtype=np.float32))


def _gap(d: Path) -> None:
    for kind in ("grads", "real"):
        (d / kind / "step_000001.npy").rename(d / kind / "step_000005.npy")


_STEP_CHANGES: dict[str, Callable[[Path], None]] = {
    "a step file 20 bytes short": _short,
    "a stray grads/a.npy": _stray("a.npy"),
    "a hidden grads/.step_1.npy": _stray(".step_1.npy"),
    "a step past the last": _stray("step_000002.npy"),
    "a numbering gap": _gap,
    "step_1.npy unpadded": _stray("step_1.npy"),
    "real/ missing": lambda d: shutil.rmtree(d / "real"),
}


def _replay_argv(rec: Path, text: str, change: Callable[[Path], None] | None = None) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        d = tmp / "rec"
        shutil.copytree(rec, d)
        (d / "manifest.json").write_text(text)
        if change:
            change(d)
        return ["replay", str(d), "--out", str(tmp / "out"), "--no-report", "--json"]

    return argv


def _source_cases() -> list[Case]:
    def make(change: Callable[[Path], None]) -> Callable[[Path], list[str]]:
        def argv(tmp: Path) -> list[str]:
            d = tmp / "src"
            d.mkdir()
            for t in range(3):
                np.save(d / f"step_{t:06d}.npy", np.ones((4, 8), dtype=np.float32) * (t + 1))
            change(d)
            return ["run", "--source", str(d), "--out", str(tmp / "out"), "-q", "--no-report"]

        return argv

    def put(name: str) -> Callable[[Path], None]:
        return lambda d: np.save(d / name, np.zeros((4, 8), dtype=np.float32))

    def gap(d: Path) -> None:
        (d / "step_000002.npy").rename(d / "step_000017.npy")

    def unpadded(d: Path) -> None:
        (d / "step_000002.npy").rename(d / "step_2.npy")

    return [
        ("--source directory", "a stray a.npy", "a.npy", make(put("a.npy"))),
        ("--source directory", "a hidden .step_1.npy", ".step_1.npy", make(put(".step_1.npy"))),
        ("--source directory", "a gap (0, 1, 17)", "step_000002", make(gap)),
        ("--source directory", "step_2.npy unpadded", "step_2.npy", make(unpadded)),
        (
            "--source directory",
            "step_000003.npy of another shape",
            "step_000003",
            make(lambda d: np.save(d / "step_000003.npy", np.zeros((4, 9), np.float32))),
        ),
    ]


def _doc_set(name: str, key: str, value: Any) -> Callable[[Path], None]:
    """A change to a folder: its JSON document ``name`` with ``key`` (dotted, list indices as numbers) set."""

    def change(d: Path) -> None:
        from fpreduce.base import jsonfile

        doc = jsonfile.loads((d / name).read_text())
        (d / name).write_text(jsonfile.dumps(_set(doc, key, value)))

    return change


def _put(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(data)


def _report_argv(folder: Path, change: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        d = tmp / folder.name
        shutil.copytree(folder, d)
        change(d)
        return ["report", str(d), *(["-o", str(tmp / "r.pdf")] if folder.name in ("run", "replay") else [])]

    return argv


def _report_cases(run: Path, rp: Path, sc: Path, pr: Path) -> list[Case]:
    """``fpreduce report`` on a run, a replay's run, a scale study and a price study folder, each with one of its
    documents corrupt, missing or mutated, or a foreign file beside them."""
    cases: list[tuple[str, Path, str, str, Callable[[Path], None]]] = [
        ("summary.json", run, "not JSON", "summary.json", _put("summary.json", b"{arms")),
        ("summary.json", run, "missing", "summary.json", lambda d: (d / "summary.json").unlink()),
        ("summary.json", run, "a list", "summary.json", _put("summary.json", b"[1, 2]")),
        ("summary.json", run, "arms[0].max_ulp = 'x'", "max_ulp", _doc_set("summary.json", "arms.0.max_ulp", "x")),
        ("metrics.csv", run, "missing", "metrics.csv", lambda d: (d / "metrics.csv").unlink()),
        ("metrics.csv", run, "another CSV", "metrics.csv", _put("metrics.csv", b"a,b\n1,2\n")),
        ("metrics.csv", run, "not UTF-8", "metrics.csv", _put("metrics.csv", b"\xff\xfe")),
        ("replay.json", rp, "not JSON", "replay.json", _put("replay.json", b"[1,")),
        ("replay.json", rp, "a list", "replay.json", _put("replay.json", b"[1]")),
    ]
    replay_muts: dict[str, list[Any]] = {
        "rows.0": [5, {}],
        "rows.0.shape": ["x", [-1]],
        "rows.0.differ_world": [-1, "x", 10**9],
        "rows.0.diff_frac_order": [2.0, "x"],
        "variants": [{}, 5],
        "per_step.0.differ": [99, "x"],
        "per_step.0.match": [2.0, None],
        "real_match": [-1.0, "x"],
        "world_size": [0, 3.9],
        "verified": ["yes"],
        "contrast": [5, {"rd": -1}],
        "dtype": [5],
    }
    for key, values in replay_muts.items():
        for v in values:
            last = key.split(".")[-1]
            cases.append(("replay.json", rp, f"{key} = {v!r}", last, _doc_set("replay.json", key, v)))
    scale_muts: dict[str, list[Any]] = {
        "rows": [[], 5],
        "rows.0.workers": [0, 3.9, "x"],
        "rows.0.zz": [1],
        "rows.0.speedup": ["x", -1.0, None],
        "profile": [{}, 5],
        "profile.gpus_per_node": [0, "x"],
        "profile.beta": [0.0, None],
        "compute_s": [0.0, "x"],
        "nbytes": [-1.0, [], "x"],
        "name": [5],
    }
    for key, values in scale_muts.items():
        for v in values:
            last = key.split(".")[-1]
            cases.append(("scale.json", sc, f"{key} = {v!r}", last, _doc_set("scale.json", key, v)))
    cases.append(("scale.json", sc, "not JSON", "scale.json", _put("scale.json", b"\xff")))
    price_muts: dict[str, list[Any]] = {
        "traces.sync.time": [[], "x", [-1.0]],
        "traces": [{}, 5],
        "rows.0.step_s": [0.0, "x"],
        "rows.0.final_loss": ["x", None],
        "rows.0.weights_differ_ref": [2.0, -1.0],
        "rows.0.staleness_max": [1.5, -1],
        "rows": [[], [5]],
        "config.price.workers": [3.9, 0],
        "config.compute.step": [0.0, "x"],
        "config.source.lr": ["x"],
        "config": [5],
        "target_loss": ["x", None],
    }
    for key, values in price_muts.items():
        for v in values:
            last = key.split(".")[-1]
            cases.append(("price.json", pr, f"{key} = {v!r}", last, _doc_set("price.json", key, v)))
    cases.append(("price.json", pr, "not JSON", "price.json", _put("price.json", b"{")))
    for folder in (run, sc, pr):
        for name in ("notes.txt", "scale.json" if folder != sc else "price.json"):
            cases.append(("foreign file", folder, f"{name} in a {folder.name} folder", name, _put(name, b"{}")))
    return [(f"report: {doc}", what, key, _report_argv(folder, change)) for doc, folder, what, key, change in cases]


class _Runaway(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise _Runaway


def classify(argv: list[str], key: str, file_hint: str | None) -> tuple[str, str]:
    err, out = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(argv)
    except _Runaway:
        return "runaway", ""
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException as e:  # noqa: BLE001 - what escaped is what is counted
        return "traceback", f"{type(e).__name__}: {str(e)[:100]}"
    finally:
        signal.alarm(0)
    lines = [x for x in err.getvalue().splitlines() if x.strip() and "compil" not in x and "warning" not in x.lower()]
    if rc == 0:
        return "accepted", out.getvalue()[:80].replace("\n", " | ")
    if "Traceback" in err.getvalue() or len(lines) != 1 or not lines[0].startswith("fpreduce: error:"):
        return "traceback", " / ".join(lines)[:160]
    line = lines[0]
    named = key.lower() in line.lower() and (file_hint is None or file_hint in line)
    return ("one-line" if named else "one-line, key or file unnamed"), line[:200]


def cases(tmp: Path) -> list[Case]:
    run = tmp / "good-run"
    assert (
        main(
            [
                "run",
                "-q",
                "--no-report",
                "--out",
                str(run),
                "--set",
                "experiment.steps=2",
                "--set",
                "experiment.workers=4",
                "--set",
                "source.elements=16",
            ]
        )
        == 0
    )
    rec = tmp / "good-rec"
    m = _recording(rec)
    (rec / "manifest.json").write_text(json.dumps(m))
    out = [
        *_config_cases(),
        *_price_cases(),
        *_scale_cases(),
        *_summary_cases(run),
        *_replay_cases(rec),
        *_source_cases(),
    ]
    if "--no-report" in sys.argv:
        return out  # (the report cases: each accepted one draws a report, ~10 s)
    folders = tmp / "folders"
    shutil.copytree(run, folders / "run")
    assert main(["replay", str(rec), "--out", str(folders / "replay"), "-q", "--no-report"]) == 0
    (tmp / "s.toml").write_text(tomli_w.dumps(SCALE))
    assert main(["scale", str(tmp / "s.toml"), "--out", str(folders / "scale"), "--no-report"]) == 0
    (tmp / "p.toml").write_text(tomli_w.dumps(_set(PRICE, "price.steps", 1)))
    assert main(["price", str(tmp / "p.toml"), "--out", str(folders / "price"), "--no-report"]) == 0
    return [*out, *_report_cases(*(folders / k for k in ("run", "replay", "scale", "price")))]


_FILES = {
    "run config": "c.toml",
    "price config": "p.toml",
    "scale config": "s.toml",
    "summary.json": "summary.json",
    "replay manifest": "manifest.json",
}


def survey(*, verbose: bool = False) -> dict[str, Counter[str]]:
    """{surface: Counter(outcome)} over every bad input (printed one per line with ``verbose``)."""
    table: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory() as top:
        base = Path(top)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            all_cases = cases(base)
        for i, (surface, what, key, make) in enumerate(all_cases):
            tmp = base / f"c{i}"
            tmp.mkdir()
            try:
                argv = make(tmp)
            except Exception as e:  # noqa: BLE001 - an input this version cannot even be written as
                if verbose:
                    print(f"{surface:22} {what:50} SKIPPED ({e})")
                continue
            outcome, said = classify(argv, key, _FILES.get(surface, _report_file(surface)))
            table.setdefault(surface, Counter())[outcome] += 1
            if verbose:
                print(f"{surface:22} {what[:50]:50} {outcome:30} {said}")
            shutil.rmtree(tmp, ignore_errors=True)
    return table


def _report_file(surface: str) -> str | None:
    """The file a report surface's error names: its document (``report: scale.json``; a foreign file: none)."""
    doc = surface.partition(": ")[2]
    return doc if doc.endswith((".json", ".csv")) else None


OUTCOMES = ("one-line", "one-line, key or file unnamed", "accepted", "traceback", "runaway")


def main_() -> None:
    table = survey(verbose="--list" in sys.argv)
    print(f"| surface | inputs | {' | '.join(OUTCOMES)} |")
    print("|---|---" + "|---" * len(OUTCOMES) + "|")
    total: Counter[str] = Counter()
    for surface, c in table.items():
        total += c
        print(f"| {surface} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    print(f"| all | {sum(total.values())} | " + " | ".join(str(total[o]) for o in OUTCOMES) + " |")


if __name__ == "__main__":
    import resource

    os.environ.setdefault("FPREDUCE_NO_JIT", "1")
    # a plan of 2^31 workers would have the kernel kill this process: 6 GiB of address space, then MemoryError
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    main_()

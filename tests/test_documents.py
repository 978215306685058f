"""Every document fpreduce reads, fuzzed (issue 26): run, price and scale configs, summary.json, a recording's
manifest. Hypothesis mutates a small valid document (a key set to a value of another type, out of range,
non-finite, a list or a nested table where a scalar belongs; a key removed; an unknown key added) and checks
the one law of :mod:`fpreduce.run.schema`: the command either accepts the document and runs (exit 0), or
refuses it with one line ``fpreduce: error: ...`` naming the file and the key, exit 2; never another
exception, never a traceback.

Most mutations are refused by the loader (cheap); the accepted ones run a small command in this process (the
run and price configs, summary.json and manifest: half the profile's examples).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.backends.replay import open_recording, replay
from fpreduce.base import jsonfile
from fpreduce.base.errors import InvalidArgument
from fpreduce.cli import main
from fpreduce.plans import ring

#: the scale config takes the profile's examples, the others half of them (the accepted ones run)
MANY = settings(max_examples=settings.default.max_examples, suppress_health_check=[HealthCheck.too_slow])
HALF = settings(
    max_examples=max(3, settings.default.max_examples // 2),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FIXTURES = settings(HALF, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

RUN = {
    "experiment": {"name": "tiny", "steps": 2, "workers": 4, "seed": 0},
    "source": {"kind": "synthetic", "elements": 16, "noise": 1.0, "dist": "normal"},
    "arrival": {"base": 1.0, "jitter": "normal"},
    "arms": [
        {"name": "A", "order": "fixed:sequential", "input": "bf16", "accumulate": "fp32"},
        {"name": "B", "order": "shuffle:ring", "rounding": "nearest_even", "algorithm": "plain"},
    ],
}
PRICE = {
    "price": {"workers": 2, "steps": 1, "seed": 0, "modes": ["sync", "local:2"], "plan": "ring", "target_loss": 0.0},
    "source": {"hidden": 4, "inputs": 4, "outputs": 2, "batch_per_worker": 2, "teacher_hidden": 4, "lr": 0.05},
    "compute": {"step": 0.1, "jitter": "none"},
    "cluster": {"alpha": 1e-6, "bandwidth": 1e10, "gpus_per_node": 2},
}
SCALE = {
    "scale": {"name": "s", "workers": [1, 2, 4], "plans": ["ring", "rd"], "compute": 0.4, "bytes": 1e6},
    "cluster": {"alpha": 5e-6, "bandwidth": 12.5e9, "gpus_per_node": 2},
}

#: values of every kind a document may hold where another belongs (None: the key removed)
_SCALARS = st.one_of(
    st.integers(-3, 9),
    st.sampled_from([2**31, 2**53 + 1, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 3.9, -0.0, 1e308, 1e-320]),
    st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["fp32", "bf16", "ring", "sync", "../x", "", "fixed:rd", "A"]),
)
VALUES = st.one_of(
    st.none(),
    _SCALARS,
    st.lists(_SCALARS, max_size=3),
    st.recursive(_SCALARS, lambda c: st.dictionaries(st.sampled_from(["a", "b"]), c, max_size=2), max_leaves=4),
)


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a document (tables, arrays and their entries)."""
    out = [at] if at else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


def _mutate(doc: dict[str, Any], path: tuple[Any, ...], value: Any, extra: bool) -> dict[str, Any]:
    """``doc`` with the key at ``path`` set to ``value`` (None: removed), or (``extra``) an unknown key beside it."""
    d = copy.deepcopy(doc)
    node: Any = d
    for k in path[:-1]:
        node = node[k]
    if extra:
        target = node[path[-1]] if isinstance(node[path[-1]], dict) else node
        if isinstance(target, dict):
            target["zz_extra"] = 1 if value is None else value
        return d
    if value is None:
        if isinstance(node, dict):
            del node[path[-1]]
        else:
            node.pop(path[-1])
    else:
        node[path[-1]] = value
    return d


def _key_named(path: tuple[Any, ...], extra: bool) -> list[str]:
    """What the one-line error must name: the key or a table holding it (a shape removed is reported at the
    tiling of its bucket's ``params``), or the unknown key added."""
    if extra:
        return ["zz_extra"]
    return [str(k) for k in path if not isinstance(k, int)] or ["arms"]


def _one_command(argv: list[str]) -> tuple[int, str]:
    """``main(argv)``'s exit status and stderr; any exception that escapes fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


def _law(rc: int, err: str, names: list[str], where: str) -> None:
    """Accepted and ran (exit 0), or refused in one line naming the file and one of ``names`` (exit 2)."""
    if rc == 0:
        return
    lines = [x for x in err.splitlines() if x and "compil" not in x]
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("fpreduce: error: "), err
    assert where in lines[0], err
    assert any(n in lines[0] for n in names), (names, err)


def _toml_safe(doc: Any) -> bool:
    try:
        tomli_w.dumps(doc)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _config_law(
    base: dict[str, Any],
    load: Callable[[Path], Any],
    argv: Callable[[Path], list[str]],
    name: str,
    data: st.DataObject,
    small: Callable[[Any], bool] = lambda cfg: True,
) -> None:
    """A mutated config: refused by its loader in one line naming the file and the key (what ``fpreduce``
    prints after ``fpreduce: error:``), or accepted, and then the command runs it (exit 0) or refuses it in
    one line (a limit checked later: memory, a plan for this many workers)."""
    path = data.draw(st.sampled_from(_paths(base)), label="path")
    value, extra = data.draw(VALUES, label="value"), data.draw(st.booleans(), label="extra key")
    doc = _mutate(base, path, value, extra)
    if not _toml_safe(doc):
        return  # (a value TOML cannot hold: no such file exists)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / name
        p.write_text(tomli_w.dumps(doc))
        try:
            cfg = load(p)
        except InvalidArgument as e:
            _law(2, f"fpreduce: error: {e}\n", [*_key_named(path, extra), "table"], name)
            return
        if not small(cfg):
            return  # (accepted, and too big to run here: the [price] table removed is the 14 s default study)
        rc, err = _one_command(argv(Path(tmp)))
    _law(rc, err, [*_key_named(path, extra), "table"], name)


@HALF
@given(data=st.data())
def test_a_mutated_run_config_runs_or_is_one_line(data: st.DataObject) -> None:
    from fpreduce.run.config import load_config

    argv = ["-q", "--no-report", "--steps", "1"]
    _config_law(RUN, load_config, lambda t: ["run", str(t / "c.toml"), "--out", str(t / "o"), *argv], "c.toml", data)


@HALF
@given(data=st.data())
def test_a_mutated_price_config_runs_or_is_one_line(data: st.DataObject) -> None:
    from fpreduce.run.price import load_price_config

    argv = lambda t: ["price", str(t / "p.toml"), "--out", str(t / "o"), "--no-report"]  # noqa: E731
    _config_law(PRICE, load_price_config, argv, "p.toml", data, lambda c: c.spec.workers * c.spec.steps <= 16)


@MANY
@given(data=st.data())
def test_a_mutated_scale_config_runs_or_is_one_line(data: st.DataObject) -> None:
    from fpreduce.run.scale import load_scale_config

    argv = lambda t: ["scale", str(t / "s.toml"), "--out", str(t / "o"), "--no-report"]  # noqa: E731
    _config_law(SCALE, load_scale_config, argv, "s.toml", data)


@pytest.fixture(scope="module")
def a_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("run") / "r"
    (d.parent / "c.toml").write_text(tomli_w.dumps(RUN))
    assert _one_command(["run", str(d.parent / "c.toml"), "--out", str(d), "-q", "--no-report"])[0] == 0
    return d


@FIXTURES
@given(data=st.data())
def test_a_mutated_summary_is_shown_or_is_one_line(a_run: Path, data: st.DataObject) -> None:
    """show and compare read summary.json through its schema: a mutated one is read or refused in one line."""
    good = json.loads((a_run / "summary.json").read_text())
    path = data.draw(st.sampled_from(_paths(good)), label="path")
    value, extra = data.draw(VALUES, label="value"), data.draw(st.booleans(), label="extra key")
    doc = _mutate(good, path, value, extra)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "r"
        d.mkdir()
        for f in ("config.toml", "metrics.csv"):
            (d / f).write_bytes((a_run / f).read_bytes())
        (d / "summary.json").write_text(jsonfile.dumps(doc))  # (NaN and Inf as the tool writes them)
        for argv in (["show", str(d)], ["compare", str(d), str(a_run)]):
            rc, err = _one_command(argv)
            if rc == 1 and argv[0] == "compare":
                continue  # (compare's "different")
            _law(rc, err, [*_key_named(path, extra), "arms"], "summary.json")


def _recording(d: Path, world: int = 3, steps: int = 2, m: int = 7) -> dict[str, Any]:
    """A small recording (as fpreduce.torch writes it), its real results by gloo's ring model; its manifest."""
    rng = np.random.default_rng(0)
    (d / "grads").mkdir(parents=True)
    (d / "real").mkdir()
    for t in range(steps):
        X = rng.standard_normal((world, m)).astype(np.float32)
        np.save(d / f"grads/step_{t:06d}.npy", X)
        y = fr.reduce(X, ring(world, "gloo"), input="fp32", accumulate="fp32", average="ddp")
        np.save(d / f"real/step_{t:06d}.npy", y)
    params = [{"name": "w", "shape": [2, 2], "offset": 0}, {"name": "b", "shape": [3], "offset": 4}]
    buckets = [{"index": 0, "elements": m, "start": 0, "params": params}]
    m_ = {"format": "fpreduce-ddp-recording", "version": 2, "world_size": world, "backend": "gloo", "dtype": "fp32"}
    m_ |= {"torch": "none", "steps": steps, "elements": m, "layouts": [buckets], "step_layout": [0] * steps}
    m_ |= {"paths": {"copy": {"average": "ddp", "wire": "fp32"}}, "path_sets": ["copy"], "step_paths": [0] * steps}
    (d / "manifest.json").write_text(json.dumps(m_))
    return m_


@pytest.fixture(scope="module")
def a_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    d = tmp_path_factory.mktemp("rec") / "rec"
    m = _recording(d)
    assert replay(open_recording(d))["real_match"] == 1.0
    return d, m


@FIXTURES
@given(data=st.data())
def test_a_mutated_manifest_replays_or_is_one_line(
    a_recording: tuple[Path, dict[str, Any]], data: st.DataObject
) -> None:
    """open_recording checks every key before a step is read: a mutated manifest replays (a match ratio in
    [0, 1]) or raises InvalidArgument naming manifest.json and the key; never another exception."""
    rec, good = a_recording
    path = data.draw(st.sampled_from(_paths(good)), label="path")
    value, extra = data.draw(VALUES, label="value"), data.draw(st.booleans(), label="extra key")
    doc = _mutate(good, path, value, extra)
    text = json.dumps(doc, allow_nan=True)  # bare NaN/Infinity too: not JSON, refused as such
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "rec"
        d.mkdir()
        for kind in ("grads", "real"):
            (d / kind).symlink_to(rec / kind)
        (d / "manifest.json").write_text(text)
        try:
            res = replay(open_recording(d))
        except InvalidArgument as e:
            msg = str(e)
            assert "\n" not in msg
            assert str(d) in msg, msg
            names = [*_key_named(path, extra), "JSON"]
            assert any(n in msg for n in names), (path, msg)
            return
    assert 0.0 <= res["real_match"] <= 1.0
    assert not math.isnan(res["real_match"])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: np.save(d / ".step_1.npy", np.ones((3, 4), np.float32)), ".step_1.npy: not a step file"),
        (lambda d: np.save(d / "a.npy", np.ones((3, 4), np.float32)), "a.npy: not a step file"),
        (lambda d: (d / "step_000002.npy").rename(d / "step_000017.npy"), "step_000002.npy is missing"),
    ],
    ids=["hidden", "stray", "gap"],
)
def test_a_source_directory_reads_step_files_only(tmp_path: Path, change: Callable[[Path], Any], said: str) -> None:
    """Issue 26's reproducers: a hidden .step_1.npy or a stray a.npy in a --source directory became step 0 of
    the run; steps 0, 1, 17 passed without a word. Now each is one line naming the file, exit 2, nothing
    written; a gap runs when asked for (source.gaps = true)."""
    d = tmp_path / "src"
    d.mkdir()
    for t in range(3):
        np.save(d / f"step_{t:06d}.npy", np.full((3, 4), t + 1.0, np.float32))
    change(d)
    rc, err = _one_command(["run", "--source", str(d), "--out", str(tmp_path / "o"), "-q", "--no-report"])
    _law(rc, err, [said], str(d))
    assert rc == 2
    assert not (tmp_path / "o").exists()
    if said.endswith("missing"):
        argv = ["run", "--source", str(d), "--out", str(tmp_path / "o"), "-q", "--no-report"]
        assert _one_command([*argv, "--set", "source.gaps=true"])[0] == 0
        assert json.loads((tmp_path / "o" / "summary.json").read_text())["steps"] == 3


# ----------------------------------------------------------------------------- what `fpreduce report` reads


@pytest.fixture(scope="module")
def drawn(
    tmp_path_factory: pytest.TempPathFactory, a_run: Path, a_recording: tuple[Path, dict[str, Any]]
) -> dict[str, Path]:
    """A folder of each kind `fpreduce report` draws in: a run, a replay's run (a_run with the replay.json of
    a_recording, written by the writer `fpreduce replay` uses), a scale study and a price study."""
    from fpreduce.backends.replay import VARIANTS, layer_rows
    from fpreduce.run import rundir

    top = tmp_path_factory.mktemp("drawn")
    rec = open_recording(a_recording[0])
    shutil.copytree(a_run, top / "replay")
    rundir.write_replay(top / "replay", {**replay(rec), "variants": VARIANTS, "rows": layer_rows(rec)})
    for kind, doc in (("scale", SCALE), ("price", PRICE)):
        (top / f"{kind}.toml").write_text(tomli_w.dumps(doc))
        argv = [kind, str(top / f"{kind}.toml"), "--out", str(top / kind), "--no-report"]
        assert _one_command(argv)[0] == 0
    return {"run": a_run, "replay": top / "replay", "scale": top / "scale", "price": top / "price"}


def _json_set(name: str, path: tuple[Any, ...], value: Any) -> Callable[[Path], None]:
    """A change to a folder: its document ``name`` with the key at ``path`` set to ``value``."""

    def change(d: Path) -> None:
        doc = jsonfile.loads((d / name).read_text())
        (d / name).write_text(jsonfile.dumps(_mutate(doc, path, value, False)))

    return change


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(data)


#: issue 26's report reproducers: a folder of a kind, a change, what the one line names (each was a traceback
#: (KeyError, TypeError, IndexError, ZeroDivisionError) or a report drawn over a foreign file before)
BROKEN = {
    "summary.json not JSON": ("run", _write("summary.json", b"{arms"), "summary.json"),
    "summary.json missing": ("run", lambda d: (d / "summary.json").unlink(), "summary.json"),
    "metrics.csv missing": ("run", lambda d: (d / "metrics.csv").unlink(), "metrics.csv"),
    "metrics.csv foreign": ("run", _write("metrics.csv", b"a,b\n1,2\n"), "metrics.csv"),
    "a scale.json in a run": ("run", _write("scale.json", b"{}"), "scale.json"),
    "a file no command wrote": ("run", _write("notes.txt", b"mine"), "notes.txt"),
    "replay.json not JSON": ("replay", _write("replay.json", b"[1,"), "replay.json"),
    "replay.json rows [5]": ("replay", _json_set("replay.json", ("rows", 0), 5), "rows[0]"),
    "replay.json no variants": ("replay", _json_set("replay.json", ("variants",), {}), "variants.order"),
    "replay differ > elements": ("replay", _json_set("replay.json", ("per_step", 0, "differ"), 99), "per_step[0]"),
    "scale.json an unknown row key": ("scale", _json_set("scale.json", ("rows", 0, "zz"), 1), "rows[0].zz"),
    "scale.json 0 gpus per node": ("scale", _json_set("scale.json", ("profile", "gpus_per_node"), 0), "profile"),
    "scale.json not JSON": ("scale", _write("scale.json", b"\xff"), "scale.json"),
    "price.json an empty trace": ("price", _json_set("price.json", ("traces", "sync", "time"), []), "traces.sync"),
    "price.json step_s 0": ("price", _json_set("price.json", ("rows", 0, "step_s"), 0.0), "rows[0].step_s"),
    "price.json workers 3.9": ("price", _json_set("price.json", ("config", "price", "workers"), 3.9), "workers"),
    "price.json and a scale.json": ("price", _write("scale.json", b"{}"), "scale.json"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_report_of_a_broken_folder_is_one_line(drawn: dict[str, Path], tmp_path: Path, case: str) -> None:
    """`fpreduce report` reads every document through its schema (and draws only in a folder of one kind): a
    corrupt, missing or foreign summary.json, metrics.csv, replay.json, scale.json or price.json is one line
    naming the file and the key, exit 2, before anything is drawn; the folder is left as it was."""
    kind, change, said = BROKEN[case]
    d = tmp_path / kind
    shutil.copytree(drawn[kind], d)
    change(d)
    before = sorted(p.name for p in d.iterdir())
    rc, err = _one_command(["report", str(d)])
    _law(rc, err, [said], str(d))
    assert rc == 2
    assert sorted(p.name for p in d.iterdir()) == before


_DOCS = {"scale": "scale.json", "price": "price.json", "replay": "replay.json"}


@FIXTURES
@given(data=st.data())
def test_a_mutated_study_or_replay_document_is_read_or_is_one_line(drawn: dict[str, Path], data: st.DataObject) -> None:
    """scale.json, price.json and replay.json, mutated: their reader refuses the document in one line naming the
    file and the key, or accepts it, and then the report's every sentence and table over it is computed (the
    figures and the PDF are drawn from the same keys: not drawn here, 10 s each)."""
    from fpreduce.report import layers, price, scaling
    from fpreduce.run import rundir

    kind = data.draw(st.sampled_from(sorted(_DOCS)), label="document")
    good = jsonfile.loads((drawn[kind] / _DOCS[kind]).read_text())
    path = data.draw(st.sampled_from(_paths(good)), label="path")
    value, extra = data.draw(VALUES, label="value"), data.draw(st.booleans(), label="extra key")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / _DOCS[kind]).write_text(jsonfile.dumps(_mutate(good, path, value, extra)))
        try:
            doc = rundir.read_replay(tmp) if kind == "replay" else rundir.read_study(tmp, kind)
        except InvalidArgument as e:
            _law(2, f"fpreduce: error: {e}\n", [*_key_named(path, extra), "table", "JSON"], _DOCS[kind])
            return
    assert doc is not None
    if kind == "scale":
        rows = scaling.rows_of(doc)
        assert scaling.findings(rows)
        assert scaling.cluster_text(SimpleNamespace(**doc["profile"]))
    elif kind == "price":
        rows = price.rows_of(doc["rows"])
        assert price.table(rows)
        assert price.findings(rows, float(doc["target_loss"]))
    else:
        assert layers.layer_table(doc["rows"], doc["dtype"])[1]

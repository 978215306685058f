"""Execute every notebook in notebooks/ and check a few of the numbers it computes.

The notebooks are committed with their outputs stripped; here each one runs top to
bottom in a fresh ``python3`` kernel (nbclient), in a temporary working directory so
nothing lands in the repository, with this checkout first on the kernel's
``PYTHONPATH``. Each notebook's last cell prints a JSON dict of key results, which
the tests read back. Needs nbformat, nbclient and ipykernel (skipped without them).
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 180  # seconds per cell; every notebook takes well under a minute in all
ALLOWED_IMPORTS = {"fpreduce", "numpy", "matplotlib", "json", "itertools", "tempfile", "pathlib", "time", "IPython"}

_executed: dict[str, tuple[Any, dict[str, Any]]] = {}


def _execute(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """Run a notebook once per session: (executed notebook, its RESULTS dict)."""
    if name not in _executed:
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        cwd = tmp_path_factory.mktemp(Path(name).stem)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        client = nbclient.NotebookClient(
            nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
        )
        client.execute(env=env, cwd=str(cwd))
        last = [c for c in nb.cells if c.cell_type == "code"][-1]
        text = "".join(o.get("text", "") for o in last.outputs if o.output_type == "stream" and o.name == "stdout")
        _executed[name] = (nb, json.loads(text.strip().splitlines()[-1]))
    return _executed[name]


@pytest.fixture
def run(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return lambda name: _execute(name, tmp_path_factory)


def test_notebooks_exist() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_why_order_matters.ipynb",
        "02_formats_and_accumulators.ipynb",
        "03_collectives.ipynb",
        "04_training_divergence.ipynb",
        "05_remedies.ipynb",
        "06_price_of_determinism.ipynb",
        "07_reveal.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_stripped_and_imports_only_fpreduce(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    imports: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [], f"{path.name}: commit notebooks with outputs stripped"
        assert cell.execution_count is None
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                imports |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imports.add((node.module or "").split(".")[0])
            assert not isinstance(node, ast.ClassDef), f"{path.name}: no core logic (classes) in notebooks"
    assert "fpreduce" in imports
    assert imports <= ALLOWED_IMPORTS, f"{path.name} imports {sorted(imports - ALLOWED_IMPORTS)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_runs_cleanly(path: Path, run) -> None:  # type: ignore[no-untyped-def]
    nb, _ = run(path.name)
    figures = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.outputs:
            assert out.output_type != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"
            assert not (out.output_type == "stream" and out.name == "stderr"), (
                f"{path.name} wrote to stderr (a warning?): {out.text[:300]}"
            )
            figures += "image/png" in out.get("data", {})
    assert figures >= 1, f"{path.name}: expected its figures in the outputs"


def test_01_why_order_matters(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("01_why_order_matters.ipynb")
    assert r["assoc_fp16"] == [1.0, 1.0 + 2.0**-10]
    assert r["assoc_bf16"] == [1.0, 1.0 + 2.0**-7]
    assert r["two_bf16"] == 0.30078125
    assert r["two_fp16"] == 0.300048828125
    assert r["perm_distinct"] == 4
    assert sum(r["perm_counts"]) == 720
    assert r["ab_reproducible_A"] is True
    assert 0.3 < r["ab_mean_diff_frac_B"] < 0.9
    assert r["ab_frac_correct"]["B-fp32acc"] == 1.0
    assert r["outcomes_distinct"]["random tree, fp32 acc -> bf16"] == 1


def test_02_formats_and_accumulators(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("02_formats_and_accumulators.ipynb")
    assert (r["ones_fp16"], r["ones_bf16"], r["ones_fp32"]) == (2048.0, 256.0, 4096.0)
    assert r["swamp"] == {
        "fp16 acc, large first": 1024.0,
        "fp16 acc, large last": 1040.0,
        "fp32 acc, large first": 1040.0,
    }
    assert r["overflow"]["fp16 acc"] == float("inf")
    assert r["overflow"]["fp32 acc"] == 80000.0
    assert r["overflow"]["fp16 acc, predivide"] == 2000.0
    assert r["overflow"]["fp16 acc, ddp"] == 2000.0
    e = r["err_N1024"]
    assert e["bf16->fp32"] < e["bf16->bf16"] / 10
    assert e["fp16->fp32"] < e["fp16->fp16"] / 10


def test_03_collectives(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("03_collectives.ipynb")
    err, div = r["err_N256"], r["div_N256"]
    assert err["rd"] < err["ring:nccl"]  # depth log2 N against N - 1
    assert err["rd"] < err["sequential"]
    assert all(0 < d < 1 for d in div.values())
    assert r["outlier_seq_first_over_last"] > 1.0


def test_04_training_divergence(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("04_training_divergence.ipynb")
    assert r["reproducible"] == {"A": True, "B": False, "A-fp32": True, "B-fp32": False}
    assert r["first_param_div_B"] == 0
    assert r["param_dist_B_final"] > r["param_dist_B_first"] > 0
    assert r["fp32_final_param_dist"] == 0.0


def test_05_remedies(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("05_remedies.ipynb")
    t = r["table"]
    plain = t["plain bf16 (order changes)"]
    assert plain["same_each_run"] is False
    assert 0.5 < plain["mean_ulp"] < 2  # O(1) ulp: errors in ulps at max(|s|, |y|), not at a cancelled |s|
    assert plain["max_ulp"] < 2**9  # never above 2**(p + 1) = 512 ulps of bf16 for a finite result
    assert plain["changed_on_rerank"] > 0
    assert t["fixed order (plain bf16)"]["same_each_run"] is True
    for name in ("fp32 accumulation -> bf16", "reproducible binned", "exact, rounded once"):
        assert t[name]["changed_on_rerank"] == 0.0, name
        assert t[name]["correct"] == 1.0, name
        assert t[name]["max_ulp"] <= 0.5
    assert r["fp32_binned_changed"] == 0.0 < r["fp32_plain_changed"]


def test_06_price_of_determinism(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("06_price_of_determinism.ipynb")
    ms = r["allreduce_ms"]
    assert ms["ring"] < ms["rd"] < ms["linear"]
    assert r["ring_late_ms"] > 50.0 + ms["ring"] / 2
    s8, s16 = r["ring_speedup_8_16"]
    assert 7.5 < s8 < 8.0
    assert 9.5 < s16 < 10.5
    assert r["weights_differ_rerun"]["sync"] == 0.0
    assert r["weights_differ_rerun"]["sync:arrival"] > 0.5
    assert r["step_ms"]["async"] < r["step_ms"]["sync"]


def test_07_reveal(run) -> None:  # type: ignore[no-untyped-def]
    _, r = run("07_reveal.ipynb")
    s = r["numpy_sum"]
    assert (s["verdict"], s["family"], s["checked"], s["differing"]) == ("tree", ["numpy"], 10_000, 0)
    assert s["calls"] <= 1000 * 10  # n log2 n at n = 1000
    assert r["numpy_depth"] == {"7": 6, "8": 3, "128": 18, "129": 12}
    g = r["gloo"]
    assert (g["verdict"], g["families"][0], g["runs"], g["differing"], g["disagreeing"]) == (
        "tree",
        "ring:gloo",
        4,
        0,
        0,
    )
    assert g["checked"] >= 10_000
    assert g["calls"] <= 8
    for fmt, low in r["gloo_low"].items():  # fp16 and bf16 on the same ranks: summed in their own format
        assert (low["verdict"], low["accumulate"], low["family"], low["differing"]) == ("tree", fmt, "ring:gloo", 0)
        assert low["checked"] >= 10_000
    assert sorted(r["gloo_low"]) == ["bf16", "fp16"]
    for v in r["ab"].values():
        assert (v["A_reproducible"], v["B_reproducible"]) == (True, False)
        assert v["B_vs_A"] > 0


_QUOTE = re.compile(r"\d(?:\.\d+)?\s*(?:%|×|ulp|times)|\d\.\d")  # a measured number in prose


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_quoted_numbers_are_asserted_in_the_cell_above(path: Path) -> None:
    """A markdown cell that quotes a measured number follows a code cell that asserts what it quotes.

    (A heuristic for the rule "every number quoted in the prose is computed in a cell and asserted
    there": it cannot check the values, which the asserts themselves do when the notebook runs.)
    """
    nb = nbformat.read(path, as_version=4)
    last_code = None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            last_code = cell.source
        elif last_code is not None and _QUOTE.search(re.sub(r"`[^`]*`|\$[^$]*\$", "", cell.source)):
            assert "assert" in last_code, f"{path.name} cell {i} quotes numbers the code cell above does not assert"

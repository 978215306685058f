"""The house rules, checked on the source: imports flow one way, no circles, no borrowed privates.

The layers and what each may import are written down in ``docs/architecture.md``.
Every import counts, including those inside functions (they hide circles, not remove them).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fpreduce"

# layer -> the layers it may import (besides itself). The facade (fpreduce/__init__.py),
# the version and the public strategies shim sit outside the layering.
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "plans": {"base"},
    "core": {"base", "plans"},
    "analysis": {"base", "plans", "core"},
    "run": {"base", "plans", "core", "analysis"},
    "report": {"base", "plans", "core", "analysis", "run"},
    "backends": {"base", "plans", "core", "run"},
    "cli": {"base", "plans", "core", "analysis", "run", "report", "backends"},
    "torch": {"base"},  # fpreduce.torch: the DDP recorder, beside the layers (optional torch)
}
OUTSIDE = {"fpreduce", "fpreduce._version", "fpreduce.strategies"}
# report reads a run only through the run directory module (and the config it resolves)
NARROW = {"report": {"fpreduce.run.rundir", "fpreduce.run.config"}}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ["fpreduce", *p.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _layer(mod: str) -> str | None:
    if mod in OUTSIDE:
        return None
    part = mod.split(".")[1]
    return part if part in ALLOWED else None


def _imports(mod: str, path: Path) -> Iterator[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for every fpreduce import in a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "fpreduce":
                    yield a.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            if base.split(".")[0] != "fpreduce":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in MODULES:
                    yield sub, "", node.lineno
                else:
                    yield base, a.name, node.lineno


EDGES = [(m, t, name, line) for m, p in MODULES.items() for t, name, line in _imports(m, p)]


def _is_private(mod: str, name: str) -> bool:
    return any(part.startswith("_") and part != "__init__" for part in mod.split(".")[1:]) or name.startswith("_")


def test_layers_are_read() -> None:
    assert len(MODULES) > 30
    assert {_layer(m) for m in MODULES} >= set(ALLOWED)
    assert len(EDGES) > 100


def test_no_upward_import() -> None:
    bad = []
    for src, dst, _, line in EDGES:
        a, b = _layer(src), _layer(dst)
        if a is None or b is None or a == b:
            continue
        if b not in ALLOWED[a] or (a in NARROW and b == "run" and dst not in NARROW[a]):
            bad.append(f"{MODULES[src].relative_to(ROOT.parent)}:{line} imports {dst} ({a} -> {b})")
    assert not bad, "\n".join(bad)


def test_no_private_name_from_another_layer() -> None:
    bad = []
    for src, dst, name, line in EDGES:
        if dst in OUTSIDE or _layer(src) is None or _layer(src) == _layer(dst):
            continue
        if _is_private(dst, name):
            bad.append(f"{MODULES[src].relative_to(ROOT.parent)}:{line} imports {dst} {name}".rstrip())
    assert not bad, "\n".join(bad)


def _circles() -> list[list[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for src, dst, _, _ in EDGES:
        if src != dst and src not in OUTSIDE and dst not in OUTSIDE:
            # a package's __init__ re-exporting its own submodules is not a dependency of them
            if dst.startswith(src + "."):
                continue
            graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    assert _circles() == []


@pytest.mark.parametrize(
    ("code", "expect"),
    [
        ("from fpreduce.run.runner import run_experiment\n", ["fpreduce.run.runner"]),
        ("from fpreduce.core import engine\n", ["fpreduce.core.engine"]),
        ("from . import engine\n", ["fpreduce.core.engine"]),
        ("def f():\n    from fpreduce.report import plots\n", ["fpreduce.report.plots"]),
    ],
    ids=["from-module", "from-package", "relative", "inside-function"],
)
def test_import_reader(tmp_path: Path, code: str, expect: list[str]) -> None:
    """The reader sees every kind of import, so the checks above can fail."""
    p = tmp_path / "x.py"
    p.write_text(code)
    got = [t for t, _, _ in _imports("fpreduce.core.x", p)]
    assert got == expect
    assert _layer(got[0]) in ALLOWED


def _rooms() -> dict[str, str]:
    """docs/architecture.md's layer map: the text of each layer's room (``base`` .. ``cli``, ``torch``)."""
    doc = (ROOT.parent / "docs" / "architecture.md").read_text()
    block = doc.split("```")[1]
    rooms: dict[str, str] = {}
    layer = ""
    for line in block.splitlines():
        if line.startswith("fpreduce/"):
            layer = line.split()[0].removeprefix("fpreduce/").strip("/").removesuffix(".py")
            rooms[layer] = ""
        if layer:
            rooms[layer] += line + "\n"
    return rooms


def test_every_module_is_named_in_its_room() -> None:
    """Cohesion: every module is named in its layer's room of docs/architecture.md (with its concept),
    and the room names no module that does not exist."""
    rooms = _rooms()
    missing, stale = [], []
    for mod, p in MODULES.items():
        layer = _layer(mod)
        if layer is None or p.name in ("__init__.py", "__main__.py") or layer == "torch":
            continue
        if not re.search(rf"(?<![\w.]){re.escape(p.name)}", rooms.get(layer, "")):
            missing.append(f"{mod} ({p.name} not in the {layer}/ room)")
    for layer, text in rooms.items():
        for name in re.findall(r"(?<![\w./])(_?[a-z][a-z0-9_]*\.py)\b", text):
            if layer != "torch" and not (ROOT / layer / name).exists():
                stale.append(f"{layer}/{name}")
    assert not missing + stale, "\n".join(missing + [f"named but absent: {s}" for s in stale])


def test_function_sizes() -> None:
    """No function over ~80 lines (90 with its docstring): a function is read at once."""
    long = []
    for mod, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 90:
                    long.append(f"{mod}.{node.name}: {size} lines")
    assert not long, "\n".join(long)

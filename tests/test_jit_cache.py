"""The compiled kernels' disk cache and first-compile notice (fpreduce.base.jit).

Each check runs a small ``fr.reduce`` in a fresh process with ``NUMBA_CACHE_DIR`` pointed
at a temporary directory: the first process compiles (one notice line per group of
kernels, however often they are called), a second finds everything cached (no notice),
and no kernel file lands next to fpreduce's sources.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fpreduce
from fpreduce.base import jit

needs_jit = pytest.mark.skipif(not jit.AVAILABLE, reason="numba not installed (or FPREDUCE_NO_JIT)")
NOTICE = "fpreduce: compiling kernels for "
SCRIPT = """
import numpy as np
import fpreduce as fr
X = np.arange(4 * 300, dtype=np.float32).reshape(4, 300)
for _ in range(2):
    fr.reduce(X, "sequential", input="bf16", accumulate="fp32")
"""


def reduce_in_process(cache: Path, **env: str) -> list[str]:
    """The notice lines of a new process running SCRIPT with its kernels cached in ``cache``."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FPREDUCE_QUIET", "FPREDUCE_NO_JIT")}
    environ.update(NUMBA_CACHE_DIR=str(cache), **env)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=environ, capture_output=True, text=True, check=True)
    return [line for line in done.stderr.splitlines() if line.startswith(NOTICE)]


def kernel_files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*.nb[ic]")}


@needs_jit
def test_first_compile_says_so_once_then_the_cache_is_silent(tmp_path):
    package = Path(fpreduce.__file__).parent
    before = kernel_files(package)
    cold = reduce_in_process(tmp_path)
    assert cold, "a cold cache compiles with a notice"
    assert len(cold) == len(set(cold)), "one line per group of kernels, though they ran twice"
    assert all(f"(once, cached in {tmp_path}" in line for line in cold)
    assert any(tmp_path.rglob("*.nbi")), "the kernels are cached where NUMBA_CACHE_DIR says"
    assert reduce_in_process(tmp_path) == [], "a warm cache compiles nothing: no notice"
    assert kernel_files(package) == before, "no kernel file written next to the sources"


@needs_jit
def test_quiet_silences_the_notice(tmp_path):
    assert reduce_in_process(tmp_path, FPREDUCE_QUIET="1") == []
    assert any(tmp_path.rglob("*.nbi")), "compiled and cached all the same"


def test_cache_dir_is_the_users_unless_numba_cache_dir_says(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert jit.cache_dir() == str(tmp_path)
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    where = Path(jit.cache_dir())
    assert where.name == jit.source_digest()
    assert where.parent.name == "numba"
    assert where.parent.parent.name.lower() in ("fpreduce", "cache")  # platformdirs: .../fpreduce (Windows: ...\Cache)
    assert Path(fpreduce.__file__).parent not in where.parents


def test_the_cache_follows_the_kernels_sources_and_nothing_else(tmp_path):
    """An edit of a module whose functions a kernel may inline (base, plans, core) is a new cache; numba's own
    check (the defining file's time stamp) would keep a stale inlined copy. The CLI and the runner are not."""
    root = Path(fpreduce.__file__).parent
    for layer in ("base", "plans", "core", "cli"):
        (tmp_path / layer).mkdir()
        for f in (root / layer).glob("*.py"):
            (tmp_path / layer / f.name).write_bytes(f.read_bytes())
    first = jit.source_digest(tmp_path)
    assert first == jit.source_digest(root) == jit.source_digest()
    (tmp_path / "cli" / "__main__.py").write_text("# edited")
    assert jit.source_digest(tmp_path) == first
    rounder = tmp_path / "core" / "_kernels_round.py"
    rounder.write_bytes(rounder.read_bytes() + b"\n")
    edited = jit.source_digest(tmp_path)
    assert edited != first
    assert len(edited) == 16


def test_threads_calling_a_lazy_kernel_first_make_it_once(monkeypatch):
    """jit()'s kernel is made on its first call; threads making first calls at once (base.threads.run does) share
    one kernel instead of each making its own."""
    import threading
    import time

    made = []

    def kernel(fn, what, seconds, **options):  # a slow maker: the threads overlap inside it
        made.append(fn)
        time.sleep(0.05)
        return fn

    monkeypatch.setattr(jit, "AVAILABLE", True)
    monkeypatch.setattr(jit, "kernel", kernel)
    twice = jit.jit(lambda x: 2 * x)
    assert twice is not None
    start, got = threading.Barrier(4), []

    def first_call(x: int) -> None:
        start.wait()
        got.append(twice(x))

    workers = [threading.Thread(target=first_call, args=(x,)) for x in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(got) == [0, 2, 4, 6]
    assert len(made) == 1


def test_module_setups_run_one_thread_at_a_time() -> None:
    """``jit.serialized``: threads calling a module's setup together run it one after another (re-entrant: a
    setup calls the setups of the modules below it), and every module that makes its functions numba functions
    on first use does so through it (the engine's column blocks run on threads)."""
    import threading
    import time

    from fpreduce.core import _binned, _chain, _hwround, _kernels_round, _narrow, _rotated, _rows64, _steps, _tall

    inside: list[int] = []
    overlaps: list[int] = []

    @jit.serialized
    def setup(depth: int = 0) -> None:
        inside.append(depth)
        if len(inside) > 1 + depth:
            overlaps.append(len(inside))
        time.sleep(0.02)
        if depth == 0:
            setup(1)
        inside.pop()

    threads = [threading.Thread(target=setup) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    assert not inside
    wrapper = jit.serialized(lambda: None).__code__
    for fn in (_narrow.compile_all, _rows64.compile_all, _rotated.compile_all, _hwround.compile_all,
               _kernels_round.compile_all, _tall._compile_helpers, _binned._compile_helpers, _steps._kernel,
               _chain._setup):  # fmt: skip
        assert fn.__code__ is wrapper, fn

"""Optional compiled kernels: numba when installed (the ``fast`` extra), else None; the one compile registry.

A few hot loops (the exact oracle's column scan, the runner's per-element metrics)
need one pass over the data where numpy needs several. They are written for numba
and used only when it is installed; every caller keeps its numpy path, and the
tests check that both give the same bits. ``FPREDUCE_NO_JIT=1`` forces the numpy
paths. This module is the one switch: every caller asks :func:`enabled` at call time,
and tests force the numpy paths with ``with disabled(): ...``. numba is imported, and
a kernel compiled (or loaded from numba's on-disk cache: about 0.4 s once per
process), on a kernel's first call, so importing fpreduce stays fast.

Every kernel is made by :func:`kernel` (or :func:`jit`, its lazy form): nopython, no
GIL, cached on disk in :func:`cache_dir` (``$NUMBA_CACHE_DIR`` if set, else the user's
cache directory, never the installed package), and registered under the name of what it
computes. When a process compiles a kernel the disk cache does not hold (numba's
``numba:compile`` event fires only then), one line on stderr says so, once per group:
``fpreduce: compiling kernels for <what> (once, cached in <dir>; ~N s)``; a compile that
takes longer adds a line every :data:`EVERY` seconds until it ends (a log shows it is
alive): ``fpreduce: still compiling kernels for <what>: 45 s so far (3 compiled before it
in this process)``, then ``fpreduce: compiled kernels for <what> in 52 s``. Silent when
the cache is warm, with ``FPREDUCE_QUIET=1``, or after :func:`quiet`.

>>> jit(lambda x: x) is None or callable(jit(lambda x: x))
True
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "AVAILABLE",
    "EVERY",
    "cache_dir",
    "disabled",
    "enabled",
    "jit",
    "jitable",
    "kernel",
    "numba",
    "quiet",
    "source_digest",
]

AVAILABLE = not os.environ.get("FPREDUCE_NO_JIT") and importlib.util.find_spec("numba") is not None
_enabled = AVAILABLE


def enabled() -> bool:
    """Whether the compiled kernels are used now: numba installed, no ``FPREDUCE_NO_JIT``, not :func:`disabled`."""
    return _enabled


@contextmanager
def disabled() -> Iterator[None]:
    """Force every numpy path inside the block (tests compare them with the kernels); not thread safe.

    >>> with disabled():
    ...     enabled()
    False
    """
    global _enabled
    saved, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = saved


def numba() -> Any:
    """The numba module, imported with fpreduce's cache directory and code-generation setting (every kernel
    compiles through it).

    numba reads ``NUMBA_CACHE_DIR`` when it is first imported: it is set here first (to
    :func:`cache_dir`, so processes this one starts cache there too), and numba's own
    setting follows it if numba was imported before. Every kernel then caches in
    :func:`cache_dir`, none next to its source (a normal install: site-packages).

    On x86-64, LLVM's ``x86-cmov-converter`` is turned off: it rewrites a conditional
    move on a loop's critical path into a branch, which the rounding kernels' sign
    tests (a sum's sign decides the direction of a directed rounding) then mispredict
    on half of the additions. Measured on the pairwise fold of 10^5 x 16 bf16 in mode
    ``up``: 10.6 ns per addition with the pass, against ``down`` at 4.5 ns, whose
    kernel kept its conditional move. The setting is LLVM's (process-wide: it changes
    how later code is compiled, never what it computes); an LLVM without the option
    ignores it.
    """
    if not _TUNED:
        os.environ["NUMBA_CACHE_DIR"] = cache_dir()
    import numba as nb

    if not _TUNED:
        config: Any = nb.config  # (read when a kernel's cache is set up: numba may have been imported before)
        config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
        if platform.machine().lower() in ("x86_64", "amd64"):
            import llvmlite.binding as llb

            llb.set_option("fpreduce", "-x86-cmov-converter=false")
            _wide_vectors(config, llb)
        _listen(nb)
        _TUNED.append(True)
        for fn in _JITABLE:
            _register(fn)
    return nb


def _wide_vectors(config: Any, llb: Any) -> None:
    """On a processor with AVX-512, let LLVM vectorize with 512-bit registers (numba's ``CPU_FEATURES``: the host's
    features less ``prefer-256-bit``, a tuning LLVM sets for Intel server processors), unless the user set them.

    The kernels' loops then run 16 float32 or 8 int64 lanes per instruction instead of 8 or 4 (the counter
    generator's 64-bit products among them). Measured on 64 x 2^20 bf16 words (Xeon, Emerald Rapids, one thread):
    the nearest-even wide fold 2.5x -> 1.5x torch.sum's time, stochastic rounding 1.25 -> 0.79 ns per addition.
    Vector width changes how many lanes an instruction computes, never a lane's value: no kernel uses fast-math,
    so the bits are the same. Set before numba's first compile (its code generator reads it then), else ignored.
    """
    if config.CPU_FEATURES is not None:
        return
    features = llb.get_host_cpu_features()
    if features.get("avx512f") and features.get("avx512dq"):
        config.CPU_FEATURES = features.flatten() + ",-prefer-256-bit"


def cache_dir() -> str:
    """Where the compiled kernels are cached: ``$NUMBA_CACHE_DIR`` if set, else ``<user cache dir>/numba/<digest>``.

    The user cache directory is ``platformdirs.user_cache_dir("fpreduce")`` (Linux:
    ``$XDG_CACHE_HOME/fpreduce``, by default ``~/.cache/fpreduce``), or that Linux
    default without platformdirs. ``<digest>`` is :func:`source_digest`: numba checks a
    cached kernel against its own file's time stamp only, not against the files whose
    functions it inlined (a rounding function of ``core`` inlined into a fold of another
    module), so an upgrade or an edit of those would load a stale kernel; a new digest
    is a new, empty cache instead.

    >>> os.path.basename(os.path.dirname(cache_dir())) == "numba" or "NUMBA_CACHE_DIR" in os.environ
    True
    """
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return given
    try:
        import platformdirs

        base = platformdirs.user_cache_dir("fpreduce")
    except ImportError:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(home, "fpreduce")
    return os.path.join(base, "numba", source_digest())


def source_digest(root: Path | None = None) -> str:
    """16 hex digits of SHA-256 over the sources of the layers that define or inline kernels (``base``,
    ``plans``, ``core`` under ``root``, by default this package): their names and bytes, in name order.

    Editing the command line or the runner keeps the cache; editing a kernel, or anything a kernel may
    inline, starts a new one (about 1 ms to compute, once per process).
    """
    if root is None and _DIGEST:
        return _DIGEST[0]
    top = Path(__file__).resolve().parent.parent if root is None else root
    h = hashlib.sha256()
    for layer in ("base", "plans", "core"):
        for f in sorted((top / layer).glob("*.py")):
            h.update(f"{layer}/{f.name}\0".encode())
            h.update(f.read_bytes())
    digest = h.hexdigest()[:16]
    if root is None:
        _DIGEST.append(digest)
    return digest


_DIGEST: list[str] = []


def quiet(on: bool = True) -> None:
    """Silence (or not) the first-compile notice, in this process and the ones it starts (``FPREDUCE_QUIET``)."""
    _QUIET[0] = on
    if on:
        os.environ["FPREDUCE_QUIET"] = "1"
    else:
        os.environ.pop("FPREDUCE_QUIET", None)


def kernel(fn: Callable[..., Any], what: str | None = None, seconds: float = 0.0, **options: Any) -> Any:
    """``fn`` as a numba function (nopython, no GIL, cached in :func:`cache_dir`; compiled per signature on its
    first call), registered for the first-compile notice under ``what`` (default: its module).

    ``seconds``: the CPU time a first compile of the group takes (a hint in the notice);
    ``options``: numba's (``inline="always"``, ``pipeline_class=...``).
    """
    _GROUPS[fn] = (what or _module_of(fn), seconds)
    return numba().njit(cache=True, nogil=True, **options)(fn)


def compile_names(
    ns: dict[str, Any], names: Iterable[str], what: str | None = None, *, calls: Collection[str] = ()
) -> None:
    """Replace the plain functions ``names`` of a module's namespace ``ns`` by their :func:`kernel`, in place.

    A kernel resolves the global names of its callees when it compiles, so a module makes its helpers numba
    functions (this) before its kernels first run. Each is inlined where it is called (``inline="always"``)
    but those in ``calls``, compiled as calls of their own. A name already compiled is left as it is, so a
    module may call this every time a kernel is asked for.
    """
    plain = type(compile_names)
    for name in names:
        if isinstance(ns[name], plain):
            ns[name] = kernel(ns[name], what, inline="never" if name in calls else "always")


_SETUP = threading.RLock()  # held while a module makes its functions numba functions (:func:`serialized`)


def serialized(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, a module's setup (it makes the module's functions numba functions, rewriting its globals and
    registering overloads, once), run by one thread at a time, under one re-entrant lock (a setup calls the
    setups of the modules below it): threads that first use a module together (the column blocks of
    ``fpreduce.core.engine``, a caller's own threads) would both rewrite it, one of them reading globals the
    other has half rewritten."""

    @functools.wraps(fn)
    def setup(*args: Any, **kwargs: Any) -> Any:
        with _SETUP:
            return fn(*args, **kwargs)

    return setup


def jitable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Let kernels call ``fn`` (numba's ``register_jitable``, inlined where called), once numba is imported;
    ``fn`` itself is returned unchanged: plain Python when Python calls it, and no numba import here."""
    _JITABLE.append(fn)
    if _TUNED:
        _register(fn)
    return fn


def _register(fn: Callable[..., Any]) -> None:
    from numba.extending import register_jitable

    register_jitable(inline="always")(fn)


def _module_of(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__module__", "") or "fpreduce")


def _listen(nb: Any) -> None:
    """Install the first-compile notice on numba's ``numba:compile`` event (a disk-cache miss starting): one line
    per group, for the outermost of nested compiles (a kernel's callees compile inside it)."""
    from numba.core import event

    def ours(ev: Any) -> Any:
        fn = getattr(ev.data.get("dispatcher"), "py_func", None)
        return fn if str(getattr(fn, "__module__", "")).startswith("fpreduce") else None

    class Notice(event.Listener):  # type: ignore[misc]
        def on_start(self, ev: Any) -> None:
            fn = ours(ev)
            if fn is None:
                return
            _DEPTH[0] += 1
            what, seconds = _GROUPS.get(fn, (_module_of(fn), 0.0))
            if _DEPTH[0] == 1:
                _BEATS.append(_beat(what))
            if _DEPTH[0] > 1 or what in _ANNOUNCED or _QUIET[0] or os.environ.get("FPREDUCE_QUIET"):
                return
            _ANNOUNCED.add(what)
            hint = f"; ~{seconds:.0f} s" if seconds >= 1 else ""
            sys.stderr.write(f"fpreduce: compiling kernels for {what} (once, cached in {cache_dir()}{hint})\n")
            sys.stderr.flush()

        def on_end(self, ev: Any) -> None:
            if ours(ev) is not None:
                _DEPTH[0] -= 1
                if _DEPTH[0] == 0 and _BEATS:
                    _BEATS.pop()()
                    _COMPILED[0] += 1

    event.register("numba:compile", Notice())


#: seconds between two lines of a compile still under way
EVERY = 15.0


def _beat(what: str) -> Callable[[], None]:
    """While one kernel (and the callees it compiles) compiles: a line every :data:`EVERY` seconds, and one at its
    end if any was written; the compile calls the function returned when it ends."""
    done, start, before = threading.Event(), time.monotonic(), _COMPILED[0]

    def say(text: str) -> None:
        if not (_QUIET[0] or os.environ.get("FPREDUCE_QUIET")):
            sys.stderr.write(f"fpreduce: {text}\n")
            sys.stderr.flush()

    def beat() -> None:
        said = False
        while not done.wait(EVERY):
            said = True
            say(
                f"still compiling kernels for {what}: {time.monotonic() - start:.0f} s so far "
                f"({before} compiled before it in this process)"
            )
        if said:
            say(f"compiled kernels for {what} in {time.monotonic() - start:.0f} s")

    thread = threading.Thread(target=beat, name="fpreduce-compile-progress", daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join(1.0)  # (its last line before the compile's caller goes on)

    return stop


_TUNED: list[bool] = []
_QUIET = [False]
_DEPTH = [0]  # fpreduce compiles under way (nested: a kernel's callees)
_BEATS: list[Callable[[], None]] = []  # stops the outermost compile's progress lines
_COMPILED = [0]  # outermost compiles ended in this process
_GROUPS: dict[Callable[..., Any], tuple[str, float]] = {}
_ANNOUNCED: set[str] = set()
_JITABLE: list[Callable[..., Any]] = []


def jit(
    fn: Callable[..., Any], what: str | None = None, seconds: float = 0.0, **options: Any
) -> Callable[..., Any] | None:
    """``fn`` made by :func:`kernel` (with numba's ``options``) on its first call (numba imported then), or None
    without numba. Threads may make the first calls at once (:func:`fpreduce.base.threads.run`): one makes the
    kernel, the others wait for it (numba then compiles each signature once, under its own lock)."""
    if not AVAILABLE:
        return None
    compiled: list[Callable[..., Any]] = []
    lock = threading.Lock()

    def call(*args: Any) -> Any:
        if not compiled:
            with lock:
                if not compiled:
                    compiled.append(kernel(fn, what, seconds, **options))
        return compiled[0](*args)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call

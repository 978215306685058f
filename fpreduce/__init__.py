"""fpreduce: bit-exact emulation and measurement of floating-point reduction order effects.

The package is layered; imports flow one way, down this list (``docs/architecture.md``
has the full map and ``tests/test_layers.py`` enforces it):

* ``fpreduce.base``: errors, the compiled-kernel switch, dtype guards (imports nothing);
* ``fpreduce.plans``: reduction trees of the collectives and order drawing;
* ``fpreduce.core``: formats, rounding, exact oracle, engine, algorithms, metrics;
* ``fpreduce.analysis``: order outcomes, hypothesis strategies, reveal (a black box's tree as a plan);
* ``fpreduce.run``: configuration, gradient sources, the experiment runner, run directories;
* ``fpreduce.report``: figures and PDF reports of a run directory;
* ``fpreduce.backends``: the real libraries (Open MPI, gloo) and runs on them;
* ``fpreduce.cli``: the ``fpreduce`` command.

``import fpreduce`` loads the plans and the core only; the runner, the reports,
matplotlib and numba load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from fpreduce import plans
from fpreduce._version import __version__
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.engine import explain, reduce, reduce_reference
from fpreduce.core.exact import ExactSum, exact_sum, exact_sum_mpmath
from fpreduce.core.fabsum import fabsum
from fpreduce.core.formats import FORMATS, Format, as_native, format_name, from_bits, get_format, to_bits, ulp
from fpreduce.core.metrics import backward_bounds
from fpreduce.core.metrics import backward_errors as backward_error
from fpreduce.core.primitives import partial_sums, round_inputs, stagnation
from fpreduce.core.products import dot, matvec
from fpreduce.core.rounding import MODES, Mode, round_to
from fpreduce.core.routes import Decision, Route
from fpreduce.core.routes import trace as trace_routes

__all__ = [
    "FORMATS",
    "MODES",
    "Decision",
    "ExactSum",
    "Format",
    "InvalidArgument",
    "Mode",
    "NotATree",
    "Revelation",
    "CollectiveRevelation",
    "Route",
    "OrderOutcomes",
    "Results",
    "__version__",
    "as_native",
    "backward_bounds",
    "backward_error",
    "dot",
    "exact_sum",
    "explain",
    "exact_sum_mpmath",
    "fabsum",
    "format_name",
    "from_bits",
    "get_format",
    "load_config",
    "load_run",
    "matvec",
    "order_outcomes",
    "partial_sums",
    "plans",
    "reduce",
    "reduce_reference",
    "reveal",
    "reveal_collective",
    "revelation",
    "collective_revelation",
    "round_inputs",
    "round_to",
    "stagnation",
    "run_experiment",
    "timing",
    "to_bits",
    "trace_routes",
    "ulp",
]

# Public names whose modules are heavier (the runner, the analysis): imported on first use.
_LAZY = {
    "OrderOutcomes": "fpreduce.analysis.outcomes",
    "order_outcomes": "fpreduce.analysis.outcomes",
    "NotATree": "fpreduce.analysis.reveal",
    "Revelation": "fpreduce.analysis.reveal",
    "reveal": "fpreduce.analysis.reveal",
    "revelation": "fpreduce.analysis.reveal",
    "CollectiveRevelation": "fpreduce.analysis.reveal_collective",
    "collective_revelation": "fpreduce.analysis.reveal_collective",
    "reveal_collective": "fpreduce.analysis.reveal_collective",
    "load_config": "fpreduce.run.config",
    "run_experiment": "fpreduce.run.runner",
    "Results": "fpreduce.run.rundir",
    "load_run": "fpreduce.run.rundir",
}


def __getattr__(name: str) -> Any:
    if name == "timing":  # the cost model and event timeline: fr.timing.cost(plan, n, nbytes, profile)
        return importlib.import_module("fpreduce.core.timing")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fpreduce' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""Hypothesis strategies for testing reductions; see :mod:`fpreduce.analysis.strategies`.

Kept at ``fpreduce.strategies`` because that is the documented import
(``from fpreduce import strategies as fst``).
"""

from fpreduce.analysis.strategies import (
    FAMILIES,
    Problem,
    arrays,
    formats,
    permutations,
    plans,
    problems,
    shapes,
    values,
    worker_counts,
)

__all__ = [
    "FAMILIES",
    "Problem",
    "arrays",
    "formats",
    "permutations",
    "plans",
    "problems",
    "shapes",
    "values",
    "worker_counts",
]

"""The arithmetic: formats, rounding, the exact oracle, the reduction engine, algorithms, metrics.

Modules, each importing only those above it (and ``base``, ``plans``):

* ``formats``: the table of formats, ulp, bit views;
* ``rounding``: vectorized rounding onto a format, the overflow rule (``overflow_value``);
* ``_reference``: the scalar rounder and IEEE addition over exact integers and rationals;
* ``exact`` (+ ``_exact_limbs``, ``_exact_proof``): the exact column sums, rounded once;
* ``options``: the closed sets ``Algorithm`` and ``Average``;
* ``arith``: IEEE addition in an accumulator format (``add_rounded``), loading, scaling;
* ``algorithms``: compensated, binned and exact sums;
* ``_fastpath``: the engine's in-place float32 folds;
* ``engine``: ``reduce`` (the block scheduler) and ``reduce_reference``;
* ``metrics``: errors against the exact sum, distances between results, bounds.

Each fast path sits beside its slow reference (``_reference``, ``reduce_reference``,
``compensated_reference``) and the tests prove them equal.
"""

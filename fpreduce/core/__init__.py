"""The arithmetic: formats, rounding, the exact oracle, the reduction engine, algorithms, metrics.

Each fast path sits beside its slow reference (``_reference``, ``reduce_reference``,
``compensated_reference``) and the tests prove them equal. Imports ``base`` and ``plans`` only.
"""

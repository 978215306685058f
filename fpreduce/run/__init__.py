"""Experiments: configuration, gradient sources, order policies, the runner, sweeps, run directories.

``rundir`` is the only reader and writer of a run directory's files. Imports ``base``,
``plans``, ``core`` and ``analysis``.
"""

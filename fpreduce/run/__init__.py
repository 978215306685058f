"""Experiments: configuration, gradient sources, order policies, the runner, sweeps, run directories.

``config`` (the TOML config, the order policy parsed once), ``sources`` and ``model``
(where gradients come from), ``policies`` (the plan of each arm at each step), ``runner``
and ``stepmetrics`` (the experiment), ``sweep`` (a grid of small experiments) and
``rundir`` (the run directory's schema: the only reader and writer of its files);
``schema`` validates every document read (TOML tables, JSON documents). Imports ``base``, ``plans``, ``core``
and ``analysis``.
"""

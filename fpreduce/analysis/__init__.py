"""Analyses built on the core: order outcomes of one sum, hypothesis strategies.

Imports ``base``, ``plans`` and ``core`` only.
"""

"""Analyses built on the core: order outcomes of one sum, hypothesis strategies, reveal (a black box's tree).

Imports ``base``, ``plans`` and ``core`` only.
"""

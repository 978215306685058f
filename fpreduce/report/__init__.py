"""Figures and PDF reports: pure functions of a run directory, read through ``fpreduce.run.rundir``."""

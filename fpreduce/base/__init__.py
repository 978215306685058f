"""The bottom layer: the error type and name hints, the compiled-kernel switch, dtype guards.

Imports nothing from the rest of fpreduce.
"""

"""The one check the tests of a real collective library start with."""

from __future__ import annotations

import os

import pytest

import fpreduce as fr
from fpreduce.backends import gloo, mpi


def require(backend: str) -> None:
    """Skip the test when ``backend`` (``mpi`` or ``gloo``) is missing here; under CI, fail it instead."""
    try:
        (mpi if backend == "mpi" else gloo).check_available()
    except fr.InvalidArgument as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but backend {backend!r} is missing: {e}")
        pytest.skip(str(e))

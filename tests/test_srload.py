"""Stochastic rounding of inputs, averages and outputs draws by element (the counters of core/_srload.py).

A reduction's result depends on the seed alone: the compiled and numpy paths and a
vector reduced in pieces give the same bits, the conversion of fp32 inputs to a bf16
accumulator is :func:`fpreduce.round_inputs`, and each rounding goes up exactly when
the documented uniform (an independent pure-Python splitmix64) is below its fraction.
"""

import numpy as np
import pytest
from test_tall import same, splitmix_uniform

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core.primitives import INPUT_T

# The counters of the documented law (module fpreduce.core._srload): the stream of each rounding outside the
# additions. Written here, not imported: a change of any of them changes every seeded stochastic result.
SCALE_T = (1 << 60) + (1 << 59)  # worker i's premultiplication or predivision: SCALE_T + i
AFTER_T = (1 << 61) + (1 << 59)  # the division of the sum by n (average="after")
OUTPUT_T = (1 << 61) + (1 << 60)  # the rounding of the result to the output format

CASES = [
    {"input": "fp32", "accumulate": "bf16"},
    {"input": "fp32", "accumulate": "fp16", "average": "predivide"},
    {"input": "bf16", "accumulate": "bf16", "average": "premultiply"},
    {"input": "fp32", "accumulate": "fp32", "output": "bf16", "average": "after"},
    {"input": "fp16", "accumulate": "fp8_e5m2", "output": "fp8_e4m3"},
]


@pytest.mark.parametrize("plan", ["sequential", "pairwise", "ring:nccl", "rabenseifner", "atomic"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_bits_compiled_numpy_and_pieces(plan, case):
    X = (np.random.default_rng(case).standard_normal((6, 900)) * 3).astype(np.float32)
    p = fr.plans.parse(plan, 6, seed=1)
    kw = {**CASES[case], "rounding": "stochastic"}
    whole = fr.reduce(X, p, seed=3, **kw)
    with jit.disabled():
        assert same(whole, fr.reduce(X, p, seed=3, **kw))
    parts = [fr.reduce(X[:, a:b], p, seed=3, offset=a, total=900, **kw) for a, b in ((0, 333), (333, 900))]
    assert same(whole, np.concatenate(parts))
    assert not same(whole, fr.reduce(X, p, seed=4, **kw))


def test_inputs_converted_as_round_inputs_does():
    X = np.random.default_rng(7).standard_normal((9, 500)).astype(np.float32)
    for plan in ("sequential", "ring:nccl"):
        got = fr.reduce(X, plan, input="fp32", accumulate="bf16", rounding="stochastic", seed=5)
        R = fr.round_inputs(X, "bf16", 5)
        assert same(got, fr.reduce(R, plan, input="bf16", accumulate="bf16", rounding="stochastic", seed=5))


@pytest.mark.parametrize("seed", [0, 99])
def test_each_rounding_goes_up_iff_its_uniform_is_below_the_fraction(seed):
    """1 + d 2**-10 lies d/8 of a bf16 step above 1: the input conversion (one worker: the
    result is the converted input) and the output rounding go up iff u < d/8."""
    m = 256
    d = np.arange(m) % 8
    key = int(np.random.default_rng(seed).integers(0, 2**63))
    one = np.array([1 + d * 2.0**-10], dtype=np.float32)
    got = fr.reduce(one, "sequential", input="fp32", accumulate="bf16", rounding="stochastic", seed=seed)
    u = np.array([splitmix_uniform(key, e, INPUT_T) for e in range(m)])
    assert np.array_equal(got, np.where(u < d / 8, 1 + 2.0**-7, 1.0).astype(np.float32))
    two = np.stack([np.ones(m), d * 2.0**-10]).astype(np.float32)  # the fp32 sum is exact
    got = fr.reduce(two, "sequential", accumulate="fp32", output="bf16", rounding="stochastic", seed=seed)
    u = np.array([splitmix_uniform(key, e, OUTPUT_T) for e in range(m)])
    assert np.array_equal(got, np.where(u < d / 8, 1 + 2.0**-7, 1.0).astype(np.float32))

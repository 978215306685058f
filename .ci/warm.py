"""Compile numba's kernel families into the on-disk cache before the tests (CI runs groups in parallel).

A fresh machine has no cache: each family costs 20-70 s of CPU to compile, in every test
process that needs it first. ``python .ci/warm.py GROUP...`` compiles the groups' kernels, one group after another, by
calling ``fr.reduce`` on small arrays of the shapes and dtypes the tests use, into
``fpreduce.base.jit.cache_dir()`` (``$NUMBA_CACHE_DIR``, else the user's cache directory),
where the tests read them.
"""

import sys

import numpy as np

import fpreduce as fr

X = np.ones((8, 4096), dtype=np.float32)
X64 = X.astype(np.float64)
GROUPS = {
    "rows": lambda: [  # the row-block kernel of core/_tall.py, float32 and float64 rows
        fr.reduce(X, "pairwise", input="bf16", accumulate="fp32"),
        fr.reduce(X64[:, :40], "sequential", input="fp64", accumulate="fp64", rounding="toward_zero"),
    ],
    "columns": lambda: [  # the scalar columns of core/_tall.py and core/_chain.py, float32 and float64
        fr.reduce(X[:, :1], "sequential", input="fp32", accumulate="fp32"),  # (one bf16 column: the chain)
        fr.reduce(X64[:, :1], "sequential", input="fp64", accumulate="fp64"),
        fr.reduce(X[:, :3], "sequential", input="fp32", accumulate="fp64", rounding="up"),
    ],
    "chain": lambda: (
        [fr.reduce(X[:, :3], p, input="bf16", accumulate="bf16", rounding="up") for p in ("sequential", "pairwise")]
        + [fr.reduce(X64[:, :1], "pairwise", input="fp64", accumulate="fp64")]
        + [fr.reduce(X64[:, :13], "sequential", input="fp64", accumulate="fp64", rounding="toward_zero")]
    ),
    "wide": lambda: [  # core/_narrow.py, core/_segments.py (a ring: core/_rotated.py) and core/_binned.py
        fr.reduce(X, "sequential", input="bf16", accumulate="fp32"),
        fr.reduce(X, "sequential", input="fp32", accumulate="fp64", rounding="up"),
        fr.reduce(X, "ring:nccl", accumulate="bf16", rounding="up"),
        fr.reduce(X, "sequential", algorithm="binned"),
        fr.reduce(X64, "sequential", input="fp64", accumulate="fp32", algorithm="binned", rounding="up"),
    ],
    "misc": lambda: [  # stochastic folds, atomics, compensated sums, primitives, the exact scan, the runner's metrics
        fr.reduce(X[:, :3], "sequential", accumulate="bf16", rounding="stochastic", seed=1),  # (wide rows: "modes")
        fr.reduce(X, "atomic", accumulate="bf16", seed=1),
        fr.reduce(X, "sequential", accumulate="bf16", algorithm="kahan"),
        fr.partial_sums(X[:, :3], accumulate="bf16"),
        fr.dot(X[0], X[1], accumulate="bf16"),
        fr.exact_sum(X),
        fr.exact_sum(X64),
        fr.exact_sum(np.ones((1 << 14, 2), dtype=np.float32)),  # tall float32 columns: the buckets, no scan
        fr.reduce(np.ones((300, 64), dtype=np.float32), "atomic", accumulate="bf16", seed=1),  # 2-byte orders
        fr.reduce(X64[:, :64], "sequential", input="fp64", accumulate="fp64", algorithm="kahan"),
        fr.round_inputs(X64[:, :8], "bf16", 1),  # stochastic rounding of inputs: float64 and float32 data
        fr.round_inputs(X[:, :8], "bf16", 1),
        run_default(),
        scaling(),
    ],
    "modes": lambda: every_mode(),
    "words": lambda: words(),
    "fp16_rows": lambda: fp16_rows(),
    "fp16_inputs": lambda: fp16_inputs(),
}

MODES = ("nearest_even", "toward_zero", "up", "down", "stochastic")


def every_mode() -> None:
    """Every rounding mode of the kernels compiled per mode (the tests' rings, few columns, and the software
    directed modes of fp32 rows that the processor's rounding otherwise takes): 30-60 s of compiling in the
    first test process that needs each, measured on a cold cache. The few columns (core/_chain.py) come last, and
    this group after "wide" and "words": by then the other process has compiled the row-block fold and the chain
    ("rows", "chain": its first groups) into the cache, which this one loads instead of compiling them again
    (30-40 s of CPU each when both did)."""
    from fpreduce.core import _hwround

    for mode in MODES:
        for acc in ("bf16", "fp16", "fp32"):
            fr.reduce(X[:4, :2100], "ring:nccl", accumulate=acc, rounding=mode, seed=1)
    with _hwround.disabled():
        for mode in MODES[1:4]:
            for plan in ("sequential", "pairwise"):
                for acc in ("fp32", "fp64", "bf16", "fp16"):
                    fr.reduce(X[:, :4100], plan, input="bf16", accumulate=acc, rounding=mode)
    fr.reduce(
        X[:2, :200], "sequential", input="fp32", accumulate="bf16", algorithm="binned", rounding="stochastic", seed=5
    )
    for mode in MODES:
        fr.reduce(X[:5, :1], "ring:nccl", input="bf16", accumulate="bf16", rounding=mode, seed=1)
    with _hwround.disabled():
        for mode in MODES[1:4]:
            for m in (1, 12):
                for acc in ("fp32", "fp64", "bf16", "fp16"):
                    fr.reduce(X[:, :m], "sequential", input="bf16", accumulate=acc, rounding=mode)


def fp16_rows() -> None:
    """The left folds of float32 rows into fp16 (the tests' fast-path, edge and hardware-rounding tests): to
    nearest, and in each directed mode (the processor's rounding, scaled onto float32's grid) from bf16 inputs
    and from fp16 inputs (whose rows are checked as read): a kernel each, ~4 s."""
    fr.reduce(X, "sequential", input="fp16", accumulate="fp16")
    for mode in MODES[1:4]:
        fr.reduce(X, "sequential", input="bf16", accumulate="fp16", rounding=mode)


def fp16_inputs() -> None:
    """fp16 inputs into fp16 in each directed mode (fp16 inputs checked as read; see :func:`fp16_rows`)."""
    for mode in MODES[1:4]:
        fr.reduce(X, "sequential", input="fp16", accumulate="fp16", rounding=mode)


def words() -> None:
    """The left folds of bf16, fp16 and fp8 arrays read as their 2- and 1-byte words (tests/test_words_threads.py):
    a kernel per word type, kind and mode, as the float32 rows' own."""
    import ml_dtypes

    B, H = X[:4, :2100].astype(ml_dtypes.bfloat16), X[:4, :2100].astype(np.float16)
    for acc in ("bf16", "fp32"):
        for mode in ("nearest_even", "toward_zero", "stochastic"):
            fr.reduce(B, "sequential", accumulate=acc, rounding=mode, seed=1)
        fr.reduce(B, "ring:gloo", accumulate=acc, total=2110)  # a ring's rows by rotation
    for acc, mode in (("fp16", "nearest_even"), ("fp32", "nearest_even"), ("fp16", "up"), ("fp32", "up")):
        fr.reduce(H, "sequential", accumulate=acc, rounding=mode)
    E4, E5 = X[:4, :2100].astype(ml_dtypes.float8_e4m3fn), X[:4, :2100].astype(ml_dtypes.float8_e5m2)  # 1-byte words
    for acc, mode in (("fp8_e4m3", "nearest_even"), ("fp32", "nearest_even"), ("fp8_e4m3", "up"), ("fp32", "up")):
        fr.reduce(E4, "sequential", accumulate=acc, rounding=mode)
    for acc in ("fp8_e5m2", "fp32", "bf16"):
        fr.reduce(E5, "sequential", accumulate=acc)
    for mode in MODES[1:4]:  # every directed mode of bf16 and fp8_e4m3 words (tests/test_narrow.py)
        fr.reduce(B, "sequential", accumulate="bf16", rounding=mode)
        fr.reduce(E4, "sequential", accumulate="fp8_e4m3", rounding=mode)


def scaling() -> None:
    """The scaling by the worker count of p <= 24-bit formats (core/_kernels_round.py scale_kernel): a loop per
    divide or multiply and mode, 1.4-2 s of CPU each, for float32 values (float64 ones are read as float32) and bf16
    words."""
    import ml_dtypes

    from fpreduce.core import arith
    from fpreduce.core._srload import _Draws
    from fpreduce.core.formats import get_format
    from fpreduce.core.rounding import Mode

    words = X[:2, :8].astype(ml_dtypes.bfloat16)  # (bf16 words: read as they are, a loop of their own)
    for kind in ("premultiply", "predivide", "ddp"):
        for mode in Mode:
            draws = _Draws(1, 0, 0) if mode is Mode.STOCHASTIC else None
            arith._scale(X[:2, :8], (kind, 3.0), get_format("bf16"), mode, draws, 1)
            arith._scale(words, (kind, 3.0), get_format("bf16"), mode, draws, 1)


def run_default() -> None:
    """A tiny synthetic run: the runner's metrics kernels."""
    import tempfile

    from fpreduce.run import config as cf
    from fpreduce.run.runner import run_experiment

    arms = [
        {"name": n, "order": o, "input": "bf16", "accumulate": "bf16"}
        for n, o in (("A", "fixed:sequential"), ("B", "arrival"))
    ] + [  # fp64 results: the metrics kernels' float64 signatures, against float32 ones
        {"name": "C", "order": "fixed:sequential", "input": "fp64", "accumulate": "fp64", "compare_to": "A"},
        {"name": "D", "order": "arrival", "input": "fp64", "accumulate": "fp64", "compare_to": "C"},
    ]
    cfg = {"experiment": {"name": "warm", "steps": 1, "workers": 4}, "source": {"elements": 64}, "arms": arms}
    with tempfile.TemporaryDirectory() as d:
        run_experiment(cf.from_dict(cfg), d)


if __name__ == "__main__":
    for group in sys.argv[1:]:  # one after another: a later group loads what an earlier one compiled
        GROUPS[group]()

"""Compile numba's kernel families into the on-disk cache before the tests (CI runs groups in parallel).

A fresh checkout has no cache: each family costs 5-35 s of CPU to compile, in every test
process that needs it first. ``python .ci/warm.py GROUP`` compiles one group's kernels by
calling ``fr.reduce`` on small arrays of the shapes and dtypes the tests use.
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
        fr.reduce(X[:, :1], "sequential", input="bf16", accumulate="bf16"),
        fr.reduce(X64[:, :1], "sequential", input="fp64", accumulate="fp64"),
        fr.reduce(X[:, :3], "sequential", input="fp32", accumulate="fp64", rounding="up"),
    ],
    "chain": lambda: (
        [fr.reduce(X[:, :3], p, input="bf16", accumulate="bf16", rounding="up") for p in ("sequential", "pairwise")]
        + [fr.reduce(X64[:, :1], "pairwise", input="fp64", accumulate="fp64")]
        + [fr.reduce(X64[:, :13], "sequential", input="fp64", accumulate="fp64", rounding="toward_zero")]
    ),
    "wide": lambda: [  # core/_narrow.py, core/_segments.py and core/_binned.py
        fr.reduce(X, "sequential", input="bf16", accumulate="fp32"),
        fr.reduce(X, "sequential", input="fp32", accumulate="fp64", rounding="up"),
        fr.reduce(X, "ring:nccl", accumulate="bf16", rounding="up"),
        fr.reduce(X, "sequential", algorithm="binned"),
        fr.reduce(X64, "sequential", input="fp64", accumulate="fp32", algorithm="binned", rounding="up"),
    ],
}

if __name__ == "__main__":
    GROUPS[sys.argv[1]]()

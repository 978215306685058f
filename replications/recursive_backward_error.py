"""Backward error of recursive summation in fp32: uniform [0,1] versus [-1,1] data, against sqrt(n) u and n u.

Published (N. J. Higham & T. Mary, "A new approach to probabilistic rounding error
analysis", SIAM J. Sci. Comput. 41(5), 2019, section 4; the [-1,1] case explained in
their "Sharper probabilistic backward error analysis for basic linear algebra kernels
with random data", SISC 2020): the backward error |s_hat - s| / sum|x_i| of the
recursive sum in single precision grows like sqrt(n) u, far below the worst-case
bound (n - 1) u, and the probabilistic bound lam sqrt(n) u holds; for data of zero mean
([-1,1]) it is smaller still and does not grow with n.

Here: n = 2**4 .. 2**22 (``--full``: 2**24), 8 columns of independent data per n (4
with ``--full``), inputs fp32, sums fp32 to nearest, the backward error computed
exactly (``fpreduce.backward_error``). ``--full`` takes about a minute and 1.4 GB on a
shared 2-core machine; larger n would fit memory but were not run, and the paper's own
sizes were not checked here: compare the trend, not the exact n. What we see: the
[0,1] error is 0.1 to 0.35 sqrt(n) u (the ratio drifting down at the largest n), far
below (n - 1) u; the [-1,1] error stays between 5e-9 and 1e-7 (about u) for every n.
Run: ``python replications/recursive_backward_error.py [--full]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import fpreduce as fr  # noqa: E402

U32 = 2.0**-24


def run(sizes: Sequence[int], trials: int = 8, seed: int = 0) -> list[dict[str, float]]:
    """Per n: the mean and max backward error of [0,1] and [-1,1] data (fp32 recursive sum), sqrt(n) u, n u."""
    rng = np.random.default_rng(seed)
    N = max(sizes)
    data = {lo: rng.uniform(lo, 1.0, (N, trials)).astype(np.float32) for lo in (0.0, -1.0)}
    rows = []
    for n in sizes:
        row: dict[str, float] = {"n": n, "sqrt_n_u": float(np.sqrt(n) * U32), "n_u": (n - 1) * U32}
        for lo, name in ((0.0, "unit"), (-1.0, "sym")):
            X = data[lo][:n]
            y = fr.reduce(X, "sequential", input="fp32", accumulate="fp32")
            b = fr.backward_error(y, X)
            row[f"{name}_mean"], row[f"{name}_max"] = float(np.mean(b)), float(np.max(b))
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    args = _common.parse(__doc__ or "", argv)
    clock = _common.Clock()
    sizes = [2**k for k in range(4, (24 if args.full else 22) + 1, 2)]
    rows = run(sizes, trials=4 if args.full else 8, seed=args.seed)
    _common.table(
        "recursive summation in fp32, backward error (mean, max over columns); published: ~sqrt(n) u for [0,1], "
        "smaller and flat for [-1,1]",
        ["n", "[0,1] mean", "[0,1] max", "[-1,1] mean", "[-1,1] max", "sqrt(n) u", "(n-1) u", "[0,1] / sqrt(n) u"],
        [
            [r["n"], r["unit_mean"], r["unit_max"], r["sym_mean"], r["sym_max"], r["sqrt_n_u"], r["n_u"]]
            + [r["unit_mean"] / r["sqrt_n_u"]]
            for r in rows
        ],
    )
    _common.say("", str(clock))


if __name__ == "__main__":
    main()

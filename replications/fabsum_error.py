"""FABsum's error does not grow with n; recursive summation's does (Blanchard, Higham & Mary 2020).

Published (P. Blanchard, N. J. Higham & T. Mary, "A class of fast and accurate
summation algorithms", SIAM J. Sci. Comput. 42(3), 2020): FABsum (blocks of b terms
summed fast, the block sums summed accurately) has the error bound (b + O(1)) u, to
first order independent of n, against (n - 1) u for recursive summation; in their
experiments in low precision its error stays flat as n grows while the recursive sum's
grows (and stagnates).

Here: n terms uniform on [0,1], rounded to bf16 and summed in bf16 (recursive; FABsum
b = 32 with Kahan across the blocks in bf16; FABsum b = 32 with the block sums added in
fp32), n = 2**8 .. 2**22 (``--full``: 2**24), 2 columns; the error relative to the
exact sum (= the backward error: the terms are positive), exact oracle at each n.
fp16 would overflow (65504) beyond n of about 2**17 for this data, so bf16 is used.
What we see: both FABsums stay flat (about 1e-3 and 1e-4) while the recursive sum
stagnates (error -> 1) from n = 1024, up to n = 2**22; at n = 2**24 (``--full``) Kahan
in bf16 across m = 2**19 block sums breaks down (error 0.75: the second-order term
O(m u**2) of Kahan's bound, m u = 2**11, is no longer negligible) while the fp32 sum
across the blocks stays flat. The first-order bound is printed only where it is
informative (m u < 1 for Kahan).
Run: ``python replications/fabsum_error.py [--full]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import fpreduce as fr  # noqa: E402
from fpreduce.core.fabsum import fabsum_bound  # noqa: E402


def run(sizes: Sequence[int], fmt: str = "bf16", block: int = 32, columns: int = 2, seed: int = 0):
    """Per n: relative errors of the recursive sum and of two FABsums, and the first-order bounds."""
    N = max(sizes)
    X = fr.round_to(np.random.default_rng(seed).uniform(0, 1, (N, columns)), fmt)
    rows = []
    for n in sizes:
        Xn = X[:n]
        s = fr.exact_sum(Xn, axis=0).to_float64()

        def err(y: np.ndarray, s: np.ndarray = s) -> float:
            return float(np.mean(np.abs(np.asarray(y, dtype=np.float64) - s) / s))

        kw = {"input": fmt, "accumulate": fmt}
        b = fabsum_bound(n, block, fmt)
        rows.append(
            {
                "n": n,
                "recursive": err(fr.reduce(Xn, "sequential", **kw)),
                "fab_kahan": err(fr.fabsum(Xn, block, **kw)),
                "fab_fp32": err(fr.fabsum(Xn, block, across="plain", across_format="fp32", **kw)),
                "bound_fab": b["fabsum"],
                "bound_rec": b["recursive"],
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    args = _common.parse(__doc__ or "", argv)
    clock = _common.Clock()
    sizes = [2**k for k in range(8, (24 if args.full else 22) + 1, 2)]
    rows = run(sizes, seed=args.seed)
    _common.table(
        "bf16, U[0,1] terms, relative error (mean of 2 columns); published: FABsum flat in n, recursive grows",
        ["n", "recursive", "FABsum b=32 Kahan", "FABsum b=32 fp32 across", "FABsum bound", "recursive bound"],
        [
            [r["n"], r["recursive"], r["fab_kahan"], r["fab_fp32"], r["bound_fab"], r["bound_rec"] or "none"]
            for r in rows
        ],
    )
    _common.say("", str(clock))


if __name__ == "__main__":
    main()

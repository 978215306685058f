"""Recursive summation in fp16 and bf16: round-to-nearest stagnates, stochastic rounding does not.

Published (M. P. Connolly, N. J. Higham & T. Mary, "Stochastic rounding and its
probabilistic backward error analysis", SIAM J. Sci. Comput. 43(1), 2021): with round
to nearest, the recursive sum of many positive terms stagnates once half an ulp of
the partial sum exceeds the terms (the relative error tends to 1); with stochastic
rounding every rounding error is mean-independent, the sum stays unbiased, and the
error obeys a probabilistic bound lam sqrt(n) u (with probability at least
1 - 2 exp(-lam**2 / 2)), for every n, with no assumption on the data.

Here: n terms uniform on [0,1] (rounded to the format), summed in that format,
n = 2**4 .. 2**20 (``--full``: 2**24; fp16 stops at 2**16, where the sum nears
fp16's largest value 65504 and a larger one overflows), 4 columns of data, stochastic rounding with
the counter-based generator (one seed; its partial sums give every n in one pass).
The reference is the float64 prefix sum, exact for fp16 inputs (multiples of
2**-24 below 2**29) and within n 2**-53 relative for bf16 (far below the errors
shown). ``--full`` takes about 70 s and 2.8 GB (every partial sum of 2**24 x 4 terms
is kept). What we see: RN's sum stops at the value 2048 in fp16 and 256 in bf16 (where
half an ulp of the sum, 1, exceeds every term), which it reaches after n = 4071 to 4115
terms in fp16 and 517 to 533 in bf16 (the four columns of seed 0; about value / 0.5, the
terms' mean); from there its error goes to 1. SR's error stays at 0.06 to 0.5 sqrt(n) u,
and in bf16 at 0.02 to 0.06 where sqrt(n) u exceeds 1 (the bound says nothing there, SR
still works).
Run: ``python replications/stochastic_stagnation.py [--full]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import fpreduce as fr  # noqa: E402


def run(fmt: str, sizes: Sequence[int], columns: int = 4, seed: int = 0) -> list[dict[str, float]]:
    """Per n: the mean relative error of RN and SR recursive sums in ``fmt``, sqrt(n) u and the RN sum's value."""
    N = max(sizes)
    X = fr.round_to(np.random.default_rng(seed).uniform(0, 1, (N, columns)), fmt)
    exact = np.cumsum(X.astype(np.float64), axis=0)
    rn = fr.partial_sums(X, input=fmt, accumulate=fmt).astype(np.float64)
    sr = fr.partial_sums(X, input=fmt, accumulate=fmt, rounding="stochastic", seed=seed + 1).astype(np.float64)
    u = fr.get_format(fmt).unit_roundoff
    rows = []
    for n in sizes:
        s = exact[n - 1]
        rows.append(
            {
                "n": n,
                "rn": float(np.mean(np.abs(rn[n - 1] - s) / s)),
                "sr": float(np.mean(np.abs(sr[n - 1] - s) / s)),
                "sqrt_n_u": float(np.sqrt(n) * u),
                "rn_value": float(np.mean(rn[n - 1])),
                "exact": float(np.mean(s)),
            }
        )
    return rows


def stagnation(fmt: str, n: int, columns: int = 4, seed: int = 0) -> list[tuple[int, float]]:
    """Per column of the data :func:`run` draws (``n`` terms): the number of terms after which the RN recursive
    sum never changes again, and the value it stops at (0 terms: it still changes at the last term)."""
    X = fr.round_to(np.random.default_rng(seed).uniform(0, 1, (n, columns)), fmt)
    rn = fr.partial_sums(X, input=fmt, accumulate=fmt).astype(np.float64)
    out = []
    for c in range(columns):
        moved = np.nonzero(np.diff(rn[:, c]) != 0)[0]
        last = int(moved[-1]) + 2 if moved.size else 1  # the term (1-based) of the last change
        out.append((last if last < n else 0, float(rn[-1, c])))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    args = _common.parse(__doc__ or "", argv)
    clock = _common.Clock()
    sizes = [2**k for k in range(4, (24 if args.full else 20) + 1, 2)]
    for fmt in ("fp16", "bf16"):
        rows = run(fmt, [n for n in sizes if fmt != "fp16" or n <= 2**16], seed=args.seed)
        _common.table(
            f"{fmt}: relative error of the recursive sum of U[0,1] terms (mean of 4 columns); "
            "published: RN stagnates (error -> 1), SR stays near sqrt(n) u",
            ["n", "RN error", "SR error", "sqrt(n) u", "SR / sqrt(n) u", "RN sum", "exact sum"],
            [
                [r["n"], r["rn"], r["sr"], r["sqrt_n_u"], r["sr"] / r["sqrt_n_u"], r["rn_value"], r["exact"]]
                for r in rows
            ],
        )
        stops = stagnation(fmt, max(r["n"] for r in rows), seed=args.seed)
        _common.say(
            f"{fmt}: RN's sum stops changing after n = {', '.join(str(k) for k, _ in stops)} terms (per column), "
            f"at the value {', '.join(f'{v:g}' for _, v in stops)}"
        )
    _common.say("", str(clock))


if __name__ == "__main__":
    main()

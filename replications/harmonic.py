"""The harmonic series summed in fp16, bf16, fp32 (and tf32, fp8_e5m2): where it stops growing.

Published (N. J. Higham, "Half precision arithmetic: fp16 versus bfloat16", blog, 2018,
and the literature on the fp32 sum): computing s_n = s_{n-1} + 1/n with every term and
every sum rounded to nearest, the sum stagnates: fp16 at 7.0859375 after 513 terms,
bf16 at 5.0625 after 65 terms, fp32 at 15.403683 after about 2.1e6 terms. Here "after n
terms" is the first term n that leaves the sum unchanged; no later term can change it
(1/k only shrinks and stays below half an ulp of the sum).

Sizes: every format up to N = 2**22 terms by default (the fp32 sum needs 2.1e6; about
a second with numba); ``--full`` goes to 2**24 and adds stochastic rounding's value at N,
which keeps growing (Connolly, Higham & Mary 2021): about 50 s. What we see: exactly the
published values and n (fp16 7.0859375 and n = 513, bf16 5.0625 and n = 65), fp32
15.403683 with n = 2097152 (= 2**21); tf32 matches fp16. Run: ``python replications/harmonic.py [--full]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import fpreduce as fr  # noqa: E402

PUBLISHED: dict[str, tuple[float, int | str]] = {
    "fp16": (7.0859375, 513),
    "bf16": (5.0625, 65),
    "fp32": (15.403683, "~2.1e6"),
}


def stagnation(fmt: str, N: int, rounding: str = "nearest_even", seed: int | None = None) -> dict[str, float]:
    """The sum of 1/k, k = 1..N, in ``fmt`` (terms rounded to nearest): its last value and where it stopped."""
    terms = 1.0 / np.arange(1, N + 1, dtype=np.float64)
    n_last, value = fr.stagnation(fr.partial_sums(terms, input=fmt, accumulate=fmt, rounding=rounding, seed=seed))
    last = int(n_last[0])  # terms in the sum at its last change
    return {"value": float(value[0]), "last_change_n": last, "stagnates_at_n": last + 1 if last < N else None}


def run(N: int, formats: Sequence[str] = ("fp16", "bf16", "fp32", "tf32", "fp8_e5m2"), sr_seed: int | None = None):
    """One row per format: published value and n, ours, and (``sr_seed``) stochastic rounding's value at N."""
    rows = []
    for fmt in formats:
        ours = stagnation(fmt, N)
        sr = stagnation(fmt, N, "stochastic", sr_seed)["value"] if sr_seed is not None else None
        pub = PUBLISHED.get(fmt, (None, None))
        rows.append({"format": fmt, "published_value": pub[0], "published_n": pub[1], **ours, "sr_value": sr})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    args = _common.parse(__doc__ or "", argv)
    clock = _common.Clock()
    N = 2**24 if args.full else 2**22
    rows = run(N, sr_seed=args.seed if args.full else None)
    exact = float(np.sum(1.0 / np.arange(1, N + 1)))
    header = ["format", "published value", "published n", "our value", "our n (first term lost)"]
    header += ["SR value at N"] if args.full else []
    table(
        f"harmonic series, N = {N} terms (exact H_N = {exact:.6f})",
        header,
        [
            [
                r["format"],
                r["published_value"] or "-",
                r["published_n"] or "-",
                r["value"],
                r["stagnates_at_n"] or "grows",
            ]
            + ([r["sr_value"]] if args.full else [])
            for r in rows
        ],
    )
    _common.say("", str(clock))


table = _common.table

if __name__ == "__main__":
    main()

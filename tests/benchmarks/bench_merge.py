"""Benchmark of a split run's merge on rank 0 (fpreduce.run.split): its cost per step against the ranks.

Run: python tests/benchmarks/bench_merge.py
Shares are shaped like examples/llm-gradient.toml's (3 arms, 64 workers: 65,536-element
chunks) for TinyLlama-1.1B (16,786 chunks) and Llama-2-7B (102,821 chunks) split over K
ranks; the merge is timed from the shares (median rounds included, messages excluded).
Baseline: ``np.sum`` over the same bytes as the shares (what just reading them costs).
"""

from __future__ import annotations

import math
import pickle
import time

import numpy as np

from fpreduce.run import split
from fpreduce.run.config import load_config

ARMS = 3


def share(rng: np.random.Generator, chunks: int) -> split.Share:
    top = np.zeros((ARMS, 1 << 16), np.int64)
    top[:, 0x3A00:0x3C00] = rng.integers(0, 100, (ARMS, 512))
    counts = np.zeros((ARMS, 10), np.int64)
    counts[:, 4] = top.sum(1)
    hists = np.zeros((ARMS, 2, 16), np.int64)
    return split.Share(rng.random((chunks, ARMS, 9)), counts, rng.random((ARMS, 5)), hists, top, np.zeros(ARMS, bool))


def main() -> None:
    cfg = load_config("examples/llm-gradient.toml")
    rng = np.random.default_rng(0)
    for model, chunks in (("tinyllama-1.1b", 16786), ("llama-2-7b", 102821)):
        for ranks in (2, 8, 64):
            shares = [share(rng, chunks // ranks) for _ in range(ranks)]
            lows = [np.zeros((ARMS, 2, 1 << 16), np.int64) for _ in range(ranks)]
            t = base = math.inf
            for _ in range(3):
                t0 = time.perf_counter()
                b = split.median_buckets(shares)
                split.merge(cfg, shares, split.medians(shares, b, lows))
                t1 = time.perf_counter()
                for s in shares:
                    np.sum(s.top), np.sum(s.sums)
                for low in lows:
                    np.sum(low)
                t, base = min(t, t1 - t0), min(base, time.perf_counter() - t1)
            mb = len(pickle.dumps(shares[0])) / 1e6
            print(
                f"{model:15s} K={ranks:3d}: merge {t * 1e3:7.1f} ms/step ({t / base:5.1f}x reading), share {mb:.2f} MB"
            )


if __name__ == "__main__":
    main()

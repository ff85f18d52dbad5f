"""Paired inference engine vs scipy.stats, measured in one process.

Compares, at n = 64 and n = 2,336 paired examples with 4 layers:

* sign-flip test (20,000 draws): ``routestats.paired_inference`` (shared mode) against
  ``scipy.stats.permutation_test`` (one call per layer, vectorised, defaults) and against
  the matrix-product floor (one pre-generated (draws x n) sign matrix times the (n x 4)
  differences, nothing else);
* percentile bootstrap (10,000 resamples): ours against ``scipy.stats.bootstrap(method=
  "percentile")`` per layer.

Peak memory of our calls is measured with tracemalloc (numpy reports its buffers to it).
Run: ``python benchmarks/bench_inference.py`` (add ``--quick`` for fewer repeats). Prints a
Markdown table of times and ratios; the numbers in docs/performance.md come from it.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np
from scipy import stats

from routestats.stats.inference import paired_inference
from routestats.stats.spearman import spearman_ci


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def peak_mb(fn) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    reps = 1 if args.quick else 3
    P, B, k = 20_000, 10_000, 4
    print(f"load average before: {load_average()} (2 cores; quiet machine < 0.5)")
    print()
    print("| n | procedure | routestats (s) | alternative (s) | ratio | floor (s) | ours / floor | peak MB (ours) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (64, 2336):
        d = np.random.default_rng(0).normal(0.01, 0.05, (n, k))
        # -- sign flip
        ours = best_of(lambda: paired_inference(d, resamples=1, permutations=P, seed=1), reps)
        mem = peak_mb(lambda: paired_inference(d, resamples=1, permutations=P, seed=1))

        def scipy_perm():
            for j in range(k):
                stats.permutation_test((d[:, j],), np.mean, permutation_type="samples", n_resamples=P,
                                       vectorized=True, alternative="two-sided", rng=np.random.default_rng(j))

        alt = best_of(scipy_perm, 1)
        signs = np.where(np.random.default_rng(1).random((P, n)) < 0.5, -1.0, 1.0)
        floor = best_of(lambda: np.abs(signs @ d) / n, reps)
        print(f"| {n} | sign-flip, {P} draws x {k} layers | {ours:.4f} | {alt:.3f} (scipy permutation_test) "
              f"| {alt / ours:.0f}x | {floor:.4f} | {ours / floor:.1f}x | {mem:.0f} |")
        # -- bootstrap
        ours_b = best_of(lambda: paired_inference(d, resamples=B, permutations=1, seed=1), reps)
        mem_b = peak_mb(lambda: paired_inference(d, resamples=B, permutations=1, seed=1))

        def scipy_boot():
            for j in range(k):
                stats.bootstrap((d[:, j],), np.mean, method="percentile", n_resamples=B, vectorized=True,
                                rng=np.random.default_rng(j))

        alt_b = best_of(scipy_boot, reps)
        print(f"| {n} | bootstrap, {B} resamples x {k} layers | {ours_b:.4f} | {alt_b:.3f} (scipy bootstrap percentile) "
              f"| {alt_b / ours_b:.1f}x | | | {mem_b:.0f} |")
        # -- Spearman bootstrap (length association): counts per resample vs ranking every resample
        rng = np.random.default_rng(2)
        x = np.clip(np.round(rng.lognormal(4.1, 0.5, n)), 8, 256)  # lengths: many ties
        y = rng.normal(0.3, 0.1, (n, k)) + 1e-4 * x[:, None]
        R = 2000
        ours_s = best_of(lambda: spearman_ci(x, y, resamples=R, seed=1), reps)

        def rank_each():
            g = np.random.default_rng(18)
            for j in range(k):
                idx = np.stack([g.integers(0, n, size=n) for _ in range(R)])
                rx, ry = stats.rankdata(x[idx], axis=1), stats.rankdata(y[idx, j], axis=1)
                rx -= rx.mean(axis=1, keepdims=True)
                ry -= ry.mean(axis=1, keepdims=True)
                (rx * ry).sum(axis=1) / np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))

        alt_s = best_of(rank_each, reps)
        mem_s = peak_mb(lambda: spearman_ci(x, y, resamples=R, seed=1))
        print(f"| {n} | Spearman bootstrap, {R} resamples x {k} layers | {ours_s:.4f} | {alt_s:.3f} (rankdata per "
              f"resample + Pearson) | {alt_s / ours_s:.1f}x | | | {mem_s:.0f} |")
    print()
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()

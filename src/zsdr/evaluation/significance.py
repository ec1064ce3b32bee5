"""Paired significance tests on per-query scores, Holm's correction and table markers.

* :func:`paired_ttest` — two-tailed paired t-test (scipy).
* :func:`fisher_randomization` — two-tailed Fisher randomization (sign-flip permutation) test on
  the mean difference: exact enumeration of all ``2**n`` sign patterns when that is no more than
  ``trials``, else ``trials`` random patterns (seeded, vectorised) and ``p = (hits + 1) / (trials + 1)``
  (the observed assignment counts as one of the permutations, so p is never 0).
* :func:`holm` — Holm–Bonferroni adjusted p-values.
* :func:`compare` — pair two ``{qid: score}`` mappings by id and run one of the tests.
* :func:`marker` — the symbol for a p-value (``**`` below 0.01, ``*`` below 0.05 by default).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

TESTS = ("ttest", "fisher")
ENUMERATION_MAX_N = 24            # never enumerate more than 2**24 sign patterns
BLOCK_ELEMENTS = 1 << 22          # sign-matrix entries drawn at a time (32 MB as float64)


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"paired samples must be two flat sequences of one length, got {x.shape} and {y.shape}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("paired samples contain NaN")
    return x - y


def paired_ttest(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-tailed p-value of the paired t-test of ``a`` against ``b``; 1.0 when every difference is 0.

    Differences that are all equal and non-zero (no variance) give 0.0.
    """
    d = _differences(a, b)
    if not d.any():
        return 1.0
    if len(d) < 2:
        raise ValueError("a paired t-test needs at least 2 pairs")
    if np.all(d == d[0]):
        return 0.0
    from scipy import stats

    return float(stats.ttest_rel(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)).pvalue)


def _count_extreme(flips: np.ndarray, d: np.ndarray, total: float, observed: float, tol: float) -> int:
    """Sign patterns (rows of 0/1 ``flips``; 1 flips the pair) with |sum of signed d| >= observed."""
    sums = total - 2.0 * (flips.astype(np.float64) @ d)
    return int(np.count_nonzero(np.abs(sums) >= observed - tol))


def fisher_randomization(a: Sequence[float], b: Sequence[float], trials: int = 10000, seed: int = 0) -> float:
    """Two-tailed p-value of Fisher's randomization test of the mean paired difference.

    Each of the ``n`` pairs keeps or swaps its two values (the difference flips sign) with
    probability 1/2; p is the share of sign patterns whose |mean difference| reaches the observed
    one. Exact (all ``2**n`` patterns) when ``2**n <= trials``; otherwise ``trials`` patterns drawn
    from ``numpy.random.default_rng(seed)``, deterministic for a seed. 1.0 when every difference is 0.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    d = _differences(a, b)
    n = len(d)
    if not d.any():
        return 1.0
    total = float(d.sum())
    observed = abs(total)
    tol = 1e-9 * float(np.abs(d).sum())  # the same terms summed in another order differ by rounding
    if n <= ENUMERATION_MAX_N and 2 ** n <= trials:
        count, patterns = 0, 2 ** n
        step = max(1, BLOCK_ELEMENTS // n)
        for start in range(0, patterns, step):
            codes = np.arange(start, min(patterns, start + step), dtype=np.int64)
            count += _count_extreme((codes[:, None] >> np.arange(n)) & 1, d, total, observed, tol)
        return count / patterns
    rng = np.random.default_rng(seed)
    count, done = 0, 0
    step = max(1, BLOCK_ELEMENTS // n)
    while done < trials:
        rows = min(step, trials - done)
        count += _count_extreme(rng.integers(0, 2, size=(rows, n), dtype=np.uint8), d, total, observed, tol)
        done += rows
    return (count + 1) / (trials + 1)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order (monotone in the raw p, capped at 1)."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError("holm expects a flat sequence of p-values")
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (m - np.arange(m))
    adjusted = np.minimum(1.0, np.maximum.accumulate(scaled)) if m else scaled
    out = np.empty(m)
    out[order] = adjusted
    return [float(x) for x in out]


def compare(per_query_a: Mapping[str, float], per_query_b: Mapping[str, float], test: str = "ttest",
            trials: int = 10000, seed: int = 0) -> dict:
    """Paired test of two systems' per-query scores, paired by query id.

    Returns ``{"p", "mean_a", "mean_b", "n", "test"}``. ``trials`` and ``seed`` are used by the
    ``fisher`` test only. Raises ValueError naming the ids that only one side has.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}: use one of {', '.join(TESTS)}")
    only_a = sorted(set(per_query_a) - set(per_query_b))
    only_b = sorted(set(per_query_b) - set(per_query_a))
    if only_a or only_b:
        def show(ids):
            return ", ".join(map(repr, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        parts = [f"only in a: {show(only_a)}" if only_a else "", f"only in b: {show(only_b)}" if only_b else ""]
        raise ValueError("the two sides cover different queries (" + "; ".join(p for p in parts if p) + ")")
    ids = sorted(per_query_a)
    a = np.array([per_query_a[q] for q in ids], dtype=np.float64)
    b = np.array([per_query_b[q] for q in ids], dtype=np.float64)
    if not ids:
        raise ValueError("no queries to compare")
    p = paired_ttest(a, b) if test == "ttest" else fisher_randomization(a, b, trials=trials, seed=seed)
    return {"p": p, "mean_a": float(a.mean()), "mean_b": float(b.mean()), "n": len(ids), "test": test}


def marker(p: float, symbols: Sequence[tuple[float, str]] = ((0.01, "**"), (0.05, "*"))) -> str:
    """The symbol of the smallest threshold that ``p`` is strictly below; ``""`` if none (or p is NaN)."""
    if p is None or math.isnan(p):
        return ""
    for threshold, symbol in sorted(symbols, key=lambda s: s[0]):
        if p < threshold:
            return symbol
    return ""

"""zsdr.evaluation.significance: paired t-test, Fisher randomization, Holm, compare, markers."""

import itertools

import numpy as np
import pytest
from scipy import stats

from zsdr.evaluation.significance import compare, fisher_randomization, holm, marker, paired_ttest


def _pair(n, shift, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    return a, np.clip(a - shift + rng.normal(0, 0.2, n), 0, 1)


def test_ttest_matches_scipy():
    for n, shift in [(5, 0.05), (50, 0.02), (3000, 0.01)]:
        a, b = _pair(n, shift, seed=n)
        assert paired_ttest(a, b) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-12)
        assert paired_ttest(list(a), list(b)) == pytest.approx(stats.ttest_rel(b, a).pvalue, rel=1e-12)


def test_ttest_degenerate_cases():
    assert paired_ttest([0.1, 0.5, 0.3], [0.1, 0.5, 0.3]) == 1.0
    assert paired_ttest([0.2], [0.2]) == 1.0
    assert paired_ttest([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]) == 0.0      # constant non-zero differences
    with pytest.raises(ValueError, match="at least 2"):
        paired_ttest([1.0], [0.0])
    with pytest.raises(ValueError, match="one length"):
        paired_ttest([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        paired_ttest([1.0, float("nan")], [1.0, 2.0])


def _exact_p(d):
    observed = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_fisher_small_n_is_exact_enumeration():
    rng = np.random.default_rng(3)
    for n in (1, 4, 9, 13):
        a, b = rng.random(n).round(2), rng.random(n).round(2)   # rounding makes ties among |sums|
        assert fisher_randomization(a, b, trials=10000) == pytest.approx(_exact_p(a - b), abs=1e-12)
    # equal magnitudes: every sign pattern with as many + as - ties; p from enumeration
    assert fisher_randomization([1, 1, 1, 1], [0, 0, 0, 0]) == pytest.approx(2 / 16)
    assert fisher_randomization([0.3, 0.7], [0.3, 0.7]) == 1.0


def test_fisher_sampled_is_close_to_exact_and_deterministic():
    rng = np.random.default_rng(5)
    a, b = rng.random(16), rng.random(16)          # 65536 patterns > trials: sampled
    exact = _exact_p(a - b)
    p = fisher_randomization(a, b, trials=10000, seed=1)
    assert abs(p - exact) < 4 * np.sqrt(exact * (1 - exact) / 10000) + 1e-3
    assert fisher_randomization(a, b, trials=10000, seed=1) == p
    assert len({fisher_randomization(a, b, trials=2000, seed=s) for s in range(5)}) > 1


def test_fisher_agrees_with_ttest_for_large_n():
    for shift, seed in [(0.01, 1), (0.02, 2), (0.0, 3)]:
        a, b = _pair(2000, shift, seed=seed)
        pt = paired_ttest(a, b)
        assert 0.001 < pt < 0.999
        assert fisher_randomization(a, b, trials=10000, seed=0) == pytest.approx(pt, abs=0.02)


def test_fisher_on_a_large_set_is_seeded_and_bounded_by_the_trials():
    a, b = _pair(7000, 0.005, seed=7)
    p = fisher_randomization(a, b, trials=10000, seed=3)
    assert p == fisher_randomization(a, b, trials=10000, seed=3)
    assert 1 / 10001 <= p <= 1   # the sampled p-value counts the observed assignment


def test_holm_hand_example():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([0.02]) == [0.02]
    assert holm([]) == []
    adjusted = holm([0.001, 0.2, 0.011, 0.011, 0.9])
    assert adjusted == pytest.approx([0.005, 0.4, 0.044, 0.044, 0.9])
    order = np.argsort([0.001, 0.2, 0.011, 0.011, 0.9])
    assert all(np.diff(np.array(adjusted)[order]) >= 0)


def test_compare_pairs_by_id():
    a = {"q1": 0.5, "q2": 0.1, "q3": 0.9, "q4": 0.4}
    b = {"q4": 0.3, "q3": 0.6, "q2": 0.2, "q1": 0.1}
    result = compare(a, b)
    ids = sorted(a)
    assert result == {"p": pytest.approx(stats.ttest_rel([a[q] for q in ids], [b[q] for q in ids]).pvalue),
                      "mean_a": pytest.approx(0.475), "mean_b": pytest.approx(0.3), "n": 4, "test": "ttest"}
    fisher = compare(a, b, test="fisher", trials=1000, seed=0)
    assert fisher["test"] == "fisher" and fisher["p"] == pytest.approx(_exact_p([0.4, -0.1, 0.3, 0.1]))


def test_compare_rejects_different_queries_and_unknown_test():
    with pytest.raises(ValueError, match=r"only in a: 'q3'.*only in b: 'q9'"):
        compare({"q1": 1, "q2": 0, "q3": 1}, {"q1": 1, "q2": 0, "q9": 1})
    with pytest.raises(ValueError, match="unknown test"):
        compare({"q1": 1}, {"q1": 1}, test="wilcoxon")


def test_marker():
    assert marker(0.005) == "**"
    assert marker(0.03) == "*"
    assert marker(0.05) == ""
    assert marker(0.2) == ""
    assert marker(float("nan")) == ""
    assert marker(0.005, symbols=((0.05, "*"), (0.01, "**"))) == "**"      # order of symbols irrelevant
    assert marker(0.009, symbols=((0.01, "°"),)) == "°"
    assert marker(0.02, symbols=((0.01, "°"),)) == ""

"""Statistics of the report: tests equal scipy, stars, Holm, effect size, the t interval of Δ, the legacy
bootstrap, divergence (Fisher), degenerate cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from visionbench.report import cohen_d, holm, stars, summarize
from visionbench.report.summary import withhold_tests
from visionbench.stats.significance import compare, difference_ci, divergence_p


def runs_frame(values: dict[str, list], recipe: str = "toy", baseline: str | None = "relu") -> pd.DataFrame:
    """A `load_runs`-shaped frame from `{act: [value or status per seed]}` (seed = list index)."""
    rows = []
    for act, vals in values.items():
        for seed, v in enumerate(vals):
            if v is None:
                continue
            done = not isinstance(v, str)
            rows.append(
                {
                    "recipe": recipe,
                    "act": act,
                    "seed": seed,
                    "status": "completed" if done else v,
                    "val_top1_best": v if done else np.nan,
                    "baseline": baseline,
                    "train_time_s": 10.0 + seed,
                    "throughput_img_s": 100.0,
                    "act_params": 6 if act == "rational" else 0,
                    "params": 99,
                    "recipe_dir": f"/r/{recipe}",
                    "run_dir": f"/r/{recipe}/{act}/seed_{seed}",
                }
            )
    return pd.DataFrame(rows)


def row(table: pd.DataFrame, act: str) -> pd.Series:
    return table.set_index("act").loc[act]


A = [91.2, 90.8, 91.5, 91.0, 91.3]
B = [90.1, 90.6, 90.2, 90.4, 90.0]


@pytest.mark.parametrize("test,kw", [("student", {"equal_var": True}), ("welch", {"equal_var": False})])
def test_independent_tests_equal_scipy(test, kw):
    table = summarize(runs_frame({"relu": B, "gelu": A}), "val_top1_best", "relu", test=test)
    ref = sps.ttest_ind(A, B, **kw)
    got = row(table, "gelu")
    assert got["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert got["t_stat"] == pytest.approx(ref.statistic, rel=1e-12)
    assert got["mean"] == pytest.approx(np.mean(A)) and got["std"] == pytest.approx(np.std(A, ddof=1))
    assert got["diff"] == pytest.approx(np.mean(A) - np.mean(B))
    assert got["stars"] == stars(ref.pvalue) and got["n"] == 5


def test_welch_differs_from_student_under_unequal_variances_and_sizes():
    a, b = [80.0, 95.0, 70.0, 99.0, 85.0, 60.0, 92.0], [88.0, 88.5, 88.2]
    runs = runs_frame({"relu": b, "gelu": a})
    student = row(summarize(runs, "val_top1_best", "relu", "student"), "gelu")["p_value"]
    welch = row(summarize(runs, "val_top1_best", "relu", "welch"), "gelu")["p_value"]
    assert student == pytest.approx(sps.ttest_ind(a, b).pvalue)
    assert welch == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue)
    assert abs(student - welch) > 0.01


def test_paired_uses_only_seeds_both_acts_completed():
    relu = [90.0, 90.5, "diverged", 90.2, 89.9, None]
    gelu = [90.4, 91.1, 90.9, "failed", 90.1, 95.0]  # shared completed seeds: 0, 1, 4
    table = summarize(runs_frame({"relu": relu, "gelu": gelu}), "val_top1_best", "relu", "paired")
    got = row(table, "gelu")
    ref = sps.ttest_rel([90.4, 91.1, 90.1], [90.0, 90.5, 89.9])
    assert got["n_pairs"] == 3 and got["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert got["n"] == 5 and got["n_failed"] == 1  # mean/std still over all completed runs
    assert row(table, "relu")["n_diverged"] == 1


def test_paired_with_fewer_than_two_shared_seeds_is_marked():
    table = summarize(
        runs_frame({"relu": [90.0, 91.0, None, None], "gelu": [None, 92.0, 93.0, 94.0]}),
        "val_top1_best",
        "relu",
        "paired",
    )
    assert row(table, "gelu")["mark"] == "<2 shared seeds" and math.isnan(row(table, "gelu")["p_value"])


@pytest.mark.parametrize(
    "p,expected",
    [
        (0.05, "ns"),
        (0.0499999, "*"),
        (0.01, "*"),
        (0.00999, "**"),
        (0.001, "**"),
        (0.000999, "***"),
        (0.0001, "***"),
        (0.0000999, "****"),
        (0.0, "****"),
        (0.5, "ns"),
        (float("nan"), ""),
    ],
)
def test_star_thresholds(p, expected):
    assert stars(p) == expected


def test_holm_known_values():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max
    got = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])  # capped at 1
    got = holm([np.nan, 0.02, 0.01])  # NaN is no test: m = 2
    assert math.isnan(got[0]) and got[1:].tolist() == pytest.approx([0.02, 0.02])


def test_holm_in_summary_over_the_compared_acts():
    vals = {"relu": B, "gelu": A, "silu": [90.3, 90.9, 90.2, 90.7, 90.5], "mish": [92.0, 91.8, 92.3, 92.1, 91.9]}
    table = summarize(runs_frame(vals), "val_top1_best", "relu")
    others = table[~table.is_baseline]
    np.testing.assert_allclose(others["p_holm"], holm(others["p_value"]))
    assert math.isnan(row(table, "relu")["p_holm"])


def test_cohen_d_pooled():
    a, b = np.array(A), np.array(B)
    pooled = np.sqrt(((5 - 1) * a.var(ddof=1) + (5 - 1) * b.var(ddof=1)) / 8)
    assert cohen_d(a, b) == pytest.approx((a.mean() - b.mean()) / pooled)


def t_interval_by_hand(a, b, test: str, level: float = 0.95) -> tuple[float, float]:
    """Δ ± t_{(1+level)/2, df} · se: pooled (Student), Welch–Satterthwaite, or one-sample over a − b (paired)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if test == "paired":
        d = a - b
        se, df, delta = d.std(ddof=1) / math.sqrt(d.size), d.size - 1, d.mean()
    else:
        va, vb, na, nb = a.var(ddof=1), b.var(ddof=1), a.size, b.size
        delta = a.mean() - b.mean()
        if test == "student":
            sp2 = ((na - 1) * va + (nb - 1) * vb) / (na + nb - 2)
            se, df = math.sqrt(sp2 * (1 / na + 1 / nb)), na + nb - 2
        else:
            se = math.sqrt(va / na + vb / nb)
            df = se**4 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    half = sps.t.ppf((1 + level) / 2, df) * se
    return delta - half, delta + half


@pytest.mark.parametrize("test", ["student", "welch", "paired"])
def test_summary_ci_is_the_t_interval_of_the_tables_test(test):
    b = B + [89.5]  # unequal sizes: the paired interval uses the 5 shared seeds
    table = summarize(runs_frame({"relu": b, "gelu": A}), "val_top1_best", "relu", test=test)
    got = (row(table, "gelu")["ci_low"], row(table, "gelu")["ci_high"])
    expected = t_interval_by_hand(A, B if test == "paired" else b, test)
    assert got == pytest.approx(expected, rel=1e-10)
    assert difference_ci(A, b if test != "paired" else B, test) == pytest.approx(expected, rel=1e-10)
    assert difference_ci(A, b if test != "paired" else B, test, level=0.99)[0] < expected[0]  # wider
    assert math.isnan(row(table, "relu")["ci_low"])  # the baseline's own row


def test_t_interval_is_vectorised_and_nan_when_undefined():
    rng = np.random.default_rng(1)
    x, y = rng.normal(1, 1, (4, 3)), rng.normal(0, 1, (4, 5))
    lo, hi = difference_ci(x, y, "welch")
    for i in range(4):
        assert (lo[i], hi[i]) == pytest.approx(t_interval_by_hand(x[i], y[i], "welch"), rel=1e-10)
    assert all(math.isnan(v) for v in difference_ci([1.0], [1.0, 2.0]))
    assert all(math.isnan(v) for v in difference_ci([1.0, 1.0], [2.0, 2.0]))  # no spread: no zero-width interval
    assert all(math.isnan(v) for v in difference_ci([1.0, 2.0], [0.5, 1.5], "paired"))  # constant differences
    with pytest.raises(ValueError, match="unknown test 'z'; choose one of student, welch, paired"):
        difference_ci(A, B, "z")
    with pytest.raises(ValueError, match="aligned by seed, got 5 and 3"):
        difference_ci(A, B[:3], "paired")
    table = summarize(runs_frame({"relu": [90.1] * 3, "gelu": [90.3] * 3}), "val_top1_best", "relu")
    assert math.isnan(row(table, "gelu")["ci_low"])  # zero variance: no test, no interval


def test_divergence_p_is_fisher_exact():
    assert divergence_p(2, 5, 0, 5) == pytest.approx(sps.fisher_exact([[2, 3], [0, 5]]).pvalue)
    assert divergence_p(2, 5, 0, 5) == pytest.approx(4 / 9)  # by hand: P(k = 2) + P(k = 0) = 2 · C(5,2) / C(10,2)
    assert divergence_p(0, 5, 0, 5) == 1.0 and math.isnan(divergence_p(0, 0, 1, 5))
    with pytest.raises(ValueError, match="act: diverged runs must lie in 0..runs, got 6 of 5"):
        divergence_p(6, 5, 0, 5)


def test_withheld_tests_leave_means_and_mark_why():
    table = withhold_tests(summarize(runs_frame({"relu": B, "gelu": A, "solo": [91.0]}), "val_top1_best", "relu"))
    gelu = row(table, "gelu")
    assert gelu["mark"] == "not comparable" and gelu["stars"] == "" and gelu["mean"] == pytest.approx(np.mean(A))
    assert all(math.isnan(gelu[c]) for c in ("p_value", "t_stat", "p_holm", "ci_low", "ci_high", "cohen_d"))
    assert row(table, "solo")["mark"] == "n<2" and row(table, "relu")["mark"] == "baseline"


def test_single_run_gets_no_std_and_no_test():
    table = summarize(runs_frame({"relu": B, "gelu": [91.0]}), "val_top1_best", "relu")
    got = row(table, "gelu")
    assert got["n"] == 1 and math.isnan(got["std"]) and math.isnan(got["p_value"]) and got["mark"] == "n<2"
    assert got["diff"] == pytest.approx(91.0 - np.mean(B))
    table = summarize(runs_frame({"relu": [90.0], "gelu": A}), "val_top1_best", "relu")
    assert row(table, "gelu")["mark"] == "baseline n<2"


def test_zero_variance_in_both_groups_is_marked_not_infinite():
    table = summarize(
        runs_frame({"relu": [90.1] * 3, "gelu": [90.3] * 3, "silu": [90.1, 90.2, 90.3]}), "val_top1_best", "relu"
    )
    assert row(table, "gelu")["mark"] == "zero variance" and math.isnan(row(table, "gelu")["p_value"])
    assert row(table, "silu")["mark"] == "" and np.isfinite(row(table, "silu")["p_value"])  # one group varies
    paired = summarize(runs_frame({"relu": [90.0, 91.0], "gelu": [90.5, 91.5]}), "val_top1_best", "relu", "paired")
    assert row(paired, "gelu")["mark"] == "zero variance"  # constant differences


def test_all_diverged_is_counted_and_marked():
    table = summarize(
        runs_frame({"relu": B, "rational": ["diverged", "diverged", "failed", "diverged"]}), "val_top1_best", "relu"
    )
    got = row(table, "rational")
    assert (got["n"], got["n_runs"], got["n_diverged"], got["n_failed"]) == (0, 4, 3, 1)
    assert math.isnan(got["mean"]) and got["mark"] == "no completed run" and got["stars"] == ""
    assert got["act_params"] == 6 and pd.isna(got["rank"]) and not got["best"]
    table = summarize(runs_frame({"relu": ["diverged"] * 3, "gelu": A}), "val_top1_best", "relu")
    assert row(table, "gelu")["mark"] == "baseline n<2" and math.isnan(row(table, "gelu")["diff"])


def test_baseline_missing_from_a_recipe_is_marked_unknown_everywhere_is_an_error():
    runs = pd.concat([runs_frame({"relu": B, "gelu": A}, "r1"), runs_frame({"gelu": A, "silu": B}, "r2")])
    table = summarize(runs, "val_top1_best", "relu")
    r2 = table[table.recipe == "r2"]
    assert set(r2["mark"]) == {"no baseline"} and r2["baseline"].isna().all() and r2["p_value"].isna().all()
    assert row(table[table.recipe == "r1"], "gelu")["mark"] == ""
    with pytest.raises(ValueError, match="unknown baseline 'tanh'; acts: gelu, relu, silu"):
        summarize(runs, "val_top1_best", "tanh")
    with pytest.raises(ValueError, match="available: val_top1_best, train_time_s"):
        summarize(runs, "val_top5_best", "relu")


def test_default_baseline_from_summaries_then_relu_then_gelu():
    assert set(summarize(runs_frame({"relu": B, "gelu": A}, baseline="gelu"), "val_top1_best").baseline) == {"gelu"}
    assert set(summarize(runs_frame({"relu": B, "gelu": A}, baseline=None), "val_top1_best").baseline) == {"relu"}
    assert set(summarize(runs_frame({"silu": B, "gelu": A}, baseline="tanh"), "val_top1_best").baseline) == {"gelu"}
    none = summarize(runs_frame({"silu": B, "mish": A}, baseline=None), "val_top1_best")
    assert set(none.mark) == {"no baseline"}


def test_best_second_rows_order_and_costs():
    vals = {"relu": B, "gelu": A, "silu": [90.3, 90.9, 90.2, 90.7, 90.5], "rational": ["diverged"]}
    table = summarize(runs_frame(vals), "val_top1_best", "relu")
    assert table["act"].tolist() == ["relu", "gelu", "rational", "silu"]  # baseline first
    assert table.set_index("act")["best"].to_dict() == {"relu": False, "gelu": True, "rational": False, "silu": False}
    assert row(table, "silu")["second"] and row(table, "gelu")["train_time_s"] == pytest.approx(12.0)
    lower = summarize(runs_frame(vals), "val_top1_best", "relu", higher_better=False)
    assert row(lower, "relu")["best"] and row(lower, "silu")["second"]


def test_compare_rejects_unknown_test():
    with pytest.raises(ValueError, match="student, welch, paired"):
        compare(pd.Series(A), pd.Series(B), "mann-whitney")


def _holm_by_hand(p):
    """The step-down rule written out: sorted p times (m, m-1, ..., 1), running max, capped at 1."""
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    out = np.empty_like(p)
    out[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * (p.size - np.arange(p.size))))
    return out


def test_holm_is_statsmodels_and_equals_the_rule_with_nans_left_out():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    for size in (1, 2, 5, 12):
        p = rng.uniform(0, 0.2, size)
        p[rng.integers(0, size)] = p[0]  # a tie
        assert holm(p).tolist() == _holm_by_hand(p).tolist() == multipletests(p, method="holm")[1].tolist()
        with_nan = np.insert(p, [0, size], np.nan)  # NaN: no test, so m stays `size`
        got = holm(with_nan)
        assert np.isnan(got[0]) and np.isnan(got[-1]) and got[1:-1].tolist() == holm(p).tolist()
    assert np.isnan(holm([np.nan, np.nan])).all() and holm([]).size == 0


@pytest.mark.parametrize(
    "metric, higher",
    [
        ("val_top1_best", True),
        ("ema_val_top1_best", True),
        ("test_top1_at_best_val", True),
        ("val_top1_auc", True),
        ("val_loss_final", False),
        ("val_loss_auc", False),
        ("train_time_s", False),
        ("peak_mem_mb", False),
        ("top1_err", False),
        ("epochs_to_90", False),
        ("epochs_to_95_abs", False),
        ("ema_val_top1_epochs_to_97.5", False),
        ("epochs_to_150", False),  # an invalid level still counts epochs
    ],
)
def test_one_higher_is_better_knows_every_metric_name(metric, higher):
    from visionbench.stats.metrics import higher_is_better

    assert higher_is_better(metric) is higher

"""Per recipe (docs/report.md): mde / seeds_needed, TOST, probability of improvement, verdicts and the curve metrics
(epochs_to_X, <column>_auc), each checked against an independent computation on fabricated runs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.optimize import brentq
from statsmodels.stats.power import TTestIndPower, TTestPower
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from visionbench.report import curves, load_runs, main, summarize, verdict
from visionbench.stats import improvement, power
from visionbench.stats.metrics import higher_is_better

from .helpers import write_recipe, write_run

RNG = np.random.default_rng(11)
A = RNG.normal(90.6, 0.4, 5)  # an act
B = RNG.normal(90.0, 0.5, 6)  # its baseline


def nct_power(d: float, n1: int, n2: int | None = None, alpha: float = 0.05) -> float:
    """Two-tailed power of the Student t-test (n2=None: one-sample/paired over n1 values), from scipy's nct."""
    if n2 is None:
        df, nc = n1 - 1, d * math.sqrt(n1)
    else:
        df, nc = n1 + n2 - 2, d * math.sqrt(n1 * n2 / (n1 + n2))
    crit = sps.t.ppf(1 - alpha / 2, df)
    lower = sps.nct.cdf(-crit, df, nc)  # NaN where it underflows (< 1e-15) for a large nc
    return float(sps.nct.sf(crit, df, nc) + (0.0 if math.isnan(lower) else lower))


def nct_seeds(d: float, paired: bool = False, target: float = 0.8) -> int:
    """The smallest n per group (pairs) whose nct power reaches `target`."""
    n = 2
    while nct_power(d, n, None if paired else n) < target:
        n += 1
    return n


def pooled(a, b) -> float:
    return math.sqrt(((len(a) - 1) * np.var(a, ddof=1) + (len(b) - 1) * np.var(b, ddof=1)) / (len(a) + len(b) - 2))


# --- power.py ---------------------------------------------------------------------------------------------------


def test_mde_equals_statsmodels_and_the_noncentral_t():
    d_sm = TTestIndPower().solve_power(effect_size=None, nobs1=5, ratio=6 / 5, alpha=0.05, power=0.8)
    d_nct = brentq(lambda d: nct_power(d, 5, 6) - 0.8, 0.01, 20)
    assert power.mde_d(5, 6) == pytest.approx(d_sm, rel=1e-6) == pytest.approx(d_nct, rel=1e-6)
    assert power.mde(A, B) == pytest.approx(d_nct * pooled(A, B), rel=1e-6)
    diff = A[:5] - B[:5]  # paired: one-sample t over the differences
    d_paired = brentq(lambda d: nct_power(d, 5) - 0.8, 0.01, 20)
    assert power.mde(A[:5], B[:5], paired=True) == pytest.approx(d_paired * np.std(diff, ddof=1), rel=1e-6)
    assert power.mde_d(5, alpha=0.01) > power.mde_d(5)  # a stricter α needs a larger effect
    assert math.isnan(power.mde([1.0], B))


@pytest.mark.parametrize("d", [0.3, 0.8, 1.0, 1.7, 3.0])
def test_seeds_needed_equals_statsmodels_and_the_noncentral_t(d):
    n_sm = TTestIndPower().solve_power(effect_size=d, nobs1=None, ratio=1.0, alpha=0.05, power=0.8)
    assert power.seeds_needed(d) == math.ceil(n_sm - 1e-9) == nct_seeds(d)
    n_sm = TTestPower().solve_power(effect_size=d, nobs=None, alpha=0.05, power=0.8)
    assert power.seeds_needed(d, paired=True) == max(2, math.ceil(n_sm - 1e-9)) == nct_seeds(d, paired=True)


def test_seeds_needed_edges():
    assert power.seeds_needed(0.0) == math.inf and power.seeds_needed(1e-4) == math.inf  # > MAX_SEEDS
    assert power.seeds_needed(50.0) == 2 and math.isnan(power.seeds_needed(float("nan")))
    assert power.seeds_needed(-1.0) == power.seeds_needed(1.0)


def scipy_tost(a, b, margin: float, welch: bool = False) -> float:
    """Two one-sided t-tests by hand: H0 Δ <= -M (upper tail) and H0 Δ >= +M (lower tail); the larger p."""
    a, b = np.asarray(a), np.asarray(b)
    va, vb, na, nb = np.var(a, ddof=1), np.var(b, ddof=1), len(a), len(b)
    if welch:
        se = math.sqrt(va / na + vb / nb)
        df = (va / na + vb / nb) ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    else:
        se, df = pooled(a, b) * math.sqrt(1 / na + 1 / nb), na + nb - 2
    diff = a.mean() - b.mean()
    return max(sps.t.sf((diff + margin) / se, df), sps.t.cdf((diff - margin) / se, df))


@pytest.mark.parametrize("margin", [0.3, 1.0, 2.0])
def test_tost_p_equals_ttost_ind_and_a_hand_computation(margin):
    assert power.tost_p(A, B, margin) == pytest.approx(ttost_ind(A, B, -margin, margin)[0], rel=1e-9)
    assert power.tost_p(A, B, margin) == pytest.approx(scipy_tost(A, B, margin), rel=1e-9)
    assert power.tost_p(A, B, margin, test="welch") == pytest.approx(
        ttost_ind(A, B, -margin, margin, usevar="unequal")[0], rel=1e-9
    )
    assert power.tost_p(A, B, margin, test="welch") == pytest.approx(scipy_tost(A, B, margin, welch=True), rel=1e-9)
    assert power.tost_p(A[:5], B[:5], margin, test="paired") == pytest.approx(
        ttost_paired(A[:5], B[:5], -margin, margin)[0], rel=1e-9
    )
    with pytest.raises(ValueError, match="margin must be > 0"):
        power.tost_p(A, B, 0)


# --- improvement.py ---------------------------------------------------------------------------------------------


def direct_count(x, y, higher_better=True) -> float:
    wins = 0.0
    for xi, yj in itertools.product(x, y):
        if xi == yj:
            wins += 0.5
        elif (xi > yj) == higher_better:
            wins += 1
    return wins / (len(x) * len(y))


def test_probability_of_improvement_equals_the_direct_pairwise_count():
    x, y = [91.0, 92.0, 90.0, 92.0], [90.0, 92.0, 89.5]  # with ties
    for higher in (True, False):
        assert improvement.probability_of_improvement(x, y, higher_better=higher) == direct_count(x, y, higher)
    assert math.isnan(improvement.probability_of_improvement([], y))


def nct_limits(t: float, df: int, c: float) -> tuple[float, float]:
    """δ_L, δ_U by scalar brentq on scipy.stats.nct: P(T >= t | δ_L/c) = 0.025, P(T <= t | δ_U/c) = 0.025."""
    low = brentq(lambda d: sps.nct.sf(t, df, d / c) - 0.025, -8, 8)
    high = brentq(lambda d: sps.nct.cdf(t, df, d / c) - 0.025, -8, 8)
    return low, high


def test_normal_model_p_and_its_noncentral_t_interval_by_hand():
    d = (A.mean() - B.mean()) / pooled(A, B)
    c = math.sqrt(1 / len(A) + 1 / len(B))
    low, high = nct_limits(d / c, len(A) + len(B) - 2, c)
    p, lo, hi = improvement.recipe_interval(A, B)
    assert p == pytest.approx(sps.norm.cdf(d / math.sqrt(2)), rel=1e-12)
    assert (lo, hi) == pytest.approx((sps.norm.cdf(low / math.sqrt(2)), sps.norm.cdf(high / math.sqrt(2))), rel=1e-7)
    # lower is better: the same comparison with the signs flipped
    p2, lo2, hi2 = improvement.recipe_interval(-A, -B, higher_better=False)
    assert (p2, lo2, hi2) == pytest.approx((p, lo, hi), rel=1e-12)
    q, qlo, qhi = improvement.recipe_interval(B, A)
    assert (q, qlo, qhi) == pytest.approx((1 - p, 1 - hi, 1 - lo), rel=1e-7)
    # paired: Φ(mean D / sd D), the one-sample noncentral t over n − 1 df
    diff = A[:5] - B[:5]
    dp = diff.mean() / diff.std(ddof=1)
    low, high = nct_limits(dp * math.sqrt(5), 4, 1 / math.sqrt(5))
    p, lo, hi = improvement.recipe_interval(A[:5], B[:5], paired=True)
    assert (p, lo, hi) == pytest.approx((sps.norm.cdf(dp), sps.norm.cdf(low), sps.norm.cdf(high)), rel=1e-7)


def test_probability_of_improvement_not_estimable_without_two_runs_or_spread():
    assert all(math.isnan(v) for v in improvement.recipe_interval([1.0], B))
    assert all(math.isnan(v) for v in improvement.recipe_interval([1.0, 1.0], [2.0, 2.0]))
    assert all(math.isnan(v) for v in improvement.recipe_interval([1.0, 2.0], [0.0, 1.0], paired=True))
    # far apart: the limits clamp at 0 / 1 instead of failing in the noncentral t's far tail
    p, lo, hi = improvement.recipe_interval([100.0, 100.1, 99.9] * 10, [0.0, 0.1, -0.1] * 10)
    assert p == 1.0 and 0.999 < lo <= hi == 1.0


def test_suite_table_mean_over_estimable_recipes_without_an_interval():
    x, y = [91.0, 92.0, 90.0, 92.0], [90.0, 92.0, 89.5]
    blocks = {
        "r1": {"values": {"relu": y, "gelu": x}, "higher_better": False},
        "r2": {"values": {"relu": B, "gelu": A}, "higher_better": True},
        "r3": {"values": {"relu": B, "gelu": [95.0]}, "higher_better": True},
    }  # one run: not estimable
    frame = improvement.table(blocks, "relu").set_index("block")
    p1 = improvement.recipe_interval(x, y, higher_better=False)[0]
    p2 = improvement.recipe_interval(A, B)[0]
    assert frame.loc["all", "p_improve"] == pytest.approx((p1 + p2) / 2) and frame.loc["all", "n_blocks"] == 2
    assert math.isnan(frame.loc["all", "ci_low"]) and math.isnan(frame.loc["r3", "p_improve"])
    assert frame.loc["r3", "p_improve_empirical"] == direct_count([95.0], B)
    assert frame.loc["all", "p_improve_empirical"] == pytest.approx(
        (direct_count(x, y, False) + direct_count(A, B)) / 2
    )


# --- verdict.py -------------------------------------------------------------------------------------------------

VERDICT_VALUES = {
    "relu": [90.0, 90.4, 89.8, 90.1, 90.3, 90.2],
    "up": [91.5, 91.9, 91.4, 91.8, 91.6, 91.7],  # far above: better
    "down": [88.5, 88.9, 88.4, 88.8, 88.7, 88.6],  # far below: worse
    "same": [90.1, 90.3, 89.9, 90.2, 90.2, 90.0],  # inside ±1: equivalent
    "noisy": [89.0, 92.0, 90.5, 88.8, 91.9, 90.9],  # wide spread: inconclusive
    "edge": [90.40, 90.70, 90.10, 90.45, 90.60, 90.50],  # p < 0.05 but not after Holm
}


def verdict_table(tmp_path, *argv) -> pd.DataFrame:
    root = write_recipe(tmp_path, "toy", VERDICT_VALUES)
    assert main([str(root), "--no-plots", *argv]) == 0
    return pd.read_csv(root / "table.csv").set_index("act")


def test_verdict_rules(tmp_path):
    table = verdict_table(tmp_path, "--margin", "1")
    assert table["verdict"].fillna("").to_dict() == {
        "relu": "",
        "up": "better",
        "down": "worse",
        "same": "equivalent",
        "noisy": "inconclusive",
        "edge": "equivalent",
    }  # edge: Δ ≈ +0.4 is real (p < 0.05) but inside ±1: the margin decides
    assert table.loc["same", "tost_p"] < 0.05 <= table.loc["noisy", "tost_p"]
    assert table.loc["edge", "p_value"] < 0.05 and "but inside the margin" in table.loc["edge", "verdict_text"]
    noisy = table.loc["noisy"]
    d = 1.0 / pooled(VERDICT_VALUES["noisy"], VERDICT_VALUES["relu"])  # sized for the margin, never the observed Δ
    assert noisy["d_for_seeds"] == pytest.approx(d) and noisy["seeds_needed"] == nct_seeds(d)
    assert f"≈ {nct_seeds(d)} seeds per group would detect Δ = 1.00, the margin (d = {d:.2f})" in noisy["verdict_text"]
    assert noisy["verdict_text"].startswith(f"noisy vs relu is inconclusive: Δ = {noisy['diff']:+.2f} (Student p = ")
    assert table.loc["up", "verdict_text"] == "up is better than relu: Δ = +1.52 (Student p < 0.0001; n = 6 vs 6)."
    assert table.loc["down", "verdict_text"].startswith("down is worse than relu: Δ = -1.48 (Student p < 0.0001")
    same = table.loc["same"]
    assert same["verdict_text"] == (
        f"same is equivalent to relu within ±1.00: Δ = {same['diff']:+.2f}, TOST p < 0.0001 (n = 6 vs 6)."
    )
    assert same["tost_p"] < 1e-4 and "TOST p = 0.0" in table.loc["edge", "verdict_text"]


def test_seeds_needed_is_sized_for_a_stated_effect_never_the_observed_one(tmp_path):
    relu = [98.61111, 99.16667, 98.05556, 98.33333, 98.05556]
    same = [98.61111, 99.16667, 98.05556, 98.33333, 98.0555585]  # Δ = -3e-7: float32 ulps, d ≈ 0
    root = write_recipe(tmp_path, "toy", {"relu": relu, "same": same})
    assert main([str(root), "--no-plots"]) == 0
    row = pd.read_csv(root / "table.csv").set_index("act").loc["same"]
    assert row["d_for_seeds"] == 1.0 and row["seeds_needed"] == nct_seeds(1.0) and row["verdict"] == "inconclusive"
    assert "would detect a difference of one seed sd (d = 1; --effect D for another)" in row["verdict_text"]
    assert "Δ = +0.00 " in row["verdict_text"]  # never "-0.00"


def test_at_the_printed_seeds_a_one_sd_difference_is_found_80_percent_of_the_time():
    """The sizing is a promise: simulate the table's Student test at the printed n per group and a true difference
    of one seed sd (the default stated effect), through the same power.seeds_needed the verdict calls."""
    from scipy import stats as sps

    from visionbench.stats import power

    n = int(power.seeds_needed(1.0))
    rng = np.random.default_rng(4)
    a, b = rng.normal(1.0, 1.0, (4000, n)), rng.normal(0.0, 1.0, (4000, n))
    found = float(np.mean(sps.ttest_ind(a, b, axis=1).pvalue < 0.05))
    print(f"\n{n} seeds per group, Δ = 1 sd: found {found:.1%}")
    assert found == pytest.approx(0.80, abs=0.03)


def test_verdict_without_margin_and_with_holm(tmp_path):
    table = verdict_table(tmp_path)
    assert table["tost_p"].isna().all() and table.loc["same", "verdict"] == "inconclusive"
    edge = table.loc["edge"]
    assert edge["p_value"] < 0.05 <= edge["p_holm"]  # the fabricated case the flag is for
    assert edge["verdict"] == "better"
    holm = verdict_table(tmp_path / "holm", "--holm")
    assert holm.loc["edge", "verdict"] == "inconclusive" and "Holm-adjusted p" in holm.loc["edge", "verdict_text"]
    assert holm.loc["up", "verdict"] == "better" and holm["verdict_holm"].all()


def test_effect_and_alpha_drive_seeds_needed(tmp_path):
    table = verdict_table(tmp_path, "--effect", "0.5", "--alpha", "0.01")
    sd = pooled(VERDICT_VALUES["noisy"], VERDICT_VALUES["relu"])
    noisy = table.loc["noisy"]
    assert noisy["d_for_seeds"] == pytest.approx(0.5 / sd)
    n_sm = TTestIndPower().solve_power(effect_size=0.5 / sd, nobs1=None, ratio=1.0, alpha=0.01, power=0.8)
    assert noisy["seeds_needed"] == math.ceil(n_sm)
    d_sm = TTestIndPower().solve_power(effect_size=None, nobs1=6, ratio=1.0, alpha=0.01, power=0.8)
    assert noisy["mde"] == pytest.approx(d_sm * sd, rel=1e-6)
    assert "would detect Δ = 0.50" in noisy["verdict_text"] and (table["alpha"] == 0.01).all()


def test_annotate_api_and_lower_is_better(tmp_path):
    root = write_recipe(tmp_path, "toy", {"relu": [5.0, 5.2, 5.1, 4.9], "fast": [3.0, 3.1, 2.9, 3.2]}, metrics=None)
    runs = load_runs(root).rename(columns={"val_top1_best": "val_loss_final"})
    summary = summarize(runs, "val_loss_final")
    out = verdict.annotate(summary, runs).set_index("act")
    assert out.loc["fast", "verdict"] == "better"  # a loss going down
    assert out.loc["fast", "p_improve_empirical"] == 1.0 and out.loc["fast", "p_improve"] > 0.99
    with pytest.raises(ValueError, match="--margin must be a positive number"):
        verdict.annotate(summary, runs, margin=-1)


def test_untested_rows_get_a_reason_not_a_verdict(tmp_path):
    root = write_recipe(tmp_path, "toy", {"relu": [90.0, 90.5, 90.2], "solo": [91.0]})
    assert main([str(root), "--no-plots"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert (
        pd.isna(table.loc["solo", "verdict"])
        and table.loc["solo", "verdict_text"] == "solo: no verdict against relu (n<2: no test)."
    )


def test_cli_writes_the_columns_and_the_sentences(tmp_path, capsys):
    table = verdict_table(tmp_path, "--margin", "1", "--extras")
    for col in (
        "mde",
        "seeds_needed",
        "tost_p",
        "tost_p_holm",
        "verdict",
        "verdict_text",
        "p_improve",
        "p_improve_low",
        "p_improve_high",
        "d_for_seeds",
    ):
        assert col in table.columns
    up = table.loc["up"]
    assert up["p_improve_empirical"] == 1.0 and up["mde"] == pytest.approx(
        power.mde_d(6, 6) * pooled(VERDICT_VALUES["up"], VERDICT_VALUES["relu"]), rel=1e-6
    )
    assert table.loc["noisy", "p_improve_empirical"] == direct_count(VERDICT_VALUES["noisy"], VERDICT_VALUES["relu"])
    assert table.loc["noisy", "p_improve"] == pytest.approx(
        improvement.recipe_interval(VERDICT_VALUES["noisy"], VERDICT_VALUES["relu"])[0]
    )
    md = (tmp_path / "toy" / "table.md").read_text()
    assert "| verdict |" in md and "equivalent (±1.00) |" in md and "P(> relu) [95% CI]" in md
    assert "Verdicts (α = 0.05, equivalence margin ±1 (TOST)):" in md
    sentences = [line for line in md.splitlines() if line.startswith("- ") and " relu" in line]
    assert len(sentences) == len(VERDICT_VALUES) - 1  # one per non-baseline act
    assert f"- {table.loc['down', 'verdict_text']}" in md
    tex = (tmp_path / "toy" / "table.tex").read_text()
    assert "equivalent ($\\pm$1.00)" in tex


def test_survivors_better_with_diverged_runs_is_unstable_never_better(tmp_path):
    """2 of 5 runs diverged, the 3 that finished beat the baseline (p < 0.01): not 'better'."""
    values = {
        "relu": [90.0, 90.4, 89.8, 90.1, 90.3],
        "rational": [91.5, 91.9, 91.4, "diverged", "diverged"],  # survivors far above relu
        "gelu": [90.2, 90.6, 89.9, 90.5, 90.1],
        "bad": [88.5, 88.9, "diverged", 88.4, 88.7],
    }  # worse and diverging: stays worse
    root = write_recipe(tmp_path, "toy", values)
    assert main([str(root), "--no-plots", "--extras"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    rational = table.loc["rational"]
    assert rational["p_value"] < 0.01 and rational["verdict"] == "unstable"
    fisher = sps.fisher_exact([[2, 1 + 2], [0, 5]]).pvalue
    assert rational["div_p"] == pytest.approx(fisher) and (rational["base_diverged"], rational["base_runs"]) == (0, 5)
    assert rational["verdict_text"].startswith(
        "rational is unstable against relu: among the runs that finished it "
        "is better than relu — Δ = +1.48 (Student p = 0.0002 < 0.05"
    )
    assert rational["verdict_text"].endswith(
        f"n = 3 vs 5); but rational diverged in 2 of 5 runs, relu in 0 of 5 (Fisher exact p = {fisher:.4f})."
    )
    assert table.loc["bad", "verdict"] == "worse" and "bad diverged in 1 of 5 runs" in table.loc["bad", "verdict_text"]
    assert "diverged" not in table.loc["gelu", "verdict_text"] and table.loc["gelu", "div_p"] == 1.0
    md = (root / "table.md").read_text()
    assert "| unstable (2/5 diverged) |" in md and "| worse (1/5 diverged) |" in md
    for line in md.splitlines():  # the survivors' "better" never appears without the divergence
        if "rational" in line and "better" in line:
            assert "diverged" in line, line


def test_a_diverging_baseline_is_named_in_every_sentence(tmp_path):
    values = {
        "relu": [90.0, 90.4, "diverged", 90.1, "diverged"],
        "up": [91.5, 91.9, 91.4, 91.8, 91.6],
        "none": ["diverged", "diverged"],
    }
    root = write_recipe(tmp_path, "toy", values)
    assert main([str(root), "--no-plots"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert table.loc["up", "verdict"] == "better"  # the act itself never diverged
    assert table.loc["up", "verdict_text"].endswith(
        "; up diverged in 0 of 5 runs, relu in 2 of 5 "
        f"(Fisher exact p = {sps.fisher_exact([[0, 5], [2, 3]]).pvalue:.4f})."
    )
    assert table.loc["none", "verdict_text"].startswith(
        "none: no verdict against relu (no completed run: no test); none diverged in 2 of 2 runs, relu in 2 of 5"
    )
    assert "| better (relu 2/5 diverged) |" in (root / "table.md").read_text()
    gone = write_recipe(tmp_path / "gone", "toy", {"relu": ["diverged"] * 3, "up": [91.5, 91.9, 91.4]})
    assert main([str(gone), "--no-plots"]) == 0  # no baseline run finished: still a sentence with the counts
    assert pd.read_csv(gone / "table.csv").set_index("act").loc["up", "verdict_text"] == (
        "up: no verdict against relu (baseline n<2: no test); up diverged in 0 of 3 runs, relu in 3 of 3 "
        "(Fisher exact p = 0.1000)."
    )


def test_welch_marks_p_improve_not_estimable(tmp_path):
    table = verdict_table(tmp_path, "--test", "welch", "--extras")
    assert table.loc[["up", "noisy"], "p_improve"].isna().all() and table.loc["up", "p_improve_empirical"] == 1.0
    assert "| n/e |" in (tmp_path / "toy" / "table.md").read_text()


# --- curves.py --------------------------------------------------------------------------------------------------


def write_curve(
    root,
    recipe: str,
    act: str,
    seed: int,
    val_top1: list[float],
    *,
    status="completed",
    first_epoch: int = 1,
    extra_rows: str = "",
):
    """A run whose metrics.csv has the given val_top1 curve (epochs first_epoch, first_epoch + 1, ...)."""
    run = write_run(root, recipe, act, seed, max(val_top1), status=status)
    lines = ["epoch,val_top1,val_loss"] + [f"{first_epoch + i},{v},{1 / (1 + v)}" for i, v in enumerate(val_top1)]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n" + extra_rows)
    return run


def test_epochs_to_and_auc_on_one_curve(tmp_path):
    run = write_curve(
        tmp_path, "toy", "relu", 0, [10.0, 50.0, 80.0, 90.0, 85.0], extra_rows="3,81.0,0.1\n"
    )  # epoch 3 logged again after a resume: the last row counts
    frame = pd.read_csv(run / "metrics.csv")
    assert curves.epochs_to(frame, "val_top1", 90) == 3  # 90 % of the best 90 is 81: epoch 3 (81.0)
    assert curves.epochs_to(frame, "val_top1", 50) == 2  # 45
    assert curves.epochs_to(frame, "val_top1", 100) == 4
    assert curves.epochs_to(frame, "val_top1", 85, absolute=True) == 4
    assert math.isnan(curves.epochs_to(frame, "val_top1", 95, absolute=True))  # never reached
    assert curves.auc(frame, "val_top1") == pytest.approx(np.mean([10, 50, 81, 90, 85]))
    assert curves.parse("ema_val_top1_epochs_to_97.5") == curves.CurveMetric(
        "ema_val_top1_epochs_to_97.5", "ema_val_top1", "epochs_to", 97.5, False
    )
    assert curves.parse("epochs_to_95_abs").absolute and curves.parse("val_top1_best") is None
    assert not higher_is_better("epochs_to_90") and higher_is_better("val_top1_auc")
    assert not higher_is_better("val_loss_auc")


def test_curve_metrics_through_the_report(tmp_path):
    fast = {0: [70.0, 90.0, 95.0, 96.0], 1: [65.0, 88.0, 95.5, 96.5], 2: [72.0, 85.0, 94.0, 96.0]}
    slow = {0: [15.0, 40.0, 80.0, 95.0], 1: [12.0, 45.0, 85.0, 96.0], 2: [10.0, 30.0, 70.0, 94.0]}
    for seed in range(3):
        write_curve(tmp_path, "toy", "rational", seed, fast[seed])
        write_curve(tmp_path, "toy", "relu", seed, slow[seed])
    write_curve(tmp_path, "toy", "relu", 3, [10.0, 11.0], status="diverged")  # never scored
    root = tmp_path / "toy"

    def expected(curve, level):
        return 1 + next(i for i, v in enumerate(curve) if v >= level / 100 * max(curve))

    assert main([str(root), "--no-plots", "--metric", "epochs_to_90"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert table.loc["relu", "n"] == 3 and table.loc["relu", "n_diverged"] == 1
    assert table.loc["rational", "mean"] == pytest.approx(np.mean([expected(c, 90) for c in fast.values()]))
    assert table.loc["relu", "mean"] == pytest.approx(np.mean([expected(c, 90) for c in slow.values()]))
    assert table.loc["rational", "verdict"] == "better" and table.loc["rational", "diff"] < 0  # fewer epochs
    assert table.loc["rational", "best"]  # the lower mean is the best one
    assert table.loc["rational", "p_improve_empirical"] == 1.0 and table.loc["rational", "p_improve"] > 0.9

    assert main([str(root), "--no-plots", "--metric", "val_top1_auc"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert table.loc["rational", "mean"] == pytest.approx(np.mean([np.mean(c) for c in fast.values()]))
    assert table.loc["rational", "verdict"] == "better" and table.loc["rational", "diff"] > 0

    assert main([str(root), "--no-plots", "--metric", "epochs_to_96_abs"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert table.loc["relu", "n"] == 1 and table.loc["relu", "n_missing"] == 2  # two never reached 96
    assert "relu: 2 completed run(s) without a finite epochs_to_96_abs" in (root / "table.md").read_text()


def test_curve_metric_without_metrics_csv_is_a_clear_error(tmp_path, capsys):
    root = write_recipe(tmp_path, "toy", {"relu": [90.0, 90.5]})
    assert main([str(root), "--metric", "epochs_to_90"]) == 2
    assert "no completed run has one" in capsys.readouterr().err

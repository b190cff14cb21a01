"""Per-example evidence (docs/report.md): the statistics of visionbench/stats/per_example.py on synthetic
predictions — the two-level interval (wider than Welch's on a small test set, Welch's in the limit, 95 %
coverage by simulation), the variance share, churn and its permutation test, the seed ensemble, NLL and
ECE — and the report's section (report/per_example.py) through `visionbench report` on written trees."""

from __future__ import annotations

import json
import re
import zlib

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.special import expit, logit

from visionbench.report import main
from visionbench.results.predictions import write_predictions
from visionbench.stats import per_example as pex

from .helpers import write_run


# ---- a hierarchical model of runs scoring images ----------------------------------------------
def hierarchical(reps: int, n: int, n_img: int, *, beta=(4.0, 1.0), shift=-0.3, spread=0.8, tau=0.1, seed=0):
    """`reps` independent experiments, each n vs n runs on `n_img` images drawn from a population.

    Image i has a latent logit z_i = logit(p_i), p_i ~ Beta(*beta), for arm A, and z_i + shift + η_i,
    η_i ~ N(0, spread), for arm B; run r adds a model-quality shift u_r ~ N(0, tau); correctness is a
    Bernoulli draw of expit(z + u_r). Returns the true Δ over the image and seed distributions and the
    correctness arrays (reps × n × n_img) of both arms."""
    rng = np.random.default_rng(seed)
    big = np.random.default_rng(seed + 1)  # the truth: 5·10⁵ images, Gauss–Hermite over u
    za = logit(np.clip(big.beta(*beta, 500_000), 1e-9, 1 - 1e-9))
    zb = za + shift + big.normal(0, spread, za.size)
    nodes, weights = np.polynomial.hermite_e.hermegauss(24)
    true = sum(
        w * (expit(za + tau * x).mean() - expit(zb + tau * x).mean()) for x, w in zip(nodes, weights / weights.sum())
    )
    za = logit(np.clip(rng.beta(*beta, (reps, 1, n_img)), 1e-9, 1 - 1e-9))
    zb = za + shift + rng.normal(0, spread, (reps, 1, n_img))
    ca = rng.random((reps, n, n_img)) < expit(za + rng.normal(0, tau, (reps, n, 1)))
    cb = rng.random((reps, n, n_img)) < expit(zb + rng.normal(0, tau, (reps, n, 1)))
    return true, ca, cb


# example-dominated (images near 0 or 1, arms differ per image) and seed-dominated (run-quality shift)
SCENARIOS = {"images": dict(beta=(0.5, 0.2), spread=3.0, tau=0.1), "seeds": dict(beta=(4.0, 1.0), spread=0.8, tau=0.5)}


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_two_level_interval_covers_95_percent_at_3_and_5_seeds(n, scenario):
    true, ca, cb = hierarchical(2000, n, 300, seed=n, **SCENARIOS[scenario])
    res = pex.two_level_interval(ca, cb)
    coverage = np.mean((res["low"] <= true) & (true <= res["high"]))
    assert 0.935 <= coverage <= 0.965, coverage
    if scenario == "images":  # what the seed-only (Welch) interval misses when the test set is small
        seed_only = np.mean((res["seed_low"] <= true) & (true <= res["seed_high"]))
        assert seed_only < 0.92, seed_only


def test_two_level_interval_is_wider_on_a_small_test_set_and_welch_in_the_limit():
    _, ca, cb = hierarchical(1, 3, 200, seed=7, **SCENARIOS["images"])
    ca, cb = ca[0], cb[0]
    small = pex.two_level_interval(ca, cb)
    assert small["example_var"] > 0
    assert small["high"] - small["low"] > small["seed_high"] - small["seed_low"]
    assert small["seed_var"] + small["example_var"] > 1.5 * small["seed_var"]
    # seed-only = scipy's Welch interval of the run accuracies
    welch = sps.ttest_ind(ca.mean(axis=1), cb.mean(axis=1), equal_var=False).confidence_interval(0.95)
    assert small["seed_low"] == pytest.approx(welch.low) and small["seed_high"] == pytest.approx(welch.high)
    # the same images 10⁴ times over: the run accuracies (so Welch) are unchanged, the example term vanishes
    huge = pex.two_level_interval(np.tile(ca, 10_000), np.tile(cb, 10_000))
    assert huge["seed_low"] == pytest.approx(welch.low) and huge["seed_high"] == pytest.approx(welch.high)
    assert huge["low"] == pytest.approx(welch.low, rel=1e-3) and huge["high"] == pytest.approx(welch.high, rel=1e-3)


def test_two_level_interval_with_one_run_is_nan():
    res = pex.two_level_interval(np.ones((1, 10)), np.zeros((3, 10)))
    assert res["diff"] == 1.0 and np.isnan(res["low"]) and np.isnan(res["seed_high"])


# ---- variance share, image-paired test, McNemar ------------------------------------------------
def test_variance_share_is_one_for_independent_flips_and_small_with_run_quality():
    rng = np.random.default_rng(0)
    p = rng.beta(2, 0.5, 2000)
    flips = rng.random((400, p.size)) < p  # every run the same model: images flip independently
    share = pex.variance_share(flips)
    assert 0.85 < share["share"] < 1.15
    assert share["binomial_sd"] == pytest.approx(np.sqrt(flips.mean() * (1 - flips.mean()) / p.size))
    quality = rng.random((400, p.size)) < expit(logit(p) + rng.normal(0, 1.0, (400, 1)))
    assert pex.variance_share(quality)["share"] < 0.5
    assert np.isnan(pex.variance_share(flips[:1])["share"])
    # runs that each predict one class of ten (a net that never trained): equal counts, s² = 0, no share
    constant = np.stack([np.arange(10_000) % 10 == k for k in range(3)])
    assert pex.variance_share(constant)["seed_var"] == 0.0 and np.isnan(pex.variance_share(constant)["share"])


def test_paired_over_images_and_mcnemar():
    rng = np.random.default_rng(1)
    c = rng.random((3, 500)) < 0.8
    assert np.isnan(pex.paired_over_images(c, c)["p_value"])
    better = c | (rng.random((3, 500)) < 0.5)
    assert pex.paired_over_images(better, c)["p_value"] < 1e-6
    assert pex.mcnemar_p(c[0], c[0]) == 1.0
    a, b = np.r_[np.ones(20, bool), np.zeros(80, bool)], np.zeros(100, bool)
    assert pex.mcnemar_p(a, b) == pytest.approx(2 * 0.5**20)


# ---- churn -----------------------------------------------------------------------------------
def test_churn_of_a_run_with_itself_and_of_identical_runs_is_zero():
    pred = np.random.default_rng(2).integers(0, 10, 1000)
    assert pex.churn(np.stack([pred, pred])) == 0.0
    assert pex.churn(pred[None], pred[None]) == 0.0
    other = pred.copy()
    other[:300] = (other[:300] + 1) % 10
    assert pex.churn(pred[None], other[None]) == pytest.approx(0.3)
    assert np.isnan(pex.churn(pred[None]))


def test_churn_permutation_test_is_exact_and_says_what_few_runs_can_show():
    rng = np.random.default_rng(3)
    base = rng.integers(0, 10, 2000)

    def arm(shift, n):  # runs that agree with each other except on 2 % of images; arms differ on 20 %
        out = np.tile(base, (n, 1))
        out[:, :400] = (out[:, :400] + shift) % 10
        for row in out:
            flip = rng.random(row.size) < 0.02
            row[flip] = rng.integers(0, 10, flip.sum())
        return out

    few = pex.churn_test(arm(0, 3), arm(1, 3))
    assert few["between"] > few["within"] and few["exact"] and few["n_relabelings"] == 20
    assert few["p_value"] == pytest.approx(0.1) and few["min_p"] == pytest.approx(0.1)
    more = pex.churn_test(arm(0, 5), arm(1, 5))
    assert more["n_relabelings"] == 252 and more["p_value"] == pytest.approx(2 / 252)
    same = pex.churn_test(arm(0, 5), arm(0, 5))
    assert same["p_value"] > 0.05
    a8, b8 = arm(0, 8), arm(1, 8)  # C(16, 8) = 12,870 > 10,000: a seeded sample of relabelings
    sampled = pex.churn_test(a8, b8)
    assert not sampled["exact"] and sampled["n_relabelings"] == pex.MAX_RELABELINGS
    assert sampled["p_value"] < 0.01 and sampled == pex.churn_test(a8, b8)


# ---- ensemble and calibration ----------------------------------------------------------------
def test_ensemble_is_the_plurality_and_ties_go_to_the_summed_confidence():
    pred = np.array([[1, 4, 7], [1, 5, 8], [2, 5, 9]])
    conf = np.array([[0.2, 0.9, 0.3], [0.2, 0.1, 0.35], [0.99, 0.1, 0.34]])
    assert pex.ensemble_pred(pred, conf).tolist() == [1, 5, 8]
    tie = pex.ensemble_pred(np.array([[3], [4]]), np.array([[0.4], [0.6]]))
    assert tie.tolist() == [4]


def test_ece_of_a_calibrated_predictor_is_about_zero_and_of_an_overconfident_one_its_gap():
    rng = np.random.default_rng(4)
    conf = rng.uniform(0.1, 1.0, 200_000)
    assert pex.ece(conf, rng.random(conf.size) < conf) < 0.005
    assert pex.ece(np.full(1000, 0.9), np.arange(1000) < 700) == pytest.approx(0.2)
    two = pex.ece(np.stack([conf, conf]), np.stack([conf > 0, conf < 0]))
    assert two.shape == (2,) and two[1] == pytest.approx(conf.mean())


def test_nll_is_zero_when_certain_and_floored_at_zero_probability():
    assert pex.nll(np.ones((2, 5))).tolist() == [0.0, 0.0]
    assert pex.nll(np.array([0.0, 1.0])) == pytest.approx(-np.log(pex.NLL_FLOOR) / 2)


def test_runs_that_scored_different_images_are_refused_in_one_line():
    run = {"pred": np.zeros(4), "p_true": np.ones(4), "confidence": np.ones(4), "target": np.arange(4)}
    other = {**run, "target": np.array([0, 1, 3, 2])}
    with pytest.raises(ValueError, match="did not score the same images") as err:
        pex.Arm.from_runs([run, other], labels=["relu/seed_0", "relu/seed_1"])
    assert "\n" not in str(err.value) and "relu/seed_1" in str(err.value)
    with pytest.raises(ValueError, match="did not score the same images"):
        pex.compare_arms(pex.Arm.from_runs([run]), pex.Arm.from_runs([{**run, "target": np.arange(5)}]))


# ---- the report's section -------------------------------------------------------------------
N_IMG, N_CLASSES = 400, 10
TARGET = np.random.default_rng(10).integers(0, N_CLASSES, N_IMG)


def write_predicted_run(
    root,
    act: str,
    seed: int,
    accuracy: float,
    *,
    hard=None,
    val_split: float = 0.1,
    predictions: bool = True,
    target=TARGET,
    variant: str = "raw",
):
    """A completed run of `digits_vgg4` whose predictions.npz is right on a random `accuracy` share of images
    (never on the `hard` ones); summary.json's val_top1_best is the same accuracy, in points."""
    rng = np.random.default_rng(zlib.crc32(f"{act}/{seed}".encode()))  # not hash(): salted per process
    right = rng.random(target.size) < accuracy
    if hard is not None:
        right[hard] = False
    acc = 100 * right.mean()
    run = write_run(root, "digits_vgg4", act, seed, metrics={"val_top1_best": acc, "ema_val_top1_best": acc})
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "val_split": val_split}))
    if predictions:
        pred = np.where(right, target, (target + 1 + rng.integers(0, N_CLASSES - 1, target.size)) % N_CLASSES)
        conf = np.clip(rng.normal(accuracy, 0.05, target.size), 0.1, 1.0)
        write_predictions(
            run / "predictions.npz",
            {
                variant: dict(
                    pred=pred, p_true=np.where(right, conf, (1 - conf) / 2), confidence=conf, target=target, epoch=3
                )
            },
        )
    return run


def plain_lines(text: str) -> list[str]:
    return [line[2:] for line in text.split("In plain words:\n")[1].split("\n\n")[0].splitlines()]


def test_report_writes_the_per_example_section_with_a_plain_words_line(tmp_path, capsys):
    for seed in range(3):
        write_predicted_run(tmp_path, "relu", seed, 0.9)
        write_predicted_run(tmp_path, "rational", seed, 0.92)
    assert main([str(tmp_path / "digits_vgg4"), "--format", "md,csv,tex"]) == 0
    out = capsys.readouterr().out
    recipe = tmp_path / "digits_vgg4"
    text = (recipe / "per_example.md").read_text()
    assert "per-example evidence" in text and "scored on the test set (400 images)" in text
    assert "per_example.md" in (recipe / "table.md").read_text() and not (recipe / "per_example.tex").exists()
    assert text in out  # printed too
    (line,) = plain_lines(text)
    assert re.match(
        r"rational vs relu: Δ = [+-]\d+\.\d\d \[two-level [+-]\d+\.\d\d, [+-]\d+\.\d\d\]; one run's "
        r"accuracy varies by ±\d\.\d\d over test sets of this size \((share of seed variance \d+ %|the test set alone would "
        r"give \d+\.\d× the seed variance measured: not a share — .*within what the test set explains)\), while "
        r"the test set's part of this Δ \(√E: its sd over new test sets, both arms on the same images\) is "
        r"±\d\.\d\d( \(E estimated at 0: lost in each image's seed noise\))?; churn "
        r"between seeds \d+\.\d %, between activations \d+\.\d % \(permutation p = 0\.\d+\): too few runs "
        r"to tell .* \(the smallest p at 3 vs 3 runs is 0\.10\); ensemble \d+\.\d\d vs \d+\.\d\d \(McNemar "
        r"p = [\d.]+\); NLL \d\.\d{3} vs \d\.\d{3} \(Student p = [\d.]+\), ECE [\d.]+ % vs [\d.]+ % "
        r"\(Student p = [\d.]+\)$",
        line,
    ), line
    csv = pd.read_csv(recipe / "per_example.csv").set_index("act")
    table = pd.read_csv(recipe / "table.csv").set_index("act")
    # Δ recomputed from the predictions is the table's (the summaries hold the same accuracies)
    assert csv.loc["rational", "diff"] == pytest.approx(table.loc["rational", "diff"])
    assert csv.loc["rational", "two_level_low"] <= csv.loc["rational", "two_level_seed_low"] + 1e-9
    assert list(csv.index) == ["relu", "rational"] and csv.loc["relu", "n_with_predictions"] == 3


def test_the_test_sets_part_of_delta_is_root_e_in_the_sentence_the_table_and_the_csv(tmp_path, capsys):
    # rational never gets 60 images right that relu mostly does: the images add to Δ beyond their seed noise
    for seed in range(5):
        write_predicted_run(tmp_path, "relu", seed, 0.95)
        write_predicted_run(tmp_path, "rational", seed, 0.95, hard=np.arange(60))
    recipe = tmp_path / "digits_vgg4"
    assert main([str(recipe), "--format", "md,csv"]) == 0
    csv = pd.read_csv(recipe / "per_example.csv").set_index("act").loc["rational"]
    root_e = csv["two_level_example_sd"]  # points: √ of the two-level interval's example term (points²)
    assert root_e == pytest.approx(np.sqrt(csv["two_level_example_var"])) and root_e > 0.1
    # not the paired-over-images standard error, which also holds each image's seed noise
    paired = abs(csv["images_diff"] / csv["images_t_stat"])
    assert paired > root_e and f"{paired:.2f}" != f"{root_e:.2f}"
    text = (recipe / "per_example.md").read_text()
    (line,) = plain_lines(text)
    assert (
        f"the test set's part of this Δ (√E: its sd over new test sets, both arms on the same images) is ±{root_e:.2f};"
        in line
    ), line
    header = next(row for row in text.splitlines() if row.startswith("| Act."))
    cells = next(row for row in text.splitlines() if row.startswith("| rational |"))
    column = [h.strip() for h in header.split("|")].index("test set's part of Δ")
    assert [c.strip() for c in cells.split("|")][column] == f"±{root_e:.2f}"


def test_an_activation_that_changes_which_images_are_hard_is_said_so(tmp_path, capsys):
    hard = np.arange(60)  # rational never gets these right; relu mostly does
    for seed in range(5):
        write_predicted_run(tmp_path, "relu", seed, 0.95)
        write_predicted_run(tmp_path, "rational", seed, 0.95, hard=hard)
    assert main([str(tmp_path / "digits_vgg4"), "--format", "md", "--test", "welch"]) == 0
    (line,) = plain_lines((tmp_path / "digits_vgg4" / "per_example.md").read_text())
    assert "(permutation p = 0.0079): the activation changes which images are hard" in line and "Welch p" in line
    assert "(McNemar p < 0.0001)" in line and "p = <" not in line  # a p below the printed floor reads "p < 0.0001"


def test_old_results_without_predictions_report_everything_else_and_say_what_they_lack(tmp_path, capsys):
    for seed in range(3):
        write_predicted_run(tmp_path, "relu", seed, 0.9, predictions=False)
        write_predicted_run(tmp_path, "gelu", seed, 0.9, predictions=False)
    assert main([str(tmp_path / "digits_vgg4"), "--format", "md,csv"]) == 0
    table = (tmp_path / "digits_vgg4" / "table.md").read_text()
    assert "| gelu | 3 |" in table
    assert (
        "no run has predictions.npz (results from before per-example predictions): the per-example columns "
        "(two-level interval, variance share, churn, ensemble, NLL, ECE) are not computed"
    ) in table
    assert not (tmp_path / "digits_vgg4" / "per_example.md").exists()


def test_some_runs_without_predictions_are_named_with_the_columns_they_lack(tmp_path, capsys):
    for seed in range(3):
        write_predicted_run(tmp_path, "relu", seed, 0.9)
        write_predicted_run(tmp_path, "gelu", seed, 0.9, predictions=False)
        write_predicted_run(tmp_path, "rational", seed, 0.9, predictions=seed > 0)
    assert main([str(tmp_path / "digits_vgg4"), "--format", "md"]) == 0
    text = (tmp_path / "digits_vgg4" / "per_example.md").read_text()
    assert (
        "4 of 9 completed runs have no predictions.npz (results from before per-example predictions): columns "
        "two-level interval, variance share, churn, ensemble, NLL, ECE not computed for gelu; rational computed "
        "on the runs that have it"
    ) in text
    assert "| gelu | 0/3 |" in text and "| rational | 2/3 |" in text
    assert "(4 of 9 completed runs have no predictions.npz)" in (tmp_path / "digits_vgg4" / "table.md").read_text()


def test_runs_that_scored_different_images_give_one_line_and_no_section(tmp_path, capsys):
    write_predicted_run(tmp_path, "relu", 0, 0.9)
    write_predicted_run(tmp_path, "relu", 1, 0.9)
    write_predicted_run(tmp_path, "gelu", 0, 0.9, target=np.roll(TARGET, 1))
    assert main([str(tmp_path / "digits_vgg4"), "--format", "md"]) == 0
    notes = [line for line in (tmp_path / "digits_vgg4" / "table.md").read_text().splitlines() if "per-example" in line]
    assert len(notes) == 1 and re.fullmatch(
        r"- per-example statistics not computed: the runs did not score the same images \(relu/seed_0 vs "
        r"gelu/seed_0: \d+ of 400 targets differ\); per-example statistics need every run scored on one test set "
        r"in one order",
        notes[0],
    ), notes
    assert not (tmp_path / "digits_vgg4" / "per_example.md").exists()


def test_the_section_reads_the_weights_the_metric_scores_and_names_the_val_set(tmp_path, capsys):
    for act in ("relu", "gelu"):
        for seed in range(2):
            write_predicted_run(tmp_path, act, seed, 0.9, val_split=0.0, variant="ema")
    recipe = tmp_path / "digits_vgg4"
    assert main([str(recipe), "--format", "md", "--metric", "ema_val_top1_best"]) == 0
    text = (recipe / "per_example.md").read_text()
    assert "the EMA weights" in text and "scored on the val set (the recipe holds out no split" in text
    (recipe / "per_example.md").unlink()
    assert main([str(recipe), "--format", "md"]) == 0  # val_top1_best scores the trained weights: not in the files
    assert (
        "per-example columns (two-level interval, variance share, churn, ensemble, NLL, ECE) not computed: "
        "gelu/seed_0: predictions.npz has no 'raw' predictions (has ema) (and 3 more)"
    ) in (recipe / "table.md").read_text()
    assert not (recipe / "per_example.md").exists()


def test_a_ratio_above_one_is_never_printed_as_a_share():
    """Σ v_i / N² over s² above 1 (a noisy s² at few seeds, or flips that offset one another): no "share" of 180 %."""
    from visionbench.report.tables import share_cell, share_words
    from visionbench.stats.per_example import variance_share

    c = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], float)  # every run gets 2 of 4: s² = 0 < Σ v_i / N²
    c = np.vstack([c, [1, 0, 0, 1], [0, 1, 1, 1]])
    share = variance_share(c)["share"]
    assert share > 1
    assert share_cell(share) == f"all (×{share:.1f})" and "%" not in share_cell(share)
    assert "not a share" in share_words(share) and "share of seed variance" not in share_words(share)
    assert share_cell(0.87) == "87 %" and share_words(0.87) == " (share of seed variance 87 %)"

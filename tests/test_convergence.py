"""Did it learn, has it converged (docs/report.md): a completed run that never learned is `stalled` in the report
(its summary stays `completed`), counted like a divergence in the verdict, a stalled baseline said in one sentence;
each table's convergence line (tail slope with its t interval over seeds, flagged `still rising` only when the
window's epochs at that slope move the metric by a seed sd; the pairs whose order reversed between half the epochs
and the last, flagged only when a test of the per-run gains says the reversal is beyond noise) and the verdict
clause while the ranking still moves (stats/convergence.py, report/convergence.py).

Each flag is a test: its false-alarm rate under no change and its power at a stated change are measured here by
simulation (`pytest -s` prints them; the slow tests run enough repetitions for the figures in docs/report.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from visionbench.report import load_runs
from visionbench.report import main as report_main
from visionbench.results import layout
from visionbench.results.io import write_csv_rows
from visionbench.stats import convergence as conv

from .helpers import copy_tree, shrunk, write_class_count, write_run

STALLS = ("act=relu,gelu", "seeds=2", "optim.lr=1e-9")  # nothing moves in 2 epochs


def learned(value: float, loss: float = 0.3, final: float | None = None) -> dict:
    return {
        "val_top1_best": value,
        "val_top1_final": value if final is None else final,
        "train_loss_final": loss,
        "best_epoch": 3,
    }


def run(root, act: str, seed: int, metrics: dict, n_classes: int | None = 10, curve=None) -> None:
    """A fake run with `metrics`, a predictions.npz naming `n_classes` (none for None) and, given `curve`, a
    metrics.csv of that val_top1 per epoch (1, 2, ...)."""
    path = write_run(root, "toy", act, seed, metrics=metrics)
    if n_classes is not None:
        write_class_count(path, n_classes, recipe="toy", act=act, setting={}, seed=seed)  # the run's own identity
    if curve is not None:
        write_csv_rows(
            layout.files(path).metrics,
            [{"epoch": e + 1, "train_loss": 0.5, "val_top1": f"{v:.4f}"} for e, v in enumerate(curve)],
        )


def report(recipe, capsys, *args: str) -> tuple[str, pd.DataFrame]:
    assert report_main([str(recipe), "--no-plots", "--format", "md,csv", *args]) == 0
    capsys.readouterr()
    return (recipe / "table.md").read_text(), pd.read_csv(
        recipe / "table.csv", keep_default_na=False, na_values=[""]
    ).set_index("act")


def line(md: str, start: str) -> str:
    return next(x for x in md.splitlines() if x.startswith(start))


# ---- the rule, on numbers ----------------------------------------------------------------------------------------


def test_the_stall_thresholds():
    assert conv.stalled_loss(10) == pytest.approx(0.9 * math.log(10))
    assert conv.stalled_top1(10) == 15.0 and conv.stalled_top1(2) == 55.0
    assert conv.stalled_top1(1000) == pytest.approx(0.15)
    assert "training loss 2.073" in conv.stall_reason(2.073, 90.0, 10)
    assert conv.stall_reason(2.07, 90.0, 10) is None  # 0.9 ln 10 = 2.0723
    assert "top-1 15.00 % ≤ 15.00 % (chance 10.00 %)" in conv.stall_reason(0.5, 15.0, 10)
    assert conv.stall_reason(0.5, 15.01, 10) is None
    assert conv.stall_reason(0.5, 60.0, 2) is None and conv.stall_reason(0.6, 54.0, 2) is not None
    assert conv.stall_reason(9.9, 1.0, None) is None and conv.stall_reason(None, math.nan, 10) is None


def test_a_loss_near_ln_c_after_three_epochs_is_a_stall_whatever_the_accuracy():
    """The zoo's acon_c seed 1: 15 epochs, final training loss 2.181 = 0.95 ln 10, test top-1 40.83 % at its best
    validation epoch (29.7 % at the last): it never came 10 % below a guess, and is stalled now."""
    losses = [2.721, 2.324, 2.306, 2.299, 2.294, 2.247, 2.454, 2.314, 2.305, 2.303, 2.300, 2.297, 2.293, 2.275, 2.181]
    metrics = {"train_loss_final": 2.181, "val_top1_best": 40.97, "val_top1_final": 30.56}
    assert conv.run_stall_reason(metrics, 10) is None  # without the epochs: the short-run protection
    assert conv.run_stall_reason(metrics, 10, losses) == "final training loss 2.181 ≥ 0.9·ln 10 = 2.072"
    assert conv.stall_reason(2.181, 41.0, 10, final_top1=30.0, train_losses=[2.8, 2.5, 2.181]) is not None
    assert conv.stall_reason(2.05, 41.0, 10, final_top1=30.0, train_losses=losses[:-1] + [2.05]) is None


def test_a_run_whose_loss_never_came_down_is_stalled_at_any_length_a_short_learning_run_is_not():
    # two epochs at lr = 1e-9: the loss did not move; stalled even with an accuracy off chance (an unbalanced set)
    reason = conv.stall_reason(2.619, 20.0, 10, final_top1=20.0, train_losses=[2.623, 2.619])
    assert reason == (
        "training loss never came down: 2.623 in epoch 1, 2.619 in epoch 2 (down < 5%), never below 0.9·ln 10 = 2.072"
    )
    assert conv.stall_reason(2.0, 20.0, 10, final_top1=20.0, train_losses=[2.05, 2.0]) is None  # below 0.9 ln C
    # a short run that is learning: its loss came down from epoch 1 but not yet below 0.9 ln C, accuracy off chance
    assert conv.stall_reason(2.234, 28.1, 10, final_top1=28.1, train_losses=[2.852, 2.234]) is None
    assert conv.stall_reason(2.2, 40.0, 10, final_top1=40.0, train_losses=[2.2]) is None  # one epoch: no change seen
    assert conv.stall_reason(2.2, 40.0, 10, final_top1=11.0, train_losses=[2.9, 2.2]) is not None  # at chance: stalled
    assert conv.never_learned([2.31, math.nan, 2.30], 10) is not None and conv.never_learned([2.31], 10) is None


def test_the_training_losses_come_from_metrics_csv(tmp_path):
    run_dir = write_run(tmp_path, "toy", "relu", 0, metrics=learned(90.0))
    assert layout.train_losses(run_dir) == []
    write_csv_rows(layout.files(run_dir).metrics, [{"epoch": 1, "train_loss": "2.5"}, {"epoch": 2, "train_loss": ""}])
    assert layout.train_losses(run_dir)[0] == 2.5 and math.isnan(layout.train_losses(run_dir)[1])


def test_tail_slope_interval_and_tau_against_scipy():
    epochs = np.arange(1, 13)
    curve = np.where(epochs <= 9, epochs * 5.0, 45 + 0.5 * (epochs - 9))  # a plateau in the last 3 = 25 % of 12
    assert conv.tail_window(12) == 3 and conv.tail_window(20) == 5 and conv.tail_window(4) == 3
    assert conv.tail_slope(epochs, curve) == pytest.approx(0.5)
    assert conv.tail_slope(epochs[::-1], curve[::-1]) == pytest.approx(0.5)  # order of the rows does not matter
    assert math.isnan(conv.tail_slope([1, 2], [3.0, 4.0]))
    slopes = [0.12, 0.31, 0.05]
    mean, low, high = conv.mean_interval(slopes)
    half = sps.t.ppf(0.975, 2) * np.std(slopes, ddof=1) / math.sqrt(3)
    assert (low, high) == pytest.approx((mean - half, mean + half)) and mean == pytest.approx(np.mean(slopes))
    assert math.isnan(conv.mean_interval([0.2])[1]) and conv.mean_interval([0.2, 0.2]) == (0.2, 0.2, 0.2)
    assert conv.seed_sd([1.0, 2.0, 3.0]) == 1.0 and math.isnan(conv.seed_sd([1.0]))
    assert conv.ranking_tau([1, 2, 3], [4, 5, 6]) == 1.0 and conv.ranking_tau([1, 2, 3], [6, 5, 4]) == -1.0
    assert conv.ranking_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(sps.kendalltau([1, 2, 3], [1, 3, 2]).statistic)
    assert math.isnan(conv.ranking_tau([5, 5], [1, 2])) and math.isnan(conv.ranking_tau([1], [1]))


def test_still_improving_needs_the_interval_and_a_seed_sd_of_movement():
    assert conv.still_improving(0.2, 0.01, 0.4, sd=0.5, window=3)  # 0.6 ≥ 0.5
    assert not conv.still_improving(0.2, 0.01, 0.4, sd=0.7, window=3)  # 0.6 < 0.7: within seed noise
    assert not conv.still_improving(0.2, -0.01, 0.4, sd=0.1, window=3)  # the interval holds 0
    assert not conv.still_improving(0.2, 0.01, 0.4, sd=math.nan, window=3)  # one run: no sd, no flag
    assert conv.still_improving(-0.2, -0.4, -0.01, sd=0.5, window=3, higher_better=False)
    # +0.05 points over the last 6 of 24 epochs, seeds that agree on it, seed sd 0.18: rising, within noise
    x = np.arange(1, 25)
    runs = [97.0 + o + (0.05 / 6 + d) * x for o, d in ((0.0, 0.0), (0.2, 0.001), (0.36, -0.001))]
    mean, low, high = conv.mean_interval([conv.tail_slope(x, r) for r in runs])
    sd = conv.seed_sd([r[-1] for r in runs])
    assert low > 0 and 0.15 < sd < 0.2 and mean * conv.tail_window(24) == pytest.approx(0.05, abs=0.01)
    assert not conv.still_improving(mean, low, high, sd, conv.tail_window(24))


def test_ties_are_compared_in_image_counts():
    # two acts with 1,063 of 1,080 images each (3 runs × 360), as metrics.csv stores them (float32): means 5e-6 apart
    gelu = (100 * np.float32([350, 356, 357]) / np.float32(360)).astype(float)
    rational = (100 * np.float32([353, 355, 355]) / np.float32(360)).astype(float)
    assert 0 < abs(gelu.mean() - rational.mean()) < 1e-5
    assert conv.compare_means(gelu, rational, resolution=100 / 360) == 0
    assert conv.compare_means(gelu, rational) == 0  # without N: within TIE_RELATIVE
    one_less = gelu - [100 / 360, 0, 0]
    assert conv.compare_means(gelu, one_less, resolution=100 / 360) == 1 == conv.compare_means(gelu, one_less)
    assert conv.compare_means([1.0, 2.0], [1.5], resolution=0.5) == 0  # unequal run counts: sums cross-multiplied


def test_a_reversal_is_tested_on_the_per_run_gains_with_holm_over_every_pair():
    mid = {"a": [90.0, 90.5, 91.0], "b": [92.0, 92.4, 92.2], "c": [95.0, 95.1, 95.3]}
    last = {"a": [96.0, 96.8, 97.1], "b": [93.0, 93.1, 92.9], "c": [95.5, 95.0, 95.9]}
    change = conv.ranking_change(mid, last)
    assert change.pairs == 3 and change.tied == 0
    assert [(r.ahead, r.behind) for r in change.reversals] == [("a", "b"), ("a", "c")]
    gains = {k: np.subtract(last[k], mid[k]) for k in mid}
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    p = [sps.ttest_ind(gains[x], gains[y], equal_var=False).pvalue for x, y in pairs]
    holm = multipletests(p, method="holm")[1]
    assert [r.p for r in change.reversals] == pytest.approx(p[:2])
    assert [r.p_holm for r in change.reversals] == pytest.approx(holm[:2])
    assert conv.moving(change, alpha=0.05) == [r for r in change.reversals if r.p_holm < 0.05]
    lower = conv.ranking_change(mid, last, higher_better=False)  # for a loss the one ahead is the lower
    assert [(r.ahead, r.behind) for r in lower.reversals] == [("b", "a"), ("c", "a")]
    tied = conv.ranking_change({"a": [1.0, 2.0], "b": [2.0, 1.0]}, {"a": [3.0, 3.1], "b": [1.0, 1.1]})
    assert tied.tied == 1 and tied.reversals == []  # a tie at epoch 8 is no reversal


# ---- the report: stalled runs ------------------------------------------------------------------------------------


def test_a_stalled_run_is_reclassified_in_the_report_and_its_summary_is_left_alone(tmp_path):
    run(tmp_path, "relu", 0, learned(95.0))
    run(tmp_path, "relu", 1, learned(95.0, loss=2.2, final=11.0))  # learned, then collapsed back to chance
    run(tmp_path, "relu", 4, learned(40.0, loss=2.2))  # a short run: its accuracy left chance, its loss not yet
    run(tmp_path, "relu", 5, learned(80.0, loss=2.4))  # a loss worse than a uniform guess (ln 10 = 2.303): stalled
    run(tmp_path, "relu", 2, learned(12.0))  # best held-out top-1 at chance
    run(tmp_path, "relu", 3, learned(12.0), n_classes=None)  # C unknown: not judged
    runs = load_runs(tmp_path / "toy").set_index("seed")
    assert list(runs["status"]) == ["completed", "stalled", "stalled", "completed", "completed", "stalled"]
    assert "final training loss 2.200 ≥ 0.9·ln 10 = 2.072" == runs.loc[1, "stalled"]
    assert runs.loc[2, "stalled"].startswith("best held-out top-1 12.00 %")
    assert runs.loc[0, "n_classes"] == 10 and pd.isna(runs.loc[3, "n_classes"])
    assert layout.read_summary(tmp_path / "toy" / "relu" / "seed_1")["status"] == "completed"


def test_stalled_runs_are_counted_like_divergences(tmp_path, capsys):
    for seed, v in enumerate([90.0, 90.3, 90.1]):
        run(tmp_path, "relu", seed, learned(v))
    for seed, v in enumerate([95.0, 95.2, 95.1]):
        run(tmp_path, "gelu", seed, learned(v))
    run(tmp_path, "gelu", 3, learned(10.0, loss=2.5))
    md, csv = report(tmp_path / "toy", capsys)
    assert "| diverged | stalled | failed |" in md
    assert line(md, "| gelu |").startswith("| gelu | 3 | **95.10 ± 0.10** |")
    assert "| 0 | 1 | 0 |" in line(md, "| gelu |")
    assert line(md, "| gelu |").endswith("| unstable (1/4 stalled) |")
    sentence = line(md, "- gelu is unstable against relu")
    assert "among the runs that learned it is better than relu" in sentence
    assert "but gelu stalled in 1 of 4 runs, relu in 0 of 3 (Fisher exact p = 1.0000)." in sentence
    assert (
        "- stalled (ended training at chance level; not scored, counted like a divergence): gelu seed 3: "
        "final training loss 2.500" in md
    )
    assert csv.loc["gelu", "n_stalled"] == 1 and csv.loc["gelu", "verdict"] == "unstable"
    assert csv.loc["gelu", "stall_p"] == 1.0 and csv.loc["gelu", "base_stalled"] == 0


def test_a_table_without_a_stall_keeps_its_columns(tmp_path, capsys):
    for seed, v in enumerate([90.0, 90.3]):
        run(tmp_path, "relu", seed, learned(v))
        run(tmp_path, "gelu", seed, learned(v + 1))
    md, csv = report(tmp_path / "toy", capsys)
    assert "| diverged | failed |" in md and "stalled" not in md and (csv["n_stalled"] == 0).all()


def test_a_partly_stalled_baseline_marks_every_verdict_against_it(tmp_path, capsys):
    for seed, v in enumerate([90.0, 90.3, 90.1]):
        run(tmp_path, "relu", seed, learned(v))
        run(tmp_path, "gelu", seed, learned(v + 5))
    run(tmp_path, "relu", 3, learned(11.0))
    md, _ = report(tmp_path / "toy", capsys)
    assert (
        "- relu, the baseline, stalled in 1 of 4 runs (ended training at chance level): every verdict below "
        "compares with its 3 runs that learned and is marked `relu 1/4 stalled`."
    ) in md
    assert line(md, "| gelu |").endswith("| better (relu 1/4 stalled) |")
    assert md.index("- relu, the baseline") < md.index("- gelu is better than relu")


def test_a_stalled_baseline_withholds_every_verdict_with_one_sentence(tmp_path, capsys):
    for seed in range(2):
        run(tmp_path, "relu", seed, learned(10.0, loss=2.3))
        run(tmp_path, "gelu", seed, learned(95.0 + seed))
    md, csv = report(tmp_path / "toy", capsys)
    assert (
        "- relu, the baseline, stalled in 2 of 2 runs (ended training at chance level): no verdict against "
        "it — fewer than two of its runs learned" in md
    )
    assert line(md, "| relu |").startswith("| relu | 0 | NaN (2/2 stalled) |")
    assert csv.loc["gelu", "verdict"] == "" or pd.isna(csv.loc["gelu", "verdict"])
    assert "baseline n<2" in line(md, "| gelu |")
    notes = (tmp_path / "toy" / "per_example.md").read_text()
    assert (
        "- the baseline relu has no completed run (each diverged, stalled or failed): no per-example comparisons"
        in notes
    )


# ---- the report: convergence -------------------------------------------------------------------------------------


def test_the_convergence_line_slopes_and_a_ranking_still_moving(tmp_path, capsys):
    """relu flat at 90; gelu overtakes it in the second half and is still rising: its gains (epoch 4 to 8) differ
    from relu's beyond noise, so gelu's verdict says the ranking was still moving."""
    epochs = np.arange(1, 9)
    for seed in range(3):
        run(tmp_path, "relu", seed, learned(90.0 + 0.1 * seed), curve=90.0 + 0.1 * seed + 0 * epochs)
        gelu = np.where(epochs <= 4, 80.0, 80.0 + 4.0 * (epochs - 4)) + 0.2 * seed + 0.05 * seed * epochs
        run(tmp_path, "gelu", seed, learned(float(gelu.max())), curve=gelu)
    md, csv = report(tmp_path / "toy", capsys)
    slopes = [4.0 + 0.05 * seed for seed in range(3)]
    mean, low, high = conv.mean_interval(slopes)
    assert csv.loc["gelu", ["slope", "slope_low", "slope_high"]].tolist() == pytest.approx([mean, low, high])
    assert csv.loc["gelu", "last_sd"] == pytest.approx(0.6) and csv.loc["relu", "last_sd"] == pytest.approx(0.1)
    assert csv.loc["gelu", "still_improving"] and not csv.loc["relu", "still_improving"]
    assert csv.loc["relu", "slope"] == pytest.approx(0.0, abs=1e-9) and (csv["kendall_tau"] == -1.0).all()
    assert (csv["reversed_pairs"] == 1).all() and csv["ranking_moving"].all()
    conv_line = line(md, "- Convergence of val_top1: ")
    assert (
        f"slope per epoch over the last 3 of 8 epochs, mean [95 % t interval] over seeds (still rising: the "
        f"interval excludes 0 and 3 epochs at the slope move it by ≥ the seed sd at epoch 8): relu +0.00 [+0.00, "
        f"+0.00]; gelu +4.05 [{low:+.2f}, {high:+.2f}] still rising (3 × slope = +12.15, seed sd 0.60)."
    ) in conv_line
    assert conv_line.endswith(
        "The ranking of the activations' mean val_top1 at epoch 4 vs 8: Kendall τ = -1.00; 1 of "
        "1 pair reversed, 1 beyond noise (Welch test of the per-run gains between the two "
        "epochs, α = 0.05): gelu overtook relu (gain test p < 0.0001, Holm p < 0.0001) — still "
        "moving."
    )
    assert line(md, "- gelu is better than relu").endswith(
        "; the ranking was still moving between epoch 4 and 8 (gelu overtook relu, gain test Holm p < 0.0001)."
    )
    again, _ = report(tmp_path / "toy", capsys)
    assert again == md  # deterministic text: committed tables are regenerated byte for byte


def test_only_the_verdicts_of_the_activations_that_moved_get_the_ranking_clause(tmp_path, capsys):
    """gelu overtakes relu beyond noise; tanh stays on top, flat: the table's ranking was still moving, but tanh's
    verdict against relu rests on a pair that never moved, so only gelu's sentence says so."""
    epochs = np.arange(1, 9)
    for seed in range(3):
        run(tmp_path, "relu", seed, learned(90.0 + 0.1 * seed), curve=90.0 + 0.1 * seed + 0 * epochs)
        run(tmp_path, "tanh", seed, learned(99.0 + 0.1 * seed), curve=99.0 + 0.1 * seed + 0 * epochs)
        gelu = np.where(epochs <= 4, 80.0, 80.0 + 4.0 * (epochs - 4)) + 0.2 * seed + 0.05 * seed * epochs
        run(tmp_path, "gelu", seed, learned(float(gelu.max())), curve=gelu)
    md, csv = report(tmp_path / "toy", capsys)
    assert csv["ranking_moving"].all()
    assert "the ranking was still moving" in csv.loc["gelu", "verdict_text"]
    assert "still moving" not in csv.loc["tanh", "verdict_text"]
    assert md.count("; the ranking was still moving between epoch") == 1


def test_a_tie_is_no_reversal_and_a_reversal_within_noise_flags_nothing(tmp_path, capsys):
    """gelu and relu tie at epoch 4 (Kendall τ < 1 from the tie alone); rational overtakes both, but its gains are
    within the seeds' noise of theirs: the line says so and no verdict gets the clause."""
    values = {
        "relu": ([90.0, 91.0, 92.0], [91.0, 90.0, 92.5]),
        "gelu": ([91.5, 90.5, 91.0], [92.0, 90.2, 91.0]),
        "rational": ([90.0, 90.4, 91.0], [91.5, 91.0, 91.3]),
    }
    for act, (mid, last) in values.items():
        for seed, (m, e) in enumerate(zip(mid, last)):
            curve = [m] * 4 + [m + (e - m) * k / 4 for k in range(1, 5)]
            run(tmp_path, act, seed, learned(e), curve=curve)
    md, csv = report(tmp_path / "toy", capsys)
    assert (csv["reversed_pairs"] == 2).all() and not csv["ranking_moving"].any() and (csv["kendall_tau"] < 1).all()
    conv_line = line(md, "- Convergence of val_top1: ")
    assert conv_line.endswith(
        "Kendall τ = -0.82; 2 of 3 pairs reversed, none beyond noise (Welch test of the per-run "
        "gains between the two epochs, Holm over the 3 pairs, α = 0.05): rational overtook gelu "
        "(gain test p = 0.1748, Holm p = 0.5244); rational overtook relu (gain test p = 0.4276, "
        "Holm p = 0.8553). 1 pair tied at one of the epochs: no reversal."
    )
    assert "still moving" not in md


def test_without_curves_the_line_says_so_once(tmp_path, capsys):
    for seed in range(2):
        run(tmp_path, "relu", seed, learned(90.0 + seed))
        run(tmp_path, "gelu", seed, learned(91.0 + seed))
    md, csv = report(tmp_path / "toy", capsys)
    assert md.count("Convergence: no curves (no metrics.csv).") == 1 and "still moving" not in md
    assert csv["slope"].isna().all() and not csv["still_improving"].any()


# ---- a real run: nothing moves at lr = 1e-9 -----------------------------------------------------------------------


def test_a_run_at_lr_1e_9_is_stalled_and_never_better(trained_tree, tmp_path, capsys):
    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.rounds import _value
    from visionbench.sweep.sweep import run_sweep

    root = copy_tree(trained_tree(*STALLS), tmp_path / "r")
    recipe = root / "digits_vgg4"
    runs = load_runs(recipe)
    assert (runs["status"] == "stalled").all()
    assert runs["stalled"].str.startswith("training loss never came down: ").all()  # 2 epochs, whatever the top-1
    for run_dir in runs["run_dir"]:  # seeds=auto judges by the same rule
        assert math.isnan(_value(layout.read_summary(run_dir), run_dir, "val_top1_best"))
    assert {layout.read_summary(d)["status"] for d in runs["run_dir"]} == {"completed"}  # on disk: unchanged
    md, csv = report(recipe, capsys)
    assert csv.loc["gelu", "verdict"] not in ("better", "equivalent") and csv.loc["gelu", "n_stalled"] == 2
    assert line(md, "| gelu |").startswith("| gelu | 0 | NaN (2/2 stalled) |")
    assert "- relu, the baseline, stalled in 2 of 2 runs" in md and "gelu stalled in 2 of 2 runs" in md
    assert ("- no completed run (each diverged, stalled or failed): the per-example columns (") in md  # not "no file"
    # the sweep's resume is untouched: a stalled run is finished
    outcomes = run_sweep(load_config([f"results_dir={root}", *shrunk(), *STALLS]), progress=False)
    assert [o.status for o in outcomes] == ["skipped"] * 4


def test_a_short_run_that_is_learning_is_not_stalled(trained_tree):
    """Two epochs at lr = 0.002 on 128 images: the top-1 leaves chance (40–70 %) while the training loss, down 12 %
    from epoch 1, is still above 0.9 ln 10 in some seeds: learning, not stalled."""
    runs = load_runs(trained_tree("act=relu", "seeds=3", "optim.lr=0.002", "data.limit_train=128") / "digits_vgg4")
    assert (runs["status"] == "completed").all() and runs["stalled"].isna().all()
    assert (runs["train_loss_final"] >= conv.stalled_loss(10)).any() and (runs["val_top1_best"] > 30).all()


# ---- each flag's error rates, by simulation ----------------------------------------------------------------------

N_IMAGES = 360  # the digits test set
ALPHA = 0.05


def _images(values) -> np.ndarray:
    """Top-1s (%) as counts of N_IMAGES images, stored as metrics.csv stores them (float32)."""
    counts = np.clip(np.rint(np.asarray(values) * N_IMAGES / 100), 0, N_IMAGES)
    return (100 * counts.astype(np.float32) / np.float32(N_IMAGES)).astype(float)


def ranking_flag_rate(
    tables: int,
    seeds: int,
    crossing: float = 0.0,
    acts: int = 4,
    run_sd: float = 0.4,
    epoch_sd: float = 0.4,
    seed: int = 0,
) -> tuple[float, float]:
    """(how often the ranking flag fires, how often the old rule Kendall τ < 1 did) over `tables` simulated tables of
    `acts` activations × `seeds` runs at epochs 8 and 15 of 15: one true curve for all (96.5 → 98.0 %), a per-run
    offset (sd `run_sd`) and per-epoch noise (sd `epoch_sd`), counted in images; act a0 gains `crossing` points more
    than the others (from `crossing`/2 behind to `crossing`/2 ahead: a real crossing); the last act's runs at epoch 8
    are a1's in another order, an exactly tied pair."""
    rng = np.random.default_rng(seed)
    flags = taus = 0
    for _ in range(tables):
        offset = rng.normal(0, run_sd, (acts, seeds))
        shift = np.zeros((acts, 1))
        shift[0] = crossing / 2
        mid = _images(96.5 - shift + offset + rng.normal(0, epoch_sd, (acts, seeds)))
        last = _images(98.0 + shift + offset + rng.normal(0, epoch_sd, (acts, seeds)))
        mid[-1] = rng.permutation(mid[1])
        names = [f"a{k}" for k in range(acts)]
        change = conv.ranking_change(dict(zip(names, mid)), dict(zip(names, last)), resolution=100 / N_IMAGES)
        flags += bool(conv.moving(change, ALPHA))
        taus += conv.ranking_tau(mid.mean(1), last.mean(1)) < 1
    return flags / tables, taus / tables


def rising_flag_rate(
    acts: int,
    seeds: int,
    slope: float = 0.0,
    epochs: int = 15,
    run_sd: float = 0.4,
    epoch_sd: float = 0.4,
    seed: int = 0,
) -> tuple[float, float]:
    """(how often `still rising` flags an activation, how often the old rule — the interval alone — did) over `acts`
    simulated activations × `seeds` runs of `epochs` epochs rising by `slope` points per epoch from 90 %, with a
    per-run offset and per-epoch noise (sds `run_sd`, `epoch_sd`), counted in images."""
    rng = np.random.default_rng(seed)
    x = np.arange(1, epochs + 1)
    window = conv.tail_window(epochs)
    flags = intervals = 0
    for _ in range(acts):
        runs = _images(90.0 + slope * x + rng.normal(0, run_sd, (seeds, 1)) + rng.normal(0, epoch_sd, (seeds, epochs)))
        mean, low, high = conv.mean_interval([conv.tail_slope(x, r) for r in runs])
        flags += conv.still_improving(mean, low, high, conv.seed_sd(runs[:, -1]), window)
        intervals += low > 0
    return flags / acts, intervals / acts


def _allowed(reps: int) -> float:
    """α plus two Monte Carlo sds of a rate of α measured over `reps` repetitions."""
    return ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


@pytest.mark.parametrize("seeds", [3, 5])
def test_the_ranking_flag_rarely_fires_without_a_change(seeds):
    rate, tau = ranking_flag_rate(1000, seeds)
    print(
        f"\nranking flag, no change, 4 acts × {seeds} seeds on {N_IMAGES} images, 1000 tables: fires {rate:.1%} "
        f"(Kendall τ < 1: {tau:.1%})"
    )
    assert rate <= _allowed(1000) and tau > 0.9


def test_the_ranking_flag_finds_a_real_crossing():
    power3, _ = ranking_flag_rate(500, 3, crossing=3.0, seed=1)
    power5, _ = ranking_flag_rate(500, 5, crossing=2.0, seed=1)
    print(
        f"\nranking flag, one act gains more by 3 points (3 seeds) / 2 points (5 seeds), 500 tables: fires "
        f"{power3:.1%} / {power5:.1%}"
    )
    assert power3 > 0.7 and power5 > 0.9


@pytest.mark.parametrize("seeds, slope", [(3, 0.6), (5, 0.3)])
def test_still_rising_rarely_fires_on_a_flat_curve_and_finds_a_real_rise(seeds, slope):
    rate, interval = rising_flag_rate(1000, seeds)
    power, power_interval = rising_flag_rate(300, seeds, slope=slope, seed=1)
    print(
        f"\nstill rising, {seeds} seeds, 15 epochs, flat curves, 1000 acts: fires {rate:.1%} (interval alone: "
        f"{interval:.1%}); rising {slope} points/epoch, 300 acts: fires {power:.1%} (interval alone: "
        f"{power_interval:.1%})"
    )
    assert rate <= _allowed(1000) and power > 0.6


@pytest.mark.rates
def test_the_flags_error_rates_for_the_docs():
    """The figures in docs/report.md: more tables, other noise mixes, more effect sizes."""
    print()
    for seeds in (3, 5):
        for run_sd, epoch_sd in ((0.4, 0.4), (0.2, 0.6), (0.8, 0.2)):
            rate, tau = ranking_flag_rate(5000, seeds, run_sd=run_sd, epoch_sd=epoch_sd, seed=2)
            print(
                f"ranking, no change, 4 × {seeds}, run sd {run_sd}, epoch sd {epoch_sd}: {rate:.2%} (τ < 1: {tau:.1%})"
            )
            assert rate <= _allowed(5000)
        for crossing in (1.0, 2.0, 3.0):
            print(
                f"ranking, crossing {crossing} points, 4 × {seeds}: {ranking_flag_rate(2000, seeds, crossing)[0]:.1%}"
            )
        for slope in (0.0, 0.1, 0.2, 0.3):
            rate, interval = rising_flag_rate(5000, seeds, slope=slope, seed=3)
            print(f"still rising, {slope} points/epoch, {seeds} seeds: {rate:.2%} (interval alone {interval:.1%})")
            assert slope or rate <= _allowed(5000)

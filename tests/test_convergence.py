"""Did it learn, has it converged (issue 31, item 3; docs/report.md): a completed run at chance is `stalled` in the
report (its summary stays `completed`), counted like a divergence in the verdict, a stalled baseline said in one
sentence; each table's convergence line (tail slope with its t interval over seeds, Kendall τ of the ranking at
half the epochs vs the last) and the verdict clause while the ranking still moves (stats/convergence.py,
report/convergence.py)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from visionbench.report import load_runs
from visionbench.report import main as report_main
from visionbench.results import layout
from visionbench.results.io import write_csv_rows
from visionbench.stats import convergence as conv

from .helpers import FAST, copy_tree, write_class_count, write_run

STALLS = ("act=relu,gelu", "seeds=2", "optim.lr=1e-9")  # issue 31's check: nothing moves in 2 epochs


def learned(value: float, loss: float = 0.3, final: float | None = None) -> dict:
    return {"val_top1_best": value, "val_top1_final": value if final is None else final, "train_loss_final": loss,
            "best_epoch": 3}


def run(root, act: str, seed: int, metrics: dict, n_classes: int | None = 10, curve=None) -> None:
    """A fake run with `metrics`, a predictions.npz naming `n_classes` (none for None) and, given `curve`, a
    metrics.csv of that val_top1 per epoch (1, 2, ...)."""
    path = write_run(root, "toy", act, seed, metrics=metrics)
    if n_classes is not None:
        write_class_count(path, n_classes, recipe="toy", act=act, setting={}, seed=seed)  # the run's own identity
    if curve is not None:
        write_csv_rows(layout.files(path).metrics, [{"epoch": e + 1, "train_loss": 0.5, "val_top1": f"{v:.4f}"}
                                                    for e, v in enumerate(curve)])


def report(recipe, capsys, *args: str) -> tuple[str, pd.DataFrame]:
    assert report_main([str(recipe), "--no-plots", "--format", "md,csv", *args]) == 0
    capsys.readouterr()
    return (recipe / "table.md").read_text(), pd.read_csv(recipe / "table.csv", keep_default_na=False,
                                                          na_values=[""]).set_index("act")


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
    assert conv.still_improving(0.01, 0.3) and not conv.still_improving(-0.01, 0.3)
    assert conv.still_improving(-0.3, -0.01, higher_better=False)
    assert conv.ranking_tau([1, 2, 3], [4, 5, 6]) == 1.0 and conv.ranking_tau([1, 2, 3], [6, 5, 4]) == -1.0
    assert conv.ranking_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(sps.kendalltau([1, 2, 3], [1, 3, 2]).statistic)
    assert math.isnan(conv.ranking_tau([5, 5], [1, 2])) and math.isnan(conv.ranking_tau([1], [1]))


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
    assert "- stalled (ended training at chance level; not scored, counted like a divergence): gelu seed 3: " \
           "final training loss 2.500" in md
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
    assert ("- relu, the baseline, stalled in 1 of 4 runs (ended training at chance level): every verdict below "
            "compares with its 3 runs that learned and is marked `relu 1/4 stalled`.") in md
    assert line(md, "| gelu |").endswith("| better (relu 1/4 stalled) |")
    assert md.index("- relu, the baseline") < md.index("- gelu is better than relu")


def test_a_stalled_baseline_withholds_every_verdict_with_one_sentence(tmp_path, capsys):
    for seed in range(2):
        run(tmp_path, "relu", seed, learned(10.0, loss=2.3))
        run(tmp_path, "gelu", seed, learned(95.0 + seed))
    md, csv = report(tmp_path / "toy", capsys)
    assert "- relu, the baseline, stalled in 2 of 2 runs (ended training at chance level): no verdict against " \
           "it — fewer than two of its runs learned" in md
    assert line(md, "| relu |").startswith("| relu | 0 | NaN (2/2 stalled) |")
    assert csv.loc["gelu", "verdict"] == "" or pd.isna(csv.loc["gelu", "verdict"])
    assert "baseline n<2" in line(md, "| gelu |")
    notes = (tmp_path / "toy" / "per_example.md").read_text()
    assert "- the baseline relu has no completed run (each diverged, stalled or failed): no per-example comparisons" \
        in notes


# ---- the report: convergence -------------------------------------------------------------------------------------

def test_the_convergence_line_slopes_and_a_ranking_still_moving(tmp_path, capsys):
    """relu flat at 90; gelu overtakes it in the second half and is still rising: τ between epochs 4 and 8 is -1."""
    epochs = np.arange(1, 9)
    for seed in range(3):
        run(tmp_path, "relu", seed, learned(90.0 + 0.1 * seed), curve=90.0 + 0.1 * seed + 0 * epochs)
        gelu = np.where(epochs <= 4, 80.0, 80.0 + 4.0 * (epochs - 4)) + 0.2 * seed + 0.05 * seed * epochs
        run(tmp_path, "gelu", seed, learned(float(gelu.max())), curve=gelu)
    md, csv = report(tmp_path / "toy", capsys)
    slopes = [4.0 + 0.05 * seed for seed in range(3)]
    mean, low, high = conv.mean_interval(slopes)
    assert csv.loc["gelu", ["slope", "slope_low", "slope_high"]].tolist() == pytest.approx([mean, low, high])
    assert csv.loc["gelu", "still_improving"] and not csv.loc["relu", "still_improving"]
    assert csv.loc["relu", "slope"] == pytest.approx(0.0, abs=1e-9) and (csv["kendall_tau"] == -1.0).all()
    conv_line = line(md, "- Convergence of val_top1: ")
    assert (f"slope per epoch over the last 3 of 8 epochs, mean [95 % t interval] over seeds: relu +0.00 [+0.00, "
            f"+0.00]; gelu +4.05 [{low:+.2f}, {high:+.2f}] still rising.") in conv_line
    assert conv_line.endswith("The ranking of the activations' mean val_top1 at epoch 4 vs 8: Kendall τ = -1.00, "
                              "still moving.")
    assert line(md, "- gelu is better than relu").endswith(
        "; the ranking was still moving (Kendall τ = -1.00 between epoch 4 and 8).")
    again, _ = report(tmp_path / "toy", capsys)
    assert again == md  # deterministic text: committed tables are regenerated byte for byte


def test_without_curves_the_line_says_so_once(tmp_path, capsys):
    for seed in range(2):
        run(tmp_path, "relu", seed, learned(90.0 + seed))
        run(tmp_path, "gelu", seed, learned(91.0 + seed))
    md, csv = report(tmp_path / "toy", capsys)
    assert md.count("Convergence: no curves (no metrics.csv).") == 1 and "still moving" not in md
    assert csv["slope"].isna().all() and not csv["still_improving"].any()


# ---- a real run: issue 31's check --------------------------------------------------------------------------------

def test_a_run_at_lr_1e_9_is_stalled_and_never_better(trained_tree, tmp_path, capsys):
    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.sweep import run_sweep

    root = copy_tree(trained_tree(*STALLS), tmp_path / "r")
    recipe = root / "digits_vgg4"
    runs = load_runs(recipe)
    assert (runs["status"] == "stalled").all() and runs["stalled"].str.startswith("final training loss").all()
    assert {layout.read_summary(d)["status"] for d in runs["run_dir"]} == {"completed"}  # on disk: unchanged
    md, csv = report(recipe, capsys)
    assert csv.loc["gelu", "verdict"] not in ("better", "equivalent") and csv.loc["gelu", "n_stalled"] == 2
    assert line(md, "| gelu |").startswith("| gelu | 0 | NaN (2/2 stalled) |")
    assert "- relu, the baseline, stalled in 2 of 2 runs" in md and "gelu stalled in 2 of 2 runs" in md
    assert ("- no completed run (each diverged, stalled or failed): the per-example columns (") in md  # not "no file"
    # the sweep's resume is untouched: a stalled run is finished
    outcomes = run_sweep(load_config([f"results_dir={root}", *FAST, *STALLS]), progress=False)
    assert [o.status for o in outcomes] == ["skipped"] * 4

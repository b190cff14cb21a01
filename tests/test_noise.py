"""Where the noise comes from (docs/running.md#where-the-noise-comes-from): the variance components of a noise design (stats/noise.py)
validated by simulation — known per-source variances recovered, the χ² intervals at 95 % coverage at 5 and 10
seeds, the test-set part subtracted per arm under chaotic training, the variance-ratio test at its size — and
the report's noise section (report/noise.py) on written trees: noise.md/csv, the pointer in the
recipe-level table, the outlier notes, and one sentence, never a number, for a design that cannot give a variance.

`pytest -s tests/test_noise.py` prints the measured figures (docs/report.md, "Where the noise comes from")."""

from __future__ import annotations

import json
import re
import shutil
import zlib

import numpy as np
import pandas as pd
import pytest

from visionbench.report import main
from visionbench.results import layout
from visionbench.results.predictions import write_predictions
from visionbench.results.settings import setting_label
from visionbench.stats import noise as nz
from visionbench.train.seeds import FIXED

TRUE = {"init": 0.3, "order": 0.1, "aug": 0.05}  # points² of the runs' true accuracy
DESIGNS = 2000
LEVEL_TOLERANCE = 1.5  # ±1.5 % around 95 %: three Monte Carlo standard errors at 2,000 designs


# ---- simulated designs ----------------------------------------------------------------------------------
def source_effects(rng, n: int, reps: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    """(reps × (n + 1)) effects of each source's seeds 0..n−1 and, last, of the seed an arm holds it at (FIXED),
    normal with the variances of `TRUE` (× scale²)."""
    return {k: rng.normal(0, np.sqrt(v) * scale, (reps, n + 1)) for k, v in TRUE.items()}


def arm_shifts(g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each arm's run effects: `all` sums every source at seed k; a one-source arm holds the others at FIXED
    (train/seeds.py: a seed no run takes, so no two arms share a run)."""
    out = {nz.ALL: sum(x[:, :-1] for x in g.values())}
    for k in TRUE:
        out[k] = g[k][:, :-1] + sum(g[o][:, -1:] for o in TRUE if o != k)
    return out


def report_rates(name: str, n: int, figures: dict) -> None:
    print(f"\n{name}, n = {n}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))


@pytest.mark.parametrize("n", [5, 10])
def test_known_components_are_recovered_and_the_chi2_intervals_cover_95_percent(n):
    rng = np.random.default_rng(31 + n)
    arms = {arm: 90 + x for arm, x in arm_shifts(source_effects(rng, n, DESIGNS)).items()}
    parts = [nz.decompose({arm: x[r] for arm, x in arms.items()}) for r in range(DESIGNS)]
    truth = {**TRUE, nz.ALL: sum(TRUE.values())}
    coverage = {}
    for part, value in truth.items():
        estimates = np.array([p[part]["var"] for p in parts])
        # unbiased: the mean of 2,000 estimates within 4 of its standard errors of the truth
        assert abs(estimates.mean() - value) < 4 * estimates.std() / np.sqrt(DESIGNS), (part, estimates.mean())
        coverage[part] = 100 * np.mean([p[part]["low"] <= value <= p[part]["high"] for p in parts])
        assert abs(coverage[part] - 95) <= LEVEL_TOLERANCE, (part, coverage[part])
    inside = 100 * np.mean([p["sum"]["inside"] for p in parts])
    consistent = 100 * np.mean([p["sum"]["consistent"] for p in parts])
    assert inside > 95 and consistent > 95  # the sources add up: the check rarely says otherwise
    report_rates(
        "additive sources, no test-set part",
        n,
        {
            **{f"{k} coverage": f"{v:.1f} %" for k, v in coverage.items()},
            "sum inside": f"{inside:.1f} %",
            "difference holds 0": f"{consistent:.1f} %",
        },
    )


def chaotic_design(rng, n: int, q: np.ndarray) -> tuple[dict, dict]:
    """One design on a fixed test set of images right with chance q: a run's chance is q + its sources' effect
    (fractions), and every run draws every image afresh (chaotic training: any source re-draws which images a
    run gets right). (values in points, test-set parts in points²)."""
    shifts = {arm: s[0] / 100 for arm, s in arm_shifts(source_effects(rng, n, 1)).items()}
    values, tau = {}, {}
    for arm, shift in shifts.items():
        right = rng.random((n, q.size)) < np.clip(q[None, :] + shift[:, None], 0, 1)
        values[arm] = 100 * right.mean(axis=1)
        tau[arm] = {k: v * 1e4 for k, v in nz.test_set_part(right).items()}
    return values, tau


@pytest.mark.parametrize("n", [5, 10])
def test_the_test_set_part_is_subtracted_per_arm_under_chaotic_training(n):
    rng = np.random.default_rng(7 + n)
    q = np.clip(rng.beta(4, 1, 2000), 0.03, 0.97)
    tau_true = 1e4 * np.mean(q * (1 - q)) / q.size  # Σ q(1 − q)/N²: ≈ 0.67 points², more than any source
    designs = [chaotic_design(rng, n, q) for _ in range(300)]
    parts = [nz.decompose(values, tau) for values, tau in designs]
    truth = {**TRUE, nz.TEST: tau_true}
    for part, value in truth.items():
        estimates = np.array([p[part]["var"] for p in parts])
        assert abs(estimates.mean() - value) < 4 * estimates.std() / np.sqrt(len(parts)) + 1e-3, part
    coverage = {k: 100 * np.mean([p[k]["low"] <= v <= p[k]["high"] for p in parts]) for k, v in truth.items()}
    assert all(c >= 92 for c in coverage.values()), coverage
    consistent = 100 * np.mean([p["sum"]["consistent"] for p in parts])
    inside = 100 * np.mean([p["sum"]["inside"] for p in parts])
    assert consistent >= 92, consistent
    # without the predictions nothing is subtracted: each one-source arm carries the whole test-set part, and the
    # sources add up to about 2 τ² more than the ordinary runs' variance
    raw = [nz.decompose(values) for values, _ in designs]
    excess = np.mean([r["sum"]["var"] - r[nz.ALL]["var"] for r in raw])
    assert excess == pytest.approx(2 * tau_true, rel=0.35) and np.isnan(raw[0][nz.TEST]["var"])
    report_rates(
        "chaotic training, test-set part subtracted",
        n,
        {
            **{f"{k} coverage": f"{v:.1f} %" for k, v in coverage.items()},
            "sum inside": f"{inside:.1f} %",
            "difference holds 0": f"{consistent:.1f} %",
            "excess without predictions": f"{excess:.2f}",
            "2τ²": f"{2 * tau_true:.2f}",
        },
    )


def test_an_arm_left_out_does_not_stop_the_subtraction_from_the_others():
    # a recipe without augmentation runs noise=init,order: the aug arm has no runs and needs no test-set part
    rng = np.random.default_rng(3)
    values, tau = chaotic_design(rng, 5, np.clip(rng.beta(4, 1, 2000), 0.03, 0.97))
    values.pop("aug"), tau.pop("aug")
    parts = nz.decompose(values, tau)
    assert parts["init"]["var"] == pytest.approx(parts["init"]["arm_var"] - tau["init"]["var"])
    assert parts[nz.TEST]["var"] == tau[nz.ALL]["var"] and np.isnan(parts["aug"]["var"])
    assert not parts["sum"]["complete"]  # the sum is still not checked without the aug arm
    tau.pop("order")  # an arm with runs but no test-set part: nothing is subtracted anywhere
    assert np.isnan(nz.decompose(values, tau)[nz.TEST]["var"])


@pytest.mark.parametrize("n", [5, 10])
def test_the_variance_ratio_test_has_its_size_at_equal_variances(n):
    rng = np.random.default_rng(100 + n)
    a, b = rng.normal(0, 0.5, (2, DESIGNS, n))
    size = 100 * np.mean([nz.variance_ratio_test(x, y)["p"] < 0.05 for x, y in zip(a, b)])
    assert abs(size - 5) <= LEVEL_TOLERANCE, size
    wide = rng.normal(0, 1.0, (DESIGNS, n))  # four times the variance
    power = 100 * np.mean([nz.variance_ratio_test(x, y)["p"] < 0.05 for x, y in zip(wide, b)])
    assert power > (25 if n == 5 else 55)  # F(4, 4) and F(9, 9): 34 % and 63 % in theory
    report_rates("variance-ratio test", n, {"size at α = 5 %": f"{size:.1f} %", "power at ratio 4": f"{power:.1f} %"})


def test_one_seed_gives_no_variance_and_no_check():
    parts = nz.decompose({nz.ALL: [90.0], "init": [90.0, 91.0], "order": [90.5]})
    assert np.isnan(parts[nz.ALL]["var"]) and np.isnan(parts["order"]["low"]) and np.isnan(parts["aug"]["var"])
    assert parts["sum"]["complete"] is False and parts["sum"]["inside"] is None and parts["sum"]["consistent"] is None
    assert np.isnan(nz.variance_ratio_test([1.0], [1.0, 2.0])["p"])
    assert np.isnan(nz.variance_ratio_test([1.0, 2.0], [3.0, 3.0])["ratio"])  # a constant baseline: no ratio


# ---- the report ---------------------------------------------------------------------------------------
RECIPE = "digits_vgg4_aug"
N_IMG, N_CLASSES = 2000, 10
TARGET = np.random.default_rng(3).integers(0, N_CLASSES, N_IMG)
SD = {"relu": {"init": 0.6, "order": 0.3, "aug": 0.2}, "gelu": {"init": 1.8, "order": 0.3, "aug": 0.2}}  # points


def seed_of(arm: str, source: str, k: int) -> int:
    """The seed a source gets in run k of `arm`: k where it varies, else the one it is held at."""
    return k if arm in (nz.ALL, source) else FIXED


def write_design_run(root, act: str, arm: str, k: int, *, predictions: bool = True, off: float = 0.0) -> None:
    """Run k of `act` in `arm`: accuracy 0.97 + the sources' effects (deterministic in the sources' seeds) + `off`
    points; every image re-drawn for each distinct set of seeds (chaotic training)."""
    seeds = {s: seed_of(arm, s, k) for s in nz.SOURCES}
    shift = off + sum(
        np.random.default_rng([zlib.crc32(f"{act}/{s}".encode()), seeds[s]]).normal(0, SD[act][s]) for s in nz.SOURCES
    )
    draws = np.random.default_rng([zlib.crc32(act.encode()), *seeds.values()])
    right = draws.random(N_IMG) < 0.97 + shift / 100
    setting = {"noise": arm}
    run = layout.run_path(root, RECIPE, act, k, setting_label(setting))
    run.mkdir(parents=True)
    accuracy = 100 * float(right.mean())
    layout.write_config(run, {"recipe": RECIPE, "act": act, "seed": k, "noise": arm})
    layout.write_summary(
        run,
        {
            "schema": layout.SCHEMA,
            "recipe": RECIPE,
            "act": act,
            "seed": k,
            "status": "completed",
            "setting": setting,
            "metrics": {"test_top1_at_best_val": accuracy, "val_top1_best": accuracy, "best_epoch": 3},
            "val_split": 0.1,
            "baseline": "relu",
            "report": {"metric": "test_top1_at_best_val"},
        },
    )
    if predictions:
        pred = np.where(right, TARGET, (TARGET + 1) % N_CLASSES)
        conf = np.full(N_IMG, 0.8)
        write_predictions(
            run / "predictions.npz",
            {"raw": dict(pred=pred, p_true=np.where(right, conf, 0.1), confidence=conf, target=TARGET, epoch=3)},
            meta={"recipe": RECIPE, "act": act, "setting": setting, "seed": k, "n_classes": N_CLASSES},
        )


def write_design(root, arms=nz.ARMS, seeds: int = 5, **kwargs):
    for act in SD:
        for arm in arms:
            for k in range(seeds):
                write_design_run(root, act, arm, k, **kwargs)
    return root / RECIPE


def plain_lines(text: str) -> list[str]:
    return [line[2:] for line in text.split("In plain words:\n")[1].split("\n\n")[0].splitlines()]


def notes_of(path) -> list[str]:
    text = path.read_text()
    return [line[2:] for line in text.split("Notes:\n")[1].split("\n\n")[0].splitlines()] if "Notes:" in text else []


def test_the_report_writes_the_noise_section_of_a_noise_design(tmp_path, capsys):
    recipe = write_design(tmp_path)
    assert main([str(recipe), "--format", "md,csv,tex"]) == 0
    out = capsys.readouterr().out
    text = (recipe / "noise.md").read_text()
    assert text in out and not (recipe / "noise.tex").exists()
    assert text.startswith(f"### {RECIPE} — where the noise comes from\n")
    assert (
        "noise section (where the seed-to-seed variance comes from: init, data order, augmentation, the test "
        "set): noise.md"
    ) in notes_of(recipe / "table.md")
    for act in SD:  # every part of both acts, in the table
        for part in ("init", "order", "aug", "test set", "sum", "all-vary"):
            assert re.search(rf"^\| {act} \| {part} \|", text, re.M), (act, part)
    data = pd.read_csv(recipe / "noise.csv")
    relu, gelu = (data[data["act"] == act].set_index("part") for act in ("relu", "gelu"))
    # each source's component is its arm's s² less that arm's own test-set part; the test set's is the all-vary arm's
    assert relu.loc["init", "var"] == pytest.approx(relu.loc["init", "arm_var"] - relu.loc["init", "tau"])
    assert relu.loc["test set", "var"] == pytest.approx(relu.loc["all-vary", "tau"])
    assert relu.loc["sum", "var"] == pytest.approx(relu.loc[["init", "order", "aug", "test set"], "var"].sum())
    assert relu.loc[["init", "order", "aug", "test set"], "share"].sum() == pytest.approx(1.0)  # of the parts above 0
    assert np.isnan(relu.loc["init", "p"]) and 0 <= gelu.loc["init", "p"] <= 1
    assert gelu.loc["sum", "seeds_needed"] >= 2
    lines = plain_lines(text)
    x, signed = r"-?\d+\.\d{3}", r"[+-]\d+\.\d{3}"  # a variance, a difference of two
    assert re.fullmatch(
        rf"relu: the components, in points²: init {x} \(\d+ %\), order .*, aug .*, test set {x} \(\d+ %\); .* "
        rf"dominates.*\. Their sum {x} lies (inside|outside) the all-vary arm's 95 % interval \[{x}, {x}\] \(s² = "
        rf"{x}\); sum − s² = {signed} \[{signed}, {signed}\], which holds 0: the components are consistent with the "
        "ordinary runs' variance",
        lines[0],
    ), lines[0]
    assert re.fullmatch(
        r"gelu vs relu: (less stable in|not shown less stable in) .*init \(ratio \d+\.\d\d, "
        r"one-sided F p [=<] [\d.]+\).* \(at α = 0\.05\)",
        lines[2],
    ), lines[2]
    assert re.fullmatch(
        r"gelu vs relu: (≈ \d+ seeds per group|more than .*) for 80 % power to detect a difference of one seed sd "
        r"of an ordinary run \(--effect D for another\), d = 1\.00 with the variance of an ordinary "
        r"run taken as the sum of the components that vary in it \(those above 0\), pooled with "
        r"relu's",
        lines[3],
    ), lines[3]
    # deterministic: a second report writes the same bytes
    first = {name: (recipe / name).read_bytes() for name in ("noise.md", "noise.csv")}
    assert main([str(recipe), "--format", "md,csv"]) == 0
    assert first == {name: (recipe / name).read_bytes() for name in ("noise.md", "noise.csv")}
    assert main([str(recipe), "--format", "md", "--effect", "1"]) == 0  # seeds needed for a Δ the user names
    assert "for 80 % power to detect Δ = 1.00 (--effect), d = " in plain_lines((recipe / "noise.md").read_text())[3]


def test_an_arm_with_an_outlying_seed_is_named_with_what_it_makes_unreliable(tmp_path, capsys):
    recipe = write_design(tmp_path)
    for act, arm, k in (("gelu", nz.ALL, 2), ("relu", "order", 3)):  # runs that trained badly, as hermite's seed 2
        shutil.rmtree(recipe / f"noise={arm}" / act / f"seed_{k}")
        write_design_run(tmp_path, act, arm, k, off=-20.0)
    assert main([str(recipe), "--format", "md,csv"]) == 0
    text = (recipe / "noise.md").read_text()
    assert "χ² intervals assume normal seeds: an arm with an outlying seed is named in the notes" in text
    base_note, note = [n for n in notes_of(recipe / "noise.md") if "outlier" in n]
    assert base_note.startswith("relu noise=order: seed 3 (") and base_note.endswith(
        "the seeds are not normal there, so this arm's χ² interval is unreliable"
    )  # the baseline: no F test
    assert re.fullmatch(
        r"gelu noise=all: seed 2 \([78]\d\.\d\d\) lies far from the arm's other seeds \(outlier test at "
        r"α = 0\.01, docs/report\.md, \"Where the noise comes from\"\): the seeds are not normal there, so "
        r"this arm's χ² interval and its F test against relu are unreliable",
        note,
    ), note
    assert plain_lines(text)[1].endswith("(an outlying seed in all-vary: its interval unreliable, see the notes)")
    data = pd.read_csv(recipe / "noise.csv", dtype={"outliers": str}).set_index(["act", "part"])
    assert data.loc[("gelu", "all-vary"), "outliers"] == "2" and data.loc[("relu", "order"), "outliers"] == "3"
    assert data["outliers"].notna().sum() == 2


def test_a_design_with_one_seed_per_arm_says_so_in_one_sentence(tmp_path, capsys):
    recipe = write_design(tmp_path, seeds=1)
    assert main([str(recipe), "--format", "md"]) == 0
    (line,) = [n for n in notes_of(recipe / "table.md") if "noise" in n]
    assert line == (
        "no noise section: every arm has one seed, and there is no variance without 2 seeds per arm; run "
        f"more, e.g. `visionbench run recipe={RECIPE} noise=init,order,aug seeds=5`"
    )
    assert not (recipe / "noise.md").exists() and line in capsys.readouterr().out


def test_missing_arms_and_single_seeds_are_named_and_the_sum_is_not_checked(tmp_path, capsys):
    recipe = write_design(tmp_path, arms=(nz.ALL, "init"), seeds=3)
    for k in (1, 2):  # gelu's init arm keeps one seed
        (recipe / "noise=init" / "gelu" / f"seed_{k}" / "summary.json").unlink()
    assert main([str(recipe), "--format", "md"]) == 0
    text = (recipe / "noise.md").read_text()
    notes = notes_of(recipe / "noise.md")
    assert (
        "no runs of the arm(s) noise=order, noise=aug: their component is blank and the sum is not checked "
        "against the all-vary arm"
    ) in notes
    assert "gelu: noise=init (1): fewer than 2 completed seeds, no variance without 2 seeds; left blank" in notes
    assert "the sum is not checked (an arm has fewer than 2 seeds or no runs)" in plain_lines(text)[0]
    assert "| relu | order | 0 |  |  |  |  |  |  |" in text and "| gelu | init | 1 |  |  |  |  |  |  |" in text


def test_an_arm_whose_seeds_all_give_the_same_value_is_named_as_drawing_nothing(tmp_path, monkeypatch):
    # a recipe without augmentation or dropout: the aug arm's runs are the same training, bit for bit
    monkeypatch.setitem(SD, "relu", {**SD["relu"], "aug": 0.0})
    recipe = write_design(tmp_path, seeds=3, predictions=False)
    for k in (1, 2):  # chaotic draws aside, the same run gives the same value
        path = recipe / "noise=aug" / "relu" / f"seed_{k}" / "summary.json"
        summary = json.loads(path.read_text())
        summary["metrics"] = json.loads((path.parent.parent / "seed_0" / "summary.json").read_text())["metrics"]
        path.write_text(json.dumps(summary))
    assert main([str(recipe), "--format", "md,csv"]) == 0
    assert (
        "relu: noise=aug: every seed gave the same value, so nothing in these runs drew from that seed (e.g. aug "
        "in a recipe without augmentation, dropout or Mixup): its component is 0 by construction, not measured"
    ) in notes_of(recipe / "noise.md")
    assert not any(n.startswith("gelu: noise=") for n in notes_of(recipe / "noise.md"))
    assert pd.read_csv(recipe / "noise.csv").set_index(["act", "part"]).loc[("relu", "aug"), "var"] == 0


def test_a_design_without_the_all_vary_arm_gives_no_section(tmp_path, capsys):
    recipe = write_design(tmp_path, arms=("init", "order"), seeds=2)
    assert main([str(recipe), "--format", "md"]) == 0
    assert (
        "no noise section: the all-vary arm (noise=all: the ordinary runs every component is measured against) "
        "has no runs"
    ) in notes_of(recipe / "table.md")
    assert not (recipe / "noise.md").exists()


def test_without_predictions_the_components_keep_the_test_set_part_and_say_so(tmp_path, capsys):
    recipe = write_design(tmp_path, seeds=3, predictions=False)
    assert main([str(recipe), "--format", "md,csv"]) == 0
    data = pd.read_csv(recipe / "noise.csv").set_index(["act", "part"])
    assert data.loc[("relu", "init"), "var"] == pytest.approx(data.loc[("relu", "init"), "arm_var"])
    assert np.isnan(data.loc[("relu", "test set"), "var"])
    assert any(
        n.startswith("no test-set component: no run has usable predictions.npz (the components keep the test-set part")
        for n in notes_of(recipe / "noise.md")
    )


def test_an_ordinary_factor_sweep_gets_no_noise_section(tmp_path, capsys):
    for arm in ("true", "false"):
        for k in range(2):
            run = layout.run_path(tmp_path, RECIPE, "relu", k, f"model.lsuv={arm}")
            run.mkdir(parents=True)
            layout.write_summary(
                run,
                {
                    "schema": layout.SCHEMA,
                    "recipe": RECIPE,
                    "act": "relu",
                    "seed": k,
                    "status": "completed",
                    "setting": {"model.lsuv": arm == "true"},
                    "metrics": {"val_top1_best": 90.0 + k},
                },
            )
    assert main([str(tmp_path / RECIPE), "--format", "md"]) == 0
    assert not (tmp_path / RECIPE / "noise.md").exists()
    assert not any("noise" in n for n in notes_of(tmp_path / RECIPE / "table.md"))

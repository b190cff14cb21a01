"""Per-example evidence of one recipe's table: what the runs' `predictions.npz` say beyond the seed-level
t-test (docs/per_example.md). Written as `per_example.md` and `per_example.csv` beside `table.md`.

    >>> from visionbench.report import per_example
    >>> table, note = per_example.section(recipe_runs, "test_top1_at_best_val", "relu")
    >>> render.write(table, recipe_dir / "per_example", ("md", "csv"))   # table is None without predictions

Per activation against the baseline (statistics: `visionbench.stats.per_example`): Δ of top-1 recomputed
from the predictions with its two-level interval (seeds and test images) beside the seed-only Welch one, and
the test set's part of Δ (√E, `two_level_interval`'s `example_sd`: the one definition of that phrase); the
binomial sd of one run's accuracy and the share of the seed-to-seed variance the finite test set explains; a
paired test over images; churn within and between activations with its permutation p; the
seed ensemble's accuracy with McNemar's p; NLL and ECE with the table's seed-level test. Then one
plain-words line each. `note` is the line `table.md` gets: where the section is, or which columns old
results (no predictions.npz) lack.

A run's file is used only when it is that run's evidence (results/evidence.py: identity, selected epoch,
accuracy, ranges); a damaged or mismatching file leaves that run's columns blank with a note naming it,
why, and the command that rewrites it. No file, damaged or not, stops the report.
"""

from __future__ import annotations

import math

import pandas as pd

from ..results import evidence, layout
from ..results.io import RunStateError
from ..results.predictions import FILE_NAME, variant_of
from ..stats import per_example as pex
from . import render
from .tables import TEST_NAMES, number, p_relation, p_text, share_cell, share_words

LACKING = "two-level interval, variance share, churn, ensemble, NLL, ECE"
TEST_WORD = {"student": "Student", "welch": "Welch", "paired": "paired"}
# compare_arms' fractions shown and stored in points (× 100), and its variances in points² (× 10⁴)
POINTS = (
    "diff",
    "two_level_low",
    "two_level_high",
    "two_level_seed_low",
    "two_level_seed_high",
    "two_level_example_sd",
    "images_diff",
    "churn_between",
    "churn_within",
    "ensemble_a",
    "ensemble_b",
    "ece_a",
    "ece_b",
    "ece_sd_a",
    "ece_sd_b",
    "accuracy_a",
    "accuracy_b",
    "binomial_sd_a",
    "binomial_sd_b",
    "churn_within_a",
    "churn_within_b",
)
SQUARED = ("two_level_seed_var", "two_level_example_var", "seed_var_a", "seed_var_b", "example_var_a", "example_var_b")


def scored_set(runs: pd.DataFrame) -> str:
    """Which images the predictions score: the test set with a held-out val split, else the val set."""
    split = pd.to_numeric(runs.get("val_split"), errors="coerce").dropna()
    if not len(split):
        return "the test set, or the val set when the recipe has none (the runs record no val_split)"
    if (split > 0).all():
        return "the test set"
    return "the val set (the recipe holds out no split: it is the official test/val set)"


def _judge(run_dir: str, variant: str) -> evidence.Evidence:
    """`evidence.judge` of one run; whatever a damaged file or summary raises is that run's refusal."""
    try:
        summary = layout.read_summary(run_dir) or {}
        return evidence.judge(run_dir, summary, variant)
    except (OSError, RunStateError, ValueError, TypeError, KeyError) as exc:
        return evidence.Evidence(evidence.DAMAGED, why=f"{FILE_NAME} unusable ({type(exc).__name__}: {exc})")


def load_arms(runs: pd.DataFrame, variant: str) -> tuple[dict[str, list], dict[str, int], list[str], dict]:
    """Per act, the completed runs' prediction arrays of `variant` ([(seed, label, arrays)]), the number of
    completed runs, notes on refused files (damaged, not the run's, without the variant: those runs count as
    without), and the labels of the runs per evidence kind (`{kind: [(label, run_dir)]}`)."""
    arms, counts, notes, kinds = {}, {}, [], {}
    done = runs[runs["status"] == layout.COMPLETED]
    for act, group in done.groupby("act", sort=True):
        arms[act], counts[act] = [], len(group)
        for _, row in group.iterrows():
            label = f"{act}/seed_{row['seed']}"
            found = _judge(row["run_dir"], variant)
            kinds.setdefault(found.kind, []).append((label, row["run_dir"]))
            if found.kind in (evidence.DAMAGED, evidence.MISMATCH):
                notes.append(
                    f"{label}: {found.why}; its per-example columns are blank; rewrite it with "
                    f"`{evidence.fix_command(row['run_dir'])}`"
                )
            elif found.kind == evidence.NO_VARIANT:
                notes.append(f"{label}: {found.why}")
            elif found.kind in evidence.USED:
                arms[act].append((int(row["seed"]), label, found.arrays))
    return arms, counts, notes, kinds


def section(
    runs: pd.DataFrame,
    metric: str,
    baseline: str | None,
    test: str = "student",
    *,
    alpha: float = 0.05,
    digits: int = 2,
    seed: int = 0,
) -> tuple[render.Table | None, str]:
    """(the per-example table of one recipe dir's runs, or None; the note for table.md)."""
    arms, counts, notes, kinds = load_arms(runs, variant_of(metric))
    total, have = sum(counts.values()), sum(len(v) for v in arms.values())
    if not have and notes:  # files there, but unreadable or without the weights the metric scores
        more = f" (and {len(notes) - 1} more)" if len(notes) > 1 else ""
        return None, f"per-example columns ({LACKING}) not computed: {notes[0]}{more}"
    if not have and kinds.get(evidence.MISSING):
        return None, f"per-example columns ({LACKING}) not computed: {_lost_note(kinds[evidence.MISSING])}"
    if not total:
        return None, (
            f"no completed run (each diverged, stalled or failed): the per-example columns ({LACKING}) are not computed"
        )
    if not have:
        return None, (
            f"no run has {FILE_NAME} (results from before per-example predictions): the per-example "
            f"columns ({LACKING}) are not computed"
        )
    every = [entry for act in sorted(arms) for entry in arms[act]]
    try:
        pex.check_same_images([e[2]["target"] for e in every], [e[1] for e in every])
    except ValueError as exc:
        return None, f"per-example statistics not computed: {exc}"
    built = {act: pex.Arm.from_runs([e[2] for e in v], seeds=[e[0] for e in v]) for act, v in arms.items() if v}
    base = baseline if baseline in built else None
    rows = [_row(act, built.get(act), built.get(base), act == base, test, seed) for act in _order(arms, baseline)]
    data = pd.DataFrame(
        [
            {"act": act, "n_runs": counts[act], "n_with_predictions": len(arms[act]), **r}
            for act, r in zip(_order(arms, baseline), rows)
        ]
    )
    intro = _intro(runs, metric, baseline, test, every[0][2]["target"].size)
    lines = [
        _sentence(act, baseline, r, test, alpha, digits)
        for act, r in zip(data["act"], rows)
        if r.get("diff") is not None and act != baseline
    ]
    outro = ["In plain words:\n" + "\n".join(f"- {s}" for s in lines)] if lines else []
    table_notes = notes + _missing_notes(arms, counts, base, baseline, kinds)
    headers, cells = _cells(data, baseline, digits)
    table = render.Table(
        headers,
        cells,
        title=f"{runs['recipe'].iloc[0]} — per-example evidence",
        intro=[intro],
        outro=outro,
        notes=table_notes,
        data=data,
    )
    note = "per-example evidence (two-level intervals, churn, ensemble, calibration): per_example.md"
    refused = len(kinds.get(evidence.DAMAGED, [])) + len(kinds.get(evidence.MISMATCH, []))
    if have < total:
        note += f" ({total - have} of {total} completed runs {_have(total - have)} no {'usable ' if refused else ''}{FILE_NAME}"
        note += f"; {refused} refused as damaged or not the run's: named there)" if refused else ")"
    return table, note


def _order(arms: dict, baseline: str | None) -> list[str]:
    return sorted(arms, key=lambda act: (act != baseline, act))


def _row(act, arm, base_arm, is_base, test, seed) -> dict:
    """Numbers of one act, scaled to points: its own (`_a`) and, against the baseline, the comparison."""
    if arm is None:
        return {}
    if is_base or base_arm is None:
        raw = {f"{k}_a": v for k, v in pex.describe_arm(arm).items()}
    else:
        raw = pex.compare_arms(arm, base_arm, test, seed=seed)
    return {k: v * 100 if k in POINTS else v * 1e4 if k in SQUARED else v for k, v in raw.items()}


def _intro(runs, metric, baseline, test, n_images) -> str:
    variant = variant_of(metric)
    weights = "the EMA weights" if variant == "ema" else "the trained weights"
    return (
        f"From each completed run's {FILE_NAME}: {weights} at the checkpoint `{metric}` reports, scored on "
        f"{scored_set(runs)} ({n_images:,} images). Accuracy and Δ (points) are top-1 recomputed from the "
        f"predictions, vs {baseline or '(no baseline)'}. Two-level 95 % CI: a t interval over seeds and test "
        "images (what another test set from the same distribution would give); seed-only: Welch's, this test "
        "set fixed. Test set's part of Δ: √E, the sd of Δ over new test sets of N images (the two-level "
        "interval's example term E; both arms scored on the same images, most of one run's test-set sd cancels). "
        "Run's test-set sd: √(p(1 − p)/N), one run's accuracy over random test sets of N images; "
        "share: the part of the seed-to-seed variance the finite test set alone explains. Images p: paired "
        "t-test over images of the seed-averaged correctness (these runs, these images). Churn: % of images "
        "whose predicted class differs between two runs (perm. p: exact permutation test of between > "
        "within). Ensemble: plurality vote of the seeds (McNemar exact p). NLL, ECE (15 bins): mean ± sd "
        f"over runs, {TEST_NAMES[test]}. Method and references: docs/per_example.md."
    )


def _lost_note(lost: list[tuple[str, str]]) -> str:
    """The runs whose summary says they wrote predictions.npz, which is gone, and the command that rewrites it."""
    names = ", ".join(label for label, _ in lost)
    dirs = " ".join(str(d) for _, d in lost)
    return (
        f"{len(lost)} completed {'run' if len(lost) == 1 else 'runs'} lost {FILE_NAME} (deleted since they "
        f"wrote it: {names}); rewrite it from the checkpoints with `{evidence.fix_command(dirs)}`, or rerun the "
        "sweep's `visionbench run ...` command"
    )


def _missing_notes(arms, counts, base, baseline, kinds) -> list[str]:
    out = []
    missing = {act: counts[act] - len(v) for act, v in arms.items() if counts[act] > len(v)}
    if kinds.get(evidence.UNNAMED):
        k = len(kinds[evidence.UNNAMED])
        out.append(
            f"{k} {FILE_NAME} {'file does' if k == 1 else 'files do'} not name {'its run' if k == 1 else 'their runs'} "
            "(written before the files recorded recipe, act, setting, seed and config hash): checked against "
            "the summaries' selected epoch and accuracy only"
        )
    if kinds.get(evidence.MISSING):
        out.append(_lost_note(kinds[evidence.MISSING]))
    if missing:
        none = [act for act in missing if not arms[act]]
        some = [act for act in missing if arms[act]]
        k = sum(missing.values())
        before = len(kinds.get(evidence.BEFORE, []))
        why = (
            "results from before per-example predictions"
            if before == k
            else f"{before} from before per-example predictions, {k - before} lost or refused: named above"
            if before
            else "lost or refused: named above"
        )
        usable = "" if before == k else "usable "
        text = f"{k} of {sum(counts.values())} completed runs {_have(k)} no {usable}{FILE_NAME} ({why})"
        if none:
            text += f": columns {LACKING} not computed for {', '.join(none)}"
        if some:
            text += f"{';' if none else ':'} {', '.join(some)} computed on the runs that have it"
        out.append(text)
    if baseline and base is None:
        why = (
            "has no predictions" if counts.get(baseline) else "has no completed run (each diverged, stalled or failed)"
        )
        out.append(f"the baseline {baseline} {why}: no per-example comparisons")
    return out


def _have(k: int) -> str:
    return "has" if k == 1 else "have"


def _fmt(x, digits, sign=False, unit="") -> str:
    text = number(x, digits, sign)
    return text + unit if text else ""


def _ci(r, lo, hi, digits) -> str:
    if not math.isfinite(r.get(lo, math.nan)):
        return ""
    return f"[{number(r[lo], digits, True)}, {number(r[hi], digits, True)}]"


def _pm(x, digits) -> str:
    """±x, or blank when x is not a number."""
    return "±" + number(x, digits) if x is not None and math.isfinite(x) else ""


def _mean_sd(r, key, digits) -> str:
    mean, sd = r.get(f"{key}_a", math.nan), r.get(f"{key}_sd_a", math.nan)
    if not math.isfinite(mean):
        return ""
    return number(mean, digits) + (f" ± {number(sd, digits)}" if math.isfinite(sd) else "")


def _cells(data: pd.DataFrame, baseline, digits) -> tuple[list[str], list[list[str]]]:
    headers = [
        "Act.",
        "runs",
        "acc.",
        f"Δ vs {baseline}" if baseline else "Δ",
        "two-level 95% CI",
        "seed-only 95% CI",
        "test set's part of Δ",
        "run's test-set sd",
        "share",
        "images p",
        "churn within %",
        "churn between %",
        "perm. p",
        "ensemble",
        "McNemar p",
        "NLL",
        "NLL p",
        "ECE %",
        "ECE p",
    ]
    rows = []
    for _, r in data.iterrows():
        r = r.to_dict()
        base = r["act"] == baseline
        dash = "—" if base else ""
        share = r.get("share_a", math.nan)
        rows.append(
            [
                r["act"],
                f"{r['n_with_predictions']}/{r['n_runs']}",
                _fmt(r.get("accuracy_a"), digits),
                dash or _fmt(r.get("diff"), digits, True),
                dash or _ci(r, "two_level_low", "two_level_high", digits),
                dash or _ci(r, "two_level_seed_low", "two_level_seed_high", digits),
                dash or _pm(r.get("two_level_example_sd"), digits),
                _pm(r.get("binomial_sd_a"), digits),
                share_cell(share),
                dash or p_text(r.get("images_p_value")),
                _fmt(r.get("churn_within_a"), 1),
                dash or _fmt(r.get("churn_between"), 1),
                dash or p_text(r.get("churn_p_value")),
                _fmt(r.get("ensemble_a"), digits),
                dash or p_text(r.get("ensemble_p")),
                _mean_sd(r, "nll", 3),
                dash or p_text(r.get("nll_p")) or r.get("nll_mark", "") or "",
                _mean_sd(r, "ece", digits),
                dash or p_text(r.get("ece_p")) or r.get("ece_mark", "") or "",
            ]
        )
    return headers, [[c if isinstance(c, str) else "" for c in row] for row in rows]


def _sentence(act, baseline, r, test, alpha, digits) -> str:
    """The plain-words line of one act against the baseline."""
    d = lambda x, sign=False: number(x, digits, sign)  # noqa: E731
    text = f"{act} vs {baseline}: Δ = {d(r['diff'], True)}"
    if math.isfinite(r["two_level_low"]):
        text += f" [two-level {d(r['two_level_low'], True)}, {d(r['two_level_high'], True)}]"
    text += f"; one run's accuracy varies by ±{d(r['binomial_sd_a'])} over test sets of this size"
    text += share_words(r["share_a"])
    part = r.get("two_level_example_sd", math.nan)
    if math.isfinite(part):  # both arms scored the same images: most of the test set's sampling cancels in Δ
        text += (
            f", while the test set's part of this Δ (√E: its sd over new test sets, both arms on the same "
            f"images) is ±{d(part)}"
        )
        text += " (E estimated at 0: lost in each image's seed noise)" if part == 0 else ""
    text += "; " + _churn_words(r, alpha)
    mcnemar = p_relation(r["ensemble_p"])
    text += f"; ensemble {d(r['ensemble_a'])} vs {d(r['ensemble_b'])} "
    text += f"(McNemar p {mcnemar})" if mcnemar else "(untested)"
    word = TEST_WORD[test]
    for name, label, unit, places in (("nll", "NLL", "", 3), ("ece", "ECE", " %", digits)):
        p = p_relation(r[f"{name}_p"])
        test_text = f"{word} p {p}" if p else r[f"{name}_mark"] or "untested"
        text += (
            f"{';' if name == 'nll' else ','} {label} {number(r[f'{name}_a'], places)}{unit} vs "
            f"{number(r[f'{name}_b'], places)}{unit} ({test_text})"
        )
    return text


def _churn_words(r, alpha) -> str:
    """Churn between seeds and between activations, and what the permutation test lets one say."""
    within, between, p, min_p = (
        r.get(k, math.nan) for k in ("churn_within", "churn_between", "churn_p_value", "churn_min_p")
    )
    text = (
        f"churn between seeds {_fmt(within, 1, unit=' %') or 'n/a'}, between activations {_fmt(between, 1, unit=' %')}"
    )
    if not math.isfinite(p):
        return text + " (too few runs for the permutation test)"
    text += f" (permutation p {p_relation(p)})"
    if p < alpha:
        return text + ": the activation changes which images are hard"
    if min_p >= alpha:
        return text + (
            f": too few runs to tell whether the activation changes which images are hard (the smallest "
            f"p at {r['n_a']} vs {r['n_b']} runs is {min_p:.2f})"
        )
    return text + ": no sign that the activation changes which images are hard"

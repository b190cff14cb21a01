"""The tuning section of a tuning design's tree (`visionbench run ... tune=SPACE trials=B`, docs/tuning.md):

* `tuning.md/csv` beside table.md: per activation the expected best validation score after n = 1..B trials ± its
  bootstrap sd and band, and the expected training time of those n trials; where one leads beyond that noise
  (report/tuning_curves.py);
* `tuning.png`: those curves against n and against cumulative training time;
* the equal-budget verdicts: the table of `tune.trial=best/` (each activation at its own best-on-validation
  configuration, fresh seeds) beside the table of `tune.trial=defaults/` (the recipe's own values, the same seeds),
  and one sentence per activation (`sentences`, stats/tuned_comparison.py): with `tune_repeats=R` >= 2 a verdict
  about the activations (a t-test over the R procedures, `tune.repeat=j,tune.trial=best/`), with R = 1 the table's
  verdict, said to be about the two selected configurations; then whether tuning changed the comparison, the
  interaction Δ_tuned − Δ_recipe with its interval and p;
* the selection's optimism: a selected configuration's validation score is the best of B noisy scores, biased
  upward; the retrained seeds' test scores are not.

    table, figure_rows, notes = section(root_runs, per_setting_summaries, metric)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.settings import parse_setting_label
from ..stats import tuned_comparison as tc
from ..stats.metrics import higher_is_better
from . import render, tuning_curves

TRIAL = "tune.trial"
REPEAT = "tune.repeat"  # a procedure's index, first in a setting's label when tune.repeats > 1
MIN_REPEATS = 2  # the fewest procedures with a spread to test over (held its level in simulation; 3+ for power: docs)
BEST, DEFAULTS = "best", "defaults"
VAL_METRICS = ("ema_val_top1_best", "val_top1_best")


def phase_of(setting_label: str):
    """The `tune.trial` of a setting folder (an index, best, defaults), None outside a tuning design."""
    if not setting_label or not str(setting_label).startswith((f"{TRIAL}=", f"{REPEAT}=")):
        return None
    return parse_setting_label(setting_label).get(TRIAL)


def is_tuning(runs: pd.DataFrame) -> bool:
    return "setting" in runs and any(phase_of(s) is not None for s in runs["setting"])


def tuned_keys(runs: pd.DataFrame) -> set[str]:
    """The keys the trials varied (the setting keys besides tune.trial)."""
    keys: set[str] = set()
    for s in runs["setting"]:
        if isinstance(phase_of(s), int):
            keys |= set(parse_setting_label(s)) - {TRIAL, REPEAT}
    return keys


def selection_metric(runs: pd.DataFrame) -> str:
    """The validation score the sweep selected on (sweep/tune_sweep.py `selection_metric`): the EMA's when the recipe
    reports the EMA and the runs have it."""
    reported = str(runs["report_metric"].dropna().iloc[0]) if runs["report_metric"].notna().any() else ""
    return VAL_METRICS[0] if reported.startswith("ema_") and VAL_METRICS[0] in runs else VAL_METRICS[1]


def trials_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per trial run: act, trial, the drawn values, score (the selection metric; NaN unless completed),
    train_time_s."""
    metric = selection_metric(runs)
    rows = []
    for _, r in runs.iterrows():
        phase = phase_of(r["setting"])
        if not isinstance(phase, int):
            continue
        # a completed run that stalled (learned nothing) still has its validation score, as the sweep selected on it
        value = r.get(metric) if r["status"] in ("completed", "stalled") else math.nan
        values = {k: v for k, v in parse_setting_label(r["setting"]).items() if k not in (TRIAL, REPEAT)}
        rows.append(
            {
                "act": r["act"],
                "trial": phase,
                "setting": ", ".join(f"{k}={v}" for k, v in values.items()),
                "score": float(value) if value is not None and pd.notna(value) else math.nan,
                "train_time_s": float(r["train_time_s"]) if pd.notna(r.get("train_time_s")) else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=["act", "trial", "setting", "score", "train_time_s"]).sort_values(
        ["act", "trial"], kind="stable"
    )


def _verdicts(summary: pd.DataFrame | None) -> dict[str, str]:
    if summary is None or "verdict" not in summary:
        return {}
    return {r["act"]: str(r["verdict"] or "") for _, r in summary.iterrows()}


def _phrase(verdict: str, act: str, base: str) -> str:
    if verdict in ("better", "worse"):
        return f"{act} is {verdict} than {base}"
    if verdict == "equivalent":
        return f"{act} and {base} are equivalent"
    if verdict:
        return f"{act} vs {base} is {verdict}"
    return f"{act} vs {base} has no verdict"


def _interval(c: tc.Comparison, digits: int) -> str:
    return f"{c.estimate:+.{digits}f} [{c.low:+.{digits}f}, {c.high:+.{digits}f}], p = {c.p:.2g}"


def _change(c: tc.Comparison | None, repeats: int, digits: int, act: str = "the activation") -> str:
    """The interaction's clause: whether tuning changed the comparison, Δ_tuned − Δ_recipe with its interval."""
    if c is None or not c.verdict:
        return "whether tuning changed the comparison is not tested (fewer than 2 runs on a side)"
    unit = f"over the {repeats} procedures" if repeats > 1 else "over the seeds, given the two selected configurations"
    moved = {"better": f"in {act}'s favour", "worse": f"against {act}"}
    if c.verdict in moved:
        return f"tuning changed the comparison {moved[c.verdict]}: Δ_tuned − Δ_recipe {_interval(c, digits)}, {unit}"
    return f"tuning did not measurably change the comparison: Δ_tuned − Δ_recipe {_interval(c, digits)}, {unit}"


def sentences(
    best: pd.DataFrame | None,
    defaults: pd.DataFrame | None,
    base: str | None,
    budget: int,
    tests: dict[str, dict] | None = None,
    repeats: int = 1,
    digits: int = 2,
) -> list[str]:
    """One sentence per activation: its equal-budget verdict and what it is about, its verdict at the recipe's own
    values, and the interaction test (`tests[act]`: {"about": the procedures' Comparison when repeats > 1, "change":
    the interaction's}; stats/tuned_comparison.py). With one procedure (repeats = 1) the verdict is the table's, over
    seeds: about the two selected configurations, and the sentence says so."""
    if base is None or best is None:
        return []
    tuned, fixed, tests = _verdicts(best), _verdicts(defaults), tests or {}
    out = []
    for act in tuned:
        if act == base:
            continue
        mine = tests.get(act) or {}
        if repeats > 1 and mine.get("about") is not None:
            about = mine["about"]
            now = (
                f"over {repeats} independent tuning procedures each ({budget} trials each), "
                f"{_phrase(about.verdict, act, base)} (mean paired difference "
                + (f"{_interval(about, digits)}, t-test over the procedures)" if about.verdict else "not tested)")
            )
        else:
            now = (
                f"tuned alike ({budget} trials each), {_phrase(tuned[act], act, base)}: a verdict about the two "
                f"selected configurations, not the activations (tune_repeats=R >= {MIN_REPEATS} makes it one about "
                "the activations)"
            )
        if defaults is None:
            out.append(
                f"{now}; the recipe's own values were not retrained (tune.defaults=false), so there is no verdict "
                "without tuning to set beside it"
            )
            continue
        then = _phrase(fixed.get(act, ""), act, base)
        out.append(f"{now}; at the recipe's own values {then}; {_change(mine.get('change'), repeats, digits, act)}")
    return out


def retrained(runs: pd.DataFrame, metric: str) -> tuple[dict, dict]:
    """({repeat: {act: scores}} of the retrains of the selections (repeat 0 for a design of one procedure),
    {act: scores} of the recipe's values): the completed runs' `metric`."""
    best: dict[int, dict] = {}
    recipe: dict[str, list] = {}
    if metric not in runs:
        return best, recipe
    for _, r in runs[runs["status"] == "completed"].iterrows():
        setting = parse_setting_label(r["setting"]) if phase_of(r["setting"]) is not None else {}
        value = r[metric]
        if pd.isna(value):
            continue
        if setting.get(TRIAL) == BEST:
            best.setdefault(int(setting.get(REPEAT, 0)), {}).setdefault(r["act"], []).append(float(value))
        elif setting.get(TRIAL) == DEFAULTS:
            recipe.setdefault(r["act"], []).append(float(value))
    return best, recipe


def tests(runs: pd.DataFrame, base: str, metric: str) -> dict[str, dict]:
    """Per activation besides `base`: {"about": X vs base over the procedures (None with one procedure), "change":
    the interaction}, stats/tuned_comparison.py, at α = stats/power.py ALPHA."""
    best, recipe = retrained(runs, metric)
    higher = higher_is_better(metric)
    acts = {a for by_act in best.values() for a in by_act} - {base}
    order = sorted(best)
    out = {}
    for act in sorted(acts):
        if len(order) > 1:
            x = [float(np.mean(best[j].get(act) or [math.nan])) for j in order]
            b = [float(np.mean(best[j].get(base) or [math.nan])) for j in order]
            about = tc.procedures(x, b, higher=higher)
            change = tc.interaction(x, b, recipe.get(act, []), recipe.get(base, []), True, higher=higher)
        else:
            one = best[order[0]] if order else {}
            about = None
            change = tc.interaction(
                one.get(act, []), one.get(base, []), recipe.get(act, []), recipe.get(base, []), False, higher=higher
            )
        out[act] = {"about": about, "change": change if recipe else None}
    return out


def section(
    runs: pd.DataFrame, per_setting: list[pd.DataFrame], digits: int = 2
) -> tuple[render.Table, pd.DataFrame, pd.DataFrame]:
    """(the tuning table, the curves frame, the trials frame) of one recipe's tuning tree; `per_setting`: the
    annotated summaries of its settings (each with a `setting` column)."""
    trials = trials_frame(runs)
    curve, scores = tuning_curves.curves(trials)
    metric = selection_metric(runs)
    budget = int(trials.groupby("act").size().min()) if len(trials) else 0
    by_setting = {str(s["setting"].iloc[0]): s for s in per_setting if len(s)}
    best_labels = sorted(label for label in by_setting if phase_of(label) == BEST)
    repeats = max(1, len(best_labels))
    per_procedure = budget // repeats if repeats > 1 else budget  # the curves pool the procedures' trials
    best = by_setting.get(best_labels[0]) if best_labels else None
    defaults = by_setting.get(f"{TRIAL}={DEFAULTS}")
    base = None
    for s in (best, defaults):
        if s is not None and isinstance(s["baseline"].iloc[0], str):
            base = s["baseline"].iloc[0]
            break
    acts = list(dict.fromkeys(trials["act"]))
    if base in acts:
        acts = [base] + [a for a in acts if a != base]
    rows = tuning_curves.table_rows(curve, trials, acts, digits)
    frame = pd.concat([curve[curve["act"] == act] for act in acts], ignore_index=True) if acts else curve
    notes = [tuning_curves.method_note(metric, budget)]
    if base is not None:
        notes += tuning_curves.lead_notes(curve, scores, acts, base)
    test_metric = str(best["metric"].iloc[0]) if best is not None and "metric" in best else ""
    found = tests(runs, base, test_metric) if base is not None and test_metric else {}
    lines = sentences(best, defaults, base, per_procedure, found, repeats, digits)
    if best is None:
        notes.append(f"the retrain of each activation's best configuration ({TRIAL}={BEST}/) has no runs yet")
    notes += [s[0].upper() + s[1:] + "." for s in lines]
    selected = trials.dropna(subset=["score"]).groupby("act")["score"].max()
    if best is not None and len(selected):
        test = {r["act"]: r["mean"] for _, r in best.iterrows()}
        retrained = runs[runs["setting"].isin(best_labels) & (runs["status"] == "completed")]
        fresh = retrained.groupby("act")[metric].mean() if metric in retrained else pd.Series(dtype=float)
        pairs = "; ".join(
            f"{act} {selected[act]:.{digits}f} selected, {fresh.get(act, math.nan):.{digits}f} over the fresh seeds "
            f"(test {test.get(act, math.nan):.{digits}f})"
            for act in acts
            if act in selected
        )
        notes.append(
            tuning_curves.optimism_note(
                metric, per_procedure, str(best["metric"].iloc[0]), pairs, f"{TRIAL}={BEST}/table.md"
            )
        )
    table = render.Table(
        tuning_curves.header(metric),
        rows,
        align="lrrrrl",
        title=f"{runs['recipe'].iloc[0]} — equal tuning budgets",
        intro=[
            (f"{repeats} independent tuning procedures per activation (tune_repeats); in each, " if repeats > 1 else "")
            + ("e" if repeats > 1 else "E")
            + f"ach activation trained the same {per_procedure} configurations (random search with a recorded seed), one "
            f"run each; selected on {metric} (validation), its best retrained with fresh seeds ({TRIAL}={BEST}/), "
            + (
                f"beside the recipe's own values ({TRIAL}={DEFAULTS}/)."
                if defaults is not None
                else "the recipe's own values not retrained."
            )
        ],
        notes=notes,
        data=frame,
    )
    return table, frame, trials


def best_table_note(runs: pd.DataFrame) -> str:
    """The note of the `tune.trial=best` table: each activation's configuration (they differ by design)."""
    from ..results.io import RunStateError
    from ..results.layout import read_summary

    configs: dict[str, str] = {}
    for _, r in runs.iterrows():
        if r["act"] in configs:
            continue
        try:
            setting = (read_summary(Path(r["run_dir"])) or {}).get("setting") or {}
        except RunStateError:
            setting = {}
        configs[r["act"]] = ", ".join(f"{k}={v}" for k, v in setting.items() if k != TRIAL)
    shown = "; ".join(f"{a}: {v}" for a, v in configs.items() if v)
    return (
        "equal tuning budgets: each activation at its own best-on-validation configuration"
        + (f" ({shown})" if shown else "")
        + "; the differing tuned keys are by design, not a mixed configuration"
    )


def write(table: render.Table, runs: pd.DataFrame, curve: pd.DataFrame, root: Path, formats) -> list[Path]:
    from .figures import plot_tuning

    written = render.write(table, Path(root) / "tuning", [f for f in formats if f != "tex"])
    figure = plot_tuning(curve, Path(root) / "tuning.png", str(runs["recipe"].iloc[0]), selection_metric(runs))
    return written + ([figure] if figure else [])

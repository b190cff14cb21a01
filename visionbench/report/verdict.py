"""The verdict of each activation against the recipe's baseline: better / worse / equivalent /
unstable / inconclusive, with the power numbers behind it and one sentence a reader can quote
(docs/report.md, "Power, equivalence, verdicts").

    visionbench report runs/digits_vgg4 --margin 0.5 --holm

    >>> from visionbench.report import verdict
    >>> summary = verdict.annotate(summary, recipe_runs, margin=0.5)   # adds the columns below

Columns added to one recipe's `summarize` rows:
`mde` (minimal detectable |Δ| at the n at hand, power.mde), `d_for_seeds` (the Cohen's d the
seed count is for: a stated effect, never the observed one — `--effect D` / pooled sd, else the margin / pooled
sd, else 1: one seed sd), `seeds_needed`
(per group), `tost_p` and `tost_p_holm` (with a margin), `verdict`, `verdict_text`, the
probability of improvement `p_improve` with its exact interval (`p_improve_low`, `p_improve_high`;
stats/improvement.py; not estimable with `--test welch`) and the empirical pair count
`p_improve_empirical`, the divergence and stall comparisons `div_p`, `stall_p` (Fisher exact, act vs baseline)
with the baseline's counts `base_diverged`, `base_stalled`, `base_runs`, and the settings `alpha`, `margin`,
`verdict_holm`.

The rule, at the table's α (on the Holm-adjusted p-values with `holm_adjust`; the TOST p-values are then
Holm-adjusted over the recipe's activations too), over the runs that finished:
1. TOST p < α (a margin was given): **equivalent** — the difference is inside ±M, even if the
   t-test also finds it non-zero (then the sentence says so: a real but negligible difference);
2. else p < α: **better** or **worse**, in the metric's direction (losses, errors, times and
   epochs_to_X: lower is better);
3. else **inconclusive**, and the sentence says how many seeds per group would detect a stated effect.
Then divergence and stalls: the tests see only the runs that completed and learned, so an act that diverged or
stalled (trained to the end at chance: collect.py, stats/convergence.py) in some seeds is compared on its survivors.
If the act diverged or stalled in any seed, a survivors' "better" or "equivalent" becomes **unstable** (never
better): the sentence gives the survivors' result, then how many runs of each arm diverged or stalled and the Fisher
exact p of the two rates. Every sentence of a row where either arm diverged or stalled gives those counts; the
compact cell adds them too.
Rows without a test (`n<2`, zero variance, not comparable, ...) get no verdict, and a sentence saying
why; the baseline's own row gets neither, but a sentence when it stalled: the verdicts against it are withheld
when fewer than two of its runs learned (no test), else marked with its count.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import improvement, power
from ..stats.metrics import higher_is_better
from ..stats.significance import MARK_BASELINE, MARK_MIXED, divergence_p, holm
from .summary import scored_values
from .tables import number, p_relation

VERDICTS = ("better", "worse", "equivalent", "unstable", "inconclusive")
TEST_LABEL = {"student": "Student", "welch": "Welch", "paired": "paired"}
DEFAULT_EFFECT_D = 1.0  # the effect `seeds_needed` is sized for when neither --effect nor --margin states one
NUMBER_COLUMNS = (
    "mde",
    "d_for_seeds",
    "seeds_needed",
    "tost_p",
    "tost_p_holm",
    "p_improve",
    "p_improve_low",
    "p_improve_high",
    "p_improve_empirical",
)


def _p(p: float) -> str:
    """`= 0.0345`, `< 0.0001` (tables.p_relation); `= nan` where no test ran."""
    return p_relation(p) or "= nan"


def _p_below(p: float, alpha: float) -> str:
    """`= 0.0160 < 0.05`, or `< 0.0001` alone (already below any usual α)."""
    return _p(p) if p < 1e-4 else f"{_p(p)} < {alpha:g}"


def _seeds_text(n: float) -> str:
    if math.isinf(n):
        return f"more than {power.MAX_SEEDS:,} seeds per group"
    return f"≈ {int(n)} seeds per group"


def check_settings(alpha: float, target_power: float, margin: float | None, effect: float | None) -> None:
    """Raise ValueError naming the option when a setting is out of range (before any computation)."""
    for name, value in (("margin", margin), ("effect", effect)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"--{name} must be a positive number in the metric's units, got {value!r}")
    for name, value in (("alpha", alpha), ("power", target_power)):
        if not 0 < value < 1:
            raise ValueError(f"--{name} must lie in (0, 1), got {value!r}")


def annotate(
    summary: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    alpha: float = power.ALPHA,
    target_power: float = power.POWER,
    margin: float | None = None,
    effect: float | None = None,
    holm_adjust: bool = False,
    higher_better: bool | None = None,
    digits: int = 2,
) -> pd.DataFrame:
    """One recipe's `summarize` rows (one `recipe_dir`) with the power, TOST, improvement, divergence and
    verdict columns.

    Args:
        summary: rows of one recipe dir from `stats.summarize`.
        runs: that recipe dir's runs (`load_runs` rows), for the per-seed values.
        alpha: the significance level of the verdict and of the power solutions.
        target_power: the power `mde` and `seeds_needed` are solved for.
        margin: equivalence margin ±M in the metric's units (None: no TOST, no "equivalent").
        effect: the difference of means (metric units) `seeds_needed` is solved for; None = the observed one.
        holm_adjust: decide on the Holm-adjusted p-values (`p_holm`, `tost_p_holm`).
        higher_better: the metric's direction; None decides from its name (`stats.metrics.higher_is_better`).
        digits: decimals of the numbers in the sentence.

    Raises:
        ValueError: a margin or effect that is not a positive number, alpha or power outside (0, 1).
    """
    check_settings(alpha, target_power, margin, effect)
    out = summary.copy().reset_index(drop=True)
    metric = out["metric"].iloc[0]
    higher = higher_is_better(metric) if higher_better is None else higher_better
    base = out["baseline"].iloc[0] if isinstance(out["baseline"].iloc[0], str) else None
    values = {act: scored_values(group, metric) for act, group in runs.groupby("act", sort=True)}
    b = values.get(base, pd.Series(dtype=float))
    numbers = [
        _numbers(row, values.get(row["act"], pd.Series(dtype=float)), b, higher, alpha, target_power, margin, effect)
        for _, row in out.iterrows()
    ]
    for col in NUMBER_COLUMNS:
        out[col] = [res.get(col, math.nan) for res in numbers]
    out["tost_p_holm"] = holm(out["tost_p"])
    out = _divergence(out, base)
    decided = [
        _decide(row, len(b), higher, alpha, target_power, margin, effect, holm_adjust, digits)
        for _, row in out.iterrows()
    ]
    out["verdict"] = [v for v, _ in decided]
    out["verdict_text"] = [t for _, t in decided]
    out["alpha"], out["margin"], out["verdict_holm"] = alpha, margin if margin else math.nan, holm_adjust
    return out


def _numbers(row, a: pd.Series, b: pd.Series, higher: bool, alpha, target_power, margin, effect) -> dict:
    """mde, d, seeds_needed, tost_p and the probabilities of improvement of one row; {} for the baseline,
    without one, or when the table is not comparable."""
    if row["is_baseline"] or row["mark"] in (MARK_BASELINE, MARK_MIXED) or not len(b):
        return {}
    res = {
        "p_improve_empirical": improvement.probability_of_improvement(
            a.to_numpy(float), b.to_numpy(float), higher_better=higher
        )
    }
    if row["mark"]:  # untested: n<2, zero variance, ...
        return res
    paired = row["test"] == "paired"
    if paired:  # the test's own data: the seeds both completed
        shared = a.index.intersection(b.index)
        x, y = a.loc[shared].to_numpy(float), b.loc[shared].to_numpy(float)
        sd = float(np.std(x - y, ddof=1))
    else:
        x, y = a.to_numpy(float), b.to_numpy(float)
        sd = power.pooled_sd(x, y)
    if row["test"] != "welch":  # its interval misses at unequal spreads (docs/report.md): not estimable
        res.update(
            zip(
                ("p_improve", "p_improve_low", "p_improve_high"),
                improvement.recipe_interval(x, y, higher_better=higher, paired=paired),
            )
        )
    res["mde"] = power.mde(x, y, paired=paired, alpha=alpha, power=target_power)
    # sized for a stated effect, never the observed one (a study sized from its own noisy Δ̂ is sized for noise):
    # --effect D, else the margin, else one seed sd (d = 1)
    stated = effect if effect is not None else margin if margin else None
    res["d_for_seeds"] = (stated / sd if sd > 0 else math.nan) if stated is not None else DEFAULT_EFFECT_D
    res["seeds_needed"] = power.seeds_needed(res["d_for_seeds"], paired=paired, alpha=alpha, power=target_power)
    if margin:
        res["tost_p"] = power.tost_p(x, y, margin, test=row["test"])
    return res


FAILURES = (("diverged", "div_p"), ("stalled", "stall_p"))  # runs that did not learn, and their Fisher p column


def _divergence(out: pd.DataFrame, base: str | None) -> pd.DataFrame:
    """Adds `base_diverged`, `base_stalled`, `base_runs` (the baseline's diverged and stalled runs and its runs that
    completed, stalled or diverged), `div_p` and `stall_p` (Fisher exact, this act's divergence or stall rate vs the
    baseline's) to every row."""
    ran = out["n_runs"] - out["n_failed"]
    base_row = out[out["act"] == base]
    known = base is not None and not base_row.empty
    out["base_diverged"], out["base_runs"] = pd.NA, int(ran[base_row.index[0]]) if known else pd.NA
    for what, p_col in FAILURES:
        if not known:
            out[f"base_{what}"], out[p_col] = pd.NA, math.nan
            continue
        j, m = int(base_row[f"n_{what}"].iloc[0]), int(out["base_runs"].iloc[0])
        out[f"base_{what}"] = j
        out[p_col] = [
            math.nan if r["is_baseline"] else divergence_p(int(r[f"n_{what}"]), int(k), j, m)
            for (_, r), k in zip(out.iterrows(), ran)
        ]
    return out


def _divergence_text(row) -> str:
    """`rational diverged in 2 of 5 runs, relu in 0 of 5 (Fisher exact p = 0.4444)`, and the same for the runs that
    stalled, `; `-joined; "" when neither arm diverged or stalled."""
    n, m = int(row["n_runs"] - row["n_failed"]), row.get("base_runs")
    parts = []
    for what, p_col in FAILURES:
        k, j = int(row[f"n_{what}"]), row.get(f"base_{what}")
        if j is None or j is pd.NA or (k == 0 and int(j) == 0):
            continue
        fisher = f" (Fisher exact p {_p(row[p_col])})" if math.isfinite(row[p_col]) else ""
        parts.append(f"{row['act']} {what} in {k} of {n} runs, {row['baseline']} in {int(j)} of {int(m)}{fisher}")
    return "; ".join(parts)


def _baseline_text(row) -> str:
    """The baseline row's sentence when it stalled (else ""): the verdicts against it are withheld (fewer than two of
    its runs learned: no test) or marked with its count (they compare with the runs that learned)."""
    stalled, ran = int(row["n_stalled"]), int(row["n_runs"] - row["n_failed"])
    if not stalled:
        return ""
    said = f"{row['act']}, the baseline, stalled in {stalled} of {ran} runs (ended training at chance level)"
    if row["n"] < 2:
        return (
            f"{said}: no verdict against it — fewer than two of its runs learned, so there is nothing to test "
            "against; rerun it with a setting under which it learns, or pass --baseline ACT."
        )
    return (
        f"{said}: every verdict below compares with its {row['n']} runs that learned and is marked "
        f"`{row['act']} {stalled}/{ran} stalled`."
    )


def _decide(
    row, n_base: int, higher: bool, alpha, target_power, margin, effect, holm_adjust, digits
) -> tuple[str, str]:
    """(verdict, sentence) of one row over the runs that finished, then the divergence and stall rule (module
    docstring); the baseline's row has no verdict, and a sentence only when it stalled."""
    if row["is_baseline"]:
        return "", _baseline_text(row)
    word, text = _decide_finished(row, n_base, higher, alpha, target_power, margin, effect, holm_adjust, digits)
    diverged = _divergence_text(row)
    if not diverged or not text:
        return word, text
    if word in ("better", "equivalent") and (row["n_diverged"] > 0 or row["n_stalled"] > 0):
        claim, found = text[:-1].split(": ", 1)  # "x is better than relu", "Δ = ... (Student p ...; n = 3 vs 5)"
        scored = "learned" if row["n_stalled"] > 0 else "finished"
        return "unstable", (
            f"{row['act']} is unstable against {row['baseline']}: among the runs that {scored} it "
            f"{claim.removeprefix(row['act'] + ' ')} — {found}; but {diverged}."
        )
    return word, f"{text[:-1]}; {diverged}."


def _decide_finished(
    row, n_base: int, higher: bool, alpha, target_power, margin, effect, holm_adjust, digits
) -> tuple[str, str]:
    """(verdict, sentence) of one row; ("", "") for the baseline or a recipe without one."""
    act, base = row["act"], row["baseline"]
    if row["is_baseline"] or row["mark"] == MARK_BASELINE or not isinstance(base, str):
        return "", ""
    if row["mark"]:
        return "", f"{act}: no verdict against {base} ({row['mark']}: no test)."
    p = row["p_holm"] if holm_adjust else row["p_value"]
    tost = row["tost_p_holm"] if holm_adjust else row["tost_p"]
    p_name, tost_name = ("Holm-adjusted p", "Holm-adjusted TOST p") if holm_adjust else ("p", "TOST p")
    test = TEST_LABEL.get(row["test"], row["test"])
    n = f"{int(row['n_pairs'])} pairs" if row["test"] == "paired" else f"n = {row['n']} vs {n_base}"
    delta = f"Δ = {number(row['diff'], digits, sign=True)}"
    significant = math.isfinite(p) and p < alpha
    if margin and math.isfinite(tost) and tost < alpha:
        text = (
            f"{act} is equivalent to {base} within ±{number(margin, digits)}: {delta}, "
            f"{tost_name} {_p_below(tost, alpha)} ({n})"
        )
        if significant:
            text += f"; the difference is real ({test} {p_name} {_p(p)}) but inside the margin"
        return "equivalent", text + "."
    if significant:
        word = "better" if (row["diff"] > 0) == higher else "worse"
        return word, f"{act} is {word} than {base}: {delta} ({test} {p_name} {_p_below(p, alpha)}; {n})."
    text = (
        f"{act} vs {base} is inconclusive: {delta} ({test} {p_name} {_p(p)}); at {n} the smallest difference "
        f"detectable with {100 * target_power:g} % power at α = {alpha:g} is ±{number(row['mde'], digits)}"
    )
    if margin:
        text += (
            f"; not shown equivalent within ±{number(margin, digits)} ({tost_name} {_p(tost)})"
            if math.isfinite(tost)
            else f"; no TOST within ±{number(margin, digits)}"
        )
    d, seeds = row["d_for_seeds"], row["seeds_needed"]
    if not math.isfinite(d):
        text += "; no spread to size a study in: pass --effect D"
    elif effect is not None:
        text += f"; {_seeds_text(seeds)} would detect Δ = {number(effect, digits)} (d = {d:.2f})"
    elif margin:
        text += f"; {_seeds_text(seeds)} would detect Δ = {number(margin, digits)}, the margin (d = {d:.2f})"
    else:
        text += f"; {_seeds_text(seeds)} would detect a difference of one seed sd (d = 1; --effect D for another)"
    return "inconclusive", text + "."

"""The table of `visionbench compare` (report/compare.py): one row per (recipe, setting, activation), then one
sentence per verdict saying what it rests on and what it is worth (stats/reproduction.py, stats/equivalence.py).

    table = compare_table.table(data, a, b, metrics, configs, envs, notes, alpha)   # a render.Table

A `reproduced` carries its design's strength: how often n_A vs n_B runs read `reproduced` when nothing changed
and when B is 1 sd of A off (at 3 runs a side, 10 % against 5 %: evidence of about 2 : 1). An exact tie (Δ̂ = 0)
is named as one, with the runs and the spread it rests on; a row whose B is significantly noisier than A is no
reproduction; a side whose runs all stalled is tested by their count, not assumed to differ.
"""

from __future__ import annotations

import math

import pandas as pd

from ..stats import reproduction
from . import render
from .tables import number, p_relation, p_text

DIGITS = 2
VERDICT_RULE = (
    "identical: every run in both trees, with the same metric values and predicted classes; "
    "reproduced: equivalence p < α (|Δ| within ±margin) and B's runs not significantly noisier than A's; "
    "differs: not reproduced, and a test of the row (Welch, or Fisher on the runs left out), Holm-adjusted over "
    "every test of the compare, < α; undecided: neither (the cell says how many seeds per tree would make "
    "`reproduced` 80 % likely were the two the same)"
)


def failed_side(r) -> str:
    """`B` (or `A`) when every run of that side was left out of the scoring (stalled, diverged, failed) while the
    other side has scored runs; '' otherwise."""
    for side, other in (("a", "b"), ("b", "a")):
        if not int(r[f"n_{side}"]) and int(r.get(f"left_out_{side}", 0) or 0) and int(r[f"n_{other}"]):
            return side.upper()
    return ""


def table(
    data: pd.DataFrame,
    a,
    b,
    metrics: dict,
    configs: list[str],
    envs: list[str],
    notes: list[str],
    alpha: float,
) -> render.Table:
    """The compare table of `data` (compare.py `_verdicts`' rows); `a`, `b`: the two sides (their `path`)."""
    header = [
        "Recipe",
        "Act.",
        "A: mean ± sd (n)",
        "B: mean ± sd (n)",
        "Δ B − A",
        "95% CI",
        "p (Holm)",
        "equiv. p (±margin)",
        "supported ±",
        "verdict",
    ]
    rows = [
        [
            _where(r),
            r["act"],
            _mean_sd(r, "a"),
            _mean_sd(r, "b"),
            number(r["diff"], DIGITS, True),
            _ci(r),
            p_text(_tests_p(r)),
            _equivalence(r),
            _bound(r),
            _verdict_cell(r, alpha),
        ]
        for _, r in data.iterrows()
    ]
    scored = "; ".join(f"{recipe}: `{m}`" for recipe, m in metrics.items())
    tests = int(data["welch_p_holm"].notna().sum() + data["stall_p_holm"].notna().sum())
    intro = [
        f"A = `{a.path}`, B = `{b.path}`. Metric — {scored}. Per (recipe, setting, activation) run in both: "
        "mean ± sample sd (n completed runs; stalled, diverged and failed runs are left out, named in the "
        "notes) of each tree; Δ = B − A with its 95 % interval (Welch's se, Hsu's df = min(n) − 1, whose level "
        "holds at any ratio of the spreads); p: the row's smallest two-tailed p — Welch's, and Fisher's on the "
        f"counts of runs left out where there are some — Holm-adjusted over the {tests} test"
        f"{'s' if tests != 1 else ''} of the compare; equiv. p: that |Δ| < margin ({_margin_rule(data)}); "
        "supported ±: the smallest margin that test accepts on these runs. "
        f"Verdict at α = {alpha:g} — {VERDICT_RULE}."
    ]
    outro = ["Verdicts:\n" + "\n".join(f"- {_sentence(r, alpha, tests)}" for _, r in data.iterrows())]
    outro.append(
        "Configuration: "
        + (
            "A and B differ in keys a rerun may change — " + "; ".join(configs)
            if configs
            else "A and B are configured alike (but for act and seed)"
        )
        + "."
    )
    outro.append(
        "Environment (git commit and visionbench version not compared): "
        + ("A and B differ in " + "; ".join(envs) if envs else "no difference recorded")
        + "."
    )
    return render.Table(
        header, rows, align="ll" + "r" * 8, title="Did B reproduce A?", intro=intro, outro=outro, notes=notes, data=data
    )


def _tests_p(r) -> float:
    found = [float(p) for p in (r["welch_p_holm"], r["stall_p_holm"]) if math.isfinite(float(p))]
    return min(found) if found else math.nan


def _margin_rule(data: pd.DataFrame) -> str:
    """How the margin was set: K seed sd of A (the exact test), or M metric units (the TOST)."""
    if data["equivalence_test"].eq("sd").all():
        k = _k(float(data["margin_sd"].iloc[0]))
        return (
            f"±{k} seed sd of A, the reference: a noisier B cannot widen it; the exact test in A's sd, its level "
            "held for B's sd up to 2 × A's, and no `reproduced` where B is significantly noisier (one-sided F test)"
        )
    return f"±{number(float(data['margin'].iloc[0]), DIGITS)} in the metric's units; TOST with Welch's se, Hsu's df"


def _k(value: float) -> str:
    return number(value, DIGITS).rstrip("0").rstrip(".")


def _where(r) -> str:
    return "/".join(filter(None, [r["recipe"], r["setting"]]))


def _mean_sd(r, side: str) -> str:
    n = int(r[f"n_{side}"])
    if not n:
        return "(no completed run)"
    sd = r[f"sd_{side}"]
    return number(r[f"mean_{side}"], DIGITS) + (f" ± {number(sd, DIGITS)}" if math.isfinite(sd) else "") + f" ({n})"


def _ci(r) -> str:
    if not math.isfinite(r["ci_low"]):
        return ""
    return f"[{number(r['ci_low'], DIGITS, True)}, {number(r['ci_high'], DIGITS, True)}]"


def _equivalence(r) -> str:
    if r["tie"] and math.isfinite(r["equivalence_p"]):
        return f"tie (±{number(r['margin'], DIGITS)})"
    text = p_text(r["equivalence_p"])
    return f"{text} (±{number(r['margin'], DIGITS)})" if text and math.isfinite(r["margin"]) else text


def _bound(r) -> str:
    if not math.isfinite(r["bound"]):
        return ""
    return f"±{number(r['bound'], DIGITS)} ({_k(r['bound_sd'])} sd)" if math.isfinite(r["bound_sd"]) else ""


def _seeds(n: float) -> str:
    return f"{int(n):,}" if math.isfinite(n) else "more than 10,000"


def _percent(p: float) -> str:
    return f"{p * 100:.1f} %" if p < 0.1 else f"{p * 100:.0f} %"


def _strength(r) -> str:
    """How often this design says `reproduced`: when nothing changed, and when B is 1 sd of A off."""
    if not math.isfinite(r["rate_same"]):
        return ""
    return f"{_percent(r['rate_same'])} if same, {_percent(r['rate_off'])} if 1 sd off"


def _unscored(r) -> str:
    """`A`, `B` or `A or B`: the side(s) of a row without a scored run ('' when both have one)."""
    return " or ".join(side.upper() for side in ("a", "b") if not int(r[f"n_{side}"]))


def _noisier(r, alpha: float) -> bool:
    """An undecided row whose B is significantly noisier than A at the compare's α (what stopped `reproduced`)."""
    return r["verdict"] == reproduction.UNDECIDED and math.isfinite(r["spread_p"]) and r["spread_p"] < alpha


def _verdict_cell(r, alpha: float) -> str:
    n = r["seeds_needed"]
    if r["verdict"] == reproduction.REPRODUCED:
        return f"reproduced{', a tie' if r['tie'] else ''} ({_strength(r)})"
    if failed_side(r):
        return f"{r['verdict']} (no run of {failed_side(r)} learned)"
    if r["verdict"] == reproduction.UNDECIDED and _unscored(r):
        return f"undecided (no scored run in {_unscored(r)})"
    if _noisier(r, alpha):
        return "undecided (B noisier)"
    if r["verdict"] == reproduction.UNDECIDED and (math.isfinite(n) or n == math.inf):
        return f"undecided (≈ {_seeds(n)} seeds/tree)"
    return r["verdict"]


def _margin_words(r) -> str:
    plain = f"±{number(r['margin'], DIGITS)}" if math.isfinite(r["margin"]) else ""
    return plain + (f" = {_k(r['margin_sd'])} seed sd of A" if plain and r["equivalence_test"] == "sd" else "")


def _stalls(r) -> str:
    """The Fisher test of the runs left out, in words ('' when no run was)."""
    if not math.isfinite(r["stall_p"]):
        return ""
    return (
        f"runs left out: A {int(r['left_out_a'])} of {int(r['left_out_a']) + int(r['n_a'])}, B "
        f"{int(r['left_out_b'])} of {int(r['left_out_b']) + int(r['n_b'])} (Fisher p {p_relation(r['stall_p'])}, "
        f"Holm {p_relation(r['stall_p_holm'])})"
    )


def _sentence(r, alpha: float, tests: int) -> str:
    """The plain-words line of one row."""
    head = f"{_where(r)} {r['act']}: {r['verdict']}"
    delta = f"Δ = {number(r['diff'], DIGITS, True)}" + (f" {_ci(r)}" if _ci(r) else "")
    margin = _margin_words(r)
    design = f"{int(r['n_a'])} vs {int(r['n_b'])} runs"
    if r["verdict"] == reproduction.IDENTICAL:
        return f"{head} — the same {r['n_a']} runs, metric values and predicted classes run by run"
    if r["verdict"] == reproduction.REPRODUCED:
        if r["tie"]:
            lattice = (
                f"; the metric counts test images, so Δ̂ moves in steps of {number(r['step'], 4)} and the test took "
                f"the tie as |Δ| ≤ {number(r['step'] / 2, 4)}"
                if r["step"] > 0
                else ""
            )
            evidence = (
                f"an exact tie — both trees' means are equal (Δ = 0); it rests on {design} and A's seed sd "
                f"{number(r['sd_a'], DIGITS)}, which sets the margin {margin}{lattice} (equivalence p "
                f"{p_relation(r['equivalence_p'])} < {alpha:g})"
            )
        else:
            evidence = f"{delta}, within {margin} (equivalence p {p_relation(r['equivalence_p'])} < {alpha:g})"
        return (
            f"{head} — {evidence}; at {design} this test says `reproduced` {_percent(r['rate_same'])} of the time "
            f"when nothing changed and {_percent(r['rate_off'])} when B is 1 sd of A off: "
            f"{_odds(r)}"
        )
    if failed_side(r):
        other = "B" if failed_side(r) == "A" else "A"
        called = (
            "a difference beyond the stall rate both trees could share"
            if r["verdict"] == reproduction.DIFFERS
            else "too few runs to tell it from a stall rate both trees share"
        )
        return (
            f"{head} — every run of {failed_side(r)} stalled, diverged or failed (named in the notes) where "
            f"{other}'s learned: not reproduced; {_stalls(r)}: {called}"
        )
    if r["verdict"] == reproduction.UNDECIDED and _unscored(r):
        return (
            f"{head} — no scored run in {_unscored(r)} (every one stalled, diverged or failed: named in the "
            "notes), nothing to compare"
        )
    welch = (
        f"Welch p {p_relation(r['welch_p_holm'])} after Holm over {tests} test{'s' if tests != 1 else ''}"
        if math.isfinite(r["welch_p_holm"])
        else "no Welch test (n < 2 or no spread)"
    )
    stalls = f"; {_stalls(r)}" if _stalls(r) else ""
    tost = (
        f"equivalence p {p_relation(r['equivalence_p'])} at {margin}"
        if math.isfinite(r["equivalence_p"])
        else "not tested for equivalence (n < 2 in A, or A without spread)"
    )
    supported = (
        f"; these runs show equivalence only within {_bound(r)}"
        if math.isfinite(r["bound"]) and not r["verdict"] == reproduction.DIFFERS
        else ""
    )
    if r["verdict"] == reproduction.DIFFERS:
        return f"{head} — {delta} ({welch}{stalls}; {tost})"
    if _noisier(r, alpha):
        return (
            f"{head} — B's runs are noisier than A's (sd {number(r['sd_b'], DIGITS)} vs {number(r['sd_a'], DIGITS)}, "
            f"one-sided F test p {p_relation(r['spread_p'])} < {alpha:g}): not a reproduction whatever the means "
            f"({delta}; {welch}{stalls})"
        )
    n = r["seeds_needed"]
    decide = (
        f"≈ {_seeds(n)} seeds per tree would call two trees that do not differ reproduced within "
        f"{_margin_words(r) or 'the margin'} 80 % of the time"
        if math.isfinite(n) or n == math.inf
        else "at least 2 completed runs per tree, with some spread, are needed to decide"
    )
    return f"{head} — {delta} ({welch}{stalls}; {tost}){supported}; {decide}"


def _odds(r) -> str:
    """The likelihood ratio of a `reproduced`, in words."""
    if not (r["rate_off"] > 0):
        return "strong evidence"
    ratio = r["rate_same"] / r["rate_off"]
    return f"evidence of about {ratio:.0f} : 1 for 'nothing changed' over '1 sd off'" + (
        " — weak: more seeds make it stronger" if ratio < 10 else ""
    )

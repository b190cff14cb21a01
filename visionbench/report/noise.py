"""The noise section of a recipe run as a noise design (`visionbench run recipe=R noise=init,order,aug seeds=N`):
where each activation's seed-to-seed variance comes from — init, data order, augmentation, the test set —
written to `<recipe>/noise.md` and `noise.csv` beside the recipe-level table (docs/report.md, "Where the
noise comes from"; the statistics: stats/noise.py).

    >>> table, notes = section(per_setting_summaries, recipe_runs, alpha=0.05, digits=2)
    >>> write(table, Path("runs/digits_vgg4_aug"), ("md", "csv"))

The runs of arm `a` sit in the setting folder `noise=a` (settings `{"noise": a}`). Per activation: each
component with its 95 % interval and share, the check of their sum against the all-vary arm, a one-sided
F test per arm of "less stable than the baseline", and the seeds a t-test needs with the variance of the
sources an ordinary run varies. The χ² intervals and F tests assume normal seeds: an arm with an outlying seed
(`stats.noise.outlier_runs`) is named in a note with what it makes unreliable. A design that cannot give a
variance (one seed per arm, no all-vary arm, no one-source arm) gets one sentence instead, never a number;
missing arms are named.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..results import evidence
from ..results.predictions import variant_of
from ..results.settings import parse_setting_label
from ..stats import noise as nz
from ..stats import power
from ..stats.metrics import parse
from ..stats.per_example import check_same_images
from . import per_example, render
from .summary import scored_values
from .tables import number, p_relation, p_text
from .verdict import _seeds_text

KEY = "noise"  # the config key of the design
PART_NAMES = {"init": "init", "order": "order", "aug": "aug", nz.TEST: "test set", "sum": "sum", nz.ALL: "all-vary"}
WORDS = {"init": "init", "order": "data order", "aug": "augmentation", nz.TEST: "the test set's finite sample"}
METHOD = 'docs/report.md, "Where the noise comes from"'


def arms_of(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The runs of each noise arm, by arm name ({} when no setting of `runs` sets `noise`)."""
    arms = {}
    for label, group in runs.groupby("setting", sort=True):
        setting = parse_setting_label(label)
        if KEY in setting:
            arms[str(setting[KEY])] = group
    return arms


def section(
    summaries: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    alpha: float = power.ALPHA,
    digits: int = 2,
    effect: float | None = None,
) -> tuple[render.Table | None, list[str]]:
    """(the noise table of one recipe's runs, or None; the notes for the recipe-level table).

    `summaries`: the per-setting `summarize` rows with their `setting` column; `runs`: the recipe's runs.
    ((None, []) for a factor sweep that is no noise design.)"""
    arms = arms_of(runs)
    if not arms:
        return None, []
    recipe, metric = str(runs["recipe"].iloc[0]), str(summaries["metric"].iloc[0])
    refusal = _refusal(runs, arms, recipe)
    if refusal:
        return None, [f"no noise section: {refusal}"]
    values = {
        act: {arm: scored_values(group[group["act"] == act], metric) for arm, group in arms.items()}
        for act in sorted(set(runs["act"]))
    }
    if all(len(v) < 2 for by_arm in values.values() for v in by_arm.values()):
        return None, [
            f"no noise section: every arm has one seed, and there is no variance without 2 seeds per "
            f"arm; run more, e.g. `visionbench run recipe={recipe} noise={','.join(nz.SOURCES)} seeds=5`"
        ]
    taus, notes, n_images = _test_set_parts(arms, metric, runs)
    base = _baseline(summaries, values)
    acts = sorted(values, key=lambda act: (act != base, act))
    parts = {act: nz.decompose(values[act], taus.get(act)) for act in acts}
    outliers = _outliers(values, 100 / n_images if n_images else 0.0)
    rows = [row for act in acts for row in _rows(act, parts, values, base, alpha, effect, outliers)]
    data = pd.DataFrame(rows)
    notes = _arm_notes(arms, values) + notes + _outlier_notes(acts, values, outliers, base, digits)
    unit = _unit(metric)
    table = render.Table(
        [
            "Act.",
            "part",
            "seeds",
            "arm s²",
            "component",
            "95% CI",
            "share",
            f"ratio vs {base or '—'}",
            "p (less stable)",
        ],
        [_cells(r, digits) for r in rows],
        title=f"{recipe} — where the noise comes from",
        intro=[_intro(summaries, unit, base)],
        outro=_outro(acts, parts, data, base, alpha, digits, unit, effect, outliers),
        notes=notes,
        data=data,
    )
    return table, [
        "noise section (where the seed-to-seed variance comes from: init, data order, augmentation, "
        "the test set): noise.md"
    ]


def write(table: render.Table | None, root: Path, formats) -> list[Path]:
    """Print the noise table and write `noise.md`, `noise.csv` (of `formats`; no LaTeX: too wide) into `root`."""
    if table is None:
        return []
    print(render.markdown(table))
    return render.write(table, Path(root) / "noise", [f for f in formats if f != "tex"])


# ---- the design and its inputs ------------------------------------------------------------------


def _refusal(runs: pd.DataFrame, arms: dict, recipe: str) -> str | None:
    """Why the design gives no section at all (None: it gives one)."""
    other = sorted({k for label in set(runs["setting"]) for k in parse_setting_label(label)} - {KEY})
    if other:
        return (
            f"the noise arms are crossed with other factors ({', '.join(other)}); run the noise design on its "
            f"own: `visionbench run recipe={recipe} noise={','.join(nz.SOURCES)} seeds=5`"
        )
    unknown = sorted(set(arms) - set(nz.ARMS))
    if unknown:
        return f"unknown noise arm(s) {', '.join(unknown)}; the arms are {', '.join(nz.ARMS)}"
    if nz.ALL not in arms:
        return f"the all-vary arm ({KEY}={nz.ALL}: the ordinary runs every component is measured against) has no runs"
    if not set(nz.SOURCES) & set(arms):
        return f"no one-source arm ({', '.join(f'{KEY}={s}' for s in nz.SOURCES)}) has runs"
    return None


def _arm_notes(arms: dict, values: dict) -> list[str]:
    """The missing arms, and each (act, arm) with fewer than 2 seeds: named, never a number."""
    out = []
    missing = [s for s in nz.SOURCES if s not in arms]
    if missing:
        names, its = ", ".join(f"{KEY}={s}" for s in missing), "its" if len(missing) == 1 else "their"
        out.append(
            f"no runs of the arm(s) {names}: {its} component is blank and the sum is not checked against the "
            "all-vary arm"
        )
    for act, by_arm in values.items():
        few = [f"{KEY}={arm} ({len(by_arm[arm])})" for arm in nz.ARMS if arm in arms and len(by_arm[arm]) < 2]
        if few:
            out.append(
                f"{act}: {', '.join(few)}: fewer than 2 completed seeds, no variance without 2 seeds; left blank"
            )
        same = [f"{KEY}={arm}" for arm in nz.SOURCES if len(by_arm.get(arm, ())) > 1 and len(set(by_arm[arm])) == 1]
        if same:
            out.append(
                f"{act}: {', '.join(same)}: every seed gave the same value, so nothing in these runs drew from "
                "that seed (e.g. aug in a recipe without augmentation, dropout or Mixup): its component is 0 by "
                "construction, not measured"
            )
    return out


def _baseline(summaries: pd.DataFrame, values: dict) -> str | None:
    """The all-vary arm's baseline (the summaries'), when it has runs in the design."""
    named = summaries["baseline"].dropna()
    base = str(named.iloc[0]) if len(named) else None
    return base if base in values else None


def _scores_predictions(runs: pd.DataFrame, metric: str) -> bool:
    """Whether `metric` is the top-1 of the set predictions.npz scores (the test set's, else val's)."""
    held_out, val = evidence.ACCURACY[variant_of(metric)]
    scored = held_out if held_out in runs and runs[held_out].notna().any() else val
    return metric == scored


def _test_set_parts(arms: dict, metric: str, runs: pd.DataFrame) -> tuple[dict, list[str], int | None]:
    """({act: {arm: test_set_part in points²}}, notes, N): from the arms' predictions.npz, when the metric is the
    top-1 they score and every run scored the same N images; {}, a note saying why not and None otherwise."""
    lacking = (
        "the components keep the test-set part, there is no test-set component, and under chaotic "
        "training the sources sum to more than the all-vary arm"
    )
    if not _scores_predictions(runs, metric):
        return {}, [f"no test-set component: {metric} is not the top-1 predictions.npz scores ({lacking})"], None
    loaded = {arm: per_example.load_arms(group, variant_of(metric))[0] for arm, group in arms.items()}
    every = [
        (f"{KEY}={arm}/{label}", arrays)
        for arm, by_act in loaded.items()
        for entries in by_act.values()
        for _, label, arrays in entries
    ]
    if not every:
        return {}, [f"no test-set component: no run has usable predictions.npz ({lacking})"], None
    try:
        check_same_images([a["target"] for _, a in every], [label for label, _ in every])
    except ValueError as exc:
        return {}, [f"no test-set component: {exc}"], None
    out, short = {}, []
    for arm, by_act in loaded.items():
        for act, entries in by_act.items():
            part = nz.test_set_part([e[2]["pred"] == e[2]["target"] for e in entries]) if len(entries) > 1 else {}
            if not math.isfinite(part.get("var", math.nan)):
                short.append(f"{act} {KEY}={arm}")
            out.setdefault(act, {})[arm] = {k: v * 1e4 for k, v in part.items()}  # fractions² → points²
    notes = (
        [
            f"no test-set component for {', '.join(short)}: fewer than 2 runs with usable predictions.npz "
            f"({lacking.replace('the components', 'their components')})"
        ]
        if short
        else []
    )
    return out, notes, int(every[0][1]["target"].size)


def _outliers(values: dict, resolution: float) -> dict[tuple[str, str], list]:
    """{(act, arm): the seeds `nz.outlier_runs` names} for the arms that have one; `resolution`: one image of the
    test set in points (0 when unknown)."""
    out = {}
    for act, by_arm in values.items():
        for arm in nz.ARMS:
            series = by_arm.get(arm)
            found = nz.outlier_runs(series.to_numpy(), resolution=resolution) if series is not None else []
            if found:
                out[(act, arm)] = [series.index[k] for k in found]
    return out


def _outlier_notes(acts, values, outliers, base, digits) -> list[str]:
    """One note per (act, arm) with an outlying seed: which, and what it makes unreliable."""
    notes = []
    for act in acts:
        for arm in nz.ARMS:
            seeds = outliers.get((act, arm))
            if not seeds:
                continue
            named = ", ".join(f"seed {seed} ({number(values[act][arm][seed], digits)})" for seed in seeds)
            what = f"χ² interval and its F test against {base} are" if base and act != base else "χ² interval is"
            notes.append(
                f"{act} {KEY}={arm}: {named} lies far from the arm's other seeds (outlier test at α = "
                f"{nz.OUTLIER_ALPHA:g}, {METHOD}): the seeds are not normal there, so this arm's {what} "
                "unreliable"
            )
    return notes


# ---- rows, cells and words -----------------------------------------------------------------------


def _rows(
    act: str, parts: dict, values: dict, base: str | None, alpha: float, effect: float | None, outliers: dict
) -> list[dict]:
    """The CSV rows of one act: its components, their sum (with the checks and the seeds needed), the all-vary
    arm; `parts`: every act's `decompose`, `outliers`: `_outliers`."""
    rows = []
    for part in (*nz.COMPONENTS, "sum", nz.ALL):
        row = {"act": act, "part": PART_NAMES[part], **parts[act][part]}
        if part in nz.ARMS:
            row["outliers"] = " ".join(str(seed) for seed in outliers.get((act, part), []))
        if part in nz.ARMS and base and act != base:
            row.update(nz.variance_ratio_test(values[act].get(part, []), values[base].get(part, [])))
        if part == "sum":
            row.update(_seeds(act, parts, values, base, alpha, effect))
        rows.append(row)
    return rows


def _seeds(act, parts, values, base, alpha, effect) -> dict:
    """Seeds per group for 80 % power at `alpha` (stats/power.py), the variance of one ordinary run taken as the
    sum of the components that vary in it (those above 0: the sources, and the test set) pooled with the
    baseline's, and Δ `effect` (else one such sd: d = 1); {} where a design is incomplete."""
    if not base or act == base:
        return {}
    sums = [parts[a]["sum"] for a in (act, base)]
    if not all(s["complete"] and s["varying"] > 0 for s in sums):
        return {}
    diff = float(values[act][nz.ALL].mean() - values[base][nz.ALL].mean())
    # a stated effect (--effect), else one seed sd of an ordinary run: never the observed difference
    d = effect / math.sqrt((sums[0]["varying"] + sums[1]["varying"]) / 2) if effect is not None else 1.0
    return {"all_diff": diff, "d_for_seeds": d, "seeds_needed": power.seeds_needed(d, alpha=alpha)}


def _cells(row: dict, digits: int) -> list[str]:
    """One display row; variances to `digits` + 1 decimals."""
    v = lambda x: number(x, digits + 1)  # noqa: E731
    low, share = row.get("low", math.nan), row.get("share", math.nan)
    return [
        row["act"],
        row["part"],
        str(row["n"]) if "n" in row else "",
        v(row.get("arm_var")),
        v(row["var"]),
        f"[{v(low)}, {v(row['high'])}]" if math.isfinite(low) else "",
        f"{share * 100:.0f} %" if math.isfinite(share) else "",
        number(row.get("ratio"), digits),
        p_text(row.get("p")),
    ]


def _unit(metric: str) -> str:
    """points² for an accuracy in points (top-1, top-5), else the metric's units squared."""
    accuracy = parse(metric) is None and any(k in metric for k in ("top1", "top5"))
    return "points²" if accuracy else "(the metric's units)²"


def _intro(summaries: pd.DataFrame, unit: str, base: str | None) -> str:
    base = base or "the baseline"
    return (
        f"Where the seed-to-seed variance comes from, per activation; metric {summaries['metric_text'].iloc[0]}. "
        f"Arms: in {KEY}={nz.ALL} every source follows the seed (the ordinary run); in {KEY}=init, order, aug only "
        "that source does (weight and activation init; the sampler's order; augmentation and dropout draws), the "
        f"others are held at one fixed seed. Variances in {unit}; every run scores the same test set. arm s²: the arm's "
        "sample variance over its seeds. component: what the source changes in the runs' true accuracy, the "
        "arm's s² less the arm's own test-set part (unbiased; below 0 when the source is lost in the test-set "
        "noise). test set: the part of the seed variance that comes only from which test images each run gets "
        "right, Σᵢ vᵢ/N² from predictions.npz (the all-vary arm's; it is in every arm's s²: subtracted from each "
        "source, counted once). 95% CI: the χ² interval of the arm's s² less its test-set part (taken as known), "
        "floored at 0 (χ² intervals assume normal seeds: an arm with an outlying seed is named in the notes); "
        "test set: a jackknife over the arm's runs; all-vary: the χ² interval its sum is checked against. "
        "share: of the components, a negative one counted as 0. sum: the components', checked against the "
        f"all-vary arm's s². ratio, p: the arm's s² over {base}'s, one-sided F test of \"less stable than "
        f'{base}". Method, assumptions and simulated coverage: {METHOD}.'
    )


def _outro(acts, parts, data, base, alpha, digits, unit, effect, outliers) -> list[str]:
    lines = []
    for act in acts:
        flagged = [PART_NAMES[arm] for arm in nz.ARMS if (act, arm) in outliers]
        lines.append(
            _where(act, parts[act], digits, unit)
            + (
                f" (an outlying seed in {', '.join(flagged)}: {'its' if len(flagged) == 1 else 'their'} interval"
                f"{'' if len(flagged) == 1 else 's'} unreliable, see the notes)"
                if flagged
                else ""
            )
        )
        if base and act != base:
            lines.append(_stability(act, data[data["act"] == act], base, alpha, digits))
            lines.append(
                _seeds_words(act, data[(data["act"] == act) & (data["part"] == "sum")].iloc[0], base, digits, effect)
            )
    return ["In plain words:\n" + "\n".join(f"- {line}" for line in lines if line)]


def _where(act: str, parts: dict, digits: int, unit: str) -> str:
    """Where one act's noise comes from, and whether the components add up to the all-vary arm's variance."""
    v = lambda x, sign=False: number(x, digits + 1, sign)  # noqa: E731
    total, all_vary = parts["sum"], parts[nz.ALL]
    shown = [k for k in nz.COMPONENTS if math.isfinite(parts[k]["var"])]
    if not shown or not math.isfinite(total["var"]):
        return f"{act}: no component has 2 seeds"
    split = ", ".join(
        f"{PART_NAMES[k]} {v(parts[k]['var'])}"
        + (f" ({parts[k]['share'] * 100:.0f} %)" if math.isfinite(parts[k]["share"]) else "")
        for k in shown
    )
    text = f"{act}: the components, in {unit}: {split}"
    if total["dominant"]:
        text += f"; {WORDS[total['dominant']]} dominates"
    lost = [PART_NAMES[k] for k in nz.SOURCES if parts[k]["var"] < 0]
    if lost:
        text += f" ({', '.join(lost)} below 0: lost in the test-set noise at these seeds)"
    if not total["complete"]:
        return text + "; the sum is not checked (an arm has fewer than 2 seeds or no runs)"
    text += (
        f". Their sum {v(total['var'])} lies {'inside' if total['inside'] else 'outside'} the all-vary arm's "
        f"95 % interval [{v(all_vary['low'])}, {v(all_vary['high'])}] (s² = {v(all_vary['var'])}); sum − s² = "
        f"{v(total['diff'], True)} [{v(total['diff_low'], True)}, {v(total['diff_high'], True)}]"
    )
    if total["consistent"]:
        return text + ", which holds 0: the components are consistent with the ordinary runs' variance"
    if total["diff"] > 0:
        return text + (
            ": the sources add up to more than the ordinary runs' variance — each alone moves the runs "
            "nearly as much as all together (chaotic training)"
            + (
                "; the test-set part, in every arm, is not subtracted here"
                if not math.isfinite(parts[nz.TEST]["var"])
                else ""
            )
        )
    return text + ": the sources add up to less than the ordinary runs' variance (they interact: not additive)"


def _stability(act: str, rows: pd.DataFrame, base: str, alpha: float, digits: int) -> str:
    """Whether `act` is less stable than the baseline, arm by arm (one-sided F tests at `alpha`)."""
    tested = rows[rows["p"].notna()] if "p" in rows else rows.iloc[:0]
    if not len(tested):
        return f"{act} vs {base}: no arm has 2 seeds of both and a varying {base}: stability not tested"
    said = {
        r["part"]: f"{r['part']} (ratio {number(r['ratio'], digits)}, one-sided F p {p_relation(r['p'])})"
        for _, r in tested.iterrows()
    }
    less = [said[part] for part, p in zip(tested["part"], tested["p"]) if p < alpha]
    rest = [said[part] for part, p in zip(tested["part"], tested["p"]) if not p < alpha]
    text = f"{act} vs {base}: " + (f"less stable in {', '.join(less)}" if less else "not shown less stable")
    if rest:
        text += f"{'; not shown in ' if less else ' in '}{', '.join(rest)}"
    return text + f" (at α = {alpha:g})"


def _seeds_words(act: str, row, base: str, digits: int, effect: float | None) -> str:
    """The seeds a t-test of the ordinary runs needs, with the components' variance."""
    if not math.isfinite(row.get("seeds_needed", math.nan)):
        return ""
    what = (
        f"Δ = {number(effect, digits)} (--effect)"
        if effect is not None
        else "a difference of one seed sd of an ordinary run (--effect D for another)"
    )
    return (
        f"{act} vs {base}: {_seeds_text(row['seeds_needed'])} for 80 % power to detect {what}, d = "
        f"{row['d_for_seeds']:.2f} with the variance of an ordinary run taken as the sum of the components that "
        f"vary in it (those above 0), pooled with {base}'s"
    )

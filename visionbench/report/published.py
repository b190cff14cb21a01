"""The seed papers' published result tables, as data, and the statistics that read them.

The numbers live in `published_tables.csv` beside this file, one row per (paper, table, model,
activation, metric), each citing its table: 001 Tables 1, 2, 7 (ConvNeXt-T ImageNet, GPT-2,
CIFAR-10) and 3-6 (the ConvNeXt-T ImageNet ablations: degree, init, learnability, clamp, as
variants of `imagenet_convnext_t`'s acts); 004 Tables 1, 2, 5 (CIFAR-10 VGG plain and augmented,
Tiny ImageNet); 000 App H (ResNet50 ImageNet); 003 Tables 4, 5, 6 (MNIST CNN, CIFAR-10 ResNet
error %, Fashion-MNIST ResNet). Means and stds are stored exactly as printed (so their rounding
is known); `n` is the number of seeds the paper states (empty when it states none); `recipe` is
empty where no recipe runs the row's protocol.

Two uses:

* `recompute(rows)`: the p-value of every row against its group's baseline, from the printed
  mean ± std (n) alone (scipy's `ttest_ind_from_stats`; Student with equal variances as 001
  states, Welch as an option), next to the p the paper printed, with a `check` that says
  whether the printed significance holds given the rounding of the printed numbers.
* `attach(summary, ...)`: our report rows get the paper's mean ± std (n), the difference, a
  two-tailed Welch test from summary statistics, and the 95 % prediction interval of ONE run of ours
  with whether the paper's number lies inside it (`visionbench report --published`).

    >>> rows = load(paper="001", table="Table 7")
    >>> recompute(rows)[["activation", "metric", "p_value", "printed_p", "check"]]
"""

from __future__ import annotations

import functools
import io
import itertools
import math
import re
from importlib import resources

import pandas as pd
from scipy import stats as sps

from ..stats.reproduction import prediction_interval
from ..stats.significance import STAR_LEVELS, stars

DATA_FILE = "published_tables.csv"
NUMERIC = ("mean", "std", "n")
# marks for rows whose p cannot be computed: a missing number is named, never a crash
MARK_BASELINE = "baseline"
MARK_NO_N = "n not stated"
MARK_N1 = "n=1"
MARK_NO_STD = "no std"
MARK_NAN = "diverged (NaN)"
MARK_ZERO_VAR = "zero variance"
MARK_NO_BASELINE = "no baseline row"
HOLDS, HOLDS_ROUNDED, FAILS = "holds", "holds within rounding", "DOES NOT HOLD"
TESTS = ("student", "welch")


@functools.lru_cache(maxsize=1)
def _raw_text() -> str:
    return resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")


def load(paper: str | None = None, table: str | None = None) -> pd.DataFrame:
    """The published rows, optionally of one paper (`"004"`) and one table (`"Table 2"`, `"App H"`).

    Returns:
        DataFrame with the CSV's columns; `mean`, `std` float (NaN when not printed), `n` float
        (NaN when the paper states no seed count), `is_baseline` bool, and `mean_text`,
        `std_text`: the numbers as printed (their decimals give the rounding).
    """
    rows = pd.read_csv(io.StringIO(_raw_text()), dtype=str, keep_default_na=False)
    rows["mean_text"], rows["std_text"] = rows["mean"], rows["std"]
    for col in NUMERIC:
        rows[col] = rows[col].map(lambda text: float(text) if text else math.nan)  # "NaN": a diverged run
    rows["is_baseline"] = rows["is_baseline"].str.lower().eq("true")
    if paper is not None:
        rows = rows[rows["paper"] == paper]
    if table is not None:
        rows = rows[rows["table"] == table]
    return rows.reset_index(drop=True)


def ref(row) -> str:
    """`004 Table 2`: how a row cites its source."""
    return f"{row['paper']} {row['table']}"


def _half_unit(text: str) -> float:
    """Half a unit of the last printed decimal (`"0.20"` -> 0.005), 0 for an empty or NaN text."""
    if not text or not re.fullmatch(r"-?\d+(\.\d+)?", text):
        return 0.0
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10**-decimals


def _untestable(m1, s1, n1, m2, s2, n2, own: str, other: str) -> str:
    """The mark when a row (m1, s1, n1) cannot be tested against (m2, s2, n2); "" when it can."""
    for m, s, n, who in ((m1, s1, n1, own), (m2, s2, n2, other)):
        prefix = f"{who} " if who else ""
        if not math.isfinite(m):
            return prefix + MARK_NAN
        if not math.isfinite(n):
            return prefix + MARK_NO_N
        if n < 2:
            return prefix + (MARK_N1 if n == 1 else f"n={int(n)}")
        if not math.isfinite(s):
            return prefix + MARK_NO_STD
    if s1 == 0 and s2 == 0:
        return MARK_ZERO_VAR
    return ""


def ttest_from_stats(
    m1: float,
    s1: float,
    n1: float,
    m2: float,
    s2: float,
    n2: float,
    test: str = "student",
    own: str = "",
    other: str = "baseline",
) -> tuple[float, str]:
    """Two-tailed p of mean m1 ± s1 (n1) against m2 ± s2 (n2), from summary statistics alone.

    `student` is 001's test (Tables 1, 2, 7: "two-tailed Student's t-test assuming equal
    variances"); `welch` drops the equal-variance assumption. The stds are taken as sample stds
    (ddof = 1): no paper says otherwise.

    Returns:
        (p, mark): p is NaN and mark names why (e.g. `n=1`, `baseline no std`) when untestable.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    mark = _untestable(m1, s1, n1, m2, s2, n2, own, other)
    if mark:
        return math.nan, mark
    res = sps.ttest_ind_from_stats(m1, s1, int(n1), m2, s2, int(n2), equal_var=(test == "student"))
    return float(res.pvalue), ""


def p_range(row, base, test: str = "student") -> tuple[float, float]:
    """The smallest and largest p consistent with the rounding of the printed means and stds
    (every printed number within half a unit of its last decimal): a printed p outside this
    range cannot come from the printed numbers."""
    dm = _half_unit(row["mean_text"]) + _half_unit(base["mean_text"])
    gap = abs(row["mean"] - base["mean"])
    ps = []
    for d, e1, e2 in itertools.product((max(gap - dm, 0.0), gap + dm), (-1, 1), (-1, 1)):
        s1 = max(row["std"] + e1 * _half_unit(row["std_text"]), 1e-12)
        s2 = max(base["std"] + e2 * _half_unit(base["std_text"]), 1e-12)
        ps.append(ttest_from_stats(d, s1, row["n"], 0.0, s2, base["n"], test)[0])
    return min(ps), max(ps)


def parse_printed_p(text: str) -> tuple[float, float, str]:
    """`0.0345 (*)` -> (0.0345, 0.0345, "*"); `< 0.0001 (****)` -> (0, 1e-4, "****"); "" -> NaNs."""
    match = re.fullmatch(r"\s*(<\s*)?([0-9.eE-]+)\s*(?:\((\**|ns)\))?\s*", text or "")
    if not match:
        return math.nan, math.nan, ""
    value = float(match.group(2))
    low = 0.0 if match.group(1) else value
    return low, value, match.group(3) or stars(value)


def _star_interval(mark: str) -> tuple[float, float]:
    """The p interval a star mark stands for: `**` -> [0.001, 0.01); `ns` -> [0.05, 1]."""
    levels = [0.0] + [lvl for lvl, _ in STAR_LEVELS] + [1.0]  # 0, 1e-4, 1e-3, 1e-2, 5e-2, 1
    names = [m for _, m in STAR_LEVELS] + ["ns"]  # ****, ***, **, *, ns
    i = names.index(mark)
    return levels[i], levels[i + 1]


def check(printed: str, p: float, p_low: float, p_high: float) -> str:
    """Does the printed significance hold? `holds` when the recomputed stars equal the printed
    ones; `holds within rounding` when some p consistent with the printed numbers' rounding has
    the printed stars; `DOES NOT HOLD` otherwise; "" when nothing is printed or p is NaN."""
    _, _, mark = parse_printed_p(printed)
    if not mark or not math.isfinite(p):
        return ""
    if stars(p) == mark:
        return HOLDS
    lo, hi = _star_interval(mark)
    return HOLDS_ROUNDED if p_low < hi and p_high >= lo else FAILS


def recompute(rows: pd.DataFrame, test: str = "student") -> pd.DataFrame:
    """Every row tested against the baseline row of its (paper, table, group, metric).

    Returns:
        `rows` plus `baseline` (the baseline's activation), `diff` (mean − baseline mean),
        `p_value`, `stars`, `mark` (why p is missing), `p_low`, `p_high` (the p range the
        printed rounding allows) and `check` (the printed p against the recomputed one).
    """
    out = rows.copy()
    for col in ("baseline", "mark", "stars", "check"):
        out[col] = ""
    for col in ("diff", "p_value", "p_low", "p_high"):
        out[col] = math.nan
    for _, group in out.groupby(["paper", "table", "group", "metric"], sort=False):
        bases = group[group["is_baseline"]]
        for i, row in group.iterrows():
            if bases.empty:
                out.at[i, "mark"] = MARK_NO_BASELINE
                continue
            base = bases.iloc[0]
            out.at[i, "baseline"] = base["activation"]
            out.at[i, "diff"] = round(row["mean"] - base["mean"], 6)  # printed numbers have <= 4 decimals
            if row["is_baseline"]:
                out.at[i, "mark"] = MARK_BASELINE
                continue
            p, mark = ttest_from_stats(row["mean"], row["std"], row["n"], base["mean"], base["std"], base["n"], test)
            out.at[i, "p_value"], out.at[i, "mark"], out.at[i, "stars"] = p, mark, stars(p)
            if math.isfinite(p):
                out.at[i, "p_low"], out.at[i, "p_high"] = p_range(row, base, test)
                out.at[i, "check"] = check(row["printed_p"], p, out.at[i, "p_low"], out.at[i, "p_high"])
    return out


# --- our runs against the paper: `visionbench report --published` ------------------------------

PUBLISHED_COLUMNS = [
    "published_mean",
    "published_std",
    "published_n",
    "published_diff",
    "published_p",
    "published_mark",
    "published_ref",
    "pi_low",
    "pi_high",
    "published_in_pi",
]
TEXT_COLUMNS = ("published_mark", "published_ref", "published_in_pi")


def _held_out(val_split) -> bool:
    """True when the runs held out part of the training split for selection (`data.val_split > 0`)."""
    return isinstance(val_split, (int, float)) and math.isfinite(val_split) and val_split > 0


def comparable_metrics(metric: str, val_split) -> tuple[list[str], str]:
    """The published metric names `metric` can be compared with, given the runs' `data.val_split`,
    and, when there are none, the note that says why.

    The published rows name the official split the way a run with `val_split: 0` does, where
    `val_*` is the official test/val set. With a held-out split (`val_split > 0`) `val_*` is the
    held-out part of the training images, not the paper's split: never compared. `test_*` is then
    the official split, read at every epoch: `test_top1_at_best_val` (the test set at the epoch of
    best held-out accuracy) matches rows stored under that name (003 Table 6), and `test_X`
    also matches the paper's `val_X` (`test_top1_final` ~ `val_top1_final`: the same split and epoch
    rule). Other metrics (train loss) keep their name.
    """
    if not _held_out(val_split):
        return [metric], ""
    if metric.startswith(("test_", "ema_test_")):
        return list(dict.fromkeys([metric, metric.replace("test_", "val_", 1)])), ""
    if metric.startswith(("val_", "ema_val_")):
        return [], (
            f"the published numbers are on the official test/val split, {metric} here on a held-out part "
            f"of the training images (data.val_split={val_split}): not compared (a test_* metric is, "
            "e.g. --metric test_top1_at_best_val)"
        )
    return [metric], ""


def _pick(hits: pd.DataFrame, metric: str) -> pd.Series:
    """The published row for one of our rows when several match (001 Tables 1 and 3-6 both print
    the recipe's Hermite): our exact metric first, then a row whose n is stated, then CSV order."""
    order = sorted(
        range(len(hits)), key=lambda i: (hits["metric"].iloc[i] != metric, not math.isfinite(hits["n"].iloc[i]), i)
    )
    return hits.iloc[order[0]]


def attach(
    table: pd.DataFrame, *, setting: str = "", setting_col: str | None = None, val_split: float | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """Add the paper's mean ± std (n) to each row of one of our tables that has a published
    counterpart (same recipe, act, setting and metric) and test ours against it.

    Args:
        table: rows with `recipe`, `act`, `metric`, `mean`, `std`, `n` (a `summarize` table, or
            the recipe-level table of a factor sweep, whose `column` is the setting: 004 Table 2
            prints per GN setting the best of the two inits, as that table does).
        setting: the setting label of every row (a factor setting's folder; "" outside sweeps),
            unless `setting_col` names a column holding it per row.
        val_split: the runs' `data.val_split`: with a held-out split (> 0) val_* metrics score
            that split, not the paper's, and are not compared; test_* metrics are
            (`comparable_metrics`).

    Returns:
        (table with `PUBLISHED_COLUMNS`, notes saying why rows of this recipe were not compared).
        `published_p` is a two-tailed Welch test from summary statistics (ours vs the paper's;
        the spreads of two labs need not be equal); NaN with `published_mark` when untestable.
        `pi_low`, `pi_high`: the 95 % prediction interval of one more run of ours, mean ± t(0.975, n − 1)·s·√(1 + 1/n)
        (stats/reproduction.py; NaN for n < 2); `published_in_pi`: `yes`/`no`, whether the paper's mean lies in it —
        the question for a paper that printed one run per cell ("" without an interval or a published number).
        Where several published rows match one of ours, `_pick` chooses.
    """
    out = table.copy()
    for col in PUBLISHED_COLUMNS:
        out[col] = "" if col in TEXT_COLUMNS else math.nan
    if out.empty:
        return out, []
    recipe, metric = str(out["recipe"].iloc[0]), str(out["metric"].iloc[0])
    rows = load()
    rows = rows[rows["recipe"] == recipe]
    if rows.empty:
        return out, []
    wanted, why_not = comparable_metrics(metric, val_split)
    if why_not:
        return out, [f"{recipe}: {why_not}"]
    same_metric = rows[rows["metric"].isin(wanted)]
    if same_metric.empty:
        refs = ", ".join(sorted({ref(r) for _, r in rows.iterrows()}))
        return out, [
            f"{recipe}: the published numbers ({refs}) are {', '.join(sorted(set(rows['metric'])))}; "
            f"this table scores {metric}: not compared"
        ]
    matched = 0
    for i, row in out.iterrows():
        where = row[setting_col] if setting_col else setting
        hit = same_metric[(same_metric["activation"] == row["act"]) & (same_metric["setting"] == where)]
        if hit.empty:
            continue
        pub = _pick(hit, metric)
        matched += 1
        p, mark = ttest_from_stats(
            float(row["mean"]),
            float(row["std"]),
            float(row["n"]),
            pub["mean"],
            pub["std"],
            pub["n"],
            "welch",
            own="",
            other="published",
        )
        out.at[i, "published_mean"], out.at[i, "published_std"], out.at[i, "published_n"] = (
            pub["mean"],
            pub["std"],
            pub["n"],
        )
        out.at[i, "published_diff"] = float(row["mean"]) - pub["mean"]
        out.at[i, "published_p"], out.at[i, "published_mark"], out.at[i, "published_ref"] = p, mark, ref(pub)
        low, high = prediction_interval(float(row["mean"]), float(row["std"]), int(row["n"]))
        out.at[i, "pi_low"], out.at[i, "pi_high"] = low, high
        if math.isfinite(low) and math.isfinite(pub["mean"]):
            out.at[i, "published_in_pi"] = "yes" if low <= pub["mean"] <= high else "no"
    notes = [_pi_note(out)] if matched else []
    if not matched:
        settings = sorted(set(same_metric["setting"]) - {""})
        if settings and not setting_col:
            notes.append(
                f"{recipe}: {ref(same_metric.iloc[0])} prints one number per {' / '.join(settings)} "
                "(the best over the other factors); compared in the recipe-level table"
            )
        else:
            notes.append(f"{recipe}: no act of this table has a published {metric} row")
    return out, notes


def _pi_note(table: pd.DataFrame) -> str:
    """How many published numbers lie inside our one-run 95 % prediction interval, and which rows have none."""
    compared = table[table["published_ref"] != ""]
    judged = compared[compared["published_in_pi"] != ""]
    text = (
        f"{int((judged['published_in_pi'] == 'yes').sum())} of {len(judged)} published numbers lie inside the "
        "one-run 95 % prediction interval, mean ± t(0.975, n − 1)·s·√(1 + 1/n) of our n runs: where one more run "
        "of ours would land (a number outside is unlikely to be one run of this protocol)"
    )
    lacking = compared[(compared["published_in_pi"] == "") & compared["published_mean"].notna()]
    if len(lacking):
        text += f"; no interval for {', '.join(dict.fromkeys(map(str, lacking['act'])))} (fewer than 2 runs)"
    return text


def departures(config: dict) -> list[str]:
    """Where a run's stored config departs from its packaged recipe (with the run's act, seed and factor
    setting): `epochs: these runs 2, the recipe 24`, one line per key; [] when it does not, or when its
    recipe is not a packaged one. The published numbers belong to the recipe's protocol."""
    from ..config import ConfigError, recipe_config, run_config
    from ..results.identity import diff_configs, shared_part

    try:
        packaged = run_config(
            recipe_config(str(config["recipe"])),
            str(config.get("act_label") or config["act"]),
            int(config.get("seed", 0)),
            config.get("setting") or {},
        )
    except (ConfigError, KeyError, TypeError, ValueError):
        return []
    ours = shared_part(config)
    return diff_configs(ours, _within(shared_part(packaged), ours), labels=("these runs", "the recipe"))


def _within(values: dict, keys: dict) -> dict:
    """`values` pruned to the keys `keys` has (a key a run did not store is not known to differ)."""
    return {
        k: _within(v, keys[k]) if isinstance(v, dict) and isinstance(keys[k], dict) else v
        for k, v in values.items()
        if k in keys
    }

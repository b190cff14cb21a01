"""What a recipe's paper reports: the metric a table scores, the settings it selects over, and
the sentence that says so.

Each recipe declares it in its `report:` block (004 Sec 5.3: EMA top-1 at the best epoch; 001
Sec 4.3: the value at a fixed, final epoch; 004 Table 6: best test accuracy over training). The
runs record that block in their summary.json; runs written before it existed fall back to the
packaged recipe of the same name, then to the default rule (`test_top1_at_best_val` with a
held-out val split, else `val_top1_best`).

    >>> metric, source = report_metric(runs_of_one_recipe)        # ("ema_val_top1_best", "recipe")
    >>> describe_metric("val_top1_best", val_split=0.0)
"""

from __future__ import annotations

import functools
import math

import pandas as pd

from ..results.layout import DEFAULT_METRIC, HELD_OUT_METRIC


@functools.cache
def packaged_report(recipe: str) -> dict:
    """The `report:` block of the packaged recipe `recipe` ({} when there is no such recipe)."""
    from omegaconf import OmegaConf

    from ..config import ConfigError, recipe_config, recipe_names

    if recipe not in recipe_names():
        return {}
    try:
        return OmegaConf.to_container(recipe_config(recipe).report)
    except ConfigError:
        return {}


def _recorded(runs: pd.DataFrame, column: str):
    """The most common recorded value of `column` (None when no run recorded one)."""
    if column not in runs:
        return None
    values = runs[column].dropna()
    return values.value_counts().index[0] if len(values) else None


def report_metric(runs: pd.DataFrame, available: list[str]) -> tuple[str, str]:
    """(metric, where it came from) for the runs of one recipe: the runs' recorded `report.metric`,
    else the packaged recipe's, else the default rule. `available` are the runs' metric names."""
    metric, source = _recorded(runs, "report_metric"), "the runs' report.metric"
    if metric is None:
        metric, source = (
            packaged_report(str(runs["recipe"].iloc[0])).get("metric"),
            "the packaged recipe's report.metric",
        )
    if metric is None:
        metric = HELD_OUT_METRIC if HELD_OUT_METRIC in available else DEFAULT_METRIC
        source = "the default (no report.metric)"
    return metric, source


def choose_metric(runs: pd.DataFrame, available: list[str], explicit: str | None = None) -> tuple[str | None, str]:
    """(metric, note) a table of one recipe's runs scores: the `explicit` one (None, with a note, when no run has it),
    else `report_metric`'s; a declared metric its runs lack falls back to the default rule, and the note says so.
    `available` are the runs' metric names."""
    if explicit is not None:
        return (explicit, "") if explicit in available else (None, f"no run has metric {explicit!r}")
    metric, source = report_metric(runs, available)
    if metric in available:
        return metric, ""
    fallback = HELD_OUT_METRIC if HELD_OUT_METRIC in available else DEFAULT_METRIC
    if fallback not in available:
        return None, f"{source} is {metric!r}, which no run has (available: {', '.join(available)}); pass --metric"
    return fallback, f"{source} is {metric!r}, which no run has; scored {fallback} instead"


def report_best_of(runs: pd.DataFrame) -> list[str]:
    """The factor keys the recipe-level table selects the best setting over (004 Table 2: model.lsuv)."""
    recorded = _recorded(runs, "report_best_of")
    if recorded is None:
        return list(packaged_report(str(runs["recipe"].iloc[0])).get("best_of") or [])
    return [k for k in recorded.split(",") if k]


_AGGREGATES = {
    "best": "best over training epochs",
    "final": "at the final epoch",
    "at_best_val": "at the epoch of best validation top-1",
}


def describe_metric(metric: str, val_split: float | None = None) -> str:
    """A phrase naming what `metric` measures, and on which split: for captions.

    With `val_split = 0` the "val" split is the official test/val set (the papers' protocol), so
    a best-over-epochs value is selected on the test set itself — said explicitly.
    """
    name = metric
    ema = name.startswith("ema_")
    name = name.removeprefix("ema_")
    split, _, rest = name.partition("_")
    if split not in ("val", "test") or not rest:
        return f"`{metric}`"
    quantity, aggregate = rest, ""
    for suffix, phrase in _AGGREGATES.items():
        if rest.endswith("_" + suffix):
            quantity, aggregate = rest[: -len(suffix) - 1], phrase
            break
    quantity = {"top1": "top-1 accuracy", "top5": "top-5 accuracy", "loss": "loss"}.get(quantity, quantity)
    weights = " of the EMA weights" if ema else ""
    known = val_split is not None and not math.isnan(val_split)
    if split == "test":
        where = "on the official test split"
    elif not known:
        where = "on the val split"
    elif val_split > 0:
        where = "on the held-out validation split"
    else:
        where = "on the official test/val split (no held-out split)"
    text = ", ".join(p for p in (f"`{metric}`: {quantity}{weights}", aggregate, where) if p)
    if aggregate == _AGGREGATES["best"] and split == "val" and known and val_split == 0:
        text += " — best-over-epochs on the test set, as the paper reports it: an optimistic selection"
    return text

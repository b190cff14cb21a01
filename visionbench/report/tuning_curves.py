"""The expected-maximum curves of a tuning design (report/tuning.py's section): per activation the expected best
validation score after n = 1..B trials — the unbiased estimator (Tang et al. 2020: the mean best of n distinct
trials among the B) — ± its bootstrap sd over trials, its 95 % band, and which activation leads where beyond that
noise (stats/expected_max_band.py); and the selection's optimism in words that are true.

    frame, scores = curves(trials)                    # the curve frame (+ boot_sd, band_low, band_high), trial scores
    rows = table_rows(frame, trials, acts, digits)     # the tuning table's rows
    notes = lead_notes(frame, scores, acts, base)      # one sentence per activation against the baseline
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import expected_max as em
from ..stats import expected_max_band as band

METHOD = "unbiased"


def curves(trials: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """(the curve per activation with the cumulative training time and the bootstrap columns, each activation's
    trial scores in trial order: paired across activations, trial i being one configuration)."""
    cost = "train_time_s" if trials["train_time_s"].notna().any() else None
    frame = em.expected_max_curve(trials, score="score", by="act", cost=cost, method=METHOD)
    ordered = trials.sort_values(["act", "trial"], kind="stable")
    scores = {act: g["score"].to_numpy(float) for act, g in ordered.groupby("act", sort=True)}
    draws = band.bootstrap(scores)
    parts = []
    for act, group in frame.groupby("act", sort=False):
        stats = band.summary(draws[act])
        parts.append(group.assign(**{k: v[: len(group)] for k, v in stats.items()}))
    out = pd.concat(parts, ignore_index=True) if parts else frame
    out.attrs.update(frame.attrs)
    return out, scores


def table_rows(frame: pd.DataFrame, trials: pd.DataFrame, acts: list[str], digits: int) -> list[list[str]]:
    """Per activation and n: the estimate ± its bootstrap sd, the 95 % band, the expected training time; the
    selected trial beside n = B."""
    rows = []
    for act in acts:
        mine = frame[frame["act"] == act].set_index("n")
        picked = trials[trials["act"] == act].dropna(subset=["score"])
        chosen = picked.loc[picked["score"].idxmax()] if len(picked) else None
        for n, r in mine.iterrows():
            cost = r.get("expected_cost", math.nan)
            rows.append(
                [
                    act if n == mine.index[0] else "",
                    str(int(n)),
                    f"{r['expected_max']:.{digits}f} ± {r['boot_sd']:.{digits}f}",
                    f"[{r['band_low']:.{digits}f}, {r['band_high']:.{digits}f}]",
                    "" if pd.isna(cost) else f"{cost:.1f}",
                    (f"trial {int(chosen['trial'])}: {chosen['setting']} ({chosen['score']:.{digits}f})")
                    if chosen is not None and n == mine.index[-1]
                    else "",
                ]
            )
    return rows


def header(metric: str) -> list[str]:
    return ["Act.", "n trials", f"expected best {metric} (± bootstrap sd)", "95% band", "training time (s)", "selected"]


def method_note(metric: str, budget: int) -> str:
    return (
        f"expected best {metric} after n of the {budget} trials per activation: the mean best of n distinct trials "
        "among them (the unbiased estimator of Tang et al. 2020; Dodge et al. 2019's draws with replacement are "
        f"biased low near n = {budget}), ± the estimate's bootstrap sd over trials ({band.RESAMPLES} resamples of the "
        "trials, fixed seed; the activations resampled together, trial i being one configuration for all), with its "
        "95 % percentile band — the uncertainty of the curve one search gives, not the spread of the best draw; "
        "training time: the expected cumulative training seconds of n trials. A diverged or failed trial counts in "
        "the budget and is never the best."
    )


def lead_notes(frame: pd.DataFrame, scores: dict[str, np.ndarray], acts: list[str], base: str) -> list[str]:
    """Per activation against `base`: where it leads beyond noise (the paired max-T permutation test over trials,
    stats/expected_max_band.py), where the two are not distinguishable, where the estimates are tied exactly."""
    notes = []
    higher = bool(frame.attrs.get("higher_is_better", True))
    for act in acts:
        if act == base or act not in scores or base not in scores:
            continue
        if len(scores[act]) != len(scores[base]):
            notes.append(f"{act} and {base} ran different numbers of trials: which leads is not tested")
            continue
        signs = band.lead_signs(scores[act], scores[base], higher_is_better=higher)
        notes.append(
            band.lead_sentence(signs, act, base)
            + " (a lead: the paired permutation test of the two curves over trials, simultaneous over n, at 5 %)"
        )
    return notes


def optimism_note(metric: str, per_procedure: int, test_metric: str, pairs: str, best_label: str) -> str:
    """The selection's optimism, said as it is: the selected validation score is a maximum; the fresh seeds' test
    score is not selected on; their validation score, on the same fixed split, still carries the split's part."""
    return (
        f"Optimism of the selection: each activation's selected configuration has the best {metric} of its "
        f"{per_procedure} trials, a maximum of noisy scores and so biased upward ({pairs}). Retrained with fresh seeds "
        f"the seed part of that luck is gone, but the validation split is the same fixed set of images the selection "
        f"was made on, so the fresh seeds' {metric} still carries the image-level part of it; their {test_metric}, on "
        f"images never selected on, carries none. The verdict rests on the fresh seeds' {test_metric} ({best_label})."
    )

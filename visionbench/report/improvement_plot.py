"""The interval plot of the probability of improvement (Agarwal et al. 2021, Fig. 4 style): one row
per activation, its P(X > baseline) per recipe (small marks) and aggregated over the recipes (the
bar: stratified-bootstrap CI; the dot: the estimate), a line at 0.5 (indistinguishable).

    >>> plot(improvement.table(blocks, "relu"), "relu", "results/improvement.png")
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure


def plot(frame: pd.DataFrame, baseline: str, out_path) -> Path | None:
    """Write the plot of `improvement.table(...)`'s frame; None when it has no aggregate row."""
    agg = frame[frame["block"] == "all"].sort_values("p_improve").reset_index(drop=True)
    if agg.empty:
        return None
    blocks = sorted(set(frame["block"]) - {"all"})
    markers = dict(zip(blocks, "osD^v<>ph*"))
    fig = Figure(figsize=(6.5, 1.0 + 0.45 * len(agg)))
    ax = fig.add_subplot(1, 1, 1)
    for i, r in agg.iterrows():
        if math.isfinite(r["ci_low"]):
            ax.hlines(i, r["ci_low"], r["ci_high"], color="tab:blue", lw=6, alpha=0.35)
        ax.plot(r["p_improve"], i, "o", color="tab:blue", ms=6)
        per = frame[(frame["act"] == r["act"]) & (frame["block"] != "all")]
        for _, b in per.iterrows():
            ax.plot(b["p_improve"], i + 0.22, markers.get(b["block"], "o"), color="gray", ms=4, mfc="none")
    for block, m in markers.items():
        ax.plot([], [], m, color="gray", ms=4, mfc="none", label=block)
    ax.axvline(0.5, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(len(agg)), [f"{a} ({n})" for a, n in zip(agg["act"], agg["n_blocks"])])
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.6, len(agg) - 0.4)
    ax.set_xlabel(f"P(X > {baseline})  (bar: 95 % stratified-bootstrap CI over recipes; gray: per recipe)")
    if blocks:
        ax.legend(fontsize=7, loc="lower right", frameon=False)
    ax.set_title(f"Probability of improvement over {baseline} (n recipes in brackets)", fontsize=9)
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=120, bbox_inches="tight")
    return out_path

"""Where `seeds=auto` stopped each activation, and why: the `stopped` column and notes of a table,
from the `sequential.json` the sweep wrote beside the runs (visionbench/sweep/rounds.py).

    >>> summary, notes = attach(summary, layout.read_sequential(recipe_dir))
"""

from __future__ import annotations

import pandas as pd

from ..stats import sequential


def stopped_cell(act: str, record: dict) -> str:
    """`better at 5 seeds`, `inconclusive at 10 seeds`, `baseline, 10 seeds`; "" for an act the record lacks."""
    if act == record.get("baseline"):
        return f"baseline, {record.get('baseline_seeds', 0)} seeds"
    entry = (record.get("acts") or {}).get(act)
    if not entry:
        return ""
    return f"{entry['decision']} at {entry['seeds']} seeds"


def notes(record: dict) -> list[str]:
    """The design in one line, and each activation's deciding look (p against that look's level)."""
    looks = ", ".join(map(str, record.get("looks", [])))
    levels = ", ".join(f"{a:.4f}" for a in record.get("nominal_alphas", []))
    margin = record.get("margin")
    out = [
        f"seeds=auto on `{record.get('metric')}`: looks at {looks} seeds per activation, tested at levels {levels} "
        f"(overall α = {record.get('alpha')}; {record.get('rule')})"
        + (f"; equivalence margin ±{margin:g} (TOST)" if margin else "")
        + ". The p-value column is the fixed-n test over the seeds that ran, not adjusted for stopping; "
        "the `stopped` column holds the sequential decision."
    ]
    for act, entry in (record.get("acts") or {}).items():
        step = (entry.get("history") or [{}])[-1]
        why = step.get("why") or (f"Δ {step['diff']:+.3g}, {sequential.evidence_text(step)}" if "p" in step else "")
        out.append(f"{act}: {entry['decision']} at {entry['seeds']} seeds" + (f" ({why})" if why else ""))
    return out


def attach(summary: pd.DataFrame, record: dict | None) -> tuple[pd.DataFrame, list[str]]:
    """`summary` with a `stopped` column and the notes, when the recipe ran with seeds=auto (else unchanged)."""
    if not record:
        return summary, []
    return summary.assign(stopped=[stopped_cell(a, record) for a in summary["act"]]), notes(record)

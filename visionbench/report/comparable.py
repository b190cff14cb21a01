"""Is a table one comparison? Its runs configured alike but for act and seed (else the table says NOT COMPARABLE and
tests nothing: sections.py), and each plugin module's runs from one version of its source (else NOT ONE PLUGIN).
The third condition, one environment, is environment.py's."""

from __future__ import annotations

from pathlib import Path

from ..results.identity import diff_configs, shared_part
from ..results.io import RunStateError
from ..results.layout import read_config


def mixed_plugins(runs) -> list[str]:
    """A line per plugin module whose runs in this table come from more than one version of its source."""
    if "plugins" not in runs:
        return []
    seen: dict[str, dict[str, list[str]]] = {}
    for _, row in runs.dropna(subset=["plugins"]).iterrows():
        for item in str(row["plugins"]).split(";"):
            module, _, digest = item.partition("@")
            seen.setdefault(module, {}).setdefault(digest, []).append(f"{row['act']} seed {row['seed']}")
    return [
        f"NOT ONE PLUGIN: the runs of plugin module {m} come from {len(v)} versions of its source (sha256 "
        + "; ".join(f"{d}: {', '.join(r)}" for d, r in v.items())
        + "); rerun them with one version"
        for m, v in seen.items()
        if len(v) > 1
    ]


def mixed_configs(runs, expected: set[str] = frozenset()) -> str:
    """'' when every run of the table was configured alike but for act and seed (and the `expected` keys: a tuning
    design's tuned keys in its equal-budget table); else what differs, and where."""
    hashes = runs.dropna(subset=["config_hash"]).groupby("config_hash")
    if hashes.ngroups < 2:
        return ""
    groups = []
    for _, group in hashes:
        try:
            config = read_config(Path(group["run_dir"].iloc[0])) or {}
        except RunStateError:
            config = {}
        groups.append((shared_part(config), sorted(set(group["act"]))))
    diffs = sorted({d.split(":")[0] for cfg, _ in groups[1:] for d in diff_configs(groups[0][0], cfg)})
    if expected and diffs and set(diffs) <= set(expected):
        return ""
    where = "; ".join(f"config {i + 1}: {', '.join(acts)}" for i, (_, acts) in enumerate(groups))
    return f"keys {', '.join(diffs) or '(unreadable configs)'} — {where}"

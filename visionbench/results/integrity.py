"""Whether a finished run's files are the ones it wrote, read against what its summary.json records of them.

    integrity.problem(run_dir, summary)     # None, or one line: what disagrees, and the fix (deleting the run to
                                            # retrain it); the report leaves such a run out

- **config.yaml** — the summary records the hash of the settings it was trained with (`config_hash`) and repeats
  the keys the hash leaves out (`REPEATED`: act, seed, `threads`, the config's last key): a config.yaml that
  cannot be read, is cut short, or holds settings of another hash or another of those keys is damaged (cut on a
  line boundary it still parses, lacking the keys written last: it then reads as *another configuration*, which it
  is not). A run without config.yaml is not judged; a summary's missing hash or key, not on that part.
- **predictions.npz** — the file of this very run (results/evidence.py: its meta names the run) whose accuracy or
  selected epoch is not the summary's: one of the two was changed after the run wrote them, and the files cannot
  say which (a metric made up in a re-sealed record, an edited file). Named as a disagreement, blaming neither.

Readers: the report's run table (report/collect.py) leaves such a run out of every table and verdict with a note,
`compare` likewise, `export` refuses to seal it into a record, and the sweep fails that run alone
(sweep/sweep.py), never the whole tree.
"""

from __future__ import annotations

from pathlib import Path

from . import evidence, layout, origins
from .identity import config_hash
from .io import RunStateError

# what a summary repeats of its config.yaml besides the settings' hash (which leaves these out): the run's act and
# seed, and `threads`, the config's last key (the sweep adds it last), so that a cut on the last line boundaries,
# which drops only keys outside the hash (act_label, setting, threads), still shows
REPEATED = ("act", "seed", "threads")


def config_damage(run_dir: Path, summary: dict) -> str | None:
    """Why the run's config.yaml is not the one its summary was written with (None: whole, absent, or not judged)."""
    config_file = layout.files(run_dir).config
    try:
        config = layout.read_config(run_dir)
    except RunStateError as e:  # unreadable, or cut short (no final newline, no act): the message names the file
        return str(e).replace(f"delete the run directory {run_dir} to restart this run", _fix(run_dir))
    if config is None:
        return None
    recorded = summary.get("config_hash")
    found = config_hash(config)
    if recorded and found != recorded:
        return (
            f"{config_file} is damaged: summary.json records this run's settings (config hash {recorded}), "
            f"config.yaml others (hash {found}: cut short or edited?); {_fix(run_dir)}"
        )
    # threads of a finished run only: a resumed run rewrites its config with this session's threads before its summary
    for key in REPEATED if summary.get("status") in layout.SCORED else REPEATED[:-1]:
        if summary.get(key) is not None and config.get(key) != summary.get(key):
            says = f"says {key} {config[key]!r}" if key in config else f"has no {key} (cut short?)"
            return f"{config_file} is damaged: it {says}, summary.json {summary[key]!r}; {_fix(run_dir)}"
    return None


def _fix(run_dir: Path) -> str:
    """Retraining the run: where it is the user's folder, deleting it; in a record or a store, in its source tree."""
    if origins.materialised(run_dir):
        return "retrain it in the results tree it was exported or collected from (delete its run directory there)"
    return f"delete the run directory {run_dir} to restart this run"


def disagreement(run_dir: Path, summary: dict) -> str | None:
    """The summary's metrics against this run's own predictions.npz (None: they agree, or there is nothing to
    hold them against: no file, a damaged one, another run's; results/evidence.py names those)."""
    found = evidence.judge(run_dir, summary, "raw")
    return found.why if found.kind == evidence.DISAGREE else None


def problem(run_dir: Path, summary: dict) -> str | None:
    """One line on what in a finished run's files disagrees with its summary (None: nothing found)."""
    if damage := config_damage(run_dir, summary):
        return damage
    if summary.get("status") == layout.COMPLETED and (why := disagreement(run_dir, summary)):
        return f"{why}: one of them was changed after the run wrote it; {_fix(run_dir)}"
    return None

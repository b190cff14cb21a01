"""What identifies a run's configuration on disk: the keys that decide its results (compared before a run
resumes), the part shared by the runs of one table and its hash (summary.json's `config_hash`), and the
upgrade of a config.yaml written by an older visionbench.

    diff_configs(fingerprint(upgrade(stored, defaults)), fingerprint(run))   # [] when `run` may resume
    config_hash(run)                                                         # same for every row of a table

`run` is a run's plain config, config.yaml's dict (visionbench/config `run_config`).
"""

from __future__ import annotations

import copy
import hashlib
import json

# keys that do not change what a run computes (trainer.portable: only its last bits): a resumed run may differ in
# these ("act_label" and "setting" only name what act_options and the factor keys already hold; "baseline",
# "estimate" and "threads" are keys of older versions)
NOT_FINGERPRINTED = (
    "seeds",
    "seeds_max",
    "seeds_margin",
    "parallel",
    "results_dir",
    "baseline",
    "report",
    "act_label",
    "setting",
    "factors",
    "estimate",
    "threads",
    "data.root",
    "data.num_workers",
    "data.download",
    "snapshot_epochs",
    "trainer.loggers",
    "trainer.portable",
    "trainer.mps",
    "trainer.kernels",
    "imports",
    "tune",
)  # imports: what counts is the run's `plugins` record
# tune: a tuning design's record (config/tune_space.py); what a trial computes is its setting's values, which are keys of
# their own, so a trial's run and an untuned run at the same values and seed are the same run
# trainer.kernels (the learnable activations' kernel backend) is out at every value, so no ADDED_AT_DEFAULT entry: its
# backends compute the same formulas and differ in float rounding only (tests/test_fast_path.py), like the CPU's
# kernels or trainer.portable; and VISIONBENCH_KERNELS wins over it, so the key alone cannot say what ran. What ran is
# the run's environment.kernels (backend and where it came from), which the report compares (MIXED ENVIRONMENTS).
# what differs between the rows of one table ("plugins": module, version and sha256 of the plugin owning the row's
# activation, visionbench/plugins.py: compared on resume; the report flags a table pooling two versions of one)
PER_RUN = ("act", "act_label", "act_options", "act_lr_mult", "seed", "plugins")
# the seed split's keys at their defaults: every source follows `seed`, as before the split existed
SPLIT_DEFAULTS = (("seed_init", None), ("seed_order", None), ("seed_aug", None), ("noise", "all"))
# keys added to the schema after runs were written without them, with the value that reproduces what
# those runs did where it is not the new default (the DeiT epoch was the only repeated-aug rule before)
LEGACY_VALUES = {"data.augment.repeated_aug_epoch": "deit"}
# keys added to a block at a default that keeps what runs did before (trainer.deterministic: on the CPU nothing
# changes), left out of the hash at that default, so that runs from before them keep their hashes
ADDED_AT_DEFAULT = (("trainer", "deterministic", True),)


def fingerprint(run: dict) -> dict:
    """The part of a run config that determines its results (compared before resuming)."""
    out = copy.deepcopy(run)
    augment = (out.get("data") or {}).get("augment") or {}
    ignored = list(NOT_FINGERPRINTED)
    if float(augment.get("repeated_aug", 1) or 1) <= 1:  # no repeats: the epoch rule changes nothing
        ignored.append("data.augment.repeated_aug_epoch")
    for key in ignored:
        parts = key.split(".")
        d = out
        for p in parts[:-1]:
            d = d.get(p, {})
        if isinstance(d, dict):
            d.pop(parts[-1], None)
    out.pop("defaults", None)
    return out


def upgrade(stored: dict, defaults: dict) -> dict:
    """A run's stored config.yaml with the keys that the schema (`defaults`: config.defaults()) gained since
    it was written: their legacy value (LEGACY_VALUES), else their default, which keeps what runs did before
    the key existed. A results directory from an older visionbench then resumes instead of failing on keys
    it never had. A block (a non-empty mapping of defaults) is filled key by key when the run has it; a free
    mapping (act_options, model.kwargs, ...: empty by default) is a value like any other."""
    out = copy.deepcopy(stored)

    def fill(into: dict, base: dict, prefix: str) -> None:
        for key, default in base.items():
            name = prefix + key
            if isinstance(default, dict) and default:
                if isinstance(into.get(key), dict):
                    fill(into[key], default, name + ".")
            elif key not in into and name not in ("defaults", "seed"):
                into[key] = LEGACY_VALUES.get(name, default)

    fill(out, defaults, "")
    return out


def shared_part(run: dict) -> dict:
    """The fingerprint without what may differ between the runs of one table (act and seed), and without the seed
    split's keys where they keep their defaults (train/seeds.py; hashes of runs from before the split unchanged)."""
    out = {k: v for k, v in fingerprint(run).items() if k not in PER_RUN and (k, v) not in SPLIT_DEFAULTS}
    for block, key, default in ADDED_AT_DEFAULT:
        if isinstance(out.get(block), dict) and out[block].get(key, default) == default:
            out[block] = {k: v for k, v in out[block].items() if k != key}
    return out


def config_hash(run: dict) -> str:
    """A short hash of `shared_part`: runs of one table should all have the same."""
    text = json.dumps(shared_part(run), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def diff_configs(a: dict, b: dict, prefix: str = "", labels: tuple[str, str] = ("stored", "now")) -> list[str]:
    """Human-readable differences between two nested dicts: `path: <labels[0]> a, <labels[1]> b`."""
    out = []
    for k in sorted(set(a) | set(b)):
        path = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_configs(va, vb, path + ".", labels)
        elif va != vb:
            out.append(f"{path}: {labels[0]} {va!r}, {labels[1]} {vb!r}")
    return out

"""The tuning design of `tune=`: a declared search space, B trials drawn from it by random search with a recorded
seed, the same B configurations for every activation (equal budget, paired draws), docs/tuning.md.

    space = parse_space("optim.lr:log[1e-4,1e-1],optim.weight_decay:log[1e-6,1e-3]")
    trial_settings(space, trials=16, seed=0)   # [{"tune.trial": 0, "optim.lr": 0.00316, ...}, ...]

Grammar, one item per tuned key, items separated by commas: `KEY:log[LO,HI]` (log-uniform, 0 < LO < HI),
`KEY:uniform[LO,HI]` (LO < HI), `KEY:[V1,V2,...]` (a grid: each trial picks one value, uniformly). A recipe may
give the space as a mapping {KEY: "log[LO,HI]" | [V1, ...]}. Drawn numbers are rounded to 3 significant digits
(an integer key's to the nearest integer), so a trial's folder label holds exactly the value its run used.

Each trial i is drawn from its own generator, numpy's PCG64 seeded with (seed, i): trial i is the same whatever B,
so a larger budget extends a search instead of redrawing it. With tune.repeats = R > 1, procedure j draws its own B
trials from (seed, i) for j = 0 (the R = 1 draw) and (seed, j, i) for j > 0, and its settings start with
`tune.repeat=j` (folder `tune.repeat=1,tune.trial=3,optim.lr=...`). Every trial is a factor setting
`{"tune.trial": i, KEY: value, ...}` (folder `tune.trial=3,optim.lr=0.00316,...`); the retrain of each
activation's best configuration is the setting `tune.trial=best` (its runs hold their activation's values), the
recipe's own values retrained alike `tune.trial=defaults`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .keys import fields, valid_keys
from .overrides import parse_value, split_top_level
from .rules import did_you_mean, is_int, is_number
from .schema import RunConfig

TRIAL = "tune.trial"  # the setting key of a trial (an index), of the retrain (BEST) and of the recipe's values
REPEAT = "tune.repeat"  # the setting key of a procedure's index j when tune.repeats > 1 (absent when 1)
# What a search may vary: the keys of how one activation is trained, which a run's identity lets differ within one
# activation's comparison. Everything else (the activation, the data, the architecture, the device, the report) makes a
# different comparison, or selects on the test set (data.val_split), and is refused.
# (an activation's own options, act_options.*, are not yet: a setting cannot hold a key of a free dict)
TUNABLE_PREFIXES = ("optim.", "sched.", "loss.", "ema.", "data.augment.")
TUNABLE_KEYS = ("batch_size", "epochs", "model.dropout", "model.drop_path", "trainer.gradient_clip_val")
BEST, DEFAULTS = "best", "defaults"
TRIAL_SEED = 10_000  # the seed every trial trains with: the retrain's seeds 0..S-1 are fresh (no trial used them)
KINDS = ("log", "uniform")
_ITEM = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:\s*(log|uniform)?\s*(\[.*\])\s*$")
# a recipe value whose comment cites its source in a paper's protocol: "paper 004 Table 6", "003 code lr()", "Sec 4"
_CITES = re.compile(r"#.*\b(paper|table|sec\.?|app\.?|code|eq\.?|fig\.?)\b", re.I)


_PAPER = re.compile(r"#\s*paper\s+\d+", re.I)  # a recipe file's first line naming the paper it reruns


class SpaceError(ValueError):
    """A search space that cannot be drawn from; the message names the key and what is accepted."""

    def __init__(self, message: str, key: str = "tune.space"):
        super().__init__(message)
        self.key = "tune.space"  # what the command line wrote (a recipe's space is the recipe's)
        self.tuned = key


@dataclass(frozen=True)
class Dim:
    """One tuned key: `kind` log | uniform (between lo and hi) or grid (one of `values`); `integer`: drawn numbers
    rounded to integers (the key's default is one)."""

    key: str
    kind: str
    lo: float | None = None
    hi: float | None = None
    values: tuple = ()
    integer: bool = False

    def describe(self) -> str:
        if self.kind == "grid":
            return f"{self.key}:[{','.join(map(str, self.values))}]"
        return f"{self.key}:{self.kind}[{self.lo:g},{self.hi:g}]"


def _items(space: Any) -> list[tuple[str, str | None, Any, str]]:
    """(key, kind or None for a grid, [values], the item as written) of each item of the text or mapping `space`."""
    if isinstance(space, Mapping):
        text = ",".join(
            f"{k}:{v}" if isinstance(v, str) else f"{k}:[{','.join(map(str, v))}]" for k, v in space.items()
        )
    elif isinstance(space, str):
        text = space
    else:
        raise SpaceError(f"tune.space must be KEY:log[LO,HI],KEY:[V1,V2],... or a mapping, got {space!r}")
    try:
        parts = [p for p in split_top_level(text) if p]
    except ValueError as e:
        raise SpaceError(f"tune.space: {e}") from None
    if not parts:
        raise SpaceError("tune.space names no key; e.g. tune=optim.lr:log[1e-4,1e-1]")
    out = []
    for part in parts:
        m = _ITEM.match(part)
        if not m:
            raise SpaceError(
                f"tune.space item {part!r}: expected KEY:log[LO,HI], KEY:uniform[LO,HI] or KEY:[V1,V2,...]"
            )
        key, kind, body = m.groups()
        values = parse_value(body)
        if not isinstance(values, list) or not values:
            raise SpaceError(f"tune.space item {part!r}: {body} is no list of values", key)
        out.append((key, kind, values, " ".join(part.split())))
    return out


def parse_space(space: Any, defaults: Mapping | None = None, fixed: tuple[str, ...] = ()) -> list[Dim]:
    """The dimensions of `space` (module docstring); SpaceError on a key the schema lacks (`defaults`: the schema's
    defaults, config.defaults()), a key a sweep cannot vary (`fixed`), a range on a key that is not numeric, bounds
    out of order or not positive on a log scale, a key named twice or a grid that repeats a value."""
    dims, seen = [], set()
    for key, kind, values, written in _items(space):
        if key not in valid_keys():
            raise SpaceError(f"tune.space: unknown key {key!r}{did_you_mean(key, valid_keys(), n=3)}", key)
        if key in fixed or key.startswith("tune."):
            raise SpaceError(f"tune.space: {key} is not a key a search can vary", key)
        if not is_tunable(key):
            raise SpaceError(
                f"tune.space: {key} is not tunable: a search varies how one activation is trained, and {key} "
                f"changes what is compared{_WHY.get(key, '')}; tunable: "
                f"{', '.join(p + '*' for p in TUNABLE_PREFIXES)}, {', '.join(TUNABLE_KEYS)}",
                key,
            )
        if key in seen:
            raise SpaceError(f"tune.space names {key} twice", key)
        seen.add(key)
        default = _lookup(defaults or {}, key)
        if kind is None:
            if len({repr(v) for v in values}) != len(values):
                raise SpaceError(f"tune.space: the grid of {key} repeats a value: {values}", key)
            dims.append(Dim(key, "grid", values=tuple(values)))
            continue
        if not _numeric(key, default):
            raise SpaceError(
                f"tune.space: {key} is not numeric (its default is {default!r}); a {kind}[LO,HI] range needs a "
                f"number, a grid {key}:[V1,V2] takes any values",
                key,
            )
        if len(values) != 2 or not all(is_number(v) and not isinstance(v, bool) for v in values):
            raise SpaceError(f"tune.space: {key}:{kind}[LO,HI] takes two numbers, got {values}", key)
        lo, hi = (float(v) for v in values)
        if not lo < hi:
            raise SpaceError(f"tune.space: {written} has its bounds out of order; write [LO,HI] with LO < HI", key)
        if kind == "log" and lo <= 0:
            raise SpaceError(
                f"tune.space: {written} needs 0 < LO on a log scale; use {key}:uniform[...] for a range that reaches 0",
                key,
            )
        dims.append(Dim(key, kind, lo, hi, integer=is_int(default) and not isinstance(default, bool)))
    return dims


_WHY = {
    "act": " (its runs would be labelled with the swept activation, not the one they trained)",
    "data.val_split": " (a split of 0 selects the best trial on the test set)",
    "data.root": " (the data a run reads)",
    "model.name": " (the architecture)",
}


def is_tunable(key: str) -> bool:
    """Whether a search may vary `key` (TUNABLE_PREFIXES, TUNABLE_KEYS)."""
    return key in TUNABLE_KEYS or key.startswith(TUNABLE_PREFIXES)


def _numeric(key: str, default: Any) -> bool:
    """Whether `key` holds a number: its default is one, or its field is declared float/int (optionally null)."""
    if isinstance(default, bool):
        return False
    if is_number(default):
        return True
    cls, hint, f = RunConfig, None, None
    for part in key.split("."):
        f, hint = fields(cls)[part]
        cls = hint
    kind = (f.metadata or {}).get("kind") if f is not None else None
    return any(t in (float, int) for t in (getattr(hint, "__args__", None) or (hint, kind)))


def _lookup(tree: Mapping, key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _round(x: float, integer: bool) -> float | int:
    return int(round(x)) if integer else float(f"{x:.3g}")


def draw(dims: list[Dim], trials: int, seed: int, repeat: int = 0) -> list[dict[str, Any]]:
    """The values of trials 0..trials-1 of procedure `repeat`: trial i from its own generator seeded with (seed, i),
    (seed, repeat, i) for repeat > 0."""
    out = []
    for i in range(trials):
        rng = np.random.default_rng([int(seed), i] if not repeat else [int(seed), int(repeat), i])
        values: dict[str, Any] = {}
        for d in dims:
            if d.kind == "grid":
                values[d.key] = d.values[int(rng.integers(len(d.values)))]
            elif d.kind == "log":
                values[d.key] = _round(math.exp(rng.uniform(math.log(d.lo), math.log(d.hi))), d.integer)
            else:
                values[d.key] = _round(rng.uniform(d.lo, d.hi), d.integer)
        out.append(values)
    return out


def trial_settings(dims: list[Dim], trials: int, seed: int, repeat: int | None = None) -> list[dict[str, Any]]:
    """Every trial as a factor setting: {"tune.trial": i, KEY: value, ...}, in trial order; with `repeat` j (a design
    of tune.repeats > 1) procedure j's trials, {"tune.repeat": j, "tune.trial": i, ...}."""
    head = {} if repeat is None else {REPEAT: int(repeat)}
    return [{**head, TRIAL: i, **values} for i, values in enumerate(draw(dims, trials, seed, repeat or 0))]


def protocol_keys(recipe: str, keys: list[str], recipes_dir: Path) -> list[tuple[str, str, str]]:
    """(key, recipe file, its comment) of each tuned key that the recipe (or a recipe it inherits from) sets with a
    comment citing a paper's protocol ("paper 004 Table 6", "003 code lr()"), when the recipe reruns a paper's
    experiment (its first line: "# Paper 003 ..."): tuning it departs from the published
    comparison the recipe reproduces."""
    path = recipes_dir / f"{recipe}.yaml"
    header = next((ln for ln in path.read_text().splitlines() if ln.startswith("#")), "") if path.is_file() else ""
    if not _PAPER.match(header):  # not a paper's experiment (the digits recipes: ours)
        return []
    found, name, seen = [], recipe, set()
    while name and name not in seen and (recipes_dir / f"{name}.yaml").is_file():
        seen.add(name)
        lines = (recipes_dir / f"{name}.yaml").read_text().splitlines()
        for key in keys:
            if key in {k for k, _, _ in found}:
                continue
            comment = _set_with_comment(lines, key)
            if comment and _CITES.search(comment):
                found.append((key, name, comment.lstrip("# ").strip()))
        parent = next((ln for ln in lines if ln.startswith("defaults:")), "")
        m = re.match(r"defaults:\s*\[\s*([\w-]+)", parent)
        name = m.group(1) if m and m.group(1) != "_base" else None
    return found


def _set_with_comment(lines: list[str], key: str) -> str | None:
    """The comment on the line that sets dotted `key` in a recipe's YAML lines (None when the file does not set it)."""
    parts, depth, indent = key.split("."), 0, -1
    for line in lines:
        body = line.split("#", 1)[0]
        if not body.strip():
            continue
        spaces = len(line) - len(line.lstrip())
        if depth and spaces <= indent:  # left the block before finding the key
            return None
        m = re.match(r"\s*([\w.-]+)\s*:", body)
        if m and m.group(1) == parts[depth] and (depth == 0 and spaces == 0 or spaces > indent):
            if depth == len(parts) - 1:
                return "#" + line.split("#", 1)[1] if "#" in line else ""
            depth, indent = depth + 1, spaces
    return None

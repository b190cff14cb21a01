"""The command line `visionbench compare A B`: did B reproduce A? (docs/reproducing.md, "Did my runs reproduce").

    visionbench compare results/digits_vgg4/record runs/digits_vgg4      # the committed record against your rerun
    visionbench compare old/results new/results --margin 0.5 --out compare.md
    visionbench compare A B --margin 1.5sd                                # a margin in seed standard deviations

A and B are results trees (a recipe dir, or a parent of several) or records (`visionbench export`), read
alike through results/sources.py `opened` (a store too). For each (recipe, setting, activation) run in both: A's and B's
mean ± sd (n), Δ = B − A with its 95 % interval (Welch's se, Hsu's df), its p Holm-adjusted over every test of the
compare, the equivalence p at ±margin (default: one seed sd of A, the reference), the smallest margin that test
accepts on these runs, and the verdict — identical, reproduced, differs, undecided (stats/reproduction.py has the
rule, stats/equivalence.py the tests); a `reproduced` says how often its design reads `reproduced` when nothing
changed and when B is 1 sd off, an undecided row how many seeds per tree would decide it. Runs that stalled (a
completed run at chance level, report/collect.py), diverged or failed are left out of the scoring, as they are in a
report, named in the notes, and their counts tested (Fisher) in the same Holm family. Then what differs between the
two: the configuration keys a rerun may change (any other difference is refused) and the recorded environment.
The table and its sentences: report/compare_table.py.

`main` returns the exit code, as `diff` does: 0 with the table printed (written to `--out FILE.md` and FILE.csv
only when asked) when no row's verdict is `differs`, 1 when one is (after the Holm adjustment; the table is
printed and written all the same: a script or CI job can gate on it), 2 after one line on stderr for bad input:
A or B missing or no results tree, a damaged, changed or malformed record, no recipe or activation (in one
setting) in common, configurations that differ in the data, the model or the recipe, an --out that cannot be
written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..results import layout
from ..results.identity import diff_configs, shared_part, upgrade
from ..results.io import RunStateError
from ..results.predictions import variant_of
from ..results.record import RecordError
from ..stats import power, reproduction
from . import protocol, render
from .arguments import add_alpha, parser
from .collect import RUN_SCALARS, metric_names, scan_runs
from .compare_table import table
from .environment import differences_between
from .errors import UsageError, fail
from .per_example import load_arms
from .summary import scored_values

# config keys a rerun may change and still ask "did it reproduce?": training hyperparameters and execution
# (a key matches itself and everything below it); any other difference (data.*: another test set; model.*
# but the LSUV init; recipe) makes it another experiment, and the comparison is refused
ALLOWED = (
    "optim",
    "sched",
    "epochs",
    "batch_size",
    "trainer",
    "seeds",
    "seed",
    "results_dir",
    "parallel",
    "threads",
    "act_options",
    "act_lr_mult",
    "model.lsuv",
    "model.lsuv_variant",
)


@dataclass(frozen=True)
class Side:
    """One of the two trees: its label (`A`, `B`), the path given, its runs and the notes on runs skipped
    (collect.py `scan_runs`)."""

    label: str
    path: str
    runs: pd.DataFrame
    notes: tuple[str, ...] = ()


def compare_parser() -> argparse.ArgumentParser:
    p = parser(
        "compare",
        "Did B reproduce A? Per (recipe, setting, activation) run in both: both means ± sd (n), "
        "Δ = B − A with its 95 % interval, an equivalence test in A's seed sd (or a TOST at --margin M), "
        "and a verdict: identical, reproduced, differs or undecided, a reproduced with how often its design "
        "says so when nothing changed and when B is 1 sd off.",
    )
    p.add_argument(
        "a",
        metavar="A",
        help="the reference: a results tree (a recipe dir or a parent of several) or a record (visionbench export)",
    )
    p.add_argument("b", metavar="B", help="the rerun, as A")
    for side in ("a", "b"):
        p.add_argument(
            f"--select-{side}",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"where {side.upper()} is a store (visionbench collect): the runs of it to compare, as `report STORE` "
            "selects them (recipe=, act=, config=HASH, source=PATH, env.device=NAME, cfg.KEY=VALUE; repeatable); "
            "one store on both sides with other --select-a and --select-b puts two environments side by side",
        )
    p.add_argument(
        "--metric",
        default=None,
        help="summary metric to compare (default: each recipe's report.metric, as visionbench report)",
    )
    p.add_argument(
        "--margin",
        type=margin_arg,
        default=None,
        metavar="M",
        help="the equivalence margin, the smallest shift that would count as not reproducing: M in the "
        "metric's units (0.5: a TOST, Welch's se with Hsu's df), or K seed standard deviations of A, the "
        f"reference (1.5sd: the exact test in A's sd); default {reproduction.DEFAULT_MARGIN_SD:g}sd",
    )
    add_alpha(p, "the Welch, Fisher and equivalence tests")
    p.add_argument(
        "--out",
        default=None,
        metavar="FILE.md",
        type=_markdown_path,
        help="also write the table to FILE.md and FILE.csv (default: print only, write nothing)",
    )
    return p


def margin_arg(text: str) -> tuple[float, bool]:
    """`--margin`: (value, in seed sd units?) from `0.5` or `1.5sd`."""
    sd = text.strip().lower().endswith("sd")
    try:
        value = float(text.strip()[:-2] if sd else text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"--margin takes a number > 0 in the metric's units (0.5) or in seed "
            f"standard deviations (1.5sd), got {text!r}"
        )
    return value, sd


def _markdown_path(text: str) -> str:
    if not text.endswith(".md"):
        raise argparse.ArgumentTypeError(f"--out takes a FILE.md (a FILE.csv is written beside it), got {text!r}")
    return text


def main(argv: list[str] | None = None) -> int:
    """`visionbench compare A B [...]`: print the comparison; with --out write FILE.md and FILE.csv. The exit code:
    0, 1 when a verdict is `differs`, 2 for bad input (module docstring)."""
    try:
        args = compare_parser().parse_args(argv)
        with contextlib.ExitStack() as stack:
            table = compare_trees(
                _side(stack, "A", args.a, args.select_a),
                _side(stack, "B", args.b, args.select_b),
                args.metric,
                args.margin,
                args.alpha,
            )
    except SystemExit as exc:  # argparse's --help and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    except UsageError as exc:
        return fail("compare", exc)
    print(render.markdown(table))
    written = _write(table, args.out) if args.out else 0
    return written or (1 if (table.data["verdict"] == reproduction.DIFFERS).any() else 0)


def _write(table: render.Table, out: str) -> int:
    """Write FILE.md and FILE.csv (creating FILE's folder); 2 after one line when they cannot be written."""
    stem = Path(out[: -len(".md")])
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
        written = render.write(table, stem, ("md", "csv"))
    except OSError as exc:
        return fail("compare", f"cannot write {out}: {exc.strerror or exc}")
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _side(stack: contextlib.ExitStack, label: str, path: str, select: list[str] = ()) -> Side:
    """The runs of tree, record or store `path` (a record or store is materialised for as long as `stack` is open;
    `select`: a store's selectors)."""
    if not Path(path).exists():
        raise UsageError(f"{label}: {path} does not exist")
    from ..results import sources, store

    if select and sources.kind(path) != sources.STORE:
        raise UsageError(f"{label}: --select-{label.lower()} selects the runs of a store; {path} is none")
    try:  # a tree, or a record's or store's runs (selected) materialised as one
        tree = stack.enter_context(sources.opened(path, store.parse_filters(list(select))))
    except RecordError as exc:
        raise UsageError(f"{label}: {exc}") from None
    runs, notes = scan_runs(tree)
    if not len(runs):
        kept = Path(path) / "record"  # a committed results folder: its runs are in its record
        hint = (
            (
                f"; it holds a record of runs ({kept}): `visionbench run` writes yours under runs/<recipe>, e.g. "
                f"visionbench compare runs/{Path(path).name} {kept}"
            )
            if (kept / "record.json").is_file()
            else ""
        )
        raise UsageError(
            f"{label}: {path} is no results tree: no finished run (<recipe>/<act>/seed_<k>/summary.json) "
            f"under it, and no record (record.json){hint}"
        )
    return Side(label, path, runs, tuple(f"{label}: {n}" for n in notes))


def compare_trees(
    a: Side, b: Side, metric: str | None = None, margin: tuple[float, bool] | None = None, alpha: float = power.ALPHA
) -> render.Table:
    """The comparison table of every (recipe, setting, act) of both trees; UsageError for what cannot be compared.
    `margin`: (value, in seed sd units?) as `margin_arg` parses it; None: `reproduction.DEFAULT_MARGIN_SD` sd."""
    recipes = sorted(set(a.runs["recipe"]) & set(b.runs["recipe"]))
    if not recipes:
        raise UsageError(f"A and B share no recipe: A has {_names(a.runs['recipe'])}; B has {_names(b.runs['recipe'])}")
    rows, configs, metrics, compared = [], [], {}, ([], [])  # compared: the runs of A, of B
    notes = [*a.notes, *b.notes, *_only_in_one(a.runs, b.runs)]
    for recipe in recipes:
        ra, rb = (s.runs[s.runs["recipe"] == recipe] for s in (a, b))
        metrics[recipe], note = _metric(ra, rb, recipe, metric)
        notes += [note] if note else []
        for setting in sorted(set(ra["setting"]) & set(rb["setting"])):
            where = "/".join(filter(None, [recipe, setting]))
            sa, sb = ra[ra["setting"] == setting], rb[rb["setting"] == setting]
            configs += [f"{where}: {d}" for d in config_differences(sa, sb, where)]
            for act in sorted(set(sa["act"]) & set(sb["act"])):
                row, row_notes = compare_act(sa[sa["act"] == act], sb[sb["act"] == act], metrics[recipe], margin, alpha)
                rows.append({"recipe": recipe, "setting": setting, "act": act, **row})
                compared[0].append(sa[sa["act"] == act])
                compared[1].append(sb[sb["act"] == act])
                notes += [f"{where} {act}: {n}" for n in row_notes]
    if not rows:
        raise UsageError(
            f"A and B share no activation of {', '.join(recipes)} in one setting: A has "
            f"{_acts_at(a.runs, recipes)}; B has {_acts_at(b.runs, recipes)}"
        )
    data = _verdicts(pd.DataFrame(rows), alpha)
    envs = differences_between(*(pd.concat(groups) for groups in compared))
    return table(data, a, b, metrics, configs, envs, list(dict.fromkeys(notes)), alpha)


def _names(values) -> str:
    return ", ".join(sorted(set(values)))


def _acts_at(runs: pd.DataFrame, recipes: list[str], most: int = 12) -> str:
    """The activations of `recipes` in `runs`, each with its setting (`relu at lr=0.1`; a recipe without factors:
    `relu`), the recipe named when there are several; `most` of them, then how many more."""
    runs = runs[runs["recipe"].isin(recipes)]
    pairs = sorted({(r, s, act) for r, s, act in runs[["recipe", "setting", "act"]].itertuples(index=False)})
    names = [
        (f"{r}/" if len(recipes) > 1 else "") + act + (f" at {s}" if s else " (no setting)") for r, s, act in pairs
    ]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _only_in_one(ra: pd.DataFrame, rb: pd.DataFrame) -> list[str]:
    """Notes naming the recipes, settings and acts only one tree has (not compared)."""
    keys = ["recipe", "setting", "act"]
    out = []
    for label, mine, other in (("A", ra, rb), ("B", rb, ra)):
        theirs = set(map(tuple, other[keys].to_numpy()))
        lone = sorted(
            {f"{'/'.join(filter(None, k[:2]))} {k[2]}" for k in map(tuple, mine[keys].to_numpy()) if k not in theirs}
        )
        if lone:
            out.append(f"only in {label} (not compared): {', '.join(lone)}")
    return out


def _metric(ra: pd.DataFrame, rb: pd.DataFrame, recipe: str, explicit: str | None) -> tuple[str, str]:
    """(the metric of one recipe: --metric, else A's report metric (protocol.choose_metric), which both trees
    must have; the note when it is not the declared one)."""
    metric, note = protocol.choose_metric(ra, metric_names(ra), explicit)
    if metric is None:
        raise UsageError(f"{recipe}: A: {note}")
    if metric not in metric_names(rb):
        raise UsageError(f"{recipe}: B has no run with metric {metric!r} (available: {', '.join(metric_names(rb))})")
    return metric, f"{recipe}: {note}" if note else ""


# ---- configurations -------------------------------------------------------------------------------


def allowed(key: str) -> bool:
    """Whether config key `key` (dotted) may differ between A and B (`ALLOWED`)."""
    return any(key == k or key.startswith(k + ".") for k in ALLOWED)


def config_differences(ra: pd.DataFrame, rb: pd.DataFrame, where: str) -> list[str]:
    """`key: A x, B y` for each config key in which A's runs of one (recipe, setting) differ from B's; UsageError
    when a key outside `ALLOWED` differs, or the runs of one tree differ among themselves."""
    ca, cb = _config(ra, "A", where), _config(rb, "B", where)
    if ca is None or cb is None:
        return []
    diffs = diff_configs(ca, cb, labels=("A", "B"))
    refused = [d for d in diffs if not allowed(d.split(":")[0])]
    if refused:
        raise UsageError(
            f"{where}: A and B are configured differently in {'; '.join(refused)} — another data set, "
            f"model or recipe is another experiment; only {', '.join(ALLOWED)} (and the keys below "
            "them) may differ"
        )
    return diffs


def _config(runs: pd.DataFrame, label: str, where: str) -> dict | None:
    """The shared part of the config of one tree's runs of one (recipe, setting) (None: no config.yaml);
    UsageError when they differ among themselves or one is unreadable."""
    from ..config import defaults

    found = {}
    for run_dir in runs.groupby("config_hash", dropna=False)["run_dir"].first():
        try:
            config = layout.read_config(Path(run_dir))
        except RunStateError as exc:
            raise UsageError(f"{label}: {exc}") from None
        if config is not None:
            shared = shared_part(upgrade(config, defaults()))
            found[json.dumps(shared, sort_keys=True, default=str)] = shared
    configs = list(found.values())
    if len(configs) > 1:
        diffs = "; ".join(diff_configs(configs[0], configs[1], labels=("one run", "another")))
        raise UsageError(
            f"{label}: the runs of {where} were configured differently ({diffs}); compare one configuration at a time"
        )
    return configs[0] if configs else None


# ---- one activation: A's runs against B's ---------------------------------------------------------


def compare_act(
    ga: pd.DataFrame, gb: pd.DataFrame, metric: str, margin: tuple[float, bool] | None, alpha: float = power.ALPHA
) -> tuple[dict, list[str]]:
    """(the numbers of one (recipe, setting, act), A's runs `ga` against B's `gb`, with `identical`; notes on its
    runs). The verdict needs the whole family (`_verdicts`: Holm over the activations compared)."""
    act = str(ga["act"].iloc[0])
    arms, notes = {}, []
    for label, group in (("A", ga), ("B", gb)):
        found, _, arm_notes, _ = load_arms(group, variant_of(metric))
        arms[label] = found.get(act, [])
        notes += [f"{label}: {n}" for n in arm_notes]
    # stalled runs (trained to chance level), like diverged and failed ones, have no accuracy to compare: left out,
    # and named
    va, vb = (scored_values(g, metric) for g in (ga, gb))
    notes += [n for label, group in (("A", ga), ("B", gb)) for n in _left_out(label, group)]
    value, in_sd = margin if margin is not None else (reproduction.DEFAULT_MARGIN_SD, True)
    res = reproduction.compare_runs(
        va,
        vb,
        None if in_sd else value,
        alpha=alpha,
        margin_sd=value if in_sd else reproduction.DEFAULT_MARGIN_SD,
        images=_images(arms["A"] + arms["B"]),
    )
    same = identical(ga, gb, arms["A"], arms["B"], _scored_metrics(ga, gb))
    lost = {f"left_out_{side}": int(g["status"].isin(LEFT_OUT).sum()) for side, g in (("a", ga), ("b", gb))}
    return {"metric": metric, **res, "identical": same, **lost}, notes


def _images(arms: list) -> int:
    """The number of test images every run with predictions scored (0 when none has them or they differ): what
    makes an accuracy a count, and Δ̂ a lattice."""
    sizes = {len(arrays["target"]) for _, _, arrays in arms if "target" in arrays}
    return sizes.pop() if len(sizes) == 1 else 0


LEFT_OUT = (layout.STALLED, layout.DIVERGED, layout.FAILED)  # runs compare does not score (collect.py's statuses)


def _left_out(label: str, group: pd.DataFrame) -> list[str]:
    """Notes naming the runs of one side of one act that are not scored: stalled (with the stall rule's reason),
    diverged, failed."""
    out = []
    for status in LEFT_OUT:
        runs = group[group["status"] == status].sort_values("seed")
        if not len(runs):
            continue
        seeds = ", ".join(str(s) for s in runs["seed"])
        text = f"{label}: {len(runs)} {status} run{'s' if len(runs) > 1 else ''} (seed {seeds}) left out of the scoring"
        if status == layout.STALLED:
            reason = next((str(r) for r in runs.get("stalled", pd.Series(dtype=object)).dropna()), "")
            text += (
                f" ({reason})" if reason else ""
            ) + ", as diverged runs are: a run that ended training at chance level has no accuracy to compare"
        out.append(text)
    return out


def _verdicts(data: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """`data` with `welch_p_holm`, `stall_p`, `stall_p_holm` (Holm over every test of the rows whose verdict rests
    on tests: every row but the identical ones) and `verdict`. A side whose runs all stalled, diverged or failed
    where the other's learned has no number to test: its row is never `reproduced`, and `differs` only when
    Fisher's test of the counts says so."""
    out = data.copy().reset_index(drop=True)
    tests, verdicts = reproduction.family_verdicts(out.to_dict("records"), list(out["identical"].astype(bool)), alpha)
    out = pd.concat([out, tests], axis=1)
    out["verdict"] = verdicts
    return out


def identical(ga: pd.DataFrame, gb: pd.DataFrame, arms_a: list, arms_b: list, metrics: list[str]) -> bool:
    """Whether A's and B's runs of one act are the same, run by run: the same seeds with the same status and
    `metrics` values (NaN equals NaN), and the same predicted classes where both runs have predictions."""
    x, y = (g.set_index("seed").sort_index() for g in (ga, gb))
    if x.empty or not x.index.equals(y.index) or not (x["status"] == y["status"]).all():
        return False
    if not np.array_equal(x[metrics].to_numpy(float), y[metrics].to_numpy(float), equal_nan=True):
        return False
    pred_a, pred_b = ({seed: arrays for seed, _, arrays in arms} for arms in (arms_a, arms_b))
    return all(
        np.array_equal(pred_a[s][k], pred_b[s][k]) for s in pred_a.keys() & pred_b.keys() for k in ("pred", "target")
    )


def _scored_metrics(ga: pd.DataFrame, gb: pd.DataFrame) -> list[str]:
    """The summary metrics both groups have (not the wall-clock scalars: time differs between identical runs)."""
    return sorted((set(metric_names(ga)) & set(metric_names(gb))) - set(RUN_SCALARS))

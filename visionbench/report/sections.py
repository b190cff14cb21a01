"""The report of one results tree (`visionbench report`; command.py reads its arguments): three lists of sections,
each read in order. A section knows when it applies and what it adds: columns of a table's rows, a note under the
table, a file.

    TABLE_SECTIONS    one table (a recipe, or one setting of a factor sweep): its notes in the order they stand
                      under it, its tests, verdicts and convergence, its files (table, per_example, figures)
    RECIPE_SECTIONS   a recipe over its tables: a tuning design's section, or a factor sweep's table in its
                      paper's layout (with a noise design's section)
    TREE_SECTIONS     the tree: the suite view across recipes, the pages of --html

`report_tree` refuses what it can before the first file is written (a format, the metric, the baseline, --html,
--strict-env), then reads the three lists; the report reads the results files only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from ..results.layout import first_link
from ..stats.metrics import NAMES_HELP, higher_is_better, parse
from . import (
    best_of,
    convergence,
    curves,
    figures,
    html,
    noise,
    per_example,
    protocol,
    published,
    render,
    stopping,
    suite,
    tables,
    tuning,
    verdict,
)
from .collect import has_curves, metric_names, scan_runs
from .comparable import mixed_configs, mixed_plugins
from .environment import environment_footer, mixed_environments, mixed_note, strict_env_refusal
from .errors import UsageError
from .summary import summarize, withhold_tests


@dataclass
class Tree:
    """The report of one results tree so far: its arguments (command.py), its runs and what it has written."""

    args: Any
    formats: list[str]
    runs: pd.DataFrame
    notes: list[str]  # the runs skipped while reading (`<recipe>/...: why`)
    plots: bool  # the figures are drawn
    plotted: bool  # the figures were asked for (--html says why there are none where matplotlib cannot draw)
    problem: str | None  # why matplotlib cannot draw here (--html)
    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # the recipes without a metric to report
    tasks: list = field(default_factory=list)  # the suite view's, one per table

    @property
    def several(self) -> bool:
        return self.runs["recipe_root"].nunique() > 1


@dataclass
class Recipe:
    """One recipe of the tree (its folder) and the metric its tables score."""

    tree: Tree
    folder: str
    runs: pd.DataFrame
    metric: str
    metric_note: str
    per_setting: list[pd.DataFrame] = field(default_factory=list)  # each table's rows, with its setting


@dataclass
class Table:
    """One table of a recipe: the recipe's, or one setting's of a factor sweep."""

    recipe: Recipe
    folder: str
    runs: pd.DataFrame
    summary: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    examples: render.Table | None = None  # the per-example section

    @property
    def args(self):
        return self.recipe.tree.args

    @property
    def metric(self) -> str:
        return self.recipe.metric

    @property
    def setting(self) -> str:
        return self.runs["setting"].iloc[0]

    @property
    def phase(self):
        return tuning.phase_of(self.setting)

    @property
    def printed(self) -> bool:
        """A tuning design's trial tables are written, not printed (B of them)."""
        return not isinstance(self.phase, int)

    @property
    def baseline(self) -> str | None:
        return tables.baseline_of(self.summary)


class Section(NamedTuple):
    """One section of a report: `add` adds it to a table, a recipe or the tree where `when` holds."""

    when: Callable[[Any], bool]
    add: Callable[[Any], None]


def always(_) -> bool:
    return True


def report_tree(args) -> list[Path]:
    """Report the run tree `args.results_dir`; the paths written."""
    tree = _opened(args)
    for recipe in _recipes(tree):
        for table in _tables(recipe):
            _add(TABLE_SECTIONS, table)
        _add(RECIPE_SECTIONS, recipe)
    if len(tree.skipped) == tree.runs["recipe_root"].nunique():
        raise UsageError("nothing to report: " + "; ".join(tree.skipped))
    _add(TREE_SECTIONS, tree)
    return tree.written


def _add(sections, part) -> None:
    for section in sections:
        if section.when(part):
            section.add(part)


# ------------------------------------------------------------------------------------- the tree, its recipes
def _opened(args) -> Tree:
    """The tree's runs, once every check that can refuse the report has passed (nothing written yet)."""
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(tables.FORMATS))
    if unknown:
        raise UsageError(f"unknown format {', '.join(unknown)}; choose from {', '.join(tables.FORMATS)}")
    try:
        runs, notes = scan_runs(args.results_dir)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not len(runs):
        kept = Path(args.results_dir) / "record"  # a committed results folder: its runs are in its record
        hint = f"; it holds a record of runs: visionbench report {kept}" if (kept / "record.json").is_file() else ""
        link = first_link(args.results_dir)
        if link is not None:  # the report follows no folder link: say that this is why it found nothing
            raise UsageError(
                f"{link} is a symbolic link (to {os.readlink(link)}); the report follows no linked folder — "
                "report the folder it points to, or replace the link with a real folder"
            )
        raise UsageError(
            f"no finished run (summary.json) under {args.results_dir!r}; "
            f"expected <recipe>/<act>/seed_<k>/summary.json{hint}"
        )
    available = metric_names(runs)
    if args.metric is not None and args.metric not in available:
        runs = _curve_metric(runs, args.metric, available)
    acts = sorted(set(runs["act"]))
    if args.baseline is not None and args.baseline not in acts:
        raise UsageError(f"unknown baseline {args.baseline!r}; acts: {', '.join(acts)}")
    plotted = has_curves(runs) if args.plots is None else args.plots
    # --html: refused before anything is written when it cannot be made; no figures where matplotlib cannot draw
    problem = html.check(formats, args.suite and runs["recipe_root"].nunique() > 1) if args.html else None
    if args.strict_env:  # every table checked before the first file is written
        _check_environments(runs)
    return Tree(args, formats, runs, notes, plots=plotted and not problem, plotted=plotted, problem=problem)


def _recipes(tree: Tree) -> Iterator[Recipe]:
    """Each recipe of the tree with the metric its tables score; a recipe without one is skipped, with a note."""
    args = tree.args
    for root, root_runs in tree.runs.groupby("recipe_root", sort=True):
        metric, metric_note = protocol.choose_metric(root_runs, metric_names(root_runs), args.metric)
        if metric is None and not (root_runs["status"] == "completed").any():
            # every run diverged or failed: the declared metric's rows read "NaN (n/n diverged)"
            metric, metric_note = args.metric or protocol.report_metric(root_runs, [])[0], ""
            root_runs = root_runs.assign(**{metric: float("nan")}) if metric not in root_runs else root_runs
        if metric is None:
            tree.skipped.append(f"{Path(root).name}: {metric_note}")
            print(f"note: {tree.skipped[-1]}; skipped", file=sys.stderr)
            continue
        yield Recipe(tree, root, root_runs, metric, metric_note)


def _tables(recipe: Recipe) -> Iterator[Table]:
    """The recipe's tables (one per setting), each with its rows: counts, mean ± std, the test against the baseline."""
    args, runs, metric = recipe.tree.args, recipe.runs, recipe.metric
    # an explicit baseline missing from this recipe marks it "no baseline" instead of failing the others
    summaries = summarize(
        runs, metric, args.baseline, args.test, require_baseline=False, higher_better=higher_is_better(metric)
    )
    summaries["metric_text"] = protocol.describe_metric(metric, _common(runs["val_split"]))
    for recipe_dir, summary in summaries.groupby("recipe_dir", sort=True):
        yield Table(recipe, recipe_dir, runs[runs["recipe_dir"] == recipe_dir], summary.reset_index(drop=True))


# ------------------------------------------------------------------------------------- a table's sections
def _mixed_environments(table: Table) -> None:
    """MIXED ENVIRONMENTS, the first note: any difference in the table may be the environment's."""
    lines = mixed_environments(table.runs)
    if lines:
        table.notes.append(mixed_note(lines))


def _metric_note(table: Table) -> None:
    table.notes.append(table.recipe.metric_note)


def _tuned_note(table: Table) -> None:
    """A tuning design's equal-budget table of its activations' best settings."""
    table.notes.append(tuning.best_table_note(table.runs))


def _not_comparable(table: Table) -> None:
    """NOT COMPARABLE, and no test, interval or verdict, when the runs were configured otherwise than by act and
    seed (and a tuning design's tuned keys, in its table of the best settings)."""
    expected = tuning.tuned_keys(table.recipe.runs) if table.phase == tuning.BEST else set()
    mixed = mixed_configs(table.runs, expected)
    if mixed:
        table.notes.append(
            f"NOT COMPARABLE: the runs differ in more than act and seed ({mixed}); rerun them with one "
            "configuration, or report each configuration from its own results_dir"
        )
        table.summary = withhold_tests(table.summary)


def _run_notes(table: Table) -> None:
    """The runs of this table skipped while reading, and what the table itself cannot show: the baseline, runs
    without a score, plugins of more than one version."""
    baseline, used = table.args.baseline, table.baseline
    table.notes += [n for n in table.recipe.tree.notes if n.startswith(Path(table.folder).name + "/")]
    declared = sorted(set(table.runs["baseline"].dropna()) - set(table.runs["act"]))
    if baseline is None and declared:
        table.notes.append(
            f"the summaries name baseline {', '.join(declared)}, which has no run here; "
            f"{'using ' + used if used else 'no fallback (relu, gelu) either'}"
        )
    if used is None:
        wanted = (
            f"baseline {baseline!r} has no run here"
            if baseline
            else "no baseline found (no summary names one, no relu or gelu run)"
        )
        table.notes.append(f"{wanted}: no differences or tests; pass --baseline ACT")
    for _, row in table.summary[table.summary["n_missing"] > 0].iterrows():
        table.notes.append(
            f"{row['act']}: {row['n_missing']} completed run(s) without a finite {row['metric']}; not scored"
        )
    table.notes += mixed_plugins(table.runs)


def _stopping(table: Table) -> None:
    """Where seeds=auto stopped each activation (sequential.json)."""
    table.summary, notes = stopping.attach(table.summary, _sequential_record(Path(table.folder), table.metric))
    table.notes += notes


def _verdicts(table: Table) -> None:
    args = table.args
    table.summary = verdict.annotate(
        table.summary,
        table.runs,
        alpha=args.alpha,
        margin=args.margin,
        effect=args.effect,
        holm_adjust=args.holm,
        higher_better=higher_is_better(table.metric),
        digits=args.digits,
    )


def _convergence(table: Table) -> None:
    """Did the runs learn, had the comparison converged."""
    args = table.args
    table.summary, notes = convergence.attach(table.summary, table.runs, table.metric, args.digits, alpha=args.alpha)
    table.notes += notes


def _published(table: Table) -> None:
    """--published: the paper's numbers beside each row that has them, and how these runs depart from its recipe."""
    table.summary, notes = published.attach(
        table.summary, setting=table.setting, val_split=_common(table.runs["val_split"])
    )
    table.notes += notes + _departures_note(table.summary, table.runs)


def _per_example(table: Table) -> None:
    """The per-example evidence from the runs' predictions.npz (its note, whether or not there is any)."""
    args = table.args
    table.examples, note = per_example.section(
        table.runs, table.metric, table.baseline, args.test, alpha=args.alpha, digits=args.digits, seed=args.seed
    )
    table.notes.append(note)


def _table_files(table: Table) -> None:
    """table.{md,csv,tex}, under the environment's footer."""
    args, tree = table.args, table.recipe.tree
    footer = environment_footer(table.runs)
    if table.printed:
        print(tables.markdown(table.summary, table.notes, args.digits, args.extras, footer))
    tree.written += tables.write(
        table.summary, table.folder, tree.formats, table.notes, args.digits, args.extras, footer
    )


def _per_example_files(table: Table) -> None:
    """per_example.md/csv beside table.md (no LaTeX: too wide for a float)."""
    tree = table.recipe.tree
    if table.printed:
        print(render.markdown(table.examples))
    tree.written += render.write(
        table.examples, Path(table.folder) / "per_example", [f for f in tree.formats if f != "tex"]
    )


def _figures(table: Table) -> None:
    table.recipe.tree.written += figures.make_plots(
        table.runs, curves.plot_metric(table.metric), table.folder, table.baseline, table.args.html
    )


def _hand_up(table: Table) -> None:
    """The table's rows to its recipe (a factor sweep's layout, a tuning section) and its scores to the suite view."""
    recipe = table.recipe
    recipe.per_setting.append(table.summary.assign(setting=table.setting))
    recipe.tree.tasks.append(
        suite.task(
            "/".join(filter(None, [Path(recipe.folder).name, table.setting])),
            table.runs,
            table.metric,
            higher_is_better(table.metric),
            table.baseline,
        )
    )


TABLE_SECTIONS = (
    Section(always, _mixed_environments),
    Section(lambda table: bool(table.recipe.metric_note), _metric_note),
    Section(lambda table: table.phase == tuning.BEST, _tuned_note),
    Section(always, _not_comparable),
    Section(always, _run_notes),
    Section(always, _stopping),
    Section(always, _verdicts),
    Section(always, _convergence),
    Section(lambda table: table.args.published, _published),
    Section(always, _per_example),
    Section(always, _table_files),
    Section(lambda table: table.examples is not None, _per_example_files),
    Section(lambda table: table.recipe.tree.plots, _figures),
    Section(always, _hand_up),
)


# ------------------------------------------------------------------------------------- a recipe's sections
def _tuning(recipe: Recipe) -> None:
    """A tuning design's section (B + 2 columns), instead of the by-setting layout."""
    tree = recipe.tree
    table, curve, _ = tuning.section(recipe.runs, recipe.per_setting, tree.args.digits)
    table.footer = environment_footer(recipe.runs)
    print(render.markdown(table))
    tree.written += tuning.write(table, recipe.runs, curve, Path(recipe.folder), tree.formats)


def _by_setting(recipe: Recipe) -> None:
    """The recipe-level table of a factor sweep (004 Table 2's layout) into the recipe's folder, with a noise
    design's section (noise.md): its pointer, or why there is none, is one of this table's notes."""
    args, runs, formats = recipe.tree.args, recipe.runs, recipe.tree.formats
    summaries = pd.concat(recipe.per_setting, ignore_index=True)
    keys = protocol.report_best_of(runs) if args.best_of is None else [k for k in args.best_of.split(",") if k]
    table = best_of.best_of_table(summaries, keys)
    notes = []
    if args.published:  # 004 Table 2 prints per GN setting the best of the inits: this table's layout
        table, notes = published.attach(table, setting_col="column", val_split=_common(runs["val_split"]))
    noise_table, noise_notes = noise.section(summaries, runs, alpha=args.alpha, digits=args.digits, effect=args.effect)
    shown = best_of.layout(
        table,
        str(runs["recipe"].iloc[0]),
        keys,
        summaries["metric_text"].iloc[0],
        sorted(set(runs["setting"]) - {""}),
        args.digits,
        list(notes) + noise_notes,
    )
    shown.footer = environment_footer(runs)
    print(render.markdown(shown))
    root = Path(recipe.folder)
    recipe.tree.written += render.write(shown, root / "table", formats) + noise.write(noise_table, root, formats)


RECIPE_SECTIONS = (
    Section(lambda recipe: tuning.is_tuning(recipe.runs), _tuning),
    Section(lambda recipe: not tuning.is_tuning(recipe.runs) and (recipe.runs["setting"] != "").any(), _by_setting),
)


# ------------------------------------------------------------------------------------- the tree's sections
def _suite(tree: Tree) -> None:
    """The suite view across recipes: ranks, the critical-difference diagram, P(improvement)."""
    args = tree.args
    text, files = suite.write(
        suite.scores_frame(tree.tasks),
        args.results_dir,
        alpha=args.alpha,
        digits=args.digits,
        posthoc_test=getattr(args, "posthoc", "wilcoxon"),
    )
    print(text)
    tree.written += files


def _pages(tree: Tree) -> None:
    """--html: report.html per recipe, index.html linking them."""
    recipes = dict(zip(tree.runs["recipe_root"], tree.runs["recipe"]))
    tree.written += html.write_pages(tree.written, tree.args.results_dir, recipes, tree.problem, tree.plotted)


TREE_SECTIONS = (
    Section(lambda tree: tree.args.suite and tree.several, _suite),  # one recipe: nothing to rank across
    Section(lambda tree: tree.args.html, _pages),
)


# ------------------------------------------------------------------------------------- what the sections read
def _curve_metric(runs: pd.DataFrame, metric: str, available: list[str]) -> pd.DataFrame:
    """`runs` with the curve metric `metric` (curves.py) computed from the metrics.csv files; UsageError when
    `metric` is neither a summary metric nor a curve metric, or its curves are missing."""
    try:
        if parse(metric) is None:
            raise UsageError(
                f"unknown metric {metric!r}; available: {', '.join(available)}; or a curve metric: {NAMES_HELP}"
            )
        return curves.add_metric(runs, metric)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _common(values: pd.Series):
    """The most common non-missing value (None when there is none)."""
    values = values.dropna()
    return values.value_counts().index[0] if len(values) else None


def _check_environments(runs) -> None:
    """--strict-env: a UsageError naming the first table whose runs come from more than one environment."""
    for _, table_runs in runs.groupby("recipe_dir", sort=True):
        lines = mixed_environments(table_runs)
        if lines:
            name = "/".join(filter(None, [table_runs["recipe"].iloc[0], table_runs["setting"].iloc[0]]))
            raise UsageError(strict_env_refusal(name, lines))


def _sequential_record(recipe_dir: Path, metric: str) -> dict | None:
    """The recipe's sequential.json when it decided on the table's metric (a note otherwise)."""
    from ..results.io import RunStateError
    from ..results.layout import read_sequential

    try:
        record = read_sequential(recipe_dir)
    except RunStateError as exc:
        print(f"note: {exc}", file=sys.stderr)
        return None
    if record and record.get("metric") != metric:
        print(
            f"note: {recipe_dir.name}: seeds=auto decided on {record.get('metric')}, this table shows {metric}; "
            "its stopping points are not shown",
            file=sys.stderr,
        )
        return None
    return record


def _departures_note(summary, runs) -> list[str]:
    """A note when rows were compared with published numbers but the runs departed from the packaged
    recipe (the paper's protocol): the keys, ours and the recipe's values."""
    from ..results.io import RunStateError
    from ..results.layout import read_config

    if not summary["published_mean"].notna().any():
        return []
    try:
        config = read_config(Path(runs["run_dir"].iloc[0])) or {}
    except RunStateError:
        return []
    lines = published.departures(config)
    if not lines:
        return []
    return [
        f"{config['recipe']}: these runs depart from the packaged recipe, whose protocol the published numbers "
        f"follow — {'; '.join(lines)}"
    ]

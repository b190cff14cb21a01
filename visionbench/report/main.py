"""The command line `visionbench report` (the top-level CLI delegates here).

    visionbench report runs/cifar10_vgg8                       # one recipe
    visionbench report runs --metric ema_val_top1_best --test welch --extras
    visionbench report runs/digits_vgg4 --margin 0.5 --holm      # verdicts with equivalence (verdict.py)
    visionbench report runs/digits_vgg4 --metric epochs_to_90    # convergence (curves.py)
    visionbench report runs          # several recipes: + ranks.md/csv, cd_diagram.png in runs/ (suite.py)

`main` returns an exit code instead of exiting: 0 on success, 2 on a usage or data error
(the message, printed to stderr, lists the valid choices). The report reads the results files
only; the decision-boundary figure (`visionbench plot boundaries`) trains networks and is
`visionbench.experiments.boundaries`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from ..stats import power
from ..stats.metrics import NAMES_HELP, higher_is_better, parse
from ..stats.significance import TESTS
from . import (
    best_of,
    convergence,
    curves,
    figures,
    html,
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
from .environment import environment_footer, mixed_environments, mixed_note, strict_env_refusal
from .errors import UsageError
from .summary import summarize, withhold_tests


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="visionbench report",
        description="Aggregate the runs under RESULTS_DIR into mean ± std tables with t-tests against a baseline.",
    )
    p.add_argument(
        "results_dir",
        metavar="RESULTS_DIR",
        type=_writable_tree,
        help="a recipe dir (runs/cifar10_vgg8) or a parent of several",
    )
    p.add_argument(
        "--metric",
        default=None,
        help="summary metric to compare (default: each recipe's report.metric, the value its paper "
        f"reports; else {protocol.HELD_OUT_METRIC} with a held-out val split, else "
        f"{protocol.DEFAULT_METRIC}); "
        # argparse %-formats help strings: NAMES_HELP's "X % of" would raise
        "or a curve metric: " + NAMES_HELP.replace("%", "%%"),
    )
    p.add_argument(
        "--baseline",
        default=None,
        help="act to test against (default: the summaries' baseline field, else relu, else gelu)",
    )
    p.add_argument(
        "--best-of",
        default=None,
        metavar="KEY[,KEY]",
        type=_factor_keys,
        help="factor keys the recipe-level table of a factor sweep selects the best setting over "
        "(default: the recipe's report.best_of, e.g. model.lsuv for 004 Table 2; '' for none)",
    )
    p.add_argument(
        "--test",
        choices=TESTS,
        default="student",
        help="student: equal variances, as the papers (default); welch; paired: over shared seeds",
    )
    p.add_argument(
        "--format",
        default=",".join(tables.FORMATS),
        help="table files to write in each recipe dir, comma-separated subset of md,csv,tex",
    )
    p.add_argument(
        "--extras",
        action="store_true",
        help="add Holm-adjusted p, Cohen's d, the t interval of Δ and P(> baseline) to md/tex (always in the CSV)",
    )
    p.add_argument(
        "--plots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write curves and activation-shape PNGs (default: on when metrics.csv files exist)",
    )
    p.add_argument(
        "--digits",
        type=_integer("--digits", 0, 15),
        default=2,
        help="decimals of mean, std and differences (default 2)",
    )
    p.add_argument(
        "--seed",
        type=_integer("--seed", 0),
        default=0,
        help="seed of the sampled permutation tests (per-example churn beyond 10,000 relabelings; default 0)",
    )
    p.add_argument(
        "--published",
        action="store_true",
        help="add the paper's mean ± std (n) of each row that has a published counterpart (same recipe, "
        "act, setting, metric), ours - paper, and a Welch p (`visionbench papers` lists them)",
    )
    p.add_argument(
        "--margin",
        type=positive_arg("--margin"),
        default=None,
        metavar="M",
        help="equivalence margin in the metric's units: adds the TOST p (tost_p) against ±M and the "
        "verdict 'equivalent'",
    )
    p.add_argument(
        "--effect",
        type=positive_arg("--effect"),
        default=None,
        metavar="D",
        help="difference of means (metric units) seeds_needed is solved for (default: the observed one)",
    )
    p.add_argument(
        "--alpha",
        type=level_arg("--alpha"),
        default=power.ALPHA,
        help=f"significance level of the verdicts and of mde / seeds_needed (default {power.ALPHA:g})",
    )
    p.add_argument(
        "--holm",
        action="store_true",
        help="decide the verdicts on the Holm-adjusted p-values (p_holm, tost_p_holm) over the recipe's acts",
    )
    p.add_argument(
        "--suite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with several recipes: write the suite view (ranks.csv, ranks.md, cd_diagram.png: mean "
        "ranks, Friedman test, Nemenyi CD, P(X > baseline)) into RESULTS_DIR (default on)",
    )
    p.add_argument(
        "--html",
        action="store_true",
        help="also write report.html in each recipe folder (tables, verdicts, sections, figures: one "
        "self-contained page, works offline) and index.html at RESULTS_DIR linking them (html.py)",
    )
    p.add_argument(
        "--strict-env",
        action="store_true",
        help="refuse to test across runs from different environments (package versions, CPU kernels, "
        "threads, data digest, ...: a table's MIXED ENVIRONMENTS note): exit 2, nothing written",
    )
    return p


def _number(flag: str, ok, wanted: str):
    """An argparse type: a float for which `ok` holds, else one line naming the flag and what it takes."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{flag} takes {wanted}, got {text!r}")
        return value

    return parse


def positive_arg(flag: str):
    return _number(flag, lambda v: 0 < v < float("inf"), "a positive number in the metric's units")


def level_arg(flag: str):
    return _number(flag, lambda v: 0 < v < 1, "a number in (0, 1)")


def _integer(flag: str, lo: int, hi: int | None = None):
    """An argparse type: an integer in [lo, hi], else one line naming the flag and what it takes."""
    wanted = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{flag} takes {wanted}, got {text!r}")
        return value

    return parse


def _factor_keys(text: str) -> str:
    """--best-of: comma-separated config keys a factor sweep can vary ('' for none); an unknown one is
    refused (it would be ignored: no setting has it)."""
    from ..config.rules import did_you_mean
    from ..config.validate import NOT_FACTORS, is_free, valid_keys

    for key in filter(None, (k.strip() for k in text.split(","))):
        if key not in valid_keys() or key in NOT_FACTORS or is_free(key):
            raise argparse.ArgumentTypeError(
                f"--best-of {key!r} is not a config key a sweep varies{did_you_mean(key, valid_keys(), n=3)}; give "
                "the factor keys to select the best setting over, e.g. --best-of model.lsuv"
            )
    return text


def _writable_tree(text: str) -> str:
    """RESULTS_DIR, when it exists, must be writable where the report writes (tables, plots, the suite
    view: every folder above the runs); a missing one is refused later, in the report's own words."""
    from ..results.layout import first_unwritable

    found = first_unwritable(text, runs=False) if Path(text).is_dir() else None
    if found:
        where, why = found
        raise argparse.ArgumentTypeError(
            f"{where} is not writable ({why}); the report writes its tables and plots "
            f"there: make it writable (chmod -R u+w {where}) or copy the results to a "
            "writable directory and report that"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    """`visionbench report RESULTS_DIR [...]`: print the Markdown tables, write table.{md,csv,tex} and plots.
    RESULTS_DIR may be a record (`visionbench export`): its runs are read from it and the files are written into
    the folder that holds it, at their places in the tree."""
    from ..results import sources, store
    from ..results.record import RecordError
    from ..results.safe_paths import UnsafePath

    try:
        argv, selection = store.take_filters(sys.argv[1:] if argv is None else list(argv))  # a store's recipe=, act=
        args = report_parser().parse_args(argv)
        if sources.kind(args.results_dir) == sources.TREE and not selection:
            written = _report(args)
        else:  # a record's or a store's runs (selected), as a tree; the files into the record's folder or _report/
            with sources.opened(args.results_dir, selection) as tree:
                written = _copy_back(
                    _report(argparse.Namespace(**{**vars(args), "results_dir": str(tree)})),
                    tree,
                    sources.report_folder(args.results_dir),
                )
    except SystemExit as exc:  # argparse's --help and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    except (UsageError, RecordError, UnsafePath) as exc:
        print(f"visionbench report: error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _copy_back(written: list[Path], tree: Path, into: Path) -> list[Path]:
    """The report's files of a materialised record, copied to `into` at their places below the tree's root. Every
    place is checked before the first is written (UnsafePath: a folder on the way is a symlink out of `into`), and
    each is written atomically (a symlink planted at a file's name is replaced, never written through)."""
    from ..results.io import atomic_write_bytes
    from ..results.safe_paths import component, inside

    places = []
    for path in map(Path, written):
        relative = path.relative_to(tree)
        folder = (
            inside(into, relative.parent.as_posix(), "the folder of a report file")
            if relative.parent != Path(".")
            else Path(into)
        )
        places.append((path, folder / component(relative.name, "a report file")))
    return [atomic_write_bytes(target, path.read_bytes()) for path, target in places]


def _report(args) -> list[Path]:
    """Report the run tree `args.results_dir`; the paths written."""
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
    want_plots = has_curves(runs) if args.plots is None else args.plots
    # --html: refused before anything is written when it cannot be made; no figures where matplotlib cannot draw
    problem = html.check(formats, args.suite and runs["recipe_root"].nunique() > 1) if args.html else None
    plotted, want_plots = want_plots, want_plots and not problem
    if args.strict_env:  # every table checked before the first file is written
        _check_environments(runs)

    written, skipped, tasks = [], [], []
    for root, root_runs in runs.groupby("recipe_root", sort=True):
        metric, metric_note = protocol.choose_metric(root_runs, metric_names(root_runs), args.metric)
        if metric is None and not (root_runs["status"] == "completed").any():
            # every run diverged or failed: the declared metric's rows read "NaN (n/n diverged)"
            metric, metric_note = args.metric or protocol.report_metric(root_runs, [])[0], ""
            root_runs = root_runs.assign(**{metric: float("nan")}) if metric not in root_runs else root_runs
        if metric is None:
            skipped.append(f"{Path(root).name}: {metric_note}")
            print(f"note: {skipped[-1]}; skipped", file=sys.stderr)
            continue
        # an explicit baseline missing from this recipe marks it "no baseline" instead of failing the others
        summaries = summarize(
            root_runs, metric, args.baseline, args.test, require_baseline=False, higher_better=higher_is_better(metric)
        )
        summaries["metric_text"] = protocol.describe_metric(metric, _common(root_runs["val_split"]))
        per_setting = []
        for recipe_dir, summary in summaries.groupby("recipe_dir", sort=True):
            summary = summary.reset_index(drop=True)
            recipe_runs = root_runs[root_runs["recipe_dir"] == recipe_dir]
            setting = recipe_runs["setting"].iloc[0]
            phase = tuning.phase_of(setting)
            expected = tuning.tuned_keys(root_runs) if phase == tuning.BEST else set()
            recipe_notes = _recipe_notes(summary, recipe_runs, notes, Path(recipe_dir), args.baseline, expected)
            if phase == tuning.BEST:
                recipe_notes.insert(0, tuning.best_table_note(recipe_runs))
            if _mixed_configs(
                recipe_runs, expected
            ):  # NOT COMPARABLE: no test, interval or verdict across configurations
                summary = withhold_tests(summary)
            if metric_note:
                recipe_notes.insert(0, metric_note)
            mixed_env = mixed_environments(recipe_runs)
            if mixed_env:  # first: any difference in the table may be the environment's
                recipe_notes.insert(0, mixed_note(mixed_env))
            footer = environment_footer(recipe_runs)
            summary, stop_notes = stopping.attach(summary, _sequential_record(Path(recipe_dir), metric))
            recipe_notes += stop_notes
            summary = verdict.annotate(
                summary,
                recipe_runs,
                alpha=args.alpha,
                margin=args.margin,
                effect=args.effect,
                holm_adjust=args.holm,
                higher_better=higher_is_better(metric),
                digits=args.digits,
            )
            summary, learned_notes = convergence.attach(summary, recipe_runs, metric, args.digits, alpha=args.alpha)
            recipe_notes += learned_notes
            if args.published:
                summary, published_notes = published.attach(
                    summary, setting=recipe_runs["setting"].iloc[0], val_split=_common(recipe_runs["val_split"])
                )
                recipe_notes += published_notes + _departures_note(summary, recipe_runs)
            examples, examples_note = per_example.section(
                recipe_runs,
                metric,
                tables.baseline_of(summary),
                args.test,
                alpha=args.alpha,
                digits=args.digits,
                seed=args.seed,
            )
            recipe_notes.append(examples_note)
            if not isinstance(phase, int):  # a tuning design's trial tables are written, not printed (B of them)
                print(tables.markdown(summary, recipe_notes, args.digits, args.extras, footer))
            written += tables.write(summary, recipe_dir, formats, recipe_notes, args.digits, args.extras, footer)
            if examples is not None:  # per_example.md/csv beside table.md (no LaTeX: too wide for a float)
                if not isinstance(phase, int):
                    print(render.markdown(examples))
                written += render.write(examples, Path(recipe_dir) / "per_example", [f for f in formats if f != "tex"])
            if want_plots:
                written += figures.make_plots(
                    recipe_runs, curves.plot_metric(metric), recipe_dir, tables.baseline_of(summary), args.html
                )
            per_setting.append(summary.assign(setting=recipe_runs["setting"].iloc[0]))
            tasks.append(
                suite.task(
                    "/".join(filter(None, [Path(root).name, recipe_runs["setting"].iloc[0]])),
                    recipe_runs,
                    metric,
                    higher_is_better(metric),
                    tables.baseline_of(summary),
                )
            )
        if tuning.is_tuning(root_runs):  # the tuning section instead of the by-setting layout (B + 2 columns)
            table, curve, _ = tuning.section(root_runs, per_setting, args.digits)
            table.footer = environment_footer(root_runs)
            print(render.markdown(table))
            written += tuning.write(table, root_runs, curve, Path(root), formats)
        elif (root_runs["setting"] != "").any():
            written += _write_layout(pd.concat(per_setting, ignore_index=True), root_runs, Path(root), args, formats)
    if len(skipped) == runs["recipe_root"].nunique():
        raise UsageError("nothing to report: " + "; ".join(skipped))
    if args.suite and runs["recipe_root"].nunique() > 1:  # one recipe: no suite view (nothing to rank across)
        text, suite_files = suite.write(
            suite.scores_frame(tasks), args.results_dir, alpha=args.alpha, digits=args.digits
        )
        print(text)
        written += suite_files
    if args.html:
        written += html.write_pages(
            written, args.results_dir, dict(zip(runs["recipe_root"], runs["recipe"])), problem, plotted
        )
    return written


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


def _write_layout(summaries, runs, root: Path, args, formats) -> list[Path]:
    """The recipe-level table of a factor sweep (004 Table 2's layout) into the recipe's folder."""
    keys = protocol.report_best_of(runs) if args.best_of is None else [k for k in args.best_of.split(",") if k]
    table = best_of.best_of_table(summaries, keys)
    notes = []
    if args.published:  # 004 Table 2 prints per GN setting the best of the inits: this table's layout
        table, notes = published.attach(table, setting_col="column", val_split=_common(runs["val_split"]))
    settings_dirs = sorted(set(runs["setting"]) - {""})
    from . import noise  # a noise design's section (noise.md): its pointer or why not is one of this table's notes

    noise_table, noise_notes = noise.section(summaries, runs, alpha=args.alpha, digits=args.digits, effect=args.effect)
    shown = best_of.layout(
        table,
        str(runs["recipe"].iloc[0]),
        keys,
        summaries["metric_text"].iloc[0],
        settings_dirs,
        args.digits,
        list(notes) + noise_notes,
    )
    shown.footer = environment_footer(runs)
    print(render.markdown(shown))
    return render.write(shown, root / "table", formats) + noise.write(noise_table, root, formats)


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


def _recipe_notes(
    summary, runs, notes: list[str], recipe_dir: Path, baseline: str | None, expected: set[str] = frozenset()
) -> list[str]:
    """The skipped-run notes of this recipe plus what the table itself cannot show."""
    out = [n for n in notes if n.startswith(recipe_dir.name + "/")]
    used = tables.baseline_of(summary)
    declared = sorted(set(runs["baseline"].dropna()) - set(runs["act"]))
    if baseline is None and declared:
        out.append(
            f"the summaries name baseline {', '.join(declared)}, which has no run here; "
            f"{'using ' + used if used else 'no fallback (relu, gelu) either'}"
        )
    if used is None:
        wanted = (
            f"baseline {baseline!r} has no run here"
            if baseline
            else "no baseline found (no summary names one, no relu or gelu run)"
        )
        out.append(f"{wanted}: no differences or tests; pass --baseline ACT")
    for _, row in summary[summary["n_missing"] > 0].iterrows():
        out.append(f"{row['act']}: {row['n_missing']} completed run(s) without a finite {row['metric']}; not scored")
    out += _mixed_plugins(runs)
    mixed = _mixed_configs(runs, expected)
    if mixed:
        out.insert(
            0,
            f"NOT COMPARABLE: the runs differ in more than act and seed ({mixed}); rerun them with one "
            "configuration, or report each configuration from its own results_dir",
        )
    return out


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


def _mixed_plugins(runs) -> list[str]:
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


def _mixed_configs(runs, expected: set[str] = frozenset()) -> str:
    """'' when every run of the table was configured alike but for act and seed (and the `expected` keys: a tuning
    design's tuned keys in its equal-budget table); else what differs, and where."""
    from ..results.identity import diff_configs, shared_part
    from ..results.io import RunStateError
    from ..results.layout import read_config

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

"""The command line `visionbench report` (the top-level CLI delegates here).

    visionbench report runs/cifar10_vgg8                       # one recipe
    visionbench report runs --metric ema_val_top1_best --test welch --extras
    visionbench report runs/digits_vgg4 --margin 0.5 --holm      # verdicts with equivalence (verdict.py)
    visionbench report runs/digits_vgg4 --metric epochs_to_90    # convergence (curves.py)
    visionbench report runs          # several recipes: + ranks.md/csv, cd_diagram.png in runs/ (suite.py)

`main` returns an exit code instead of exiting: 0 on success, 2 on a usage or data error
(the message, printed to stderr, lists the valid choices). The report itself, section by section, is
sections.py `report_tree`; a record's or a store's runs are reported as a tree and its files copied back. The report
reads the results files only; the decision-boundary figure (`visionbench plot boundaries`) trains networks and is
`visionbench.experiments.boundaries`.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from ..stats.metrics import NAMES_HELP
from ..stats.significance import TESTS
from . import protocol, tables
from .arguments import add_alpha, integer, parser, positive_arg, switch
from .errors import UsageError, fail
from .sections import report_tree

STORE_SELECTION = """reading a store (visionbench collect ... --into STORE):
  the report reads every run in it, or the runs the selectors after STORE pick (KEY=VALUE; a comma
  list is any of its values; docs/store.md):
    recipe=A,B           those recipes' runs          act=x,y         those activations'
    config=HASH          one configuration's          source=PATH     the runs collected from PATH
    env.KEY=V            one environment's (env.device=cuda, env.torch=2.11.0)
    cfg.KEY=V            a configuration key's value (cfg.optim.lr=0.01)
  e.g.  visionbench report all.store recipe=digits_vgg4 act=relu,gelu"""


def report_parser() -> argparse.ArgumentParser:
    p = parser(
        "report",
        "Aggregate the runs under RESULTS_DIR into mean ± std tables with t-tests against a baseline. "
        "RESULTS_DIR is a results tree, a record (visionbench export) or a store (visionbench collect).",
        epilog=STORE_SELECTION,
    )
    p.add_argument(
        "results_dir",
        metavar="RESULTS_DIR",
        type=_writable_tree,
        help="a recipe dir (runs/cifar10_vgg8) or a parent of several, a record, or a store (see below)",
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
    switch(
        p,
        "--extras",
        "add Holm-adjusted p, Cohen's d, the t interval of Δ and P(> baseline) to md/tex (always in the CSV)",
    )
    p.add_argument(
        "--plots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write curves and activation-shape PNGs (default: on when metrics.csv files exist)",
    )
    p.add_argument(
        "--digits",
        type=integer("--digits", 0, 15),
        default=2,
        help="decimals of mean, std and differences (default 2)",
    )
    p.add_argument(
        "--seed",
        type=integer("--seed", 0),
        default=0,
        help="seed of the sampled permutation tests (per-example churn beyond 10,000 relabelings; default 0)",
    )
    switch(
        p,
        "--published",
        "add the paper's mean ± std (n) of each row that has a published counterpart (same recipe, "
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
        help="difference of means (metric units) seeds_needed is solved for (default: the --margin, else one "
        "seed sd; never the observed difference)",
    )
    add_alpha(p, "the verdicts and of mde / seeds_needed")
    p.add_argument(
        "--posthoc",
        choices=("wilcoxon", "nemenyi"),
        default="wilcoxon",
        help="the suite view's post-hoc across recipes: pairwise Wilcoxon signed-rank tests with Holm (default; "
        "Benavoli et al. 2016) or Nemenyi's mean-rank critical difference (Demšar 2006)",
    )
    switch(
        p, "--holm", "decide the verdicts on the Holm-adjusted p-values (p_holm, tost_p_holm) over the recipe's acts"
    )
    p.add_argument(
        "--suite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with several recipes: write the suite view (ranks.csv, ranks.md, cd_diagram.png: mean "
        "ranks, Friedman test, the pairwise post-hoc, P(X > baseline)) into RESULTS_DIR (default on)",
    )
    switch(
        p,
        "--html",
        "also write report.html in each recipe folder (tables, verdicts, sections, figures: one "
        "self-contained page, works offline) and index.html at RESULTS_DIR linking them (html.py)",
    )
    switch(
        p,
        "--strict-env",
        "refuse to test across runs from different environments (package versions, CPU kernels, "
        "threads, data digest, ...: a table's MIXED ENVIRONMENTS note): exit 2, nothing written",
    )
    return p


def _factor_keys(text: str) -> str:
    """--best-of: comma-separated config keys a factor sweep can vary ('' for none); an unknown one is
    refused (it would be ignored: no setting has it)."""
    from ..config.keys import NOT_FACTORS, is_free, valid_keys
    from ..config.rules import did_you_mean

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
            written = report_tree(args)
        else:  # a record's or a store's runs (selected), as a tree; the files into the record's folder or _report/
            with sources.opened(args.results_dir, selection) as tree:
                written = _copy_back(
                    report_tree(argparse.Namespace(**{**vars(args), "results_dir": str(tree)})),
                    tree,
                    sources.report_folder(args.results_dir),
                )
    except SystemExit as exc:  # argparse's --help and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    except (UsageError, RecordError, UnsafePath) as exc:
        return fail("report", exc)
    except OSError as exc:  # a full disk (results/io.py's DiskFullError), a folder gone read-only mid-report
        where = getattr(exc, "filename", None) or args.results_dir
        what = "no space left on the device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        return fail(
            "report",
            f"cannot write {where}: {what}; the tables written before it are whole (each file is written "
            "atomically), free space or pass another folder and run the report again",
        )
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

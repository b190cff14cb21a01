"""The `visionbench` command: one table of its commands, `COMMANDS`, from which its usage (`visionbench --help`),
its dispatch, the unknown-command line and the `-h` of run, estimate and list all come (docs/layout.md, "Commands",
is checked against it; `bench` names its benchmarks from their own table, visionbench/bench/__init__.py
`BENCHMARKS`). A command marked `takes_imports` has its `imports=` arguments taken out of its argv and loaded here
(visionbench/plugins.py) with the installed plugins, before it runs; run and estimate read `imports` as a config key.
`python -m visionbench ...` is the same command where visionbench is not installed (a checkout on PYTHONPATH).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.metadata
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .bench import BENCHMARKS

RUN_USAGE = """usage: visionbench {cmd} [recipe=NAME] [act=a,b[k=v,...],...] [act.KEY=V] [baseline=ACT] [KEY=V | KEY=v1,v2 ...]

{what}

  recipe=NAME          a recipe of visionbench/recipes/ (`visionbench list`; default digits_vgg4)
  act=a,b[k=v]         the activations swept; a variant's options in brackets; all = every one
  act.KEY=V            option KEY of every swept activation that takes it
  baseline=ACT         short for report.baseline=ACT (the t-test's reference)
  imports=MOD[,MOD]    modules of yours that register activations/models (docs/your_activation.md)
  KEY=V                any schema key: seeds=5, epochs=100, optim.lr=0.01, data.root=PATH, ...
  KEY=v1,v2            a factor sweep: every combination of factor values is a setting
Every key, its type, default and rule: docs/configuration.md (visionbench/config/schema.py)."""
WHAT = {
    "run": "Train every (setting, activation, seed) of the sweep, resuming what is unfinished, then report.",
    "estimate": "Time each (setting, activation) of the sweep on its device and print the projected wall time, "
    "memory and parameters (minus runs completed in results_dir); trains and writes nothing.",
}
LIST_HELP = (
    "usage: visionbench list [imports=MODULE,...]\n\nThe recipes, the activations (by family) and the models a "
    "config may name; each plugin's (imports=, or an installed `visionbench.plugins` entry point) with the "
    "module it came from."
)


@dataclass(frozen=True)
class Command:
    """One `visionbench NAME ...` command."""

    name: str
    synopsis: str  # its arguments, as `visionbench --help` shows them after `visionbench NAME`
    summary: str  # what it does, in one line
    handler: str  # `module:function` below visionbench (imported when the command runs), or a function of this module
    help: str | None = None  # its `-h` text when this module gives it; else the handler answers -h itself
    takes_imports: bool = False  # its `imports=` arguments are taken out and loaded before the handler runs

    def lines(self) -> str:
        """Its entry in `visionbench --help`: the synopsis, then the summary."""
        return f"    visionbench {self.name} {self.synopsis}\n        {self.summary}"

    def resolve(self) -> Callable[[list[str]], int]:
        """The handler: argv after the command name -> exit code."""
        module, sep, function = self.handler.rpartition(":")
        return getattr(importlib.import_module(module, __package__), function) if sep else globals()[function]


COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        "[recipe=NAME] [act=a,b,...] [seeds=N] [key=value ...]",
        "train the sweep (activations × seeds), resuming what is unfinished, then report",
        "_run",
        help=RUN_USAGE.format(cmd="run", what=WHAT["run"]),
    ),
    Command(
        "estimate",
        "<the run's arguments>",
        "projected time, memory, params of the sweep; trains nothing",
        "_estimate",
        help=RUN_USAGE.format(cmd="estimate", what=WHAT["estimate"]),
    ),
    Command(
        "report",
        "RESULTS_DIR [--metric ...] [--baseline ...] [--test student|welch|paired]",
        "significance tables, verdicts and figures of a results tree",
        ".report:main",
    ),
    Command(
        "export", "RUNS_DIR OUT", "the tree's compact, committable record; `report OUT` reads it", ".report.export:main"
    ),
    Command(
        "compare",
        "A B [--metric M] [--margin M] [--select-a K=V] [--select-b K=V]",
        "did B reproduce A? identical/reproduced/differs/undecided",
        ".report.compare:main",
    ),
    Command(
        "list",
        "[imports=my_acts]",
        "recipes, activations, models; a plugin's by its module",
        "_list",
        help=LIST_HELP,
        takes_imports=True,
    ),
    Command(
        "bench",
        "|".join(BENCHMARKS) + " [...]",
        "speed and memory benchmarks (docs/bench.md)",
        ".bench:main",
        takes_imports=True,
    ),
    Command(
        "plot",
        "boundaries [--acts ...] [--out FILE]",
        "the decision-boundary toy experiment",
        ".experiments.boundaries:main",
    ),
    Command(
        "papers",
        "[--paper 004] [--table 2] [--format md|csv] [--test student|welch]",
        "the papers' published tables",
        ".report.papers:main",
    ),
    Command(
        "predictions", "RUN_DIR [...]", "rewrite completed runs' predictions.npz from their checkpoints", "_predictions"
    ),
    Command(
        "check",
        "act=NAME[k=v,...] [imports=MOD] [--quick] [--max-ratio R]",
        "an activation's contracts, PASS/FAIL each (docs/activations.md)",
        ".check.arguments:main",
        takes_imports=True,
    ),
    Command(
        "collect",
        "TREE_OR_RECORD... --into STORE",
        "one table of every run: trees, records into a store (Parquet); `report STORE` reads it",
        ".report.collect_store:main",
    ),
)
BY_NAME = {c.name: c for c in COMMANDS}
USAGE = "\n".join(
    [
        "The `visionbench` command.",
        "",
        *(c.lines() for c in COMMANDS),
        "    visionbench --version\n        the installed version",
        "",
        '`visionbench COMMAND -h`: a command\'s own arguments. docs/layout.md, "Commands".',
    ]
)


def version() -> str:
    """visionbench's version (visionbench/__init__.py `__version__`)."""
    from . import __version__

    return __version__


def _load(cmd: str, args: list[str]):
    """The checked sweep config of `visionbench run|estimate ARGS`, or None after printing why."""
    from .config import ConfigError
    from .sweep.preflight import load_config

    try:
        if any(a.split("=", 1)[0].lstrip("+") == "seed" for a in args):  # the schema's per-run key, not a sweep's
            raise ConfigError(
                "seed is set per run by the sweep, not on its command line: seeds=N trains seeds "
                "0..N-1; for one given seed use the Hydra entry point (python -m "
                "visionbench.sweep.hydra_app ... seed=K, docs/running.md)",
                "seed",
            )
        return load_config(args)
    except ConfigError as e:
        print(f"visionbench {cmd}: {e}", file=sys.stderr)
        return None


def _estimate(args: list[str]) -> int:
    """The preflight before a sweep is submitted (bench/estimate.py): its cost, nothing written."""
    from .bench.estimate import estimate, format_estimate
    from .config import ConfigError
    from .sweep.resultsdir import check_directory

    cfg = _load("estimate", args)
    if cfg is None:
        return 2
    try:
        check_directory(cfg)  # the completed runs it leaves out are read from there
        print(format_estimate(estimate(cfg), cfg.recipe, str(Path(cfg.results_dir) / cfg.recipe)), flush=True)
    except ConfigError as e:
        print(f"visionbench estimate: {e}", file=sys.stderr)
        return 2
    return 0


def _run(args: list[str]) -> int:
    from .config import ConfigError, split_top_level, sweep_settings
    from .results.layout import DEFAULT_METRIC, HELD_OUT_METRIC
    from .results.settings import format_value
    from .sweep.acts import ALL, sweep_acts
    from .sweep.eta import SweepClock
    from .sweep.ranks import is_rank_zero
    from .sweep.resultsdir import ResultsMoved
    from .sweep.signals import Interrupted, hand_over, install_sigterm, received
    from .sweep.sweep import run_sweep

    cfg = _load("run", args)
    if cfg is None:
        return 2
    if cfg.parallel == "auto":  # measured first (bench/estimate.py): the line says what was picked and why
        from .bench.estimate import choose_parallel

        try:
            cfg.parallel, why = choose_parallel(cfg)
        except ConfigError as e:
            print(f"visionbench run: {e}", file=sys.stderr)
            return 2
        if is_rank_zero():
            print(why, flush=True)
    recipe_dir = Path(cfg.results_dir) / cfg.recipe
    # under DDP every rank runs this command and trains; rank 0 alone prints and reports (sweep/ranks.py)
    lead = is_rank_zero()
    factors = "".join(f" {k}={','.join(map(format_value, v))}" for k, v in cfg.factors.items())
    settings = f" ({len(sweep_settings(cfg))} settings)" if factors else ""
    if lead:
        seeds = f"auto (up to {cfg.seeds_max})" if cfg.seeds == "auto" else cfg.seeds
        acts = f" ({len(sweep_acts(cfg))} activations)" if ALL in split_top_level(str(cfg.act)) else ""
        print(
            f"recipe {cfg.recipe}: act={cfg.act}{acts} seeds={seeds} epochs={cfg.epochs}{factors}{settings} -> "
            f"{recipe_dir}",
            flush=True,
        )

    shown = list(dict.fromkeys([cfg.report.metric or DEFAULT_METRIC, HELD_OUT_METRIC]))
    clock = SweepClock() if sys.stdout.isatty() else None  # a person watching: the place and the ETA, never in a log

    def show(o):
        m = {**(o.summary.get("metrics") or {}), **o.summary}
        extra = "".join(f" {k}={m[k]:.2f}" for k in shown if isinstance(m.get(k), (int, float)))
        why = f" ({o.summary.get('error')})" if o.status in ("failed", "diverged", "locked") else ""
        where = f"{o.run_dir.parent.parent.name}/" if o.summary.get("setting") else ""
        eta = clock.finished(trained=o.status not in ("skipped", "locked")) if clock else ""
        print(f"  {where}{o.act:<18} seed {o.seed}: {o.status}{extra}{why}{eta}", flush=True)

    def planned(runs: int) -> None:  # on a terminal: the runs to go, before the first one finishes
        if line := clock.planned(runs):
            print(line, flush=True)

    install_sigterm()
    try:
        outcomes = run_sweep(
            cfg,
            progress=sys.stdout.isatty(),  # Lightning draws its bar on stdout: never into a log
            on_outcome=show if lead else None,
            on_note=functools.partial(print, flush=True) if lead else None,
            on_jobs=planned if clock and lead else None,
        )
    except ConfigError as e:
        print(f"visionbench run: {e}", file=sys.stderr)
        return 2
    except ResultsMoved as e:  # runs already trained stay where they were; the rest never started
        print(f"visionbench run: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Interrupted (SIGTERM) or a Ctrl-C outside training
        stop = e if isinstance(e, Interrupted) else Interrupted(received())
        recorded = getattr(e, "recorded", 0)
        if lead and recorded:
            runs = "the run in progress is" if recorded == 1 else f"the {recorded} runs in progress are"
            print(
                f"visionbench run: interrupted by {stop.signal_name}; {runs} recorded as 'interrupted' — rerun "
                f"the same command to resume {'it' if recorded == 1 else 'them'}",
                file=sys.stderr,
            )
        elif lead:
            print(
                f"visionbench run: interrupted by {stop.signal_name} while no run was training (none recorded as "
                "'interrupted'); rerun the same command to go on with the sweep",
                file=sys.stderr,
            )
        hand_over(stop)  # in a submitit job's own process: submitit's handler requeues the job (sweep/signals.py)
        return stop.exit_code
    if not lead:  # rank 0 reports and gives the exit status; a rank > 0 exiting non-zero would make
        return 0  # Lightning's launcher kill rank 0 (its child-process observer) before the report
    from .report import main as report_main

    swept = {o.act for o in outcomes}
    # the recipe's baseline if this sweep ran it; otherwise the report picks one from the results dir.
    # The metric is the recipe's `report.metric`, which the report reads from the runs' summaries.
    baseline = cfg.report.baseline
    try:
        report_main([str(recipe_dir), "--html"] + (["--baseline", str(baseline)] if baseline in swept else []))
    except KeyboardInterrupt as e:  # every run is on disk: only the table is missing
        stop = e if isinstance(e, Interrupted) else Interrupted(received())
        print(
            f"visionbench run: interrupted by {stop.signal_name} while writing the report; rerun the same "
            "command to write it",
            file=sys.stderr,
        )
        return stop.exit_code
    locked = [o for o in outcomes if o.status == "locked"]
    if locked:
        print(
            f"{len(locked)} run(s) left to another live visionbench process; rerun this command after it "
            "finishes to report them",
            file=sys.stderr,
        )
    return _exit_status(outcomes)


def _exit_status(outcomes) -> int:
    """0 when every run completed (or was completed before); else 1, after listing on stderr the runs
    that diverged and those that failed (a cluster's job status must tell: docs/running.md#exit-codes)."""
    bad = 0
    for status in ("diverged", "failed"):
        runs = [o for o in outcomes if o.status == status]
        bad += len(runs)
        if runs:
            print(
                f"{status} runs:\n" + "\n".join(f"  {o.run_dir}: {o.summary.get('error')}" for o in runs),
                file=sys.stderr,
            )
    return 1 if bad else 0


def _predictions(args: list[str]) -> int:
    """`visionbench predictions RUN_DIR ...`: rewrite each completed run's predictions.npz from its checkpoint
    (train/rewrite.py, data only: a checkpoint that pickles code is refused), holding the run's lock; one line on
    stderr for each run that could not be rewritten: 2 when one was bad input (no run directory, not completed,
    no usable checkpoint), else 1 when one is locked by a live process training it."""
    if not args or any(a.startswith("-") for a in args):
        print(
            "usage: visionbench predictions RUN_DIR [RUN_DIR ...]\n\nRewrite each completed run's "
            "predictions.npz from its checkpoints (the arrays it wrote, identical).",
            file=sys.stderr,
        )
        return 0 if any(a in ("-h", "--help") for a in args) else 2
    from .results import layout
    from .results.io import RunStateError
    from .sweep.locks import RunLock, RunLocked
    from .train.rewrite import rewrite_predictions

    bad = locked = 0
    for run_dir in args:
        if not layout.files(Path(run_dir)).summary.is_file():
            print(f"visionbench predictions: {run_dir} is no run directory (no summary.json)", file=sys.stderr)
            bad += 1
            continue
        try:
            with RunLock(Path(run_dir)):
                print(f"wrote {rewrite_predictions(run_dir)}")
        except RunLocked as e:  # not the input's fault: another process is training it now
            print(f"visionbench predictions: {e}", file=sys.stderr)
            locked += 1
        except RunStateError as e:  # the run directory cannot give the file: bad input (exit 2, as documented)
            print(f"visionbench predictions: {' '.join(str(e).split())}", file=sys.stderr)
            bad += 1
    return 2 if bad else 1 if locked else 0


def _list(args: list[str]) -> int:
    """`visionbench list`, its `imports=` loaded (`takes_imports`): what a config may name, and where from."""
    from . import activations, models, plugins
    from .config import recipe_description, recipe_names

    if args:
        print(
            f"visionbench list: unexpected {args[0]!r}; usage: visionbench list [imports=MODULE,...]", file=sys.stderr
        )
        return 2
    print("recipes:")
    for name in recipe_names():
        print(f"  {name:<30} {recipe_description(name)}")
    print("activations (by family; act=all sweeps every one):")
    groups: dict[str, list[str]] = {}
    owners = {a: p.module for p in plugins.loaded() for a in p.activations}
    for name in activations.names():
        groups.setdefault(activations.family(name), []).append(
            name + (f" (from {owners[name]})" if name in owners else "")
        )
    order = list(activations.FAMILIES) + sorted(set(groups) - set(activations.FAMILIES))
    for label in (f for f in order if f in groups):
        heading = activations.FAMILIES.get(label, label) + ":"
        print(f"  {heading:<34} " + ", ".join(groups[label]))
    print("models:")
    print("  " + ", ".join(models.names()) + ", or any timm model name")
    for p in plugins.loaded():  # where each plugin's names come from (built-ins are visionbench's own)
        print(
            f"plugin {p.module} ({p.source}; version {p.version or '-'}, sha256 {(p.sha256 or '-')[:12]}, "
            f"{p.file or '?'}):"
        )
        print(f"  activations: {', '.join(p.activations) or '-'}; models: {', '.join(p.models) or '-'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The `visionbench` entry point; returns the exit code. A Ctrl-C that arrives before a command has
    handled it itself (during the start-up imports: torch, Lightning, timm take seconds) is one line and
    exit 130, not a traceback through the import machinery."""
    try:
        with _one_line_warnings():
            return _main(argv)
    except KeyboardInterrupt as e:
        name = getattr(e, "signal_name", "Ctrl-C")  # sweep/signals.py's Interrupted (SIGTERM) carries its own
        cmd = " ".join(["visionbench", *(sys.argv[1:] if argv is None else argv)[:1]])
        print(f"{cmd}: interrupted by {name}; rerun the same command", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except BrokenPipeError:  # `visionbench list | head`: the reader left early, which is no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush does not raise again
        return 0


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """A plugin's warning (plugins.PluginWarning) as one `warning: ...` line on stderr; other warnings as Python
    shows them."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            from .plugins import PluginWarning

            if issubclass(category, PluginWarning):
                print(f"warning: {message}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"visionbench {version()}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if os.environ.get("VISIONBENCH_KERNELS"):  # a bad switch is one line here, not an error inside the first step
        from .activations import fused

        try:
            fused.check_backend()
        except ValueError as e:
            print(f"visionbench {cmd}: {e}", file=sys.stderr)
            return 2
    command = BY_NAME.get(cmd)
    if command is None:
        close = difflib.get_close_matches(str(cmd), list(BY_NAME), n=2)
        suggestion = f" (did you mean {' or '.join(close)}?)" if close else ""
        print(
            f"visionbench: unknown command {cmd!r}{suggestion}; commands: {', '.join(BY_NAME)} (`visionbench -h`)",
            file=sys.stderr,
        )
        return 2
    asks_help = any(a in ("-h", "--help") for a in rest)
    if command.help and asks_help:
        print(command.help)
        return 0
    if command.takes_imports and not asks_help:
        imports, rest = take_imports(rest)
        if imports or installed_plugins():  # nothing to load: no plugin machinery (nor the config layer, Hydra)
            from . import plugins

            try:  # the command's registries (activations, models, the benchmarks' and checks') include the plugins'
                plugins.load(imports)
            except plugins.PluginError as e:
                print(f"visionbench {cmd}: {e}", file=sys.stderr)
                return 2
    try:
        return command.resolve()(rest)
    except SystemExit as e:  # a subcommand's argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2


PLUGIN_GROUP = "visionbench.plugins"  # plugins.GROUP (tests/test_cli_table.py), read without importing plugins.py


def installed_plugins() -> bool:
    """Whether an installed distribution declares a plugin (an entry point of group visionbench.plugins): what
    `plugins.load` imports besides `imports=`. Without either a command loads nothing, and so runs where the config
    layer's Hydra is missing (`visionbench bench activations` on a lent GPU, docs/bench.md "The GPU window")."""
    return bool(importlib.metadata.entry_points(group=PLUGIN_GROUP))


def take_imports(args: list[str]) -> tuple[list[str], list[str]]:
    """(the values of the `imports=` arguments, the other arguments) of a command that takes `imports=` beside its
    own flags (`takes_imports`): the command line's one reading of `imports=` (a config's is its `imports` key)."""
    imports, rest = [], []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "imports":
            imports.append(value)
        else:
            rest.append(arg)
    return imports, rest


if __name__ == "__main__":
    sys.exit(main())

"""The `visionbench` command.

    visionbench run [recipe=NAME] [act=a,b,...] [seeds=N] [key=value ...]
    visionbench run ... estimate=true      # projected time, memory, params of the sweep; trains nothing
    visionbench report RESULTS_DIR [--metric ...] [--baseline ...] [--test student|welch|paired]
    visionbench list
    visionbench bench activations|train [...]
    visionbench plot boundaries [--acts ...] [--out FILE]
    visionbench papers [--paper 004] [--table 2] [--format md|csv] [--test student|welch]
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

USAGE = __doc__


def _run(args: list[str]) -> int:
    from .sweep.axes import ALL, format_value, split_top_level
    from .sweep.config import ConfigError, load_config, sweep_acts, sweep_settings
    from .sweep.ranks import is_rank_zero
    from .sweep.signals import Interrupted, install_sigterm, received
    from .sweep.sweep import run_sweep

    try:
        cfg = load_config(args)
    except ConfigError as e:
        print(f"visionbench run: {e}", file=sys.stderr)
        return 2
    if cfg.estimate:  # the preflight: time the sweep, print its cost, write nothing (runner/estimate.py)
        from .bench.estimate import estimate, format_estimate

        try:
            print(format_estimate(estimate(cfg), cfg.recipe, str(Path(cfg.results_dir) / cfg.recipe)), flush=True)
        except ConfigError as e:
            print(f"visionbench run: {e}", file=sys.stderr)
            return 2
        return 0
    recipe_dir = Path(cfg.results_dir) / cfg.recipe
    # under DDP every rank runs this command and trains; rank 0 alone prints and reports (runner/ranks.py)
    lead = is_rank_zero()
    factors = "".join(f" {k}={','.join(map(format_value, v))}" for k, v in cfg.factors.items())
    settings = f" ({len(sweep_settings(cfg))} settings)" if factors else ""
    if lead:
        seeds = f"auto (up to {cfg.seeds_max})" if cfg.seeds == "auto" else cfg.seeds
        acts = f" ({len(sweep_acts(cfg))} activations)" if ALL in split_top_level(str(cfg.act)) else ""
        print(f"recipe {cfg.recipe}: act={cfg.act}{acts} seeds={seeds} epochs={cfg.epochs}{factors}{settings} -> "
              f"{recipe_dir}", flush=True)

    shown = list(dict.fromkeys([cfg.report.metric or "val_top1_best", "test_top1_at_best_val"]))

    def show(o):
        m = {**(o.summary.get("metrics") or {}), **o.summary}
        extra = "".join(f" {k}={m[k]:.2f}" for k in shown if isinstance(m.get(k), (int, float)))
        why = f" ({o.summary.get('error')})" if o.status in ("failed", "diverged", "locked") else ""
        where = f"{o.run_dir.parent.parent.name}/" if o.summary.get("setting") else ""
        print(f"  {where}{o.act:<18} seed {o.seed}: {o.status}{extra}{why}", flush=True)

    install_sigterm()
    try:
        outcomes = run_sweep(cfg, progress=sys.stderr.isatty(), on_outcome=show if lead else None,
                             on_note=functools.partial(print, flush=True) if lead else None)
    except ConfigError as e:
        print(f"visionbench run: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Interrupted (SIGTERM) or a Ctrl-C outside training
        stop = e if isinstance(e, Interrupted) else Interrupted(received())
        if lead:
            print(f"visionbench run: interrupted by {stop.signal_name}; the run in progress is recorded as "
                  f"'interrupted' — rerun the same command to resume it", file=sys.stderr)
        return stop.exit_code
    if not lead:  # rank 0 reports and gives the exit status; a rank > 0 exiting non-zero would make
        return 0  # Lightning's launcher kill rank 0 (its child-process observer) before the report
    from .report import main as report_main

    swept = {o.act for o in outcomes}
    # the recipe's baseline if this sweep ran it; otherwise the report picks one from the results dir.
    # The metric is the recipe's `report.metric`, which the report reads from the runs' summaries.
    baseline = cfg.report.baseline
    try:
        report_main([str(recipe_dir)] + (["--baseline", str(baseline)] if baseline in swept else []))
    except KeyboardInterrupt as e:  # every run is on disk: only the table is missing
        stop = e if isinstance(e, Interrupted) else Interrupted(received())
        print(f"visionbench run: interrupted by {stop.signal_name} while writing the report; rerun the same "
              "command to write it", file=sys.stderr)
        return stop.exit_code
    locked = [o for o in outcomes if o.status == "locked"]
    if locked:
        print(f"{len(locked)} run(s) left to another live visionbench process; rerun this command after it "
              "finishes to report them", file=sys.stderr)
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        print("failed runs:\n" + "\n".join(f"  {o.run_dir}: {o.summary.get('error')}" for o in failed), file=sys.stderr)
        return 1
    return 0


def _list(args: list[str]) -> int:
    from . import activations, models
    from .sweep.config import recipe_description, recipe_names

    print("recipes:")
    for name in recipe_names():
        print(f"  {name:<30} {recipe_description(name)}")
    print("activations (by family; act=all sweeps every one):")
    groups: dict[str, list[str]] = {}
    for name in activations.names():
        groups.setdefault(activations.family(name), []).append(name)
    order = list(activations.FAMILIES) + sorted(set(groups) - set(activations.FAMILIES))
    for label in (f for f in order if f in groups):
        heading = activations.FAMILIES.get(label, label) + ":"
        print(f"  {heading:<34} " + ", ".join(groups[label]))
    print("models:")
    print("  " + ", ".join(models.names()) + ", or any timm model name")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        return _run(rest)
    if cmd == "list":
        return _list(rest)
    if cmd == "report":
        from .report import main as report_main

        return report_main(rest)
    if cmd == "plot":
        from .report import plot_main

        return plot_main(rest)
    if cmd == "papers":
        from .report.papers import main as papers_main

        return papers_main(rest)
    if cmd == "bench":
        from .bench import main as bench_main

        return bench_main(rest)
    print(f"visionbench: unknown command {cmd!r}; commands: run, report, list, bench, plot, papers\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""The sweep of a tuning design (`tune=`, config/tune_space.py, docs/tuning.md): its two phases.

    visionbench run act=relu,gelu,rational tune=optim.lr:log[1e-4,1e-1] trials=16 seeds=5

1. Trials: every activation trains the same B configurations (the trial settings, `tune.trial=i,KEY=v,...`), one run
   each, seed `TRIAL_SEED`: normal runs of a factor sweep (resumed, recorded, collected like any other).
2. Retrain: per activation, the trial with the best validation score (`selection_metric`: the recipe's val metric,
   never a test score; ties: the earlier trial; a diverged or failed trial is never chosen) is trained again with
   the sweep's seeds 0..S-1 (or seeds=auto's rounds) into `tune.trial=best/<act>/seed_<k>`, each run recording its
   activation's values; with `tune.defaults` (the default) the recipe's own values are trained alike into
   `tune.trial=defaults/`. The report compares the activations there as in any table.

`<recipe>/tuning.json` records the design (space, B, seed, metric) and each activation's selected trial.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from omegaconf import DictConfig, OmegaConf

from ..config import RECIPES_DIR, ConfigError, defaults, most_seeds
from ..config import tune_space as design
from ..config.keys import NOT_FACTORS
from ..results import layout
from ..results.io import RunStateError, atomic_write_text
from .acts import sweep_acts
from .ranks import is_rank_zero
from .rounds import run_rounds
from .steps import Steps

RECORD = "tuning.json"


def is_tuning(cfg: DictConfig) -> bool:
    return cfg.tune.space is not None


def dims(cfg: DictConfig) -> list[design.Dim]:
    try:
        return design.parse_space(OmegaConf.to_container(cfg.tune, resolve=True)["space"], defaults(), NOT_FACTORS)
    except design.SpaceError as e:
        raise ConfigError(str(e), e.key) from None


def trials(cfg: DictConfig) -> list[dict]:
    """The trial settings of the design, the same for every activation."""
    return design.trial_settings(dims(cfg), int(cfg.tune.trials), int(cfg.tune.seed))


def selection_metric(cfg: DictConfig) -> str:
    """The validation score a trial is selected on: the recipe's val metric (the EMA's when it reports the EMA)."""
    metric = str(cfg.report.metric or "")
    return "ema_val_top1_best" if metric.startswith("ema_") else "val_top1_best"


def protocol_warnings(cfg: DictConfig) -> list[str]:
    """One line per tuned key that the recipe fixes for a published comparison (its YAML cites the paper)."""
    found = design.protocol_keys(str(cfg.recipe), [d.key for d in dims(cfg)], RECIPES_DIR)
    return [
        f"warning: tune= varies {key}, which recipe {name} fixes for the published comparison it reproduces "
        f"({comment}); the tuned runs depart from that protocol, and --published comparisons do not apply to them"
        for key, name, comment in found
    ]


def score(summary: dict, metric: str) -> float:
    """A trial's validation score (NaN unless completed with a finite value)."""
    if (summary or {}).get("status") != layout.COMPLETED:
        return math.nan
    value = (summary.get("metrics") or {}).get(metric)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def select(outcomes, metric: str, higher: bool = True) -> dict[str, dict]:
    """Per activation, its best trial: {act: {"trial", "values", "score", "scores"}} (None for an activation whose
    every trial diverged or failed)."""
    by_act: dict[str, list] = {}
    for o in outcomes:
        setting = dict(o.summary.get("setting") or {})
        by_act.setdefault(o.act, []).append((setting.get(design.TRIAL), setting, score(o.summary, metric)))
    out = {}
    for act, rows in by_act.items():
        rows.sort(key=lambda r: r[0])
        finite = [r for r in rows if math.isfinite(r[2])]
        best = max(finite, key=lambda r: r[2] if higher else -r[2]) if finite else None  # max keeps the first
        out[act] = {
            "trial": best[0] if best else None,
            "values": {k: v for k, v in best[1].items() if k != design.TRIAL} if best else None,
            "score": best[2] if best else None,
            "scores": {int(r[0]): (r[2] if math.isfinite(r[2]) else None) for r in rows},
        }
    return out


def chosen_so_far(cfg: DictConfig, trial_jobs: list[tuple[dict, Path]]) -> dict[str, dict]:
    """The selection from the trials already on disk (estimate.py plans the retrain with it); an activation with no
    finished trial gets the recipe's values as a stand-in (a learning rate does not change a step's time)."""
    found = []
    for run, out in trial_jobs:
        try:
            summary = layout.read_summary(out) or {}
        except RunStateError:
            summary = {}
        found.append(SimpleNamespace(act=run["act_label"], summary={**summary, "setting": run["setting"]}))
    chosen = select(found, selection_metric(cfg))
    return {act: c if c["values"] is not None else {**c, "values": {}} for act, c in chosen.items()}


def retrain_plan(
    cfg: DictConfig, chosen: dict[str, dict], phase: str, acts, seeds, plan: Callable[..., list]
) -> list[tuple[dict, Path]]:
    """(run config, run directory) of the retrain runs: `phase` best (each activation at its chosen values) or
    defaults (the recipe's own), into `<recipe>/tune.trial=<phase>/<act>/seed_<k>`; planned by the sweep's `plan`
    (Steps.plan), which checks them as any sweep's runs (the data at those values, the stored configs)."""
    folder = {design.TRIAL: phase}
    jobs = []
    for act in acts:
        values = (chosen.get(str(act)) or {}).get("values") if phase == design.BEST else {}
        if values is None:  # every trial of this activation diverged or failed: nothing to retrain
            continue
        jobs += plan(cfg, settings=[{**folder, **values}], acts=[act], seeds=seeds, folder=folder)
    return jobs


def write_record(cfg: DictConfig, chosen: dict, metric: str) -> None:
    record = {
        "space": [d.describe() for d in dims(cfg)],
        "trials": int(cfg.tune.trials),
        "seed": int(cfg.tune.seed),
        "trial_seed": design.TRIAL_SEED,
        "selection_metric": metric,
        "retrain_seeds": cfg.seeds,
        "defaults": bool(cfg.tune.defaults),
        "acts": chosen,
    }
    path = Path(cfg.results_dir) / cfg.recipe / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, default=str) + "\n")


def run_tuning(cfg: DictConfig, steps: Steps) -> list:
    """Both phases (module docstring), with the sweep's `steps`; the outcomes of every run, trials first."""
    settings = trials(cfg)
    metric = selection_metric(cfg)
    steps.say(
        f"tune: {len(settings)} trials per activation from {', '.join(d.describe() for d in dims(cfg))} "
        f"(seed {cfg.tune.seed}), selected on {metric}"
    )
    outcomes = list(steps.execute_all(steps.plan(cfg, settings=settings, seeds=[design.TRIAL_SEED])))
    chosen = select(outcomes, metric)
    for act, c in chosen.items():
        if c["trial"] is None:
            steps.say(f"tune: {act}: every trial diverged or failed; not retrained")
        else:
            shown = ", ".join(f"{k}={v}" for k, v in c["values"].items())
            steps.say(f"tune: {act}: best trial {c['trial']} ({shown}), {metric} {c['score']:.2f}")
    if is_rank_zero():
        write_record(cfg, chosen, metric)
    phases = [design.BEST] + ([design.DEFAULTS] if cfg.tune.defaults else [])
    acts = sweep_acts(cfg)
    if cfg.seeds == "auto":
        phase_cfg = cfg.copy()
        OmegaConf.set_struct(phase_cfg, False)
        phase_cfg.factors = {design.TRIAL: phases}

        def phase_plan(c, settings=None, acts=None, seeds=None):
            return retrain_plan(cfg, chosen, settings[0][design.TRIAL], acts, seeds, steps.plan)

        return outcomes + list(run_rounds(phase_cfg, Steps(phase_plan, steps.execute_all, steps.note)))
    for phase in phases:
        outcomes += steps.execute_all(retrain_plan(cfg, chosen, phase, acts, range(int(cfg.seeds)), steps.plan))
    return outcomes


def planned_runs(cfg: DictConfig) -> dict[str, int]:
    """Runs per phase of the design, per activation (estimate.py prices them): trials B, best S, defaults S (S:
    seeds, or seeds_max under seeds=auto, the most it may train)."""
    seeds = most_seeds(cfg)
    return {"trials": int(cfg.tune.trials), "best": seeds, **({"defaults": seeds} if cfg.tune.defaults else {})}

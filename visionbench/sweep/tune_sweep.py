"""The sweep of a tuning design (`tune=`, config/tune_space.py, docs/tuning.md): its two phases.

    visionbench run act=relu,gelu,rational tune=optim.lr:log[1e-4,1e-1] trials=16 seeds=5

1. Trials: every activation trains the same B configurations (the trial settings, `tune.trial=i,KEY=v,...`), one run
   each, seed `TRIAL_SEED`: normal runs of a factor sweep (resumed, recorded, collected like any other).
2. Retrain: per activation, the trial with the best validation score (`selection_metric`: the recipe's val metric,
   never a test score; ties: the earlier trial; a diverged or failed trial is never chosen) is trained again with
   the sweep's seeds 0..S-1 (or seeds=auto's rounds) into `tune.trial=best/<act>/seed_<k>`, each run recording its
   activation's values; with `tune.defaults` (the default) the recipe's own values are trained alike into
   `tune.trial=defaults/`. The report compares the activations there as in any table.

With `tune_repeats=R` > 1 (tune.repeats) the whole procedure is replicated R times, the unit of the equal-budget
verdict about the activations (report/tuning.py): procedure j draws its own B trials (config/tune_space.py), trains
them with trial seed TRIAL_SEED + j into `tune.repeat=j,tune.trial=i,...`, selects per activation as above, and
retrains each selection with its own fresh seeds j*S..(j+1)*S-1 into `tune.repeat=j,tune.trial=best/`; the recipe's
values are retrained once (seeds 0..S-1, `tune.trial=defaults/`). R = 1 writes exactly the folders above.

`<recipe>/tuning.json` records the design (space, B, seed, metric) and each activation's selected trial (per
procedure when R > 1).
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


def trials(cfg: DictConfig, repeat: int | None = None) -> list[dict]:
    """The trial settings of the design (of its procedure `repeat` when tune.repeats > 1), the same for every
    activation."""
    return design.trial_settings(dims(cfg), int(cfg.tune.trials), int(cfg.tune.seed), repeat)


def value_settings(cfg: DictConfig) -> list[dict]:
    """One setting per value the search may give a tuned key (each grid value, each bound of a range), which
    preflight checks as it checks a direct override's (an activation's options built, the model's keys), before any
    trial trains."""
    if not is_tuning(cfg):
        return []
    return [{d.key: int(v) if d.integer else v} for d in dims(cfg) for v in (d.values or (d.lo, d.hi))]


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


def procedures(cfg: DictConfig) -> list[int | None]:
    """The procedures of the design: [None] for tune.repeats = 1 (no tune.repeat key anywhere), else 0..R-1."""
    r = int(cfg.tune.get("repeats") or 1)
    return [None] if r == 1 else list(range(r))


def trial_seed(repeat: int | None) -> int:
    """The seed every trial of procedure `repeat` trains with."""
    return design.TRIAL_SEED + (repeat or 0)


def retrain_seeds(cfg: DictConfig, repeat: int | None) -> range:
    """The fresh seeds procedure `repeat` retrains its selection with: j*S..(j+1)*S-1 (S = seeds)."""
    s, j = int(cfg.seeds), repeat or 0
    return range(j * s, (j + 1) * s)


def retrain_plan(
    cfg: DictConfig, chosen: dict[str, dict], phase: str, acts, seeds, plan: Callable[..., list], repeat=None
) -> list[tuple[dict, Path]]:
    """(run config, run directory) of the retrain runs: `phase` best (each activation at its chosen values) or
    defaults (the recipe's own), into `<recipe>/tune.trial=<phase>/<act>/seed_<k>` (`tune.repeat=j,tune.trial=best`
    for procedure `repeat` j); planned by the sweep's `plan` (Steps.plan), which checks them as any sweep's runs (the
    data at those values, the stored configs)."""
    folder = ({} if repeat is None else {design.REPEAT: int(repeat)}) | {design.TRIAL: phase}
    jobs = []
    for act in acts:
        values = (chosen.get(str(act)) or {}).get("values") if phase == design.BEST else {}
        if values is None:  # every trial of this activation diverged or failed: nothing to retrain
            continue
        jobs += plan(cfg, settings=[{**folder, **values}], acts=[act], seeds=seeds, folder=folder)
    return jobs


def write_record(cfg: DictConfig, chosen_by: dict, metric: str) -> None:
    record = {
        "space": [d.describe() for d in dims(cfg)],
        "trials": int(cfg.tune.trials),
        "seed": int(cfg.tune.seed),
        "trial_seed": design.TRIAL_SEED,
        "selection_metric": metric,
        "retrain_seeds": cfg.seeds,
        "defaults": bool(cfg.tune.defaults),
    }
    if list(chosen_by) == [None]:
        record["acts"] = chosen_by[None]
    else:
        record["repeats"] = len(chosen_by)
        record["procedures"] = [
            {"repeat": j, "trial_seed": trial_seed(j), "retrain_seeds": list(retrain_seeds(cfg, j)), "acts": c}
            for j, c in chosen_by.items()
        ]
    path = Path(cfg.results_dir) / cfg.recipe / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, default=str) + "\n")


def run_tuning(cfg: DictConfig, steps: Steps) -> list:
    """Both phases (module docstring), with the sweep's `steps`; the outcomes of every run, trials first."""
    metric = selection_metric(cfg)
    repeats = procedures(cfg)
    steps.say(
        f"tune: {cfg.tune.trials} trials per activation from {', '.join(d.describe() for d in dims(cfg))} "
        f"(seed {cfg.tune.seed}), selected on {metric}"
        + (f"; {len(repeats)} independent procedures (tune_repeats)" if repeats != [None] else "")
    )
    planned = [steps.plan(cfg, settings=trials(cfg, j), seeds=[trial_seed(j)]) for j in repeats]
    done = list(steps.execute_all([job for jobs in planned for job in jobs]))  # in plan order
    outcomes, chosen_by, start = list(done), {}, 0
    for j, jobs in zip(repeats, planned):
        chosen_by[j] = chosen = select(done[start : start + len(jobs)], metric)
        start += len(jobs)
        where = "" if j is None else f"procedure {j}: "
        for act, c in chosen.items():
            if c["trial"] is None:
                steps.say(f"tune: {where}{act}: every trial diverged or failed; not retrained")
            else:
                shown = ", ".join(f"{k}={v}" for k, v in c["values"].items())
                steps.say(f"tune: {where}{act}: best trial {c['trial']} ({shown}), {metric} {c['score']:.2f}")
    if is_rank_zero():
        write_record(cfg, chosen_by, metric)
    phases = [design.BEST] + ([design.DEFAULTS] if cfg.tune.defaults else [])
    acts = sweep_acts(cfg)
    if cfg.seeds == "auto":  # tune.repeats = 1 (config/validate.py refuses more)
        chosen = chosen_by[None]
        phase_cfg = cfg.copy()
        OmegaConf.set_struct(phase_cfg, False)
        phase_cfg.factors = {design.TRIAL: phases}

        def phase_plan(c, settings=None, acts=None, seeds=None):
            return retrain_plan(cfg, chosen, settings[0][design.TRIAL], acts, seeds, steps.plan)

        return outcomes + list(run_rounds(phase_cfg, Steps(phase_plan, steps.execute_all, steps.note)))
    jobs = []
    for j in repeats:
        jobs += retrain_plan(cfg, chosen_by[j], design.BEST, acts, retrain_seeds(cfg, j), steps.plan, j)
    if cfg.tune.defaults:
        jobs += retrain_plan(cfg, {}, design.DEFAULTS, acts, range(int(cfg.seeds)), steps.plan)
    return outcomes + list(steps.execute_all(jobs))


def planned_runs(cfg: DictConfig) -> dict[str, int]:
    """Runs per phase of the design, per activation (estimate.py prices them): trials R x B, best R x S, defaults S
    (R: tune.repeats; S: seeds, or seeds_max under seeds=auto, the most it may train)."""
    seeds, r = most_seeds(cfg), len(procedures(cfg))
    return {"trials": r * int(cfg.tune.trials), "best": r * seeds, **({"defaults": seeds} if cfg.tune.defaults else {})}

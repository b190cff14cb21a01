"""`seeds=auto`: run a sweep's seeds in rounds and stop each activation once its comparison with the
baseline is decided (docs/running.md, "Sequential seeds"; the rule: visionbench/stats/sequential.py).

    visionbench run recipe=digits_vgg4 act=relu,gelu,rational seeds=auto seeds_max=10

Round k trains seeds up to `looks[k]` (3, 5, 7, 10 for seeds_max=10) for every activation still
open and for the baseline; then `stats.sequential.decide` tests each open activation against the
baseline on the recipe's report metric, at the level that look's share of α allows (O'Brien–Fleming-
type spending, Bonferroni on increments: the overall type-I error stays ≤ α). "better", "worse" or,
with `seeds_margin=M`, "equivalent" stops the activation; the baseline runs while any comparison is
open. Where each activation stopped, and why, is written to `<recipe>/[<setting>/]sequential.json`;
`visionbench report` shows it. Rerunning the command resumes: finished runs are skipped and the same
decisions are made again.
"""

from __future__ import annotations

import math

from omegaconf import DictConfig

from ..config import ConfigError, sweep_settings
from ..results import layout
from ..results import provenance as results
from ..results.layout import default_metric
from ..results.predictions import n_classes
from ..stats import sequential
from ..stats.convergence import run_stall_reason
from ..stats.metrics import higher_is_better
from .acts import sweep_acts
from .ranks import is_rank_zero
from .steps import Steps

STOPPED = ("better", "worse", "equivalent")


def looks(seeds_max: int) -> tuple[int, ...]:
    """Seeds per activation after each round: 3, then two more per round, the last round up to
    `seeds_max` (a last step of one seed is merged into it): 10 -> (3, 5, 7, 10), 6 -> (3, 6)."""
    steps = list(range(3, int(seeds_max), 2))
    if len(steps) > 1 and steps[-1] == seeds_max - 1:
        steps.pop()
    return tuple(steps) + (int(seeds_max),)


def metric_of(cfg: DictConfig) -> str:
    """The metric the decisions use: the recipe's report metric (the table's), by the report's rule."""
    if cfg.report.metric:
        return str(cfg.report.metric)
    return default_metric(cfg.data.val_split)


def check(cfg: DictConfig) -> tuple[str, list[str]]:
    """(baseline, other activations); ConfigError unless the baseline is swept with at least one other."""
    acts, baseline = sweep_acts(cfg), cfg.report.baseline
    if baseline not in acts or len(acts) < 2:
        raise ConfigError(
            f"seeds=auto compares each activation with report.baseline={baseline!r}: act= must list it "
            f"and at least one other (got act={','.join(acts)}); set baseline=NAME or add it to act="
        )
    return baseline, [a for a in acts if a != baseline]


def run_rounds(cfg: DictConfig, steps: Steps) -> list:
    """Every round of every setting, with the sweep's `steps` (its plan and execute_all, sweep/steps.py); returns the
    outcomes of all runs executed or skipped."""
    baseline, others = check(cfg)
    metric, rounds = metric_of(cfg), looks(cfg.seeds_max)
    margin = None if cfg.seeds_margin is None else float(cfg.seeds_margin)
    up = higher_is_better(metric)
    outcomes = []
    for setting in sweep_settings(cfg):
        record = {
            "rule": "group-sequential Student t-test, two-tailed; O'Brien-Fleming-type alpha spending "
            "(Lan-DeMets), Bonferroni on increments (visionbench.stats.sequential)",
            "metric": metric,
            "higher_is_better": up,
            "baseline": baseline,
            "alpha": sequential.ALPHA,
            "margin": margin,
            "looks": list(rounds),
            "nominal_alphas": [float(a) for a in sequential.nominal_alphas(rounds)],
            "baseline_seeds": 0,
            "acts": {a: {"decision": "continue", "seeds": 0, "history": []} for a in others},
        }
        values: dict[str, dict[int, float]] = {a: {} for a in [baseline, *others]}
        done = 0
        for n in rounds:
            open_acts = [a for a in others if record["acts"][a]["decision"] == "continue"]
            if not open_acts:
                break
            jobs = steps.plan(cfg, settings=[setting], acts=[baseline, *open_acts], seeds=range(done, n))
            for o in steps.execute_all(jobs):
                outcomes.append(o)
                values[o.act][o.seed] = _value(o.summary, o.run_dir, metric)
            done, record["baseline_seeds"] = n, n
            for act in open_acts:
                entry = record["acts"][act]
                entry["seeds"] = n
                entry.update(_decide(values[act], values[baseline], n, rounds, margin, up, entry["history"]))
            steps.say(_round_line(setting, n, rounds, record["acts"], open_acts))
        if is_rank_zero():
            layout.write_sequential(
                results.run_dir(cfg.results_dir, cfg.recipe, baseline, 0, setting).parent.parent, record
            )
    return outcomes


def _value(summary: dict, run_dir, metric: str) -> float:
    """The run's metric; NaN for a diverged, stalled or failed run, as in the report's tables (a diverged run
    keeps the metrics of the epochs before it diverged: they are not its result; a stalled one, completed at
    chance level, is counted like a divergence: stats/convergence.py `run_stall_reason`, as report/collect.py)."""
    if summary.get("status") in (layout.DIVERGED, layout.FAILED):
        return math.nan
    metrics = summary.get("metrics") or {}
    if run_stall_reason(metrics, n_classes(layout.files(run_dir).predictions), layout.train_losses(run_dir)):
        return math.nan
    v = metrics.get(metric, summary.get(metric))
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def _decide(act: dict[int, float], base: dict[int, float], n: int, rounds, margin, up: bool, history: list) -> dict:
    """The look at n seeds: decision (+ its evidence appended to `history`); runs without the metric
    (diverged, stalled, failed) leave the comparison open, then inconclusive at the last look."""
    a, b = [act.get(s, math.nan) for s in range(n)], [base.get(s, math.nan) for s in range(n)]
    missing = sum(map(math.isnan, a)) + sum(map(math.isnan, b))
    if missing:
        last = n == rounds[-1]
        step = {
            "seeds": n,
            "decision": "inconclusive" if last else "continue",
            "why": f"{missing} run(s) without the metric (diverged, stalled or failed)",
        }
    else:
        step = sequential.evidence(a, b, looks=rounds, margin=margin, higher_is_better=up)
    history.append(step)
    return {"decision": step["decision"]}


def _round_line(setting: dict, n: int, rounds, acts: dict, open_acts: list[str]) -> str:
    where = f" [{', '.join(f'{k}={v}' for k, v in setting.items())}]" if setting else ""
    parts = []
    for act in open_acts:
        step = acts[act]["history"][-1]
        parts.append(f"{act} {step['decision']} ({sequential.evidence_text(step)})")
    return f"seeds=auto round {rounds.index(n) + 1}/{len(rounds)} ({n} seeds){where}: " + "; ".join(parts)

"""Hydra entry point for clusters: one job per (activation, seed), any Hydra launcher.

    pip install -e '.[slurm]'
    python -m visionbench.sweep.hydra_app --config-name cifar10_vgg8 -m \
        hydra/launcher=submitit_slurm act=relu,rational seed=0,1,2,3,4

Every job resolves exactly as `visionbench run` would for that act and seed and writes into the
same results tree (`results_dir`), so `visionbench report results/<recipe>` aggregates them.
Without `-m`/a launcher it trains one run locally (seed defaults to 0). A recipe's `factors` are
swept by Hydra too (`-m model.norm=null,group`): each job's values of those keys are its setting.
An activation variant needs Hydra quoting: `act='"rational[init=gelu]"'`.

A failed run fails its job (non-zero exit, the run's one-line error); SIGTERM records the run as
`interrupted` and exits 143. Under SLURM, Lightning's auto-requeue (`SLURMEnvironment`, on by
default: SIGUSR1, e.g. `#SBATCH --signal=USR1@120`) requeues the job, which resumes from last.ckpt.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from ..results import provenance as results
from .config import RECIPES_DIR, DEFAULT_RECIPE, sweep_acts, validate, run_config
from .signals import Interrupted, install_sigterm
from .sweep import check_data, execute


@hydra.main(config_path=str(RECIPES_DIR), config_name=DEFAULT_RECIPE, version_base=None)
def main(cfg: DictConfig) -> int:
    install_sigterm()  # SIGTERM: the run records `interrupted` and the job fails
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    # a recipe's factors are swept by Hydra here (-m model.norm=null,group): the job's own values are its setting
    setting = {key: OmegaConf.select(cfg, key) for key in (cfg.get("factors") or {})}
    cfg.factors = {}
    validate(cfg)
    acts = sweep_acts(cfg)
    if len(acts) != 1:
        raise SystemExit(f"one activation per job: sweep with -m act={','.join(acts)}")
    seed = 0 if cfg.get("seed") is None else int(cfg.seed)
    check_data(cfg)
    run = run_config(cfg, acts[0], seed, setting)
    try:
        outcome = execute(run, results.run_dir(cfg.results_dir, cfg.recipe, acts[0], seed, setting), progress=False)
    except Interrupted as stop:  # recorded `interrupted`; a requeued job (SLURM) reruns this and resumes
        print(f"{cfg.recipe} {acts[0]} seed {seed}: interrupted by {stop.signal_name}; rerun the job to resume it",
              file=sys.stderr)
        raise SystemExit(stop.exit_code) from None
    print(f"{cfg.recipe} {outcome.act} seed {outcome.seed}: {outcome.status}")
    if outcome.status == "failed":  # Hydra ignores a return value: only an exception makes the job fail
        raise RunFailed(f"{cfg.recipe} {outcome.act} seed {outcome.seed} failed: {outcome.summary.get('error')}")
    return 0


class RunFailed(RuntimeError):
    """The job's run failed; the message is the run's one-line error (it names the file and the fix)."""


if __name__ == "__main__":
    sys.exit(main())

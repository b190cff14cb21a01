"""Hydra entry point for clusters: one job per (activation, seed, setting), any Hydra launcher.

    pip install -e '.[slurm]'
    python -m visionbench.sweep.hydra_app --config-name cifar10_vgg8 -m \
        hydra/launcher=submitit_slurm 'act=relu,rational[init=gelu]' act.version=B seed=0,1,2,3,4

The arguments are `visionbench run`'s (visionbench/config/overrides.py: act=a,b[k=v], act.KEY=,
baseline=, KEY=v1,v2); Hydra's own (`-m`, `--config-name`, `hydra.*`, `hydra/launcher=...`) pass
through. With `-m`, every comma list becomes Hydra jobs (one value each: `act=relu,gelu seed=0,1` is
four jobs); each job composes exactly as `visionbench run` would for its values and writes into the
same results tree (`results_dir`), so `visionbench report runs/<recipe>` aggregates them. Without
`-m` it trains one run locally (seed defaults to 0). A job's setting is its values of the recipe's
factor keys.

A `trainer.portable=true` job (the default recipe sets it) trains in a fresh worker process started with the pinned
kernels and one thread, as `visionbench run` trains it, so its numbers are the same bits as `visionbench run`'s.
A failed or diverged run fails its job (non-zero exit, the run's one-line error); SIGTERM records the run as
`interrupted` and exits 143. Under SLURM, SIGUSR1 (`#SBATCH --signal=USR1@120` with `--requeue`) runs
visionbench's own requeue (sweep/signals.py, which replaces Lightning's auto-requeue handler): the job is
requeued, the run recorded `interrupted` (exit 138), and the requeued job resumes from last.ckpt.
Under `hydra/launcher=submitit_slurm` (or `submitit_local`), submitit's preemption/time-limit signal (SIGUSR2, or
$SUBMITIT_PREEMPT_SIGNAL) stops the run the same way (recorded `interrupted`, last.ckpt the last finished epoch's),
then submitit's own handler requeues the job (sweep/signals.py `hand_over`); the requeued job resumes to the same
bits as an uninterrupted run (tests/test_preemption.py).
"""

from __future__ import annotations

import re
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .. import plugins
from ..config import DEFAULT_RECIPE, RECIPES_DIR, ConfigError, parse, recipe_config, run_config, split_top_level
from ..config.overrides import LIST_KEYS
from ..results import provenance as results
from ..results.safe_paths import UnsafePath
from .acts import sweep_acts
from .preflight import check_finetune_weights, load_config
from .resultsdir import check_writable
from .signals import Interrupted, hand_over, install_sigterm
from .sweep import check_data, execute_jobs

CARRIER = "cli"  # Hydra carries our arguments untouched, as strings under this key: +cli.a0='act=relu'
HYDRA_FLAGS = (
    "--config-name",
    "-cn",
    "--config-path",
    "-cp",
    "--config-dir",
    "-cd",
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--experimental-rerun",
)  # Hydra's flags that take the next argument


def _quoted(arg: str) -> str:
    """`arg` as a Hydra quoted string (a quote, or a backslash before one or at the end, escaped)."""
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), arg) + "'"


def _split(argv: list[str]) -> tuple[list[str], list[str], str]:
    """(Hydra's own arguments, ours in argv order, the recipe --config-name names)."""
    hydra_args, ours, recipe, i = [], [], DEFAULT_RECIPE, 0
    while i < len(argv):
        arg, key = argv[i], argv[i].split("=", 1)[0].lstrip("+~")
        if arg.startswith("-") or "=" not in arg or key == "hydra" or key.startswith(("hydra.", "hydra/")):
            hydra_args.append(arg)
            if arg in HYDRA_FLAGS and i + 1 < len(argv):
                hydra_args.append(argv[i + 1])
                recipe = argv[i + 1] if arg in ("--config-name", "-cn") else recipe
                i += 1
            recipe = arg.split("=", 1)[1] if arg.startswith("--config-name=") else recipe
        else:
            ours.append(arg)
        i += 1
    return hydra_args, ours, recipe


def to_hydra(argv: list[str]) -> list[str]:
    """Our arguments as Hydra carries them: each `key=value` becomes `+cli.a<i>='key=value'`; with
    `-m`, a comma list becomes a Hydra sweep of one value each (`'act=relu','act=gelu'`)."""
    hydra_args, ours, _ = _split(argv)
    multirun = "-m" in hydra_args or "--multirun" in hydra_args
    for n, arg in enumerate(ours):
        key, value = arg.split("=", 1)
        try:
            sweeps = multirun and not key.startswith("act.") and key.lstrip("+") not in LIST_KEYS
            values = split_top_level(value) if sweeps else [value]
        except ValueError:
            values = [value]  # load_config names the bad brackets
        hydra_args.append(f"+{CARRIER}.a{n}=" + ",".join(_quoted(f"{key}={v}") for v in values))
    return hydra_args


def check_sweep(argv: list[str]) -> None:
    """The whole sweep checked once, before Hydra launches a job (ConfigError): `visionbench run`'s
    checks of the same arguments, but for seed, which Hydra sweeps (`seed=0,1,2`)."""
    _, ours, recipe = _split(argv)
    cfg = load_config([f"recipe={recipe}", *(a for a in ours if a.split("=", 1)[0].lstrip("+") != "seed")])
    if cfg.tune.space is not None:  # its retrain depends on the trials' outcome: no list of independent jobs
        raise ConfigError(
            "tune= is a design of `visionbench run` (its trials, then each activation's best retrained); the Hydra "
            "entry point runs independent jobs: run the design with visionbench run",
            "tune.space",
        )


def job_config(cfg: DictConfig, recipe: str) -> tuple[DictConfig, dict]:
    """(the job's checked config, its setting) from Hydra's composed `cfg`: the carried arguments
    composed as `visionbench run` composes them."""
    carried = OmegaConf.to_container(cfg.get(CARRIER) or OmegaConf.create({}))
    args = [f"recipe={recipe}", *(carried[k] for k in sorted(carried, key=lambda k: int(k[1:])))]
    run_cfg = load_config(args, strict_act_keys=False)  # check_sweep asked that some job's act takes each act.KEY
    # a job is one setting: its values of the recipe's factor keys (and of any left on its command line)
    keys = dict.fromkeys([*recipe_config(parse(args).recipe).factors, *run_cfg.factors])
    setting = {key: OmegaConf.select(run_cfg, key) for key in keys}
    run_cfg.factors = {}
    return run_cfg, setting


@hydra.main(config_path=str(RECIPES_DIR), config_name=DEFAULT_RECIPE, version_base=None)
def main(cfg: DictConfig) -> int:
    install_sigterm()  # SIGTERM: the run records `interrupted` and the job fails; submitit's signal: also requeued
    try:
        return _job(cfg)
    except Interrupted as stop:  # recorded `interrupted` (if training); a requeued job reruns this and resumes
        print(f"visionbench hydra_app: interrupted by {stop.signal_name}; rerun the job to resume it", file=sys.stderr)
        hand_over(stop)  # submitit's preemption signal: its handler checkpoints, requeues and exits
        raise SystemExit(stop.exit_code) from None


def _job(cfg: DictConfig) -> int:
    """One job: its run checked, trained (or resumed, or skipped if completed) and its outcome said."""
    try:
        cfg, setting = job_config(cfg, HydraConfig.get().job.config_name)
    except ConfigError as e:
        raise SystemExit(f"visionbench hydra_app: {e}") from None
    acts = sweep_acts(cfg)
    if len(acts) != 1:
        raise SystemExit(f"one activation per job: sweep with -m act={','.join(acts)}")
    seed = 0 if cfg.seed is None else int(cfg.seed)
    try:  # what `visionbench run` checks before its first run, in its words (a label that is no folder name too)
        out = results.run_dir(cfg.results_dir, cfg.recipe, acts[0], seed, setting)
        check_writable(cfg)
        check_finetune_weights(cfg, setting, acts[0], check_data(cfg))
    except (ConfigError, UnsafePath) as e:
        raise SystemExit(f"visionbench hydra_app: {e}") from None
    run = plugins.record(run_config(cfg, acts[0], seed, setting))
    try:
        # execute_jobs, not execute: a `trainer.portable=true` run trains in a fresh worker started with the pinned
        # kernels and one thread (sweep/portable.py), as under `visionbench run`; any other run, in this process
        (outcome,) = execute_jobs([(run, out)], 1, progress=False)
    except Interrupted as stop:  # recorded `interrupted`; a requeued job (SLURM, submitit) reruns this and resumes
        print(
            f"{cfg.recipe} {acts[0]} seed {seed}: interrupted by {stop.signal_name}; rerun the job to resume it",
            file=sys.stderr,
        )
        hand_over(stop)  # submitit's preemption signal: its handler checkpoints, requeues and exits
        raise SystemExit(stop.exit_code) from None
    print(f"{cfg.recipe} {outcome.act} seed {outcome.seed}: {outcome.status}")
    if outcome.status in ("failed", "diverged"):  # Hydra ignores a return value: only an exception fails the job
        raise RunFailed(
            f"{cfg.recipe} {outcome.act} seed {outcome.seed} {outcome.status}: {outcome.summary.get('error')}"
        )
    return 0


class RunFailed(RuntimeError):
    """The job's run failed; the message is the run's one-line error (it names the file and the fix)."""


if __name__ == "__main__":
    try:
        check_sweep(sys.argv[1:])
    except ConfigError as e:
        sys.exit(f"visionbench hydra_app: {e}")
    sys.argv[1:] = to_hydra(sys.argv[1:])
    sys.exit(main())

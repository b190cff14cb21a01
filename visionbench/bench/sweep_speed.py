"""A real sweep at parallel=K against the same runs one after another: aggregate images/s, the GPU's busy share, and
whether every seed gave the same bits (sweep/placement.py, docs/running.md#parallel-many-runs-per-device).

    visionbench bench sweep recipe=cifar10_vgg8 data.name=synthetic data.synthetic.num_train=10240 epochs=1 \\
        --k 1,8 --seeds 8 --device cuda
    visionbench bench sweep recipe=digits_vgg4 epochs=1 --k 1,2 --seeds 2        # the CPU

Each K trains `--seeds` seeds of the recipe's activations with `parallel=K` (K per visible GPU on CUDA; K = 1: at most
`--solo-seeds` of them, one after another) in a fresh results folder of its own, through `visionbench run`'s own
sweep (Lightning, checkpoints, predictions: everything a run does). Per K: the sweep's wall time, the training
images of all its runs over that time (aggregate img/s), its ratio to K = 1, and the GPU busy share its runs
recorded (NVML, `gpu_busy_pct`: under sharing a reading is the whole GPU's). Then the bit check: each seed trained at
K = 1 and at another K compared by its predictions.npz (every logit) and its final weights (sha256 of last.ckpt's
state dict): `same` or `DIFFERENT`. Writes `<out>/<name>.md`, rewritten after each K, the bit check and the
projection: a benchmark stopped part way keeps the K done, and a `partial:` note names what is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import timing
from .fill_workers import state_digest


def projection(text: str) -> tuple[int, int]:
    """`20x60` -> (20 seeds, 60 epochs)."""
    seeds, _, epochs = text.partition("x")
    if not (seeds.isdigit() and epochs.isdigit() and int(seeds) >= 1 and int(epochs) >= 1):
        raise argparse.ArgumentTypeError(f"must be SEEDSxEPOCHS, e.g. 20x60, got {text!r}")
    return int(seeds), int(epochs)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = timing.parser("sweep", __doc__, "recipe=NAME act=... and any recipe override")
    p.add_argument(
        "--k", type=timing.k_list, default=[1, 2], help="runs per device to compare (default 1,2; 1 is added)"
    )
    p.add_argument(
        "--project",
        type=projection,
        default=None,
        metavar="SEEDSxEPOCHS",
        help="also `visionbench estimate`'s projection of that sweep at parallel=auto (e.g. 20x60)",
    )
    timing.add_count(p, "--seeds", 2, "seeds per activation at K > 1 (default 2)")
    timing.add_count(p, "--solo-seeds", 2, "seeds per activation at K = 1, the bit check's references (default 2)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="trainer.accelerator of the runs")
    timing.add_report_options(p, None, "sweep_<recipe>")
    return p.parse_known_args(argv)


def weights_sha256(run_dir: Path) -> str | None:
    """sha256 of the final weights (last.ckpt's state dict, tensors in key order); None without a last.ckpt."""
    from ..results.layout import files

    last = files(run_dir).last
    if not last.exists():
        return None
    return state_digest(torch.load(last, map_location="cpu", weights_only=True)["state_dict"])


def predictions_sha256(run_dir: Path) -> str | None:
    from ..results.layout import files

    path = files(run_dir).predictions
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def sweep_once(overrides: list[str], k: int, seeds: int, device: str, results: Path):
    """(wall seconds, outcomes) of one sweep at parallel=k into `results`."""
    from ..sweep.preflight import load_config
    from ..sweep.sweep import run_sweep

    # on the CPU a run's bits depend on its thread count, which parallel=K shares out: trainer.portable pins every
    # run, K = 1 included, to one thread (sweep/portable.py), so that the bit check compares like with like
    cpu = ["trainer.portable=true"] if device == "cpu" else []
    cfg = load_config(
        [
            *cpu,
            *overrides,
            f"parallel={k}",
            f"seeds={seeds}",
            f"results_dir={results}",
            f"trainer.accelerator={device}",
            "snapshot_epochs=[]",
        ]
    )
    start = time.perf_counter()
    outcomes = run_sweep(cfg, progress=False, on_note=lambda line: print(line, file=sys.stderr))
    return time.perf_counter() - start, outcomes


def main(argv: list[str]) -> int:
    from ..config import ConfigError

    args, overrides = parse_args(argv)
    args.k = args.k if args.k[0] == 1 else [1, *args.k]  # K = 1: the baseline of the ratios and the bit check
    recipe = ([o.split("=", 1)[1] for o in overrides if o.startswith("recipe=")] or ["digits_vgg4"])[-1]
    rows, runs = [], {}
    todo = [f"K={k}" for k in args.k] + ["bit check"] + (["projection"] if args.project else [])
    state = {"checks": None, "projected": "", "failed": ""}
    device = torch.device("cuda" if args.device == "cuda" else "cpu")

    def publish(done: int, final: bool = False) -> None:
        """The report as it stands: rewritten after each K, the bit check and the projection."""
        for row in rows:
            row[6] = row[5] / rows[0][5]
        checks = state["checks"]
        table = timing.markdown(
            ["K per device", "workers", "MPS", "runs", "wall s", "aggregate img/s", "vs K=1", "GPU busy %"], rows
        )
        verdict = (
            "not yet made"
            if checks is None
            else "every seed gave the same bits at every K"
            if checks and all(c[-1] == "same" for c in checks)
            else "SOME SEEDS DIFFER between K"
            if checks
            else "no seed was trained at two K"
        )
        check_table = timing.markdown(["act", "seed", "K", "predictions", "final weights", "bits"], checks or [])
        status = [timing.partial_note(done, len(todo), todo[done:], "parts")] if done < len(todo) else []
        timing.write_report(
            args.name or f"sweep_{recipe}",
            f"A sweep at parallel=K vs one after another: {recipe}",
            "visionbench bench sweep " + " ".join(argv),
            [
                *status,
                *([state["failed"]] if state["failed"] else []),
                timing.machine_line(device),
                "aggregate img/s: the training images of all runs of a sweep over its wall time (start-up, "
                "evaluation and checkpoints included); GPU busy: the runs' NVML readings (— off CUDA)",
                f"bit check: {verdict}",
            ],
            table + "\n\n" + check_table + state["projected"],
            args.out,
            announce=final,
        )

    with tempfile.TemporaryDirectory(prefix="vb-sweep-") as tmp:
        try:
            for i, k in enumerate(args.k):
                seeds = args.solo_seeds if k == 1 else args.seeds
                wall, outcomes = sweep_once(overrides, k, seeds, args.device, Path(tmp) / f"k{k}")
                failed = [
                    f"{o.act} seed {o.seed}: {o.summary.get('error')}" for o in outcomes if o.status != "completed"
                ]
                if failed:
                    state["failed"] = f"failed: K={k}: {len(failed)} run(s) did not complete: {failed[0]}"
                    print(f"visionbench bench sweep: {state['failed'][len('failed: ') :]}", file=sys.stderr)
                    publish(i, final=True)
                    return 1
                images = sum(
                    (o.summary.get("throughput_img_s") or 0) * (o.summary.get("train_time_s") or 0) for o in outcomes
                )
                busy = [o.summary["gpu_busy_pct"] for o in outcomes if o.summary.get("gpu_busy_pct") is not None]
                placed = outcomes[0].summary["environment"]["placement"]
                rows.append(
                    [
                        k,
                        placed["workers"],
                        placed.get("mps"),
                        len(outcomes),
                        wall,
                        images / wall,
                        None,
                        statistics.mean(busy) if busy else None,
                    ]
                )
                runs[k] = {(o.act, o.seed): o.run_dir for o in outcomes}
                publish(i + 1)
        except ConfigError as e:
            print(f"visionbench bench sweep: {e}", file=sys.stderr)
            return 2
        state["checks"] = checks = bit_check(runs)
        publish(len(args.k) + 1)
        if args.project:
            state["projected"] = project(overrides, args, Path(tmp) / "projected")
    publish(len(todo), final=True)
    return 0 if not checks or all(c[-1] == "same" for c in checks) else 1


def project(overrides: list[str], args, results: Path) -> str:
    """`visionbench estimate`'s table and total for --project SEEDSxEPOCHS at parallel=auto, as a report section."""
    from ..sweep.preflight import load_config
    from .estimate import estimate, format_estimate

    seeds, epochs = args.project
    cfg = load_config(
        [
            *overrides,
            f"seeds={seeds}",
            f"epochs={epochs}",
            "parallel=auto",
            f"results_dir={results}",
            f"trainer.accelerator={args.device}",
        ]
    )
    text = format_estimate(estimate(cfg), cfg.recipe)
    return f"\n\n## Projected: {seeds} seeds x {epochs} epochs (visionbench estimate, parallel=auto)\n\n{text}"


def bit_check(runs: dict[int, dict]) -> list[list]:
    """[act, seed, K, predictions, final weights, same|DIFFERENT] for every seed trained at K = 1 and at a K > 1."""
    out = []
    for k, by_run in runs.items():
        if k == 1:
            continue
        for key, run_dir in sorted(by_run.items()):
            solo = runs[1].get(key)
            if solo is None:
                continue
            preds = predictions_sha256(run_dir) == predictions_sha256(solo)
            weights = weights_sha256(run_dir) == weights_sha256(solo)
            out.append(
                [
                    key[0],
                    key[1],
                    k,
                    "same" if preds else "differ",
                    "same" if weights else "differ",
                    "same" if preds and weights else "DIFFERENT",
                ]
            )
    return out

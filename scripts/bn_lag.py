"""How much of a run's test accuracy is lost to BatchNorm running statistics that lag the weights.

    python scripts/bn_lag.py runs/fashion_mnist_zoo/fashion_mnist_slaf   # every completed run below (a run tree:
    python scripts/bn_lag.py runs/fashion_mnist_zoo/fashion_mnist_slaf/*/seed_0   # a record has no checkpoints)

For each completed run with a checkpoint, scores the test split (val when there is none) with the weights of
`checkpoints/best.ckpt` (the epoch the report's `*_at_best_val` metrics read) twice: in eval mode, as
the report does (BatchNorm normalises with its running averages), and with each batch's own statistics
(train-mode BatchNorm, batches of the run's size, nothing updated). A short run with a slow BatchNorm
momentum (003 code's TensorFlow 0.99 = torch 0.01) ends before the running averages catch up with
weights that moved fast: the first number is then far below the second (docs/fashion_mnist.md).
Prints a markdown table: run, eval-mode top-1, batch-statistics top-1, the difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from visionbench.data import create_datamodule
from visionbench.results.layout import files, find_run_dirs, read_config, read_summary
from visionbench.train.run import build_model


def top1(model: torch.nn.Module, loader, batch_stats: bool) -> float:
    """Top-1 % of `model` over `loader`; with `batch_stats`, BatchNorm uses each batch's statistics."""
    model.eval()
    if batch_stats:
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.train()
                m.track_running_stats, m.running_mean, m.running_var = False, None, None
    right = total = 0
    with torch.no_grad():
        for x, y in loader:
            right += int((model(x).argmax(1) == y).sum())
            total += len(y)
    return 100.0 * right / total


def test_loader(cfg: dict, cache: dict):
    """The test loader (val when there is none) of a run config; one per distinct `data:` block and batch."""
    key = json.dumps([cfg["data"], cfg["batch_size"]], sort_keys=True, default=str)
    if key not in cache:  # the split and the test set do not depend on the seed
        dm = create_datamodule(cfg["data"], int(cfg["batch_size"]), int(cfg["seed"]))
        dm.prepare_data()
        dm.setup()
        cache[key] = (dm, dm.test_dataloader() if dm.has_test else dm.val_dataloader())
    return cache[key]


def run_lag(run_dir: Path, cache: dict) -> tuple[float, float]:
    """(eval-mode top-1, batch-statistics top-1) of one run's best.ckpt on its test split."""
    cfg = read_config(run_dir)
    dm, loader = test_loader(cfg, cache)
    state = torch.load(files(run_dir).best, map_location="cpu", weights_only=True)["state_dict"]
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    scores = []
    for batch_stats in (False, True):
        model = build_model(cfg, dm.num_classes, dm.in_chans, dm.img_size)
        model.load_state_dict(weights)
        scores.append(top1(model, loader, batch_stats))
    return scores[0], scores[1]


def _completed(run_dir: Path) -> bool:
    return files(run_dir).best.exists() and (read_summary(run_dir) or {}).get("status") == "completed"


def main(argv: list[str]) -> int:
    if not argv or not all(Path(a).is_dir() for a in argv):
        print(
            "usage: python scripts/bn_lag.py DIR [DIR ...]   (run folders, or a recipe's results folder: "
            "every run below it, e.g. results/fashion_mnist_slaf)",
            file=sys.stderr,
        )
        return 2
    runs = [run for a in argv for run in find_run_dirs(a) if _completed(run)]
    if not runs:
        print(f"no completed run with checkpoints/best.ckpt under {' '.join(argv)}", file=sys.stderr)
        return 2
    print("| run | eval mode (running statistics) | batch statistics | lost to the running statistics |")
    print("| --- | ---: | ---: | ---: |")
    cache: dict = {}
    for run in runs:
        ours, batch = run_lag(run, cache)
        print(f"| {run.parent.name}/{run.name} | {ours:.2f} | {batch:.2f} | {batch - ours:+.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

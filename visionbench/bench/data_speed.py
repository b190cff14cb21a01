"""Images per second of the training data alone (no model): the loader path against `data.on_device=true`.

    visionbench bench data recipe=digits_vgg4_aug
    visionbench bench data recipe=synthetic_vgg4 data.synthetic.num_train=10000 data.augment.crop_pad=4 \\
        data.augment.hflip=0.5 batch_size=512 --device cuda

Both paths are built from the same recipe (the loader path with the recipe's `data.num_workers`), warmed by
one epoch, then timed a whole epoch each, in turn, for `--rounds` rounds (a new epoch each round, as a run
draws): the table gives the median images/s and the median of the per-round ratios, so load from other
processes hits both sides alike. On CUDA the on-device batches are synchronised before the clock stops.
Writes `results/bench/<name>.md`. A training epoch's rate is a run's `throughput_img_s` (summary.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from . import timing


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = timing.parser("data", __doc__, "recipe=NAME and any recipe override")
    timing.add_count(p, "--rounds", 5, "timed epochs per path (default 5)")
    p.add_argument("--device", type=timing.device_name, default="cpu", help="where data.on_device keeps the set")
    timing.add_report_options(p, None, "data_<recipe>")
    return p.parse_known_args(argv)


def epoch_rate(loader, epoch: int, device: torch.device) -> float:
    """Images per second of one whole epoch of `loader`."""
    loader.sampler.set_epoch(epoch)
    start, images = time.perf_counter(), 0
    for x, _ in loader:
        images += int(x.shape[0])
    timing.synchronize(device)
    return images / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    from omegaconf import OmegaConf

    from ..config import ConfigError
    from ..data import DatasetNotFoundError, create_datamodule
    from ..sweep.preflight import load_config
    from ..sweep.sweep import one_line_message

    args, overrides = parse_args(argv)
    device = torch.device(args.device)
    try:
        cfg = load_config(overrides)
        block = OmegaConf.to_container(cfg.data, resolve=True)
        loaders = {}
        for on_device in (False, True):
            dm = create_datamodule({**block, "on_device": on_device}, batch_size=int(cfg.batch_size), seed=0)
            loader = dm.train_dataloader()
            if on_device:
                loader.device = device
            loaders["on device" if on_device else "loader"] = loader
    except (ConfigError, ValueError, DatasetNotFoundError) as e:  # a missing dataset's message is several lines
        print(f"visionbench bench data: {one_line_message(str(e))}", file=sys.stderr)
        return 2
    rates: dict[str, list[float]] = {k: [] for k in loaders}
    for loader in loaders.values():
        epoch_rate(loader, 0, device)  # warm: workers start, the set is moved and padded
    for r in range(args.rounds):
        for name, loader in loaders.items():
            rates[name].append(epoch_rate(loader, r + 1, device))
        print(
            f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} img/s" for k, v in rates.items()),
            file=sys.stderr,
            flush=True,
        )
    ratio = statistics.median(a / b for a, b in zip(rates["on device"], rates["loader"]))
    rows = [
        ["loader", f"{cfg.data.num_workers} workers, cpu", statistics.median(rates["loader"]), 1.0],
        ["on device", device.type, statistics.median(rates["on device"]), ratio],
    ]
    header = ["path", "where", "images/s (median)", "× loader path (median of rounds)"]
    notes = [
        timing.machine_line(device),
        f"recipe {cfg.recipe}: {cfg.data.name}, batch {cfg.batch_size}, augment crop_pad="
        f"{cfg.data.augment.crop_pad} hflip={cfg.data.augment.hflip}; {args.rounds} rounds of one epoch per path",
    ]
    command = "visionbench bench data " + " ".join(argv)
    timing.write_report(
        args.name or f"data_{cfg.recipe}",
        "Training data alone: loader path vs data.on_device",
        command.strip(),
        notes,
        timing.markdown(header, rows),
        args.out,
    )
    return 0

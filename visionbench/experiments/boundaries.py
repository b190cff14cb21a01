"""Decision boundaries of a tiny MLP per activation on 2-D toy data (paper 001 Sec 4.2, App M).

    visionbench plot boundaries --acts relu,gelu,rational,hermite --out boundaries.png
    visionbench plot boundaries --acts relu,silu --datasets moons,spirals --steps 150 --out b.png

    >>> from visionbench.experiments.boundaries import plot_decision_boundaries
    >>> plot_decision_boundaries(["relu", "gelu"], "boundaries.png", datasets=("moons", "circles"))

Each panel is a 2-64-64-2 MLP whose two hidden activations are built by
`visionbench.activations.create(name)` (one module per layer, so learnable coefficients are
per layer as in the real models), trained full-batch with Adam in plain torch; the same data,
initial weights of the linear layers and steps for every activation, so only the activation
differs. Rows are datasets, columns activations. Runs in about a second per panel on a CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch, the activations and matplotlib are imported where a panel is trained or drawn, so that
    import torch  # `visionbench plot -h` answers before them (tests/test_cli_table.py)
    from torch import nn

DATASETS = ("moons", "circles", "spirals", "classification")
GRID = 150  # grid points per axis for the decision regions


def toy_data(name: str, n: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standardised 2-D points and 0/1 labels of a noisy toy problem."""
    from sklearn import datasets

    rng = np.random.default_rng(seed)
    if name == "moons":
        x, y = datasets.make_moons(n, noise=0.2, random_state=seed)
    elif name == "circles":
        x, y = datasets.make_circles(n, noise=0.1, factor=0.5, random_state=seed)
    elif name == "spirals":
        t = np.sqrt(rng.uniform(0.05, 1, n // 2)) * 3 * np.pi  # sqrt: even density along the arm
        arm = np.stack([t * np.cos(t), t * np.sin(t)], 1)
        x = np.concatenate([arm, -arm]) + rng.normal(0, 0.5, (2 * (n // 2), 2))
        y = np.repeat([0, 1], n // 2)
    elif name == "classification":
        x, y = datasets.make_classification(
            n, n_features=2, n_redundant=0, n_informative=2, n_clusters_per_class=1, flip_y=0.05, random_state=seed
        )
    else:
        raise ValueError(f"unknown toy dataset {name!r}; choose from {', '.join(DATASETS)}")
    x = (x - x.mean(0)) / x.std(0)
    return x.astype(np.float32), y.astype(np.int64)


def mlp(act: str, width: int = 64) -> nn.Sequential:
    """2-width-width-2 MLP with a fresh `act` module after each hidden layer."""
    from torch import nn

    from visionbench import activations

    return nn.Sequential(
        nn.Linear(2, width),
        activations.create(act),
        nn.Linear(width, width),
        activations.create(act),
        nn.Linear(width, 2),
    )


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 300, lr: float = 1e-2) -> float:
    """Full-batch Adam on cross-entropy; returns the final training accuracy (0-1)."""
    import torch

    from ..train.step import classification_step

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = classification_step(model, opt, x, y, skip_nonfinite=True)
        if not torch.isfinite(loss):  # a diverging activation shows as what it reached, not a crash
            break
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def fit_panel(act: str, dataset: str, seed: int = 0, steps: int = 300):
    """Train one MLP; returns (x, y, grid xx, grid yy, P(class 1) on the grid, train accuracy)."""
    import torch

    from ..activations.base import one_thread

    x, y = toy_data(dataset, seed=seed)
    with torch.random.fork_rng(devices=[]), one_thread():  # seeded locally: caller's RNG untouched
        torch.manual_seed(seed)
        model = mlp(act)
        acc = train(model, torch.from_numpy(x), torch.from_numpy(y), steps=steps)
        lo, hi = x.min(0) - 0.5, x.max(0) + 0.5
        xx, yy = np.meshgrid(np.linspace(lo[0], hi[0], GRID), np.linspace(lo[1], hi[1], GRID))
        grid = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], 1).astype(np.float32))
        with torch.no_grad():
            prob = torch.softmax(model(grid), 1)[:, 1].reshape(GRID, GRID).numpy()
    return x, y, xx, yy, np.nan_to_num(prob, nan=0.5), acc


def plot_decision_boundaries(acts, out_path, seed: int = 0, datasets=("moons",), steps: int = 300) -> Path:
    """Draw one panel per (dataset, activation): decision regions, boundary and the points.

    Args:
        acts: activation names from the registry, e.g. `["relu", "gelu", "rational", "hermite"]`.
        out_path: PNG to write (parent directories are created).
        seed: seeds the data and every network's initial weights.
        datasets: toy problems, rows of the figure (see `DATASETS`).
        steps: full-batch Adam steps per network.

    Returns:
        The written path.

    Raises:
        ValueError: unknown activation or dataset (listing the known ones), before any training.
    """
    from matplotlib.figure import Figure

    from visionbench import activations

    acts = [activations.resolve(a) for a in acts]  # fail fast with the list of known names
    if not acts:
        raise ValueError("no activations given")
    for name in datasets:
        if name not in DATASETS:
            raise ValueError(f"unknown toy dataset {name!r}; choose from {', '.join(DATASETS)}")
    fig = Figure(figsize=(2.8 * len(acts), 2.8 * len(datasets)), layout="constrained")
    axes = fig.subplots(len(datasets), len(acts), squeeze=False)
    for row, dataset in enumerate(datasets):
        for col, act in enumerate(acts):
            ax = axes[row, col]
            x, y, xx, yy, prob, acc = fit_panel(act, dataset, seed=seed, steps=steps)
            ax.contourf(xx, yy, prob, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.75)
            ax.contour(xx, yy, prob, levels=[0.5], colors="k", linewidths=1.0)
            ax.scatter(x[:, 0], x[:, 1], c=y, cmap="RdBu_r", s=9, edgecolors="k", linewidths=0.3)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{act}: train acc {100 * acc:.0f}%", fontsize=9)
            if col == 0:
                ax.set_ylabel(dataset)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="visionbench plot", description="Stand-alone figures.")
    sub = p.add_subparsers(dest="what", required=True)
    b = sub.add_parser("boundaries", help="decision boundaries of a tiny MLP per activation on 2-D toy data")
    b.add_argument("--acts", default="relu,gelu,rational,hermite", help="comma-separated activation names")
    b.add_argument("--out", required=True, help="PNG file to write")
    b.add_argument("--datasets", default="moons", help=f"comma-separated: {','.join(DATASETS)}")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--steps", type=int, default=300, help="full-batch Adam steps per network")
    return p


def main(argv: list[str] | None = None) -> int:
    """`visionbench plot boundaries --acts relu,gelu --out FILE`: 0 on success, 2 on a usage error
    (an unknown activation or dataset: the message lists the known ones)."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    acts = [a.strip() for a in args.acts.split(",") if a.strip()]
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    try:
        out = plot_decision_boundaries(acts, args.out, seed=args.seed, datasets=datasets, steps=args.steps)
    except ValueError as exc:
        print(f"visionbench plot: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}", file=sys.stderr)
    return 0

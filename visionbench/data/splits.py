"""Fixed, stratified index splits: the held-out validation part of train, and size caps.

Both depend only on the labels and a fixed `random_state`, never on the training seed, so
every seed and every activation of a sweep sees the same images in the same split.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

SPLIT_STATE = 0  # fixed on purpose: the split is part of the benchmark, not of a run


def stratified_split(
    targets: np.ndarray, held_out: float, random_state: int = SPLIT_STATE
) -> tuple[np.ndarray, np.ndarray]:
    """Split `range(len(targets))` into (kept, held_out) with class proportions preserved.

    Args:
        targets: integer class label of every sample.
        held_out: fraction (0, 1) of the samples that goes to the held-out part.
        random_state: seed of the split; the default keeps it identical across runs.

    Returns:
        Sorted index arrays (kept, held_out); sorted keeps file access roughly sequential.
    """
    targets = np.asarray(targets)
    indices = np.arange(len(targets))
    try:
        kept, held = train_test_split(indices, test_size=held_out, stratify=targets, random_state=random_state)
    except ValueError as err:  # e.g. a class with a single image, or fewer held-out images than classes
        raise ValueError(
            f"cannot carve a stratified split of {held_out:g} from {len(targets)} images "
            f"of {len(np.unique(targets))} classes: {err}"
        ) from err
    return np.sort(kept), np.sort(held)


def stratified_limit(targets: np.ndarray, n: int, random_state: int = SPLIT_STATE) -> np.ndarray:
    """Positions of at most `n` samples, taken round-robin over classes (balanced, deterministic).

    Round-robin rather than proportional sampling so that a smoke-test cap smaller than
    the class count still spreads over as many classes as possible and never fails.

    Args:
        targets: integer class label of every sample.
        n: how many to keep; all are kept when `n >= len(targets)`.
        random_state: seed of the within-class order.

    Returns:
        Sorted positions into `targets`.
    """
    targets = np.asarray(targets)
    if n >= len(targets):
        return np.arange(len(targets))
    perm = np.random.default_rng(random_state).permutation(len(targets))
    cls = targets[perm]
    by_class = np.argsort(cls, kind="stable")
    sorted_cls = cls[by_class]
    # rank of each sample inside its class (in permuted order): 0 for the first of each class, ...
    rank = np.empty(len(targets), dtype=np.int64)
    rank[by_class] = np.arange(len(targets)) - np.searchsorted(sorted_cls, sorted_cls, side="left")
    take = perm[np.argsort(rank, kind="stable")[:n]]
    return np.sort(take)

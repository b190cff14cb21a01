"""The seed, split by the source of noise it drives (docs/running.md#where-the-noise-comes-from).

A run's `seed` sets three sources of randomness; `seed_init`, `seed_order`, `seed_aug` override one each, and
`noise` (an arm of a `noise=init,order,aug` design) says which of them follow `seed`, the others held at `FIXED`:

    init    the weights and the activations' coefficients at initialisation (and the batch LSUV draws)
    order   the training sampler's shuffle (which images share a batch, in which step)
    aug     every draw during training: augmentation (per sample, from (seed, epoch, position)), dropout masks,
            Mixup/CutMix

    source_seeds(seed=3, noise="all")                  # Seeds(init=3, order=3, aug=3): the ordinary run
    source_seeds(seed=3, noise="order")                # Seeds(init=10000, order=3, aug=10000): only the order varies
    source_seeds(seed=3, noise="all", seed_init=0)     # Seeds(init=0, order=3, aug=3): the init held fixed
"""

from __future__ import annotations

from typing import NamedTuple

SOURCES = ("init", "order", "aug")
ALL = "all"
ARMS = (ALL, *SOURCES)  # the values of `noise`
# the seed of a source an arm holds still: one no run of a sweep takes (seeds=N trains 0..N-1, N <= 10,000), so
# the arms share no run with each other or with the ordinary arm (their variances are independent estimates)
FIXED = 10_000


class Seeds(NamedTuple):
    """The seed of each source of one run."""

    init: int
    order: int
    aug: int


def source_seeds(
    seed: int,
    noise: str = ALL,
    seed_init: int | None = None,
    seed_order: int | None = None,
    seed_aug: int | None = None,
) -> Seeds:
    """Each source's seed: its own key when set, else `seed` when the arm `noise` varies it, else `FIXED`."""
    given = {"init": seed_init, "order": seed_order, "aug": seed_aug}
    return Seeds(
        **{s: int(given[s]) if given[s] is not None else int(seed) if noise in (ALL, s) else FIXED for s in SOURCES}
    )


def of(cfg) -> Seeds:
    """The source seeds of a run config (typed `RunConfig` or config.yaml's dict)."""
    get = cfg.get if isinstance(cfg, dict) else lambda k, d=None: getattr(cfg, k, d)
    return source_seeds(get("seed") or 0, get("noise") or ALL, get("seed_init"), get("seed_order"), get("seed_aug"))


def contradiction(noise: list[str], seeds, given: dict) -> str | None:
    """Why a sweep's seed keys contradict each other (None: they do not). `noise`: the arms swept, `seeds`: the
    sweep's `seeds` value, `given`: {source: the value of its seed_<source> key, or None}."""
    fixed = [s for s in SOURCES if given.get(s) is not None]
    for arm in noise:
        if arm in fixed:
            return (
                f"seed_{arm}={given[arm]} holds still the source the arm noise={arm} varies; drop seed_{arm}, "
                f"or drop {arm} from noise="
            )
    design = [a for a in noise if a != ALL]
    if design and seeds == "auto":
        return (
            "noise= is a design of fixed size: give seeds=N (N >= 2 seeds per arm), not seeds=auto, which decides "
            "per activation, not per source"
        )
    if design and isinstance(seeds, int) and seeds < 2:
        return f"noise={','.join(design)} with seeds={seeds}: a source's variance needs at least 2 seeds per arm; give seeds=N, N >= 2"
    if len(fixed) == len(SOURCES) and (seeds == "auto" or seeds > 1):
        return (
            f"seed_init, seed_order and seed_aug are all set: every seed of seeds={seeds} would train the same "
            "network; leave one source to follow the seed, or give seeds=1"
        )
    return None

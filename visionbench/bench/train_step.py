"""Training-step throughput and memory of a recipe's model with an activation vs another, in one run
(`--compare-to NAME`; default: the model's own activation).

    visionbench bench train recipe=cifar10_vgg8 act=rational                   # vs the model's own ReLU
    visionbench bench train recipe=cifar10_convnext_t act=hermite --steps 5    # vs GELU, 32 px, batch 512
    visionbench bench train recipe=cifar10_vgg8 act=rational --compare-to leaky_relu batch_size=64
    visionbench bench train recipe=cifar10_vgg8 act=rational --device cuda trainer.precision=bf16-mixed \
        trainer.channels_last=true

A step is forward, cross-entropy, backward and the recipe's optimizer step on a fixed synthetic
batch of the recipe's size, on `--device`, with the recipe's `trainer.precision`, `channels_last`
and `compile` applied as a run applies them (`TrainStep`). Both models are built as the sweep
builds them (`build_model`), warmed up (the first steps compile the fused kernels: reported as
warm-up time), then timed in alternating steps: img/s are medians, the ratio is the median of
per-step ratios. On CUDA also the GPU time of a step by CUDA events, L2 flushed before each
(`gpu_timing`: another `--steps` alternating steps each). Memory: bytes autograd saves for backward in
one step (any device) and peak allocated (CUDA). Timed under the determinism a run of the config sets on CUDA
(`--deterministic`, default: trainer.deterministic, true unless overridden: `determinism.py`); the report is rewritten
after each phase (warm-up, timed steps, the rest), so a benchmark stopped part way keeps what it measured and says
what is missing (`partial:`).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import torch

from ..activations import fused
from ..config import RunConfig
from ..train.step import classification_step
from . import determinism, gpu_timing, timing

DEFAULT_STEPS = 10


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = timing.parser(
        "train", __doc__, "recipe=NAME act=NAME and any recipe override (batch_size=64, model.norm=group, ...)"
    )
    p.add_argument(
        "--compare-to", metavar="ACT", default=None, help="the activation timed beside act= (default: the model's own)"
    )
    timing.add_count(p, "--steps", DEFAULT_STEPS, f"timed steps per model (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per model first (default 2)")
    p.add_argument("--device", type=timing.device_name, default="cpu")
    p.add_argument(
        "--deterministic",
        type=determinism.settings,
        default=None,
        metavar="{on,off,both}",
        help="deterministic algorithms while timing (default: on where a run of the config sets them on CUDA, "
        "trainer.deterministic or trainer.portable; both: a table each)",
    )
    timing.add_report_options(p, None, "train_<recipe>_<act>")
    return p.parse_known_args(argv)


def input_shape(cfg) -> tuple[int, int, int]:
    """(num_classes, in_chans, img_size) of the recipe's dataset, without reading the dataset."""
    from ..data import DATAMODULES

    d = cfg.data
    if d.name == "synthetic":
        s = d.synthetic
        return int(s.num_classes), int(s.in_chans), int(d.img_size or s.img_size)
    cls = DATAMODULES[d.name]
    return cls.num_classes, cls.in_chans, int(d.img_size or cls.native_size or cls.default_img_size)


# Lightning's `precision` values (its legacy spellings included) -> the dtype they compute in
MIXED_DTYPES = {
    "bf16-mixed": torch.bfloat16,
    "bf16": torch.bfloat16,
    "16-mixed": torch.float16,
    "16": torch.float16,
    16: torch.float16,
}
TRUE_DTYPES = {
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "64-true": torch.float64,
    "64": torch.float64,
    64: torch.float64,
}


class TrainStep:
    """One optimisation step of `model` on a fixed batch, with the run's own optimizer
    (`train.optim.build_optimizer`: the recipe's SGD/AdamW over the same parameter groups) and the
    run's speed levers as `train.run.train_run` applies them (`run`: typed, `config.typed`): `trainer.precision` (`*-mixed`:
    torch.autocast around forward and loss; `*-true`: model and batch cast), `trainer.channels_last`
    (model and batch NHWC) and `trainer.compile` (nn.Module.compile: the warm-up pays the compile).
    Without loss scaling for 16-mixed (its cost is one multiply). `self.model` and `self.x` are the
    converted ones."""

    def __init__(self, model: torch.nn.Module, run: RunConfig, x: torch.Tensor, y: torch.Tensor):
        from ..train.optim import build_optimizer
        from ..train.run import compile_model

        t = run.trainer
        self.autocast_dtype = MIXED_DTYPES.get(t.precision)
        if t.precision in TRUE_DTYPES:
            model, x = model.to(TRUE_DTYPES[t.precision]), x.to(TRUE_DTYPES[t.precision])
        if t.channels_last and x.dim() == 4:  # as train_run + ClassificationModule._images
            model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
        self.model, self.x, self.y = model.train(), x, y
        self.opt = build_optimizer(model, run.optim, len(x))  # the lr does not change a step's cost
        self.smoothing = run.loss.label_smoothing
        compile_model(model, t)  # in place, after the optimizer took the parameters (as train_run)

    def __call__(self) -> None:
        classification_step(self.model, self.opt, self.x, self.y, self.smoothing, autocast_dtype=self.autocast_dtype)

    def evaluate(self) -> None:
        """One forward of the batch in eval mode without autograd (a validation batch; Lightning's
        inference mode and the same autocast); the model is left in train mode."""
        self.model.eval()
        try:
            with (
                torch.inference_mode(),
                torch.autocast(self.x.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None),
            ):
                self.model(self.x)
        finally:
            self.model.train()


def levers(trainer) -> str:
    """The `trainer:` speed levers a step ran with, for the report's notes."""
    return (
        f"trainer.precision={trainer.precision}, channels_last={str(bool(trainer.channels_last)).lower()}, "
        f"compile={str(bool(trainer.compile)).lower()}"
    )


HEADER = [
    "activation",
    "step ms",
    "img/s",
    "× baseline step",
    "GPU ms",
    "× baseline (GPU)",
    "kernels",
    "saved for backward MB",
    "peak MB (CUDA)",
]
# what a setting's table is filled by, in order: the report is rewritten after each
PHASES = ("warm-up", "timed steps", "GPU time and memory")


def main(argv: list[str]) -> int:
    from ..config import ConfigError
    from ..sweep.acts import sweep_acts
    from ..sweep.preflight import load_config

    args, overrides = parse_args(argv)
    baseline = args.compare_to
    try:
        if any(a.split("=", 1)[0].lstrip("+") in ("baseline", "report.baseline") for a in overrides):
            raise ConfigError(
                "baseline= names the report's baseline (the t-test's reference of `visionbench run`), "
                "not an activation to time; give --compare-to NAME to time one beside act="
            )
        cfg = load_config(overrides)
        acts = sweep_acts(cfg)
        if len(acts) != 1:
            raise ConfigError(f"give one activation (act=NAME), got act={cfg.act}")
        act = acts[0]
        num_classes, in_chans, img_size = input_shape(cfg)
    except (ConfigError, ValueError) as e:
        print(f"visionbench bench train: {e}", file=sys.stderr)
        return 2
    if args.deterministic is None:  # what a run of this config sets on CUDA (train/trainer.py `determinism`)
        args.deterministic = [cfg.trainer.deterministic or cfg.trainer.portable]
    determinism.prepare(args.deterministic, torch.device(args.device))  # before CUDA starts
    with fused.configured(cfg.trainer.kernels):  # the kernels a run of this config trains with (the variable wins)
        return _time_steps(args, argv, cfg, act, baseline, (num_classes, in_chans, img_size))


def measure(steps: dict[str, TrainStep], args: argparse.Namespace, device: torch.device, publish) -> dict:
    """One setting's figures, phase by phase (`PHASES`), `publish(figures, phases done)` after each."""
    m: dict = {}
    m["warm"] = {role: sum(timing.timed(s, device) for _ in range(args.warmup)) for role, s in steps.items()}
    publish(m, 1)
    m["times"] = timing.rounds(steps, args.steps, device)
    publish(m, 2)
    m["gpu"] = gpu_timing.event_rounds(steps, args.steps, device)
    m["kernels"] = {role: gpu_timing.kernel_count(s, device) for role, s in steps.items()}
    m["saved"] = {role: timing.saved_bytes(s) for role, s in steps.items()}
    m["peak"] = {role: timing.peak_bytes(s, device) for role, s in steps.items()}
    publish(m, 3)
    return m


def table_rows(m: dict, labels: dict[str, str], batch: int) -> list[list]:
    """The baseline's and the activation's rows from one setting's figures so far ("—" where not yet measured)."""
    times, gpu = m.get("times"), m.get("gpu")
    rows = []
    for role, label in labels.items():
        t = statistics.median(times[role]) if times else None
        ratio = None if not times else timing.median_ratio(times["act"], times["baseline"]) if role == "act" else 1.0
        gpu_ratio = None if not gpu else timing.median_ratio(gpu["act"], gpu["baseline"]) if role == "act" else 1.0
        peak = (m.get("peak") or {}).get(role)
        saved = (m.get("saved") or {}).get(role)
        rows.append(
            [
                label,
                None if t is None else 1e3 * t,
                None if t is None else batch / t,
                ratio,
                statistics.median(gpu[role]) if gpu else None,
                gpu_ratio,
                (m.get("kernels") or {}).get(role),
                None if saved is None else saved / 2**20,
                None if peak is None else peak / 2**20,
                (m.get("warm") or {}).get(role),
            ]
        )
    return rows


def _time_steps(
    args: argparse.Namespace, argv: list[str], cfg, act: str, baseline: str | None, shape: tuple[int, int, int]
) -> int:
    """Time the baseline's and the activation's train steps, alternating, under each determinism setting asked
    for, and write the report after every phase (a benchmark stopped part way keeps what it measured)."""
    from ..config import run_config, typed
    from ..train.run import build_model

    num_classes, in_chans, img_size = shape
    device = torch.device(args.device)
    batch = int(cfg.batch_size)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, in_chans, img_size, img_size, generator=gen).to(device)
    y = torch.randint(0, num_classes, (batch,), generator=gen).to(device)

    steps: dict[str, TrainStep] = {}
    for role, name in (("baseline", baseline), ("act", act)):
        run = typed(run_config(cfg, act, 0))
        if role == "baseline":
            run = dataclasses.replace(run, act=name, act_options={})  # None: the model's own activation
        torch.manual_seed(0)
        model = build_model(run, num_classes, in_chans, img_size).to(device)
        steps[role] = TrainStep(model, run, x, y)
    report = getattr(steps["act"].model, "swap_report", None)
    replaced = sorted({k.rsplit(".", 1)[-1] for k in report.counts()}) if report else []
    own = baseline or f"{'/'.join(replaced) or 'own'} (model's own)"
    labels = {"baseline": own, "act": act}

    both = len(args.deterministic) > 1
    header = [*HEADER, f"warm-up s ({args.warmup} steps{', incl. compile' if not both else ''})"]
    notes = [
        timing.machine_line(device),
        f"recipe {cfg.recipe}: model {cfg.model.name}, batch {batch} x {in_chans}x{img_size}x{img_size} "
        f"synthetic, optimizer {cfg.optim.name}, {args.steps} timed steps per model, alternating",
        f"{len(report) if report else 0} activation modules swapped for {act}",
        "speed levers: " + levers(cfg.trainer) + f"; kernels {fused.switch()}",
        *[determinism.describe(on) for on in args.deterministic],
        *(["warm-up: the first setting's includes compiling, the second's does not"] if both else []),
        "× baseline: median of per-step ratios; img/s: batch / median step time",
        (
            "GPU ms: CUDA events around each step, L2 flushed before each (as triton.testing.do_bench), median of "
            f"{args.steps} alternating steps; × baseline (GPU): median of per-step ratios; kernels: CUDA kernels "
            "one step launches (torch.profiler)"
            if device.type == "cuda"
            else f"GPU ms, × baseline (GPU), kernels: CUDA events and the profiler, CUDA only: — on {device.type}"
        ),
    ]
    name = args.name or f"train_{cfg.recipe}_{act}"
    todo = [(on, phase) for on in args.deterministic for phase in PHASES]
    sections: list[tuple[bool, dict]] = []

    def publish(done: int, final: bool = False) -> None:
        left = [phase + (f" (deterministic {'on' if on else 'off'})" if both else "") for on, phase in todo[done:]]
        parts = [
            (f"### deterministic algorithms {'on' if on else 'off'}\n\n" if both else "")
            + timing.markdown(header, table_rows(m, labels, batch))
            for on, m in sections
        ]
        timing.write_report(
            name,
            f"Training step: {cfg.model.name} with {act} vs {own}",
            "visionbench bench train " + " ".join(argv),
            ([timing.partial_note(done, len(todo), left, "phases")] if left else []) + notes,
            "\n\n".join(parts),
            args.out,
            announce=final,
        )

    for i, on in enumerate(args.deterministic):
        sections.append((on, {}))

        def phase_done(m: dict, k: int, i: int = i, on: bool = on) -> None:
            sections[i] = (on, m)
            publish(i * len(PHASES) + k)

        with determinism.algorithms(on):  # both models alike
            measure(steps, args, device, phase_done)
    publish(len(todo), final=True)
    return 0

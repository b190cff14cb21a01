"""The GPU window's stages and the rule that gives each its time (scripts/gpu_window.py runs them; docs/bench.md,
"The GPU window"). Imports nothing of visionbench: the window runs where visionbench's imports may fail.

The stages run in the order of what they decide: the kernels compiled first (in parallel), the activations' GPU times
(shared coefficients, then per-channel), the cifar10_vgg8 rational step against ReLU, the seeds per GPU (fill_vgg8),
then the rest. Each has a cap and a least time: their caps and the window's own seconds (`OVERHEAD_S`) add up to at
most the default budget, 360 s. A stage is given its cap plus what the stages before it left unused, never more than
the time left less the later stages' caps, nor more than is left (`seconds_for`); a stage with less than its least
time left is skipped. A stage that takes a budget itself (`bench fill --budget`) is handed the time it was given,
less a margin for its own ending.

A later issue appends its own stage with `bench_stage(...)` or `stage(...)` (and takes its cap from the others').
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: on the stages' PYTHONPATH (nothing is installed)
BUDGET_S = 360.0  # a lent GPU's window: 6 minutes, kernel compilation included
START_S = 5.0  # the window's own start before its first stage: python, torch's import, the card's name
GRACE_S = 10.0  # a stage stopped at its time: this long to write what it has, then SIGKILL
OVERHEAD_S = START_S + GRACE_S  # the window's own seconds, counted in the plan beside the stages' caps


@dataclass(frozen=True)
class Window:
    """What every stage's command is built from."""

    device: str  # "cuda" or "cpu" (cpu: the dry run)
    out: Path

    @property
    def dry(self) -> bool:
        return self.device == "cpu"


@dataclass(frozen=True)
class Stage:
    name: str
    what: str  # what it runs: one line for the summary
    decides: str  # what its result decides: one line for --plan
    command: Callable[[Window, float], list[str]]  # the subprocess's arguments after `python`, given its seconds
    report: Callable[[Window], str]  # the file it writes into the out dir
    cap: float  # the seconds it is planned to take at most
    least: float  # skipped when less than this is left
    env: dict[str, str] = field(default_factory=dict)  # added to the stages' environment
    stop_signal: int = signal.SIGTERM  # sent at its time (pytest writes its JUnit file on SIGINT)


STAGES: list[Stage] = []


def stage(
    name: str,
    what: str,
    decides: str,
    command: Callable[[Window, float], list[str]],
    report: Callable[[Window], str],
    cap: float,
    least: float,
    env: dict[str, str] | None = None,
    stop_signal: int = signal.SIGTERM,
) -> Stage:
    """Append a stage to the window (run in registration order)."""
    if any(s.name == name for s in STAGES):
        raise ValueError(f"stage {name!r} is registered twice")
    if not 0 < least <= cap:
        raise ValueError(f"stage {name!r}: its least time must be > 0 and at most its cap, got {least} and {cap}")
    STAGES.append(Stage(name, what, decides, command, report, cap, least, dict(env or {}), stop_signal))
    return STAGES[-1]


def bench_stage(
    name: str,
    what: str,
    decides: str,
    args: list[str],
    dry: list[str],
    cap: float,
    least: float,
    budget_margin: float | None = None,
) -> Stage:
    """A `visionbench bench` stage writing <out>/<name>_<device>.md; `dry` is appended in the dry run (the last of
    a repeated flag wins: tiny sizes, one or two repeats). `budget_margin`: the benchmark takes `--budget`, handed
    the stage's seconds less this margin (its own ending: workers stopped, the report written)."""

    def command(w: Window, seconds: float) -> list[str]:
        budget = [] if budget_margin is None else ["--budget", f"{max(1.0, seconds - budget_margin):.0f}"]
        return [
            "-m",
            "visionbench",
            "bench",
            *args,
            "--device",
            w.device,
            "--out",
            str(w.out),
            "--name",
            f"{name}_{w.device}",
            *(dry if w.dry else []),
            *budget,
        ]

    return stage(name, what, decides, command, lambda w: f"{name}_{w.device}.md", cap, least)


def seconds_for(stages: list[Stage], i: int, left: float) -> float:
    """The seconds stage `i` is given with `left` seconds of the window left: its cap plus what the stages before it
    left unused (the time left less the caps of the stages after it), and never more than is left."""
    later = sum(s.cap for s in stages[i + 1 :])
    return min(left, max(stages[i].cap, left - later))


def planned(stages: list[Stage]) -> float:
    """The window's planned seconds: the stages' caps and its own."""
    return OVERHEAD_S + sum(s.cap for s in stages)


# The caps are estimates, not measurements (sum: 345 s; with OVERHEAD_S, 360). On the first H100 (2026-11-25,
# torch.compile kernels) compiling took 0.8-8.3 s per activation case, one after another (activations_cuda.md, 19
# cases), and a training step's warm-up 0.5-15 s (train_*_cuda.md); how long each whole command ran was not recorded:
# gpu_window.md records it (its seconds and the time each stage was given).
SHAPE = "64,128,32,32"  # the activation stages' input, fp32: the warm-up compiles for it
DRY_SHAPE = "2,8,8,8"

bench_stage(
    "warm_kernels",
    f"every learnable activation's first forward + backward on [{SHAPE}] fp32, shared and per-channel, one "
    "process per core: Triton's kernels compiled side by side into its on-disk cache",
    "nothing itself: the activation stages then find their kernels compiled, not one after another in their time",
    ["warm", "--shape", SHAPE, "--dtype", "float32"],
    ["--shape", DRY_SHAPE],
    cap=35,
    least=15,
)
bench_stage(
    "activations",
    f"every family's forward + backward vs GELU, fp32 [{SHAPE}], deterministic algorithms on (as a run)",
    "each family's GPU time against GELU and its target (≤ 1.25×; kaf, fourier, bspline, polynorm, slaf ≤ 2×)",
    ["activations", "--shape", SHAPE, "--dtype", "float32"],
    ["--shape", DRY_SHAPE, "--repeats", "2", "--event-rounds", "2"],
    cap=50,
    least=25,
)
bench_stage(
    "activations_per_channel",
    "the same with one coefficient set per channel",
    "the same for per-channel coefficients",
    ["activations", "--shape", SHAPE, "--dtype", "float32", "--per-channel", "--no-reference"],
    ["--shape", DRY_SHAPE, "--repeats", "1", "--event-rounds", "1"],
    cap=35,
    least=20,
)
bench_stage(
    "train_vgg8_rational",
    "a VGG8 training step (cifar10_vgg8, batch 128) with rational vs its own ReLU, deterministic algorithms on",
    "whether the cifar10_vgg8 step with rational is within its target (≤ 1.3× ReLU's)",
    ["train", "recipe=cifar10_vgg8", "act=rational"],
    ["--steps", "1", "--warmup", "0", "batch_size=2"],
    cap=40,
    least=25,
)
# K training processes on one GPU (16 workers on the lent 16 cores; their start is most of the cost), under a
# private MPS daemon, the whole step in one CUDA graph at K=1 and 8, the bit check; its `--budget` (the stage's time
# less 10 s) skips the last cases (torch.compile's first) rather than run into the timeout, and the report is
# rewritten after every case. The dry run trains ReLU alone: rational's Triton kernels in the interpreter take
# seconds a step (train_vgg8_rational runs them).
bench_stage(
    "fill_vgg8",
    "K training processes of cifar10_vgg8 (batch 128) on the GPU at once, relu and rational: "
    "img/s and GPU busy % vs one, the bit check, a captured step, under MPS (as its --budget allows)",
    "K, the seeds per GPU a sweep of small networks runs (img/s at K = 1, 4, 8, 16 against one)",
    ["fill", "recipe=cifar10_vgg8", "act=relu,rational", "--k", "1,4,8,16", "--seconds", "2", "--mps", "--capture"]
    + ["--bits", "8"],
    ["--k", "1,2", "--seconds", "0.3", "--bits", "2", "--bit-steps", "2", "act=relu", "batch_size=2"],
    cap=85,
    least=45,
    budget_margin=10,
)
bench_stage(
    "train_convnext_t_hermite",
    "a ConvNeXt-T training step (cifar10_convnext_t, batch 512) with hermite vs its own GELU, deterministic on",
    "whether the ConvNeXt-T step with hermite is within its target (≤ 1.15× GELU's)",
    ["train", "recipe=cifar10_convnext_t", "act=hermite"],
    ["--steps", "1", "--warmup", "0", "batch_size=1"],
    cap=35,
    least=25,
)
# the same through `visionbench run`'s own sweep (Lightning, checkpoints, predictions) on synthetic CIFAR-shaped
# data: 8 seeds at parallel=8 against one of them alone, the bits of that seed compared (predictions and final
# weights), and `visionbench estimate`'s projection of 20 seeds x 60 epochs at parallel=auto
bench_stage(
    "sweep_vgg8",
    "a real cifar10_vgg8 sweep (synthetic data, 10,240 images, 1 epoch) at parallel=8 vs alone: aggregate img/s, "
    "GPU busy, the bits of a seed; the projected 20 seeds x 60 epochs",
    "whether parallel=8 pays in a real sweep and keeps a seed's bits; the wall time of 20 seeds x 60 epochs",
    ["sweep", "recipe=cifar10_vgg8", "act=relu", "data.name=synthetic", "data.synthetic.num_train=10240"]
    + ["data.synthetic.num_val=2048", "epochs=1", "--k", "1,8", "--seeds", "8", "--solo-seeds", "1"]
    + ["--project", "20x60"],
    ["recipe=digits_vgg4", "data.name=digits", "data.limit_train=128", "data.limit_val=64", "--k", "1,2"]
    + ["--seeds", "2", "--solo-seeds", "1", "--project", "2x1"],
    cap=45,
    least=35,
)


def kernel_tests(w: Window, seconds: float) -> list[str]:
    """pytest on the kernel tests, its plugins not auto-loaded (the carried pytest need not match the image's), xdist
    loaded by name: 8 workers on the GPU (compiling is most of their time), none in the dry run (its subset takes
    seconds; starting workers would take longer), `-v`: each test's result in the log as it ends."""
    return [
        "-m",
        "pytest",
        "-v",
        "-p",
        "no:cacheprovider",
        "-p",
        "xdist.plugin",
        "-n",
        "0" if w.dry else "8",
        str(ROOT / "tests" / "test_triton_kernels.py"),
        *([] if w.dry else [str(ROOT / "tests" / "test_cuda.py"), "-k", "not trains_on_cuda"]),
        *(["-k", "rational and nchw or opcheck"] if w.dry else []),
        f"--junitxml={w.out / f'kernel_tests_{w.device}.xml'}",
    ]


stage(
    "kernel_tests",
    "the Triton kernels against float64 (tests/test_triton_kernels.py) and the CUDA tests' activation checks "
    "(tests/test_cuda.py, but its whole runs), 8 pytest workers",
    "whether the Triton kernels compute what the reference formulas do on this GPU (JUnit: each test's result)",
    kernel_tests,
    lambda w: f"kernel_tests_{w.device}.xml",
    cap=20,
    least=15,
    env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    stop_signal=signal.SIGINT,
)

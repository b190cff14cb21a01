"""Forward + backward speed and memory of every learnable activation against GELU in the same run.

    visionbench bench activations                                   # [64, 128, 32, 32] float32 on the CPU
    visionbench bench activations --families rational,hermite --repeats 30
    visionbench bench activations --shape 128,96,56,56 --device cuda --per-channel
    visionbench bench activations --deterministic both         # a table with deterministic algorithms, one without

Per activation (train mode, shared coefficients unless --per-channel): the median fwd+bwd time
(y = act(x), then the gradients of <y, g> for x and every coefficient) with a sync after each call, its
median ratio to GELU's time in the same rounds; on CUDA also the GPU time by CUDA events, L2 flushed
before each call (`gpu_timing`, as triton.testing.do_bench times kernels), its ratio to GELU's, and the
kernels one forward + backward launches; the bytes saved for backward in units of the input, the peak
memory above the inputs (CUDA only), the compile time (first call; inductor's disk cache shortens later
runs), and, with the `reference` extra installed, the same against the reference implementation: median
time ratio and the largest output difference. Writes `results/bench/<name>.md`, naming the kernels
that ran (`fused.ran_on`) and the setting that chose them, rewritten after every case: a benchmark stopped part
way (a timeout) leaves the rows done and a `partial:` note naming the cases missing; a case that fails is a
`failed:` note and the others still run (exit 1). Timed, GELU included, under the determinism a run sets
(`--deterministic`, default on: `determinism.py`).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from torch import nn

from .. import activations
from ..activations import fused
from . import determinism, gpu_timing, timing
from .references import reference_for

# label -> (registry name, options): every family, every rational version, Hermite with its clamp
CASES: dict[str, tuple[str, dict]] = {
    "rational A": ("rational", {"version": "A"}),
    "rational B": ("rational", {"version": "B"}),
    "rational C": ("rational", {"version": "C"}),
    "rational D": ("rational", {"version": "D"}),
    "polyrelu": ("polyrelu", {}),
    "polynorm": ("polynorm", {}),
    "hermite": ("hermite", {}),
    "hermite clamp": ("hermite", {"clamp": True}),
    "fourier": ("fourier", {}),
    "tropical": ("tropical", {}),
    "tropical_rational": ("tropical_rational", {}),
    "slaf": ("slaf", {}),
    "apl": ("apl", {}),
    "kaf": ("kaf", {}),
    "bspline": ("bspline", {}),
    "prelu": ("prelu", {}),
    "swish_beta": ("swish_beta", {}),
    "acon_c": ("acon_c", {}),
    "star_relu": ("star_relu", {}),
}
# targets (docs/bench.md): every family <= 2x GELU, Fourier (a sincos per harmonic) <= 3x, KAF (D Gaussians
# per element) and the B-spline (a gather per element, G + k closed forms in backward) <= 3x
TARGET = {"fourier": 3.0, "kaf": 3.0, "bspline": 3.0}
DEFAULT_TARGET = 2.0
REFERENCE_ROUNDS = 5  # references are 10-100x slower: fewer rounds keep the benchmark short
EVENT_ROUNDS = 100  # CUDA-event rounds: a GELU call takes ~0.1 ms on an H100, so 100 rounds cost well under a second


def input_shape(text: str) -> tuple[int, ...]:
    """An argparse type: the input shape, comma-separated integers >= 1."""
    try:
        dims = tuple(int(s) for s in text.split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"takes comma-separated integers >= 1 (NCHW), got {text!r}")
    return dims


def add_input_options(p: argparse.ArgumentParser) -> None:
    """--shape, --dtype, --device: the input the activations run on (bench activations, bench warm)."""
    p.add_argument(
        "--shape", type=input_shape, default="64,128,32,32", help="input shape, NCHW (default: 64,128,32,32)"
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"])
    p.add_argument("--device", type=timing.device_name, default="cpu")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = timing.parser("activations", __doc__)
    add_input_options(p)
    timing.add_count(p, "--repeats", 15, "timing rounds (default 15; medians reported)")
    timing.add_count(
        p,
        "--event-rounds",
        EVENT_ROUNDS,
        f"CUDA-event timing rounds, L2 flushed before each call (default {EVENT_ROUNDS}; CUDA only)",
    )
    p.add_argument(
        "--families",
        default="all",
        help="comma-separated family names or case labels (default: all): " + ", ".join(CASES),
    )
    p.add_argument("--per-channel", action="store_true", help="one coefficient set per channel")
    p.add_argument("--no-reference", action="store_true", help="skip the reference implementations")
    p.add_argument(
        "--deterministic",
        type=determinism.settings,
        default="on",
        metavar="{on,off,both}",
        help="deterministic algorithms while timing (default on: what a run sets on CUDA; both: a table each)",
    )
    timing.add_report_options(p, "activations")
    return p.parse_args(argv)


def select(spec: str) -> list[str]:
    """Case labels for `--families` (family names select all their cases)."""
    if spec == "all":
        return list(CASES)
    out = []
    for word in (w.strip() for w in spec.split(",") if w.strip()):
        hits = [label for label, (name, _) in CASES.items() if word in (label, name)]
        if not hits:
            raise ValueError(f"unknown family {word!r}; known: {', '.join(CASES)}")
        out += [h for h in hits if h not in out]
    return out


class Step:
    """One forward + backward of `module` on fixed (x, g): the gradients of <module(x), g> for x and
    every trainable parameter, by autograd.grad (nothing accumulates into .grad between rounds). What every
    activation timing runs (this benchmark, `visionbench check`'s speed); `allow_unused`: a parameter the forward
    leaves unused is no error (the check's `param grads` reports it, its timing goes on)."""

    def __init__(self, module: nn.Module, x: torch.Tensor, g: torch.Tensor, allow_unused: bool = False):
        self.module, self.x, self.g, self.allow_unused = module, x, g, allow_unused
        self.params = [p for p in module.parameters() if p.requires_grad]

    def __call__(self) -> torch.Tensor:
        y = self.module(self.x)
        torch.autograd.grad(y, [self.x, *self.params], self.g, allow_unused=self.allow_unused)
        return y


def bench_case(label: str, act: nn.Module, gelu: Step, x: torch.Tensor, g: torch.Tensor, args) -> list:
    device = x.device
    step = Step(act, x, g)
    input_bytes = x.numel() * x.element_size()
    before = fused.compile_seconds()
    step()  # compiles on first use (timed by fused.compile_seconds)
    compiled = fused.compile_seconds() - before
    step()  # a second warm-up: allocator and caches settle
    times = timing.rounds({"gelu": gelu, "act": step}, args.repeats, device)
    ratio = timing.median_ratio(times["act"], times["gelu"])
    gpu = gpu_timing.event_rounds({"gelu": gelu, "act": step}, args.event_rounds, device)
    gpu_cells = (
        [None, None] if gpu is None else [statistics.median(gpu["act"]), timing.median_ratio(gpu["act"], gpu["gelu"])]
    )
    saved = timing.saved_bytes(step) / input_bytes
    peak = timing.peak_bytes(step, device)
    target = TARGET.get(activations.get_class(CASES[label][0]).registry_name, DEFAULT_TARGET)
    row = [
        label,
        1e3 * statistics.median(times["act"]),
        ratio,
        *gpu_cells,
        gpu_timing.kernel_count(step, device),
        f"≤ {target:g}",
        saved,
        None if peak is None else peak / input_bytes,
        compiled or None,
    ]
    channel_dim = act.channel_axis(x)
    ref = None if args.no_reference or x.dtype != torch.float32 else reference_for(act, channel_dim, str(device))
    if ref is None:
        return row + [None] * 4
    module, ref_name = ref
    module.to(device)
    ref_step = Step(module, x, g)
    ref_step()
    ref_times = timing.rounds({"act": step, "ref": ref_step}, min(args.repeats, REFERENCE_ROUNDS), device)
    with torch.no_grad():
        was = act.training
        act.eval(), module.eval()  # no noise (rational D) or batch statistics in the comparison
        diff = float((act(x) - module(x)).abs().max())
        act.train(was)
    speedup = timing.median_ratio(ref_times["ref"], ref_times["act"])
    return row + [ref_name, 1e3 * statistics.median(ref_times["ref"]), speedup, diff]


def kernel_backend(x: torch.Tensor) -> str:
    """The kernels the learnable activations ran on x (`fused.ran_on`: triton, compiled, eager, reference) and the
    setting that chose them (`fused.switch`): `eager (VISIONBENCH_KERNELS=eager)`; where compile's size threshold
    made them eager, that threshold too."""
    name, note = fused.ran_on(x), ""
    if name == "eager" and fused.backend_for(x) == "compile":
        note = f"; compiled from {fused.compile_min_numel()} elements"
    return f"{name} ({fused.switch()}{note})"


HEADER = [
    "activation",
    "fwd+bwd ms",
    "× GELU",
    "GPU ms",
    "× GELU (GPU)",
    "kernels",
    "target",
    "saved (× input)",
    "peak (× input)",
    "compile s",
    "reference",
    "ref ms",
    "speed-up vs ref",
    "max |Δ| vs ref",
]


def gelu_row(gelu: Step, x: torch.Tensor, args) -> list:
    """GELU's own row: the baseline every ratio of its table is taken against."""
    device = x.device
    times = timing.rounds({"gelu": gelu}, args.repeats, device)["gelu"]
    gpu = gpu_timing.event_rounds({"gelu": gelu}, args.event_rounds, device)
    return [
        "gelu (baseline)",
        1e3 * statistics.median(times),
        1.0,
        None if gpu is None else statistics.median(gpu["gelu"]),
        None if gpu is None else 1.0,
        gpu_timing.kernel_count(gelu, device),
        None,
        timing.saved_bytes(gelu) / (x.numel() * x.element_size()),
        *[None] * 6,
    ]


def notes(args, x: torch.Tensor) -> list[str]:
    device = x.device
    return [
        timing.machine_line(device),
        f"input {list(x.shape)} {args.dtype}, {'per-channel' if args.per_channel else 'shared'} coefficients, "
        f"train mode, kernels {kernel_backend(x)}, {args.repeats} rounds (reference: "
        f"{min(args.repeats, REFERENCE_ROUNDS)})",
        *[determinism.describe(on) for on in args.deterministic],
        "fwd+bwd ms: wall time of one call with the device synced before and after; × GELU and speed-up: "
        "medians of per-round ratios (each round times every contender once)",
        (
            f"GPU ms: CUDA events around each call, L2 flushed before each (256 MB of zeros, as "
            f"triton.testing.do_bench), median of {args.event_rounds} rounds alternating with GELU; × GELU (GPU): "
            "median of per-round ratios; kernels: GPU kernels one forward + backward launches (torch.profiler, "
            "copies and memsets not counted)"
            if device.type == "cuda"
            else f"GPU ms, × GELU (GPU), kernels: CUDA only (CUDA events, torch.profiler's kernels), — on {device.type}: "
            "no ATen op count is given instead"
        ),
        "saved: bytes autograd keeps for backward / input bytes (GELU keeps its input: 1.0); "
        "peak: CUDA max allocated above the inputs during the step, incl. output and input grad",
    ]


def tables(sections: list[tuple[bool, list]], both: bool) -> str:
    """One table per determinism setting timed, each headed by its setting where there are two."""
    parts = []
    for on, rows in sections:
        head = f"### deterministic algorithms {'on' if on else 'off'}\n\n" if both else ""
        parts.append(head + timing.markdown(HEADER, rows))
    return "\n\n".join(parts)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        labels = select(args.families)
        shape = args.shape
    except ValueError as e:
        print(f"visionbench bench activations: {e}", file=sys.stderr)
        return 2
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    determinism.prepare(args.deterministic, device)  # before CUDA starts
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, generator=gen, device=device, dtype=dtype).requires_grad_(True)
    g = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    both = len(args.deterministic) > 1
    todo = [(on, label) for on in args.deterministic for label in labels]
    sections: list[tuple[bool, list]] = []
    failed: list[str] = []
    command = ("visionbench bench activations " + " ".join(argv)).strip()

    def publish(done: int, final: bool = False) -> None:
        """The report as it stands: rewritten after every case, so a benchmark stopped part way keeps its rows."""
        left = [label + (f" (deterministic {'on' if on else 'off'})" if both else "") for on, label in todo[done:]]
        status = [timing.partial_note(done, len(todo), left, "cases")] if left else []
        timing.write_report(
            args.name,
            "Learnable activations: forward + backward",
            command,
            [*status, *notes(args, x), *[f"failed: {f}" for f in failed]],
            tables(sections, both),
            args.out,
            announce=final,
        )

    done = 0
    for on in args.deterministic:
        with determinism.algorithms(on):  # GELU and every family alike
            gelu = Step(nn.GELU(), x, g)
            gelu()
            sections.append((on, [gelu_row(gelu, x, args)]))
            publish(done)
            for label in labels:
                name, kwargs = CASES[label]
                channels = shape[1] if len(shape) >= 4 else shape[-1]  # LearnableActivation.channel_axis's rule
                extra = {"per_channel": True, "num_channels": channels} if args.per_channel else {}
                try:
                    act = activations.create(name, **kwargs, **extra).to(device=device, dtype=dtype).train()
                    sections[-1][1].append(bench_case(label, act, gelu, x, g, args))
                    print(f"  {label}: {sections[-1][1][-1][2]:.2f}x GELU", file=sys.stderr, flush=True)
                except Exception as e:  # noqa: BLE001 - one case's failure is its line; the other cases still run
                    failed.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                    print(f"  {label}: failed: {failed[-1]}", file=sys.stderr, flush=True)
                done += 1
                publish(done)
    publish(done, final=True)
    return 1 if failed else 0

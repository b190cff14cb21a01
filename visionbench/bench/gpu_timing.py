"""GPU time as the field times kernels (`triton.testing.do_bench`): CUDA events around each call, the L2
cache flushed before each, many calls, medians; and how many kernels a call launches (torch.profiler).

    times = gpu_timing.event_rounds({"gelu": gelu_step, "act": act_step}, 100, device)  # ms, per round
    ratio = timing.median_ratio(times["act"], times["gelu"])
    kernels = gpu_timing.kernel_count(act_step, device)

Each round times every contender once, in turn, as `timing.rounds` does, so a clock or a neighbour that
drifts hits both sides of a ratio alike. Unlike `timing.rounds` nothing waits on the GPU between calls:
the events time what the GPU spent from the call's first launch to its last kernel's end (including gaps
where the CPU launched more slowly than the GPU ran: do_bench counts them too). Off CUDA there are no
such events: both functions return None, and the tables show "—".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

# do_bench's cache buffer: 256 MB of zeros written before each timed call, larger than any GPU's L2
# (H100: 50 MB), so no call finds its inputs in cache because the call before it read them
FLUSH_BYTES = 256 * 2**20


def event_rounds(
    steps: Mapping[str, Callable[[], object]], rounds: int, device: torch.device
) -> dict[str, list[float]] | None:
    """Milliseconds of GPU time per call of every step, `rounds` rounds of one call each, in turn, L2 flushed
    before every call; None off CUDA. The caller warms the steps up first (compilation is not timed here)."""
    if device.type != "cuda":
        return None
    with torch.cuda.device(device):
        cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        events = {
            name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)]
            for name in steps
        }
        torch.cuda.synchronize(device)
        for i in range(rounds):
            for name, fn in steps.items():
                cache.zero_()
                start, end = events[name][i]
                start.record()
                fn()
                end.record()
        torch.cuda.synchronize(device)
    return {name: [start.elapsed_time(end) for start, end in pairs] for name, pairs in events.items()}


def kernel_count(step: Callable[[], object], device: torch.device) -> int | None:
    """The GPU kernels one call of `step` launches (torch.profiler's CUDA activity; copies and memsets are
    not kernels and are not counted); None off CUDA. Call it after a warm-up: a first call also compiles."""
    stats = kernel_stats(step, device)
    return None if stats is None else stats[0]


def kernel_stats(step: Callable[[], object], device: torch.device) -> tuple[int, float] | None:
    """(kernels, seconds the GPU spent in kernels, copies and memsets) of one call of `step`, by torch.profiler's
    CUDA activity; None off CUDA. The seconds over the call's wall time are the share of it the GPU was busy (one
    stream: its kernels do not overlap)."""
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize(device)
    gpu = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    kernels = sum(1 for e in gpu if not e.name.startswith(("Memcpy", "Memset")))
    return kernels, sum(e.time_range.elapsed_us() for e in gpu) / 1e6

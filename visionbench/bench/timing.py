"""Measuring for the benchmarks: paired timing rounds, bytes saved for backward, peak CUDA memory,
and the Markdown table every benchmark prints and writes (drawn by `visionbench.report.render`).

Machines running these benchmarks are often shared (this project's CI has 2 loaded cores), so a
benchmark never compares numbers taken minutes apart: every round times each contender once, in
turn, and ratios are the median over rounds of the per-round ratios.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

# the one table renderer; bench sits above report in the layering, so it may use it
from ..report import render
from ..results.io import atomic_write_text

RESULTS_DIR = Path("results") / "bench"


def parser(command: str, doc: str, overrides: str | None = None) -> argparse.ArgumentParser:
    """The parser of `visionbench bench COMMAND`, described by the first line of its module's `doc`; `overrides`: the
    key=value arguments it takes beside its flags (a recipe and its overrides), said under its options."""
    return argparse.ArgumentParser(
        prog=f"visionbench bench {command}",
        description=doc.splitlines()[0],
        epilog=f"key=value arguments: {overrides}" if overrides else None,
    )


def add_report_options(p: argparse.ArgumentParser, name: str | None, default_name: str | None = None) -> None:
    """--name and --out: the benchmark's report, `<out>/<name>.md`; `name` its default, or None and `default_name`
    saying what the benchmark names it after (`fill_<recipe>`)."""
    p.add_argument(
        "--name",
        default=name,
        help="report name: results/bench/<name>.md" if name else f"report name (default {default_name})",
    )
    p.add_argument("--out", type=out_dir, default=str(RESULTS_DIR), help="report folder (default results/bench)")


def at_least(lo: int, why: str = ""):
    """An argparse type: an integer >= lo (`why`: the reason, said when it is refused)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = lo - 1
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}{f' ({why})' if why else ''}, got {text!r}")
        return value

    return parse


# a count of timed rounds or steps (no median of none), of seeds or processes
positive_int = at_least(1)


def add_count(p: argparse.ArgumentParser, flag: str, default: int | None, help: str) -> None:
    """An option that counts: timing rounds, steps, seeds, processes (`positive_int`)."""
    p.add_argument(flag, type=positive_int, default=default, help=help)


def k_list(text: str) -> list[int]:
    """An argparse type: comma-separated process counts, each >= 1 (`1,4,8,16`), sorted, each once."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers >= 1 (e.g. 1,4,8,16), got {text!r}")
    return sorted(set(values))


def positive_seconds(text: str) -> float:
    """An argparse type: a duration in seconds, a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def device_name(text: str) -> str:
    """An argparse type: a torch device (cpu, cuda, cuda:1, mps, ...), checked before anything is built."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"not a torch device, got {text!r}; e.g. cpu, cuda, cuda:1") from None
    if device.type == "cuda":  # refused here, not after minutes of building and timing
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index or 0) >= count:
            has = f"{count} CUDA device(s)" if count else "no CUDA device: torch.cuda.is_available() is False"
            raise argparse.ArgumentTypeError(
                f"{text} is not available on this machine ({has}); use --device cpu"
                + (f" or cuda:0..cuda:{count - 1}" if count else "")
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError("mps is not available on this machine; use --device cpu")
    return text


def out_dir(text: str) -> str:
    """An argparse type: the folder a benchmark writes its report into (created if missing), refused before any
    timing when a file stands there or above it."""
    path = Path(text)
    existing = next((p for p in (path, *path.absolute().parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: {existing} is a file, not a directory; give a folder for the report (it is created if missing)"
        )
    return text


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of one call of fn, with the device's queue drained before and after."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def rounds(
    contenders: Mapping[str, Callable[[], object]], repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Per-round seconds of every contender: `repeats` rounds, each running all contenders once, in turn."""
    out: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            out[name].append(timed(fn, device))
    return out


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """Median of per-round ratios (robust to load that drifts between rounds)."""
    return statistics.median(a / b for a, b in zip(num, den))


def saved_bytes(fn: Callable[[], object]) -> int:
    """Bytes of the distinct storages autograd saves for backward while fn runs its forward
    (what a layer keeps alive until the backward reaches it)."""
    storages: dict[tuple, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[(t.device.type, s.data_ptr())] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def peak_bytes(fn: Callable[[], object], device: torch.device, total: bool = False) -> int | None:
    """CUDA: peak allocated bytes during fn above what was allocated before it (`total`: including
    it, i.e. the device memory the process needs: weights, optimizer state, activations); None
    elsewhere (the CPU allocator keeps no such statistic)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = 0 if total else torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def machine_line(device: torch.device) -> str:
    """One line saying where the numbers come from."""
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return (
        f"torch {torch.__version__}, {device.type} ({where}), {torch.get_num_threads()} threads, "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}"
    )


def cell(v: object) -> str:
    """A benchmark number as shown: 3 significant digits below 1000, whole numbers above; None is "—"."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The pipe table of a benchmark (no newline at the end), rendered by the report's one renderer."""
    return render.pipe_table(render.Table(header, [[cell(v) for v in row] for row in rows], align="-" * len(header)))


def write_report(
    name: str,
    title: str,
    command: str,
    notes: Sequence[str],
    table: str,
    out_dir: Path | str = RESULTS_DIR,
    announce: bool = True,
) -> Path:
    """Write `<out_dir>/<name>.md` with the command that reproduces it, replaced whole (a benchmark stopped while it
    rewrites its table leaves the previous one), and print the table (`announce`: false for the rewrites a
    benchmark makes as it goes)."""
    text = "\n".join([f"# {title}", "", f"    {command}", "", *[f"- {n}" for n in notes], "", table, ""])
    path = Path(out_dir) / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    if announce:
        print(table)
        print(f"\nwritten: {path}")
    return path


def partial_note(done: int, total: int, missing: Sequence[str], what: str = "rows") -> str:
    """The note of a table written as it goes, while it is not finished: a benchmark stopped now (a timeout, a
    failure) leaves the rows done and this line saying which are missing."""
    return f"partial: {done} of {total} {what} done; not yet: {', '.join(missing)}"

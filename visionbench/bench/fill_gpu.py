"""Filling the GPU: K training processes of a recipe's model at once on one device, their aggregate images/s against
one process, and the GPU's busy share meanwhile (docs/bench.md: a multi-seed sweep of small networks left an H100
25-32 % busy, its step bound by host work).

    visionbench bench fill recipe=cifar10_vgg8 act=relu,rational --k 1,4,8,16 --seconds 4 --device cuda
    visionbench bench fill recipe=cifar10_vgg8 act=relu --k 1,8 --device cuda --mps --capture --bits 8
    visionbench bench fill recipe=cifar10_vgg8 act=relu --device cpu --k 1,2 --seconds 0.5 --bits 2 batch_size=4

A pool of worker processes (max K, or --bits, of them: fresh interpreters) is started once and kept for every
case: each worker builds the recipe's model as the sweep builds it (`build_model`, its own seed) with the run's
optimizer and speed levers on a fixed synthetic batch of the recipe's size on the device (`TrainStep`), warms it up,
and for a case the first K workers start together at one wall-clock instant (the barrier), step for `--seconds` and
report the steps done. The parent, meanwhile, samples the GPU's busy share (NVML through `torch.cuda.utilization`,
else `nvidia-smi` polled; "—" where neither reads, and on the CPU) and never starts CUDA itself.

- `--mps`: the same cases again under a private NVIDIA MPS daemon (its own pipe and log folders in a temporary
  folder: `nvidia-cuda-mps-control -d`, stopped with `quit` at the end, on error too; a system daemon is never
  touched); "MPS absent" where `nvidia-cuda-mps-control` is not on PATH.
- `--capture`: on CUDA the whole step (forward, loss, backward, optimizer step) captured in one `torch.cuda.CUDAGraph`
  after a warm-up on a side stream (at K in `--capture-k`), and `torch.compile(mode="reduce-overhead")` at one K:
  the ceiling of removing host work. "CUDA only" on the CPU.
- `--bits N`: seeds 0..N-1 trained `--bit-steps` steps each, deterministically (`use_deterministic_algorithms`,
  cuDNN's benchmark off, CUBLAS_WORKSPACE_CONFIG=:4096:8), alone one after another and then all N at once; the
  sha256 of each final state_dict compared.

`--budget S`: cases that would end after S seconds are skipped (said in their row); the order puts what matters
most first: one process and K processes, the bit check, the CUDA graph, the MPS cases, torch.compile's last. The
report (`<out>/<name>.md`) is rewritten after every case, so a run stopped from outside leaves what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from ..sweep.placement import mps_running
from . import timing
from .fill_workers import GRAPH_WARMUP, REPLY_TIMEOUT_S, WARMUP_MIN_S, WARMUP_STEPS, Pool, Spec, WorkerError

# Targets (docs/bench.md, "Filling the GPU"): K processes give at least this many times one process's images/s ...
TARGET_RATIO = 3.0
TARGET_IMG_S_H100 = 55_000  # ... cifar10_vgg8, fp32, on an H100 ...
TARGET_BUSY = 90.0  # ... and keep the GPU at least this busy (NVML's utilization, %)

BIT_STEPS = 10
START_LEAD_S = 0.2  # the barrier: workers start this long after the parent sends the case, plus 10 ms per worker
BUSY_PERIOD_S = 0.2  # the parent reads the GPU's utilization this often during a case ...
BUSY_SKIP_S = 1.0  # ... from this long after the start (NVML's sample period is 1/6 to 1 s), or a third of the case
MPS_CONTROL = "nvidia-cuda-mps-control"

# what each phase is expected to cost, for --budget (estimates, not measurements)
POOL_START_S = 20.0
PREPARE_S = 8.0
CASE_EXTRA_S = 1.5
COMPILE_S = 60.0

MODES = {
    "eager": "eager",
    "mps": "eager, MPS",
    "graph": "CUDA graph (whole step)",
    "compile": "torch.compile reduce-overhead",
}


# ---------------------------------------------------------------------------------------------- arguments
# --bits: at least two seeds (one alone against two at once)
seed_count = timing.at_least(2, "seeds trained alone, then all at once")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = timing.parser(
        "fill",
        __doc__,
        "recipe=NAME act=NAME[,NAME...] and any recipe override (batch_size=64, trainer.precision=bf16-mixed, ...)",
    )
    p.add_argument("--k", type=timing.k_list, default=[1, 4, 8, 16], help="processes at once (default 1,4,8,16)")
    p.add_argument("--seconds", type=timing.positive_seconds, default=4.0, help="timed seconds per case (default 4)")
    p.add_argument("--mps", action="store_true", help="the same cases under a private NVIDIA MPS daemon too")
    p.add_argument(
        "--capture",
        action="store_true",
        help="rows with the whole step in one CUDA graph, and torch.compile reduce-overhead (CUDA)",
    )
    p.add_argument(
        "--capture-k",
        type=timing.k_list,
        default=[1, 8],
        help="the K of the CUDA-graph rows, those in --k (default 1,8; none there: the smallest K)",
    )
    p.add_argument(
        "--bits",
        type=seed_count,
        default=None,
        metavar="N",
        help="bit check: N seeds alone, then N at once; the final weights' sha256 compared",
    )
    timing.add_count(p, "--bit-steps", BIT_STEPS, f"training steps per seed in the bit check (default {BIT_STEPS})")
    p.add_argument(
        "--budget",
        type=timing.positive_seconds,
        default=None,
        help="seconds for the whole benchmark: cases that would overrun are skipped (default: no limit)",
    )
    p.add_argument("--device", type=timing.device_name, default="cpu")
    timing.add_report_options(p, None, "fill_<recipe>")
    return p.parse_known_args(argv)


# ---------------------------------------------------------------------------------------------- helpers
def mps_env(folder: Path) -> dict[str, str]:
    """The variables that point a daemon and its clients at a private MPS instance under `folder`."""
    return {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}


@contextlib.contextmanager
def mps_daemon(folder: Path) -> Iterator[tuple[dict[str, str] | None, str]]:
    """A private MPS control daemon for the block: (the workers' variables, "") while it runs; (None, why) where
    `nvidia-cuda-mps-control` is absent or fails to start. It is asked to quit at the end, on error too."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        yield None, f"MPS absent (no {MPS_CONTROL} on PATH)"
        return
    env = mps_env(folder)
    for path in env.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    full = {**os.environ, **env}
    try:
        started = subprocess.run(
            [control, "-d"], env=full, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        yield None, f"MPS daemon did not start: {e}"
        return
    if started.returncode:
        why = (started.stderr or started.stdout).strip().splitlines()
        yield None, f"MPS daemon did not start (rc {started.returncode}){': ' + why[-1] if why else ''}"
        return
    try:
        yield env, ""
    finally:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([control], input="quit\n", env=full, capture_output=True, text=True, timeout=30, check=False)


def nvml_index(device: torch.device, environ: dict[str, str] | None = None) -> int:
    """The device's index as nvidia-smi counts (CUDA_VISIBLE_DEVICES of plain numbers mapped back)."""
    environ = os.environ if environ is None else environ
    index = device.index or 0
    visible = [v.strip() for v in (environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible) and index < len(visible):
        return int(visible[index])
    return index


class BusySampler:
    """The GPU's busy share in percent, read by the parent (which starts no CUDA): NVML's utilization through
    `torch.cuda.utilization` where it reads (the nvidia-ml-py package), else `nvidia-smi` polled; `method` None
    (every reading None, "—" in the table) on the CPU or where neither works. Chosen once, at the first read."""

    def __init__(self, device: torch.device):
        self.device = device
        self.method: str | None = "unknown" if device.type == "cuda" else None

    def _nvml(self) -> float:
        return float(torch.cuda.utilization(self.device.index or 0))  # an index: no CUDA initialisation here

    def _smi(self) -> float:
        done = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
                f"--id={nvml_index(self.device)}",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return float(done.stdout.strip().splitlines()[0])

    def read(self) -> float | None:
        if self.method == "unknown":
            self.method = None
            for method, read in (("nvml", self._nvml), ("nvidia-smi", self._smi)):
                if method == "nvidia-smi" and shutil.which("nvidia-smi") is None:
                    continue
                try:
                    value = read()
                except Exception:  # noqa: BLE001, S112 - no NVML, no driver, an odd reply: the next, else "—"
                    continue
                self.method = method
                return value
            return None
        if self.method is None:
            return None
        try:
            return self._nvml() if self.method == "nvml" else self._smi()
        except Exception:  # noqa: BLE001 - a reading that fails once is dropped, the case goes on
            return None

    def mean_until(self, start: float, end: float) -> float | None:
        """The mean reading from `start` (wall-clock seconds, time.time) to `end`, every BUSY_PERIOD_S; None if
        nothing could be read. Returns at `end`."""
        readings = []
        while (now := time.time()) < end:
            if now >= start and self.method is not None:
                value = self.read()
                if value is not None:
                    readings.append(value)
            time.sleep(max(0.0, min(BUSY_PERIOD_S, end - time.time())))
        return statistics.fmean(readings) if readings else None


# ---------------------------------------------------------------------------------------------- the cases
@dataclasses.dataclass
class Row:
    act: str
    mode: str
    k: int
    img_s: float | None = None
    busy: float | None = None
    peak_mb: float | None = None
    steps: tuple[int, int] | None = None
    prepare_s: float | None = None
    note: str = ""


@dataclasses.dataclass
class BitRow:
    act: str
    seed: int
    alone: str | None = None
    together: str | None = None
    note: str = ""


class Budget:
    def __init__(self, seconds: float | None):
        self.seconds, self.start = seconds, time.monotonic()

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (time.monotonic() - self.start)

    def fits(self, need: float) -> bool:
        return need <= self.left()

    def why(self, need: float) -> str:
        return f"skipped: {max(0.0, self.left()):.0f} s of the {self.seconds:.0f} s budget left, needs ~{need:.0f} s"


class Bench:
    """The cases of one `bench fill` command, in order, into `rows` and `bit_rows`."""

    def __init__(
        self, args: argparse.Namespace, spec: Callable[[str, str, int], Spec], batch: int, publish: Callable[[], None]
    ):
        self.args, self.spec, self.batch, self.publish = args, spec, batch, publish
        self.device = torch.device(args.device)
        self.sampler = BusySampler(self.device)
        self.budget = Budget(args.budget)
        self.rows: list[Row] = []
        self.bit_rows: list[BitRow] = []
        self.info: dict = {}
        self.starts: list[str] = []

    # -- one case
    def case(self, pool: Pool | None, act: str, mode: str, k: int, need: float, skip: str = "") -> Row:
        """Workers 0..k-1 of `pool` prepare (act, mode), start together, step for --seconds: one row."""
        row = Row(act, mode, k)
        self.rows.append(row)
        if skip or pool is None or not self.budget.fits(need):
            row.note = skip or ("the workers did not start" if pool is None else self.budget.why(need))
            self.publish()
            return row
        step_mode = "eager" if mode == "mps" else mode
        try:
            prepared = pool.call(range(k), "prepare", lambda i: {"spec": self.spec(act, step_mode, i)})
            times = [p["seconds"] for p in prepared if p["seconds"] is not None]
            row.prepare_s = max(times) if times else None
            start = time.time() + START_LEAD_S + 0.01 * k
            end = start + self.args.seconds
            pool.send(
                range(k),
                "run",
                lambda i: {"act": act, "mode": step_mode, "start_at": start, "seconds": self.args.seconds},
            )
            row.busy = self.sampler.mean_until(start + min(BUSY_SKIP_S, self.args.seconds / 3), end)
            done = pool.collect(range(k), self.args.seconds + REPLY_TIMEOUT_S)
        except WorkerError as e:
            row.note = f"failed: {e}"
            self.publish()
            return row
        row.img_s = sum(d["steps"] * self.batch / d["seconds"] for d in done)
        row.steps = (min(d["steps"] for d in done), max(d["steps"] for d in done))
        peaks = [d["peak"] for d in done if d["peak"] is not None]
        row.peak_mb = max(peaks) / 2**20 if peaks else None
        print(
            f"  {act}, {MODES[mode]}, K={k}: {row.img_s:,.0f} img/s"
            + (f", GPU {row.busy:.0f} % busy" if row.busy is not None else ""),
            file=sys.stderr,
            flush=True,
        )
        self.publish()
        return row

    # -- the bit check
    def bits(self, pool: Pool | None, act: str, skip: str = "") -> None:
        """Seeds 0..N-1 of `act`, each alone (one after another in worker 0), then all N at once (seed i in worker
        i): their final weights' digests."""
        n, steps = self.args.bits, self.args.bit_steps
        rows = [BitRow(act, seed) for seed in range(n)]
        self.bit_rows.extend(rows)
        need = (n + 1) * 2.0
        if skip or pool is None or not self.budget.fits(need):
            for r in rows:
                r.note = skip or ("the workers did not start" if pool is None else self.budget.why(need))
            self.publish()
            return
        try:
            for seed in range(n):  # alone: one after another, in worker 0
                pool.call([0], "prepare", lambda i, seed=seed: {"spec": self.spec(act, "bits", seed)})
                rows[seed].alone = pool.call(
                    [0], "run", lambda i: {"act": act, "mode": "bits", "start_at": 0.0, "steps": steps, "digest": True}
                )[0]["digest"]
            pool.call(range(n), "prepare", lambda i: {"spec": self.spec(act, "bits", i)})
            start = time.time() + START_LEAD_S + 0.01 * n
            done = pool.call(
                range(n),
                "run",
                lambda i: {"act": act, "mode": "bits", "start_at": start, "steps": steps, "digest": True},
            )
            for r, d in zip(rows, done):
                r.together = d["digest"]
        except WorkerError as e:
            for r in rows:
                r.note = f"failed: {e}"
        self.publish()

    # -- every case, in order
    def run_all(self, acts: list[str]) -> None:
        """The cases in the order of what matters most (a --budget cuts the end): one process and K processes, the
        bit check and the captured step in one pool; the MPS cases in a second; torch.compile's in a third, of one
        worker (its compilation is the longest wait)."""
        a = self.args
        cuda = self.device.type == "cuda"
        per_case = a.seconds + CASE_EXTRA_S
        with self._pool(max(max(a.k), a.bits or 0), {}, "") as pool:
            for act in acts:
                for i, k in enumerate(a.k):
                    self.case(pool, act, "eager", k, per_case + (PREPARE_S if i == 0 else 0.0))
            if a.bits:
                for act in acts:
                    self.bits(pool, act)
            if a.capture:
                ks = [k for k in a.k if k in a.capture_k] or [min(a.k)]
                for act in acts:
                    for k in ks:
                        self.case(pool, act, "graph", k, per_case + PREPARE_S, "" if cuda else "CUDA only")
        if a.mps:
            with contextlib.ExitStack() as stack:
                env, skip = None, "" if cuda else "CUDA only"
                if cuda:
                    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="visionbench_mps_")))
                    env, skip = stack.enter_context(mps_daemon(folder))
                pool = stack.enter_context(self._pool(max(a.k), env, "MPS")) if env else None
                for act in acts:
                    for i, k in enumerate(a.k):
                        self.case(pool, act, "mps", k, per_case + (PREPARE_S if i == 0 else 0.0), skip)
        if a.capture:
            with self._pool(1, {}, "torch.compile", cuda) as pool:
                for act in acts:
                    self.case(pool, act, "compile", 1, per_case + COMPILE_S, "" if cuda else "CUDA only")

    @contextlib.contextmanager
    def _pool(self, size: int, env: dict[str, str], label: str, start: bool = True) -> Iterator[Pool | None]:
        """A pool of `size` workers for the block, closed at its end; None where it is not started (`start` false,
        the budget spent) or failed to start (said in the notes)."""
        pool = None
        what = f"{size} {label + ' ' if label else ''}worker{'s' * (size > 1)}"
        if start and not self.budget.fits(POOL_START_S):
            self.starts.append(f"{what} not started: {self.budget.why(POOL_START_S)}")
        elif start:
            try:
                pool = Pool(size, self.device, env)
            except WorkerError as e:
                self.starts.append(f"{what} failed to start: {e}")
            else:
                self.info = self.info or pool.info
                self.starts.append(f"{what} started in {pool.start_s:.1f} s")
        try:
            yield pool
        finally:
            if pool is not None:
                pool.close()


# ---------------------------------------------------------------------------------------------- the report
def short(digest: str | None) -> str | None:
    return None if digest is None else digest[:16]


def bit_verdict(rows: Sequence[BitRow], steps: int) -> str:
    """The bit check's one line."""
    checked = [r for r in rows if r.alone and r.together]
    if not checked:
        return "bit check: not run" + (f" ({rows[0].note})" if rows and rows[0].note else "")
    differ = [r for r in checked if r.alone != r.together]
    n = max(r.seed for r in rows) + 1
    acts = ", ".join(dict.fromkeys(r.act for r in checked))
    if not differ:
        return (
            f"bit check: the same — every seed's final weights ({n} seeds, {steps} steps each) are bit for bit "
            f"the same trained alone and {n} at once ({acts})"
        )
    return f"bit check: DIFFERENT — {len(differ)} of {len(checked)} seed runs changed with {n} at once: " + ", ".join(
        f"{r.act} seed {r.seed}" for r in differ
    )


def throughput_rows(rows: Sequence[Row]) -> list[list[object]]:
    """Rows grouped by activation, then mode, then K; × 1 process: over the act's one eager process."""
    acts = list(dict.fromkeys(r.act for r in rows))
    order = list(MODES)
    base = {r.act: r.img_s for r in rows if r.mode == "eager" and r.k == 1 and r.img_s}
    out = []
    for r in sorted(rows, key=lambda r: (acts.index(r.act), order.index(r.mode), r.k)):
        ratio = r.img_s / base[r.act] if r.img_s and r.act in base else None
        steps = (
            None if r.steps is None else str(r.steps[0]) if r.steps[0] == r.steps[1] else f"{r.steps[0]}–{r.steps[1]}"
        )
        out.append([r.act, MODES[r.mode], r.k, r.img_s, ratio, r.busy, r.peak_mb, steps, r.prepare_s, r.note or None])
    return out


def verdicts(rows: Sequence[Row], device: torch.device) -> list[str]:
    """Per activation, its best row against the targets."""
    out = []
    for act in dict.fromkeys(r.act for r in rows):
        mine = [r for r in rows if r.act == act and r.img_s]
        base = next((r.img_s for r in mine if r.mode == "eager" and r.k == 1), None)
        if not mine or base is None:
            continue
        best = max(mine, key=lambda r: r.img_s)
        ratio = best.img_s / base
        busy = max((r.busy for r in mine if r.busy is not None), default=None)
        if busy is not None:
            busy_text = f"{busy:.0f} % ({'met' if busy >= TARGET_BUSY else 'missed'}: ≥ {TARGET_BUSY:.0f} %)"
        else:
            busy_text = "— (not measured" + (" on the CPU)" if device.type != "cuda" else ")")
        out.append(
            f"{act}: best {best.img_s:,.0f} img/s ({MODES[best.mode]}, K={best.k}), {ratio:.2f}× one process "
            f"({'met' if ratio >= TARGET_RATIO else 'missed'}: ≥ {TARGET_RATIO:g}×); "
            f"GPU busy at most {busy_text}"
        )
    return out


THROUGHPUT_HEADER = [
    "activation",
    "mode",
    "K",
    "img/s (all K)",
    "× 1 process",
    "GPU busy %",
    "peak MB per worker",
    "steps per worker",
    "prepare s",
    "note",
]
BITS_HEADER = ["activation", "seed", "alone (sha256)", "N at once (sha256)", "bits"]


def report_body(bench: Bench) -> str:
    """The throughput table, then the bit check's table and verdict."""
    text = timing.markdown(THROUGHPUT_HEADER, throughput_rows(bench.rows))
    if bench.args.bits:
        rows = [
            [
                r.act,
                r.seed,
                short(r.alone),
                short(r.together),
                ("same" if r.alone == r.together else "DIFFERENT") if r.alone and r.together else (r.note or None),
            ]
            for r in bench.bit_rows
        ]
        text += (
            "\n\n## Bit check\n\n"
            + timing.markdown(BITS_HEADER, rows)
            + "\n\n"
            + bit_verdict(bench.bit_rows, bench.args.bit_steps)
        )
    return text


def notes(bench: Bench, cfg, batch: int, shape: tuple[int, int, int, int], acts: list[str]) -> list[str]:
    from .train_step import levers

    a = bench.args
    env = bench.info.get("environment") or timing.machine_line(torch.device("cpu")) + " (no worker answered)"
    lines = [
        f"{env}, triton {bench.info.get('triton', '?')} (the workers')",
        f"recipe {cfg.recipe}: model {cfg.model.name}, batch {batch} x {shape[1]}x{shape[2]}x{shape[3]} "
        f"synthetic, optimizer {cfg.optim.name}, activations {', '.join(acts)}; " + levers(cfg.trainer),
        (
            f"workers: {'; '.join(bench.starts) or 'none started'} (a fresh interpreter each, torch and "
            f"visionbench imported, {bench.device.type} initialised), each its own seed; a case: the first K workers "
            f"of a pool build and warm up the step ({WARMUP_STEPS}+ steps, ≥ {WARMUP_MIN_S} s), start together at "
            f"one instant, step for {a.seconds:g} s and synchronise; img/s (all K): the sum of each worker's steps × "
            "batch / its seconds; × 1 process: over the same activation's one eager process"
        ),
        (
            f"GPU busy %: the GPU's utilization (NVML: the share of its last sample period in which a kernel ran) "
            f"read by the parent every {BUSY_PERIOD_S:g} s from {BUSY_SKIP_S:g} s (or a third of the case) after "
            f"the start, averaged (read by: {bench.sampler.method or 'nothing: —'}); peak MB: the largest of the "
            "workers' peak allocated bytes in the case (CUDA)"
        ),
        "deterministic algorithms (warn only) and cuDNN's benchmark off where trainer.deterministic "
        "(default true; false: cuDNN's benchmark on, as a run), CUBLAS_WORKSPACE_CONFIG=:4096:8 in every worker"
        + (
            "; a system MPS daemon serves this environment: the rows without MPS in their mode ran under it"
            if mps_running()
            else ""
        ),
    ]
    if a.mps:
        lines.append(
            f"eager, MPS: the same cases in a second pool started under a private MPS daemon ({MPS_CONTROL} "
            "-d with its own CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY, quit at the end)"
        )
    if a.capture:
        lines.append(
            "CUDA graph: forward, loss, backward and the optimizer step captured in one torch.cuda.CUDAGraph"
            f" after {GRAPH_WARMUP} side-stream steps, then replayed (K in --capture-k); torch.compile "
            "reduce-overhead: the model compiled (forward and backward in CUDA graphs, the optimizer step "
            "eager), K=1 in a pool of its own; both CUDA only"
        )
    if a.bits:
        lines.append(
            f"bit check: seeds 0..{a.bits - 1}, {a.bit_steps} steps each from the seed's initial weights, "
            "deterministic algorithms on, trained alone (one after another in one worker), then all "
            f"{a.bits} at once (one per worker); the sha256 of each model's final state_dict (16 digits "
            "shown)"
        )
    lines.append(
        f"targets: aggregate ≥ {TARGET_RATIO:g}× one process (≥ {TARGET_IMG_S_H100:,} img/s "
        f"fp32 for cifar10_vgg8 on an H100) and the GPU ≥ {TARGET_BUSY:.0f} % busy"
    )
    lines += verdicts(bench.rows, bench.device)
    return lines


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str]) -> int:
    from ..config import ConfigError, run_config, typed
    from ..sweep.acts import sweep_acts
    from ..sweep.preflight import load_config
    from .train_step import input_shape

    args, overrides = parse_args(argv)
    try:
        cfg = load_config(overrides)
        acts = sweep_acts(cfg)
        num_classes, in_chans, img_size = input_shape(cfg)
        runs = {str(act): typed(run_config(cfg, act, 0)) for act in acts}
    except (ConfigError, ValueError) as e:
        print(f"visionbench bench fill: {e}", file=sys.stderr)
        return 2
    batch = int(cfg.batch_size)
    shape = (batch, in_chans, img_size, img_size)

    def spec(act: str, mode: str, seed: int) -> Spec:
        return Spec(act, runs[act], mode, seed, shape, num_classes)

    name = args.name or f"fill_{cfg.recipe}"
    title = (
        f"Filling the {'GPU' if args.device.startswith('cuda') else args.device.upper()}: K training processes "
        f"of {cfg.model.name} at once"
    )
    command = "visionbench bench fill " + " ".join(argv)
    bench: Bench

    def publish(final: bool = False) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(sys.stdout if final else out):
            timing.write_report(
                name, title, command, notes(bench, cfg, batch, shape, list(runs)), report_body(bench), args.out
            )

    bench = Bench(args, spec, batch, publish)

    def terminated(signum, frame):  # the GPU window's timeout: the finally blocks stop the workers and MPS
        raise KeyboardInterrupt()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        bench.run_all(list(runs))
    except KeyboardInterrupt:
        publish()
        print("visionbench bench fill: interrupted; the report holds the cases that ended", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    publish(final=True)
    return 0

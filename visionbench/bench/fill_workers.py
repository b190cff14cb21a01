"""The worker processes of `visionbench bench fill` (bench/fill_gpu.py): each builds a recipe's model with the run's
optimizer on a fixed synthetic batch (`TrainStep`), eager, with the whole step in one CUDA graph, or compiled with
reduce-overhead, and steps it when the parent says; `Pool` starts them (fresh interpreters: `python -c`, so that no
caller's main module is re-run) and talks to them over pipes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from . import determinism, timing

WARMUP_STEPS = 3  # untimed steps after a worker builds a case's step (compile, autotune, allocator) ...
WARMUP_MIN_S = 0.5  # ... and more, up to 50, until this long
GRAPH_WARMUP = 3  # side-stream iterations before a CUDA graph capture (PyTorch's "whole network capture")
REPLY_TIMEOUT_S = 300.0  # a worker that answers nothing for this long is stopped (its case fails) ...
START_TIMEOUT_S = 120.0  # ... or that has not started (imports, CUDA) in this long


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 of a state_dict: every entry's name, dtype, shape and bytes, in key order."""
    h = hashlib.sha256()
    for key in sorted(state):
        v = state[key]
        h.update(key.encode())
        if isinstance(v, torch.Tensor):
            v = v.detach().to("cpu").contiguous()
            h.update(f"{v.dtype}{tuple(v.shape)}".encode())
            h.update(v.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- the workers
@dataclasses.dataclass(frozen=True)
class Spec:
    """What a worker trains: the act's typed run config, the mode, the seed, the input."""

    act: str
    run: object  # config.RunConfig (typed)
    mode: str  # eager | graph | compile | bits
    seed: int
    shape: tuple[int, int, int, int]  # batch, channels, height, width
    num_classes: int


class CapturedStep:
    """The whole training step (forward, loss, backward, optimizer step) of a `TrainStep` in one CUDA graph on its
    static batch (PyTorch's "whole network capture"): warmed up on a side stream, gradients set to None before the
    capture so that backward allocates them from the graph's pool; a call replays the graph."""

    def __init__(self, step):
        import torch.nn.functional as F

        model, opt, x, y = step.model, step.opt, step.x, step.y
        for group in opt.param_groups:  # Adam(W) keeps its step count on the device under capture
            if "capturable" in group:
                group["capturable"] = True
        dtype = step.autocast_dtype

        def body() -> None:
            with torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None, cache_enabled=False):
                loss = F.cross_entropy(model(x), y, label_smoothing=step.smoothing)
            loss.backward()
            opt.step()

        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                opt.zero_grad(set_to_none=True)
                body()
        torch.cuda.current_stream(x.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            body()
        self.model = model

    def __call__(self) -> None:
        self.graph.replay()


def build_step(spec: Spec, device: torch.device) -> Callable[[], None]:
    """A worker's step for `spec`: the run's model (`build_model`, seeded by spec.seed) and optimizer on a fixed
    synthetic batch (`TrainStep`), eager, captured in one CUDA graph, or compiled with reduce-overhead."""
    from ..train.run import build_model
    from .train_step import TrainStep

    run = spec.run
    if spec.mode != "eager" and run.trainer.compile:  # the mode decides the compilation
        run = dataclasses.replace(run, trainer=dataclasses.replace(run.trainer, compile=False))
    batch, chans, height, width = spec.shape
    gen = torch.Generator().manual_seed(0)  # the same batch in every worker and every mode
    x = torch.randn(batch, chans, height, width, generator=gen).to(device)
    y = torch.randint(0, spec.num_classes, (batch,), generator=gen).to(device)
    torch.manual_seed(spec.seed)
    model = build_model(run, spec.num_classes, chans, height).to(device)
    step = TrainStep(model, run, x, y)
    if spec.mode == "graph":
        return CapturedStep(step)
    if spec.mode == "compile":
        step.model.compile(mode="reduce-overhead")
    return step


class Worker:
    """One worker process's state: its prepared steps by (act, mode)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.steps: dict[tuple[str, str], Callable[[], None]] = {}
        if device.type == "cuda" and device.index is not None:  # the capture and its side stream: the current one
            torch.cuda.set_device(device)

    def info(self) -> dict:
        from ..train.run import build_model  # noqa: F401 - imported now, while every worker starts at once
        from .train_step import TrainStep  # noqa: F401

        try:
            import triton

            triton_version = triton.__version__
        except ImportError:
            triton_version = "not importable"
        return {"environment": timing.machine_line(self.device), "triton": triton_version}

    def prepare(self, spec: Spec) -> dict:
        """Build (unless built: the bit check always rebuilds) and warm up the step of (act, mode)."""
        key = (spec.act, spec.mode)
        if key in self.steps and spec.mode != "bits":
            return {"seconds": None}
        stale = [k for k in self.steps if k[0] != spec.act or k == key]
        for k in stale:  # one activation's steps at a time on the device
            del self.steps[k]
        if stale:
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        determinism.apply(spec.mode == "bits" or spec.run.trainer.deterministic)
        from ..activations import fused  # this worker trains as the run would: its trainer.kernels, unless a

        fused.set_backend(*fused.resolve(spec.run.trainer.kernels))  # variable overrides it
        t0 = time.perf_counter()
        step = build_step(spec, self.device)
        if spec.mode != "bits":  # the bit check trains from the seed's initial weights: no warm-up steps
            warm = [timing.timed(step, self.device) for _ in range(WARMUP_STEPS)]
            while sum(warm) < WARMUP_MIN_S and len(warm) < 50:
                warm.append(timing.timed(step, self.device))
        timing.synchronize(self.device)
        self.steps[key] = step
        return {"seconds": time.perf_counter() - t0}

    def run(
        self,
        act: str,
        mode: str,
        start_at: float,
        seconds: float | None = None,
        steps: int | None = None,
        digest: bool = False,
    ) -> dict:
        """From `start_at` (time.time), step for `seconds` or `steps`; the steps done, their seconds, peak CUDA
        memory, and with `digest` the sha256 of the model's final state_dict."""
        step = self.steps[(act, mode)]
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        while (wait := start_at - time.time()) > 0:
            time.sleep(min(wait, 0.05))
        t0 = time.perf_counter()
        done = 0
        if steps is not None:
            for _ in range(steps):
                step()
            done = steps
        else:
            end = t0 + seconds
            while True:
                step()
                done += 1
                if time.perf_counter() >= end:
                    break
        timing.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        return {
            "steps": done,
            "seconds": elapsed,
            "peak": torch.cuda.max_memory_allocated(self.device) if cuda else None,
            "digest": state_digest(step.model.state_dict()) if digest else None,
        }


def one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:240]


def worker_main() -> None:
    """A worker process (`python -c ... worker_main()` FD DEVICE THREADS): answers the parent's (command, kwargs)
    messages on the connection FD with ("ok", result) or ("error", one line); ends at "quit" or when the parent
    goes (end of file)."""
    from multiprocessing.connection import Connection

    fd, device_name, threads = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts (the parent set it too)
    torch.set_num_threads(threads)
    import logging

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    conn = Connection(fd)
    worker = Worker(torch.device(device_name))
    while True:
        try:
            command, kwargs = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if command == "quit":
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)  # at once: no interpreter teardown (torch's, the compiler's worker pool) to wait for
        try:
            conn.send(("ok", getattr(worker, command)(**kwargs)))
        except Exception as e:  # noqa: BLE001 - one line back to the parent; the worker stays for the next case
            conn.send(("error", one_line(e)))


class WorkerError(RuntimeError):
    pass


def worker_env(threads: int, extra: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: this one, visionbench's folder first on PYTHONPATH (a checkout runs uninstalled),
    cuBLAS's deterministic workspace (before CUDA starts), `threads` OpenMP threads, and `extra` (MPS's)."""
    environ = dict(os.environ if environ is None else environ)
    root = str(Path(__file__).resolve().parents[2])
    path = [root, *[p for p in (environ.get("PYTHONPATH") or "").split(os.pathsep) if p and p != root]]
    return {
        **environ,
        "PYTHONPATH": os.pathsep.join(path),
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "OMP_NUM_THREADS": str(threads),
        **extra,
    }


WORKER_CODE = "from visionbench.bench.fill_workers import worker_main; worker_main()"


class Pool:
    """`size` worker processes (`worker_main`, started at once, with `env` added to their environment), kept for
    every case; each talks over its end of a socket pair (multiprocessing.connection: pickled messages)."""

    def __init__(self, size: int, device: torch.device, env: dict[str, str]):
        from multiprocessing import Pipe

        threads = max(1, (os.cpu_count() or 1) // size)
        full = worker_env(threads, env)
        self.conns, self.procs, self.broken, self.mps = [], [], False, bool(env)
        t0 = time.perf_counter()
        try:
            for _ in range(size):
                parent, child = Pipe()
                try:
                    proc = subprocess.Popen(
                        [sys.executable, "-c", WORKER_CODE, str(child.fileno()), str(device), str(threads)],
                        pass_fds=(child.fileno(),),
                        env=full,
                        stdin=subprocess.DEVNULL,
                    )
                finally:
                    child.close()
                self.conns.append(parent)
                self.procs.append(proc)
            # every worker has imported torch and visionbench and started its device (a broken MPS server can hang it)
            self.info = self.call(range(size), "info", timeout=START_TIMEOUT_S)[0]
        except BaseException:
            self.close()
            raise
        self.start_s = time.perf_counter() - t0

    def call(
        self,
        workers: Sequence[int],
        command: str,
        kwargs: Callable[[int], dict] | None = None,
        timeout: float = REPLY_TIMEOUT_S,
    ) -> list:
        """Send `command` to each worker in `workers` (kwargs(i) its arguments), then collect every reply."""
        self.send(workers, command, kwargs)
        return self.collect(workers, timeout)

    def send(self, workers: Sequence[int], command: str, kwargs: Callable[[int], dict] | None = None) -> None:
        if self.broken:
            raise WorkerError("an earlier worker stopped answering; this pool's cases are not run")
        for i in workers:
            try:
                self.conns[i].send((command, kwargs(i) if kwargs else {}))
            except OSError:
                self.broken = True
                raise WorkerError(f"worker {i} exited (rc {self.procs[i].poll()})") from None

    def collect(self, workers: Sequence[int], timeout: float = REPLY_TIMEOUT_S) -> list:
        """Every reply of `workers` to what was sent them (all are read, errors or not); WorkerError for the first
        error, a dead worker or one silent for `timeout` seconds (then the pool is broken: no more cases)."""
        replies, errors = [], []
        deadline = time.monotonic() + timeout
        for i in workers:
            try:
                if not self.conns[i].poll(max(0.0, deadline - time.monotonic())):
                    raise WorkerError(f"worker {i} gave no answer in {timeout:.0f} s")
                status, value = self.conns[i].recv()
            except (EOFError, OSError, WorkerError) as e:
                self.broken = True
                raise WorkerError(
                    str(e) if isinstance(e, WorkerError) else f"worker {i} exited (rc {self.procs[i].wait(5)})"
                ) from None
            if status == "error":
                errors.append(f"worker {i}: {value}")
            replies.append(value)
        if errors:
            raise WorkerError(errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
        return replies

    def close(self) -> None:
        """Ask every worker to quit; the ones still there after 5 s are killed."""
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("quit", {}))
        deadline = time.monotonic() + 5
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        for conn in self.conns:
            conn.close()

"""One lent GPU's window, prepared: every GPU benchmark in one command of at most `--budget` seconds, each stage's
report kept as soon as the stage ends (docs/bench.md, "The GPU window").

    python3 scripts/gpu_window.py                                 # on the GPU: into results/bench/, 360 s at most
    python3 scripts/gpu_window.py --site .gpu-site --archive $OUT/gpu_window.tar.gz   # on a lent GPU (see docs)
    python3 scripts/gpu_window.py --stages train_vgg8_rational    # one stage again
    python3 scripts/gpu_window.py --device cpu --out /tmp/w       # the dry run: tiny sizes, Triton's interpreter

Needs only python3 with torch here: visionbench need not be installed. Each stage runs `python -m visionbench.bench
...` in its own subprocess, with this checkout on PYTHONPATH, under a timeout (one hang cannot eat the window), its
output in <out>/gpu_window_<stage>.log. A stage whose imports fail (`bench train` needs hydra-core and omegaconf,
which the lent GPUs lack: `make gpu-carry`, then --site) fails with the ImportError in the summary, and the others
run. <out>/gpu_window.md, rewritten before and after every stage, lists each stage's status (ok, failed (rc N),
skipped: reason, timed out), its seconds, the card and the torch and triton versions. A stage is skipped, with the
reason recorded, when less of the budget is left than it needs.

Stages are a registry, `STAGES`: a later benchmark appends its own with `stage(...)` or `bench_stage(...)`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: on the subprocesses' PYTHONPATH (nothing is installed)
SUMMARY = "gpu_window.md"


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
    what: str  # one line for the summary
    command: Callable[[Window], list[str]]  # the subprocess's arguments after `python`
    report: Callable[[Window], str]  # the file it writes into the out dir
    seconds: float  # its timeout (the budget left, where less)
    least: float  # skipped when less of the budget is left


STAGES: list[Stage] = []


def stage(
    name: str,
    what: str,
    command: Callable[[Window], list[str]],
    report: Callable[[Window], str],
    seconds: float,
    least: float,
) -> Stage:
    """Append a stage to the window (run in registration order)."""
    if any(s.name == name for s in STAGES):
        raise ValueError(f"stage {name!r} is registered twice")
    STAGES.append(Stage(name, what, command, report, seconds, least))
    return STAGES[-1]


def bench_stage(name: str, what: str, args: list[str], dry: list[str], seconds: float, least: float) -> Stage:
    """A `visionbench bench` stage writing <out>/<name>_<device>.md; `dry` is appended in the dry run (the last of
    a repeated flag wins: tiny sizes, one or two repeats)."""

    def command(w: Window) -> list[str]:
        return [
            "-m",
            "visionbench.bench",
            *args,
            "--device",
            w.device,
            "--out",
            str(w.out),
            "--name",
            f"{name}_{w.device}",
            *(dry if w.dry else []),
        ]

    return stage(name, what, command, lambda w: f"{name}_{w.device}.md", seconds, least)


# The timeouts are estimates, not measurements: on the first H100 (2026-11-25, torch.compile kernels) compiling took
# 0.8-8.3 s per activation case (activations_cuda.md, 19 cases) and a training step's warm-up 0.5-15 s
# (train_*_cuda.md); how long each whole command ran was not recorded. gpu_window.md records it from now on.
bench_stage(
    "activations",
    "every family's forward + backward vs GELU, fp32 [64, 128, 32, 32]",
    ["activations", "--shape", "64,128,32,32", "--dtype", "float32"],
    ["--shape", "2,8,8,8", "--repeats", "2", "--event-rounds", "2"],
    seconds=150,
    least=60,
)
bench_stage(
    "activations_per_channel",
    "the same with one coefficient set per channel",
    ["activations", "--shape", "64,128,32,32", "--dtype", "float32", "--per-channel", "--no-reference"],
    ["--shape", "2,8,8,8", "--repeats", "1", "--event-rounds", "1"],
    seconds=100,
    least=45,
)
bench_stage(
    "train_vgg8_rational",
    "a VGG8 training step (cifar10_vgg8, batch 128) with rational vs its own ReLU",
    ["train", "recipe=cifar10_vgg8", "act=rational"],
    ["--steps", "1", "--warmup", "0", "batch_size=2"],
    seconds=60,
    least=30,
)
bench_stage(
    "train_convnext_t_hermite",
    "a ConvNeXt-T training step (cifar10_convnext_t, batch 512) with hermite vs its own GELU",
    ["train", "recipe=cifar10_convnext_t", "act=hermite"],
    ["--steps", "1", "--warmup", "0", "batch_size=1"],
    seconds=90,
    least=40,
)
# K training processes on one GPU (16 workers on the lent 16 cores; their start is most of the cost), under a
# private MPS daemon, the whole step in one CUDA graph at K=1 and 8, the bit check; `--budget` skips the last cases
# (torch.compile's first) rather than run into the timeout, and the report is rewritten after every case. The dry run
# trains ReLU alone: rational's Triton kernels in the interpreter take seconds a step (train_vgg8_rational runs them).
bench_stage(
    "fill_vgg8",
    "K training processes of cifar10_vgg8 (batch 128) on the GPU at once, relu and rational: "
    "img/s and GPU busy % vs one, under MPS, a captured step, the bit check",
    [
        "fill",
        "recipe=cifar10_vgg8",
        "act=relu,rational",
        "--k",
        "1,4,8,16",
        "--seconds",
        "2",
        "--mps",
        "--capture",
        "--bits",
        "8",
        "--budget",
        "150",
    ],
    ["--k", "1,2", "--seconds", "0.3", "--bits", "2", "--bit-steps", "2", "act=relu", "batch_size=2"],
    seconds=170,
    least=60,
)
# the same through `visionbench run`'s own sweep (Lightning, checkpoints, predictions) on synthetic CIFAR-shaped
# data: 8 seeds at parallel=8 against 2 of them alone, the bits of each seed compared (predictions and final weights),
# and `visionbench estimate`'s projection of 20 seeds x 60 epochs at parallel=auto (the target: <= 20 min on one H100)
bench_stage(
    "sweep_vgg8",
    "a real cifar10_vgg8 sweep (synthetic data, 1 epoch) at parallel=8 vs alone: aggregate img/s, "
    "GPU busy, the bits of each seed; the projected 20 seeds x 60 epochs",
    [
        "sweep",
        "recipe=cifar10_vgg8",
        "act=relu",
        "data.name=synthetic",
        "data.synthetic.num_train=20480",
        "data.synthetic.num_val=2048",
        "epochs=1",
        "--k",
        "1,8",
        "--seeds",
        "8",
        "--solo-seeds",
        "2",
        "--project",
        "20x60",
    ],
    [
        "recipe=digits_vgg4",
        "data.name=digits",
        "data.limit_train=128",
        "data.limit_val=64",
        "--k",
        "1,2",
        "--seeds",
        "2",
        "--solo-seeds",
        "1",
        "--project",
        "2x1",
    ],
    seconds=150,
    least=60,
)

stage(
    "kernel_tests",
    "the Triton kernels against float64 (tests/test_triton_kernels.py) and the CUDA tests' "
    "activation checks (tests/test_cuda.py -k accurate)",
    lambda w: [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(ROOT / "tests" / "test_triton_kernels.py"),
        *([] if w.dry else [str(ROOT / "tests" / "test_cuda.py"), "-k", "not trains_on_cuda"]),
        *(["-k", "rational and nchw or opcheck"] if w.dry else []),
        f"--junitxml={w.out / f'kernel_tests_{w.device}.xml'}",
    ],
    lambda w: f"kernel_tests_{w.device}.xml",
    seconds=120,
    least=40,
)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def folder(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return path


def archive_file(text: str) -> str:
    if not Path(text).absolute().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: its folder does not exist")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/gpu_window.py", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cuda (default), or cpu: the dry run")
    p.add_argument("--budget", type=positive_seconds, default=360.0, help="seconds for all stages (default 360)")
    p.add_argument(
        "--out", default=None, help="report folder (default results/bench; the dry run's: runs/gpu_window_dry)"
    )
    p.add_argument(
        "--stages",
        default="all",
        help="comma-separated stage names (default all): " + ", ".join(s.name for s in STAGES),
    )
    p.add_argument(
        "--site",
        type=folder,
        action="append",
        default=[],
        help="a folder of importable packages put on the stages' PYTHONPATH (`make gpu-carry`: .gpu-site)",
    )
    p.add_argument(
        "--wheels",
        type=folder,
        default=None,
        help="a folder of .whl files, installed first with pip --no-index --no-deps --target (a temp folder)",
    )
    p.add_argument(
        "--archive",
        type=archive_file,
        default=None,
        help="also write the out folder as this .tar.gz after every stage (one file to bring back)",
    )
    args = p.parse_args(argv)
    known = {s.name for s in STAGES}
    names = known if args.stages == "all" else {n.strip() for n in args.stages.split(",") if n.strip()}
    if not names or names - known:
        p.error(
            f"--stages: unknown stage(s) {', '.join(sorted(names - known)) or '(none given)'}; "
            f"known: {', '.join(s.name for s in STAGES)}"
        )
    args.stages = [s for s in STAGES if s.name in names]
    if args.device == "cuda" and not cuda_available():
        p.error(
            "--device cuda: no CUDA device here (torch.cuda.is_available() is False, or no torch); "
            "--device cpu is the dry run"
        )
    args.out = Path(args.out or (ROOT / ("runs/gpu_window_dry" if args.device == "cpu" else "results/bench")))
    return args


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def machine(device: str) -> list[str]:
    """The card, torch, triton and Python: the summary's header lines (each import may fail: it is said)."""
    lines = []
    try:
        import torch
    except ImportError as e:
        return [f"torch: not importable ({e})", f"Python {platform.python_version()}"]
    if device == "cuda":
        card = f"{torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} CUDA device(s))"
    else:
        card = f"none: the dry run on the CPU ({platform.processor() or platform.machine()})"
    lines.append(f"card: {card}")
    try:
        import triton

        triton_version = triton.__version__
    except ImportError as e:
        triton_version = f"not importable ({e})"
    lines.append(
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton_version}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    return lines


def install_wheels(wheels: Path, target: str) -> tuple[str | None, str]:
    """pip install the folder's wheels into `target`: (target, or None where nothing was installed; what happened)."""
    files = sorted(str(p) for p in wheels.glob("*.whl"))
    if not files:
        return None, f"--wheels {wheels}: no .whl files there"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--target",
            target,
            *files,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return None, f"--wheels {wheels}: pip failed (rc {done.returncode}): {last_line(done.stderr)}"
    return target, f"--wheels {wheels}: {len(files)} wheel(s) installed for this window"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def why_failed(log: Path) -> str:
    """The failure's own line from a stage's log: its ImportError if any (a missing package), else its last line."""
    text = log.read_text(errors="replace") if log.exists() else ""
    imports = re.findall(r"^(?:ModuleNotFoundError|ImportError): .*$", text, flags=re.M)
    return (imports[-1] if imports else last_line(text))[:300]


class Terminated(Exception):
    """SIGTERM (a device tool's timeout): the running stage is stopped and the summary says so."""


def run_stage(command: list[str], log: Path, timeout: float, env: dict[str, str], cwd: str) -> tuple[str, float]:
    """Run one stage in its own process group, stdout and stderr into `log`; (status, seconds)."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        out.write(f"$ {' '.join(command)}\n\n")
        out.flush()
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, preexec_fn=os.setpgrp
        )  # its own group: a timeout stops its children too
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
            return f"timed out after {timeout:.0f} s", time.monotonic() - t0
        except (KeyboardInterrupt, Terminated):
            stop(proc)
            raise
    seconds = time.monotonic() - t0
    return ("ok" if rc == 0 else f"failed (rc {rc}): {why_failed(log)}"), seconds


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the stage's process group, SIGKILL 10 s later if it is still there."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def write_summary(out: Path, head: list[str], rows: list[list[str]], archive: str | None) -> None:
    """<out>/gpu_window.md (and the archive), replaced whole: a window stopped at any moment leaves a summary.
    A plain table, not visionbench's renderer: this script imports nothing of visionbench, whose imports may fail."""
    cells = [[c.replace("|", "\\|") for c in row] for row in rows]
    table = [
        "| stage | status | seconds | report | log | what |",
        "| --- | --- | ---: | --- | --- | --- |",
        *[f"| {' | '.join(row)} |" for row in cells],
    ]
    text = "\n".join(
        [
            "# The GPU window",
            "",
            f"    python3 scripts/gpu_window.py {' '.join(sys.argv[1:])}".rstrip(),
            "",
            *[f"- {line}" for line in head],
            "",
            *table,
            "",
        ]
    )
    tmp = out / f".{SUMMARY}.tmp"
    tmp.write_text(text)
    tmp.replace(out / SUMMARY)
    if archive:
        part = Path(f"{archive}.part")
        with tarfile.open(part, "w:gz") as tar:
            tar.add(out, arcname=out.name)
        part.replace(archive)


def stage_env(args: argparse.Namespace, tmp: Path) -> tuple[dict[str, str], list[str]]:
    """The stages' environment (this checkout, --wheels and --site on PYTHONPATH; the dry run's Triton interpreter)
    and the summary's lines about it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # the Triton kernels run on the CPU, in Triton's interpreter
        env.setdefault("VISIONBENCH_KERNELS", "triton")  # and the learnable activations run them (auto: CUDA only)
    paths, notes = [str(ROOT)], [f"visionbench from {ROOT}"]
    if args.wheels:
        site, note = install_wheels(args.wheels, str(tmp / "site"))
        paths, notes = paths + ([site] if site else []), notes + [note]
    paths += [str(p.resolve()) for p in args.site]
    notes += [f"--site {p}: on PYTHONPATH" for p in args.site]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    switches = [f"{k}={env[k]}" for k in ("TRITON_INTERPRET", "VISIONBENCH_KERNELS") if k in env]
    return env, notes + [f"environment: {', '.join(switches)}"] * bool(switches)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_window_") as tmp:  # the wheels' install, the stages' cwd
        return run_window(args, Window(args.device, args.out.resolve()), Path(tmp))


def run_window(args: argparse.Namespace, w: Window, tmp: Path) -> int:
    start = time.monotonic()
    env, notes = stage_env(args, tmp)
    cwd = tmp / "cwd"  # lightning_logs/ and the like land here, not in the out folder
    cwd.mkdir()
    head = [
        *machine(args.device),
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, budget {args.budget:.0f} s, "
        f"{'the dry run (tiny sizes)' if w.dry else 'full sizes'}",
        *notes,
    ]
    # the report's cell stays "—" unless the stage ended ok: an older report of the same name may lie in the folder
    rows = [[s.name, "not reached", "", "—", f"gpu_window_{s.name}.log", s.what] for s in args.stages]

    def terminated(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, terminated)
    for row, s in zip(rows, args.stages):
        left = args.budget - (time.monotonic() - start)
        if left < s.least:
            row[1] = f"skipped: {left:.0f} s of the {args.budget:.0f} s budget left, the stage needs {s.least:.0f} s"
            continue
        row[1] = f"running since {datetime.datetime.now().strftime('%H:%M:%S')}"
        write_summary(w.out, head, rows, args.archive)
        print(f"gpu_window: {s.name} (at most {min(s.seconds, left):.0f} s)", file=sys.stderr, flush=True)
        try:
            row[1], seconds = run_stage(
                [sys.executable, *s.command(w)], w.out / row[4], min(s.seconds, left), env, str(cwd)
            )
        except (KeyboardInterrupt, Terminated):
            row[1] = "stopped: the window was interrupted"
            write_summary(w.out, head, rows, args.archive)
            return 130
        row[2], row[3] = f"{seconds:.1f}", s.report(w) if row[1] == "ok" else "—"
        write_summary(w.out, head, rows, args.archive)
        print(f"gpu_window: {s.name}: {row[1]} ({seconds:.0f} s)", file=sys.stderr, flush=True)
    head.append(f"used {time.monotonic() - start:.0f} s of {args.budget:.0f}")
    write_summary(w.out, head, rows, args.archive)
    print(f"written: {w.out / SUMMARY}")
    return 0 if all(row[1] == "ok" or row[1].startswith("skipped") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

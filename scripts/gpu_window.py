"""One lent GPU's window, prepared: every GPU benchmark in one command of at most `--budget` seconds (360: six
minutes, kernel compilation included), each stage's rows kept as they are measured (docs/bench.md, "The GPU window").

    python3 scripts/gpu_window.py --plan                          # the stages, their times, what each decides
    python3 scripts/gpu_window.py                                 # on the GPU: into results/bench/, 360 s at most
    python3 scripts/gpu_window.py --site .gpu-site --archive $OUT/gpu_window.tar.gz   # on a lent GPU (see docs)
    python3 scripts/gpu_window.py --stages train_vgg8_rational    # one stage again
    python3 scripts/gpu_window.py --device cpu --out /tmp/w       # the dry run: tiny sizes, Triton's interpreter

Needs only python3 with torch here: visionbench need not be installed. Each stage (scripts/window_stages.py: the
registry, in the order of what the stages decide, and the rule that gives each its time) runs `python -m
visionbench bench ...` or pytest in its own subprocess, with this checkout on PYTHONPATH, under its time (one hang
cannot eat the window), its output in <out>/gpu_window_<stage>.log; its benchmark rewrites its report as it goes,
so a stage stopped at its time keeps the rows it measured. A stage whose imports fail (`bench train` needs hydra-core
and omegaconf, which the lent GPUs lack: `make gpu-carry`, then --site) fails with the ImportError in the summary, and
the others run. <out>/gpu_window.md, rewritten before and after every stage, lists each stage's status (ok, failed (rc
N), skipped: reason, timed out), its seconds and the seconds it was given, the card and the torch and triton versions.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the stages' registry beside this file
from window_stages import (  # noqa: E402
    BUDGET_S,
    GRACE_S,
    OVERHEAD_S,
    ROOT,
    STAGES,
    START_S,
    Stage,
    Window,
    planned,
    seconds_for,
)

SUMMARY = "gpu_window.md"


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
    p.add_argument(
        "--budget",
        type=positive_seconds,
        default=BUDGET_S,
        help=f"seconds for the whole window, its own start included (default {BUDGET_S:.0f})",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the stages in order, the time each may take and what each decides, and the total; run nothing",
    )
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
    if args.device == "cuda" and not args.plan and not cuda_available():
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


def run_stage(
    command: list[str], log: Path, timeout: float, env: dict[str, str], cwd: str, stop_signal: int = signal.SIGTERM
) -> tuple[str, float]:
    """Run one stage in its own process group, stdout and stderr into `log`; (status, seconds). At `timeout` it is
    stopped (`stop`: `stop_signal`, then SIGKILL; at most `GRACE_S`)."""
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
            stop(proc, stop_signal)
            return f"timed out after {timeout:.0f} s", time.monotonic() - t0
        except (KeyboardInterrupt, Terminated):
            stop(proc, stop_signal)
            raise
    seconds = time.monotonic() - t0
    return ("ok" if rc == 0 else f"failed (rc {rc}): {why_failed(log)}"), seconds


def stop(proc: subprocess.Popen, first: int = signal.SIGTERM) -> None:
    """`first` to the stage's process group (its benchmark writes what it has), SIGKILL if it is still there
    `GRACE_S` - 2 s later: at most `GRACE_S` in all."""
    for sig, wait in ((first, GRACE_S - 2), (signal.SIGKILL, 2)):
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
        "| stage | status | seconds | given s | report | log | what |",
        "| --- | --- | ---: | ---: | --- | --- | --- |",
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


def written_since(path: Path, since: float) -> bool:
    """Whether `path` was written at or after `since` (a stage stopped at its time kept the rows it measured; an
    older report of the same name may lie in the folder)."""
    try:
        return path.stat().st_mtime >= since - 1  # file systems keep mtimes coarser than time.time()
    except OSError:
        return False


def plan(stages: list[Stage], budget: float, device: str) -> str:
    """The window's plan: each stage in order with its cap, its least time and what it decides; the total against
    the budget, and the rule that gives each stage its time."""
    w = Window(device, Path("<out>"))
    lines = [
        f"The GPU window: {len(stages)} stage(s) in the order of what they decide, on {device}"
        + (" (the dry run: tiny sizes)" if w.dry else ""),
        "",
        f"{'#':>2}  {'stage':<26} {'cap s':>5} {'least s':>7}  decides",
    ]
    for i, s in enumerate(stages, 1):
        lines.append(f"{i:>2}  {s.name:<26} {s.cap:>5.0f} {s.least:>7.0f}  {s.decides}")
    total = planned(stages)
    caps = sum(s.cap for s in stages)
    verdict = (
        f"within the budget of {budget:.0f} s"
        if total <= budget
        else f"{total - budget:.0f} s over the budget of {budget:.0f} s: the last stages get what is left, "
        "skipped when less than their least"
    )
    budgeted = [s.name for s in stages if "--budget" in s.command(w, s.cap)]
    lines += [
        "",
        f"total: {caps:.0f} s of caps + {OVERHEAD_S:.0f} s of the window's own (its start {START_S:.0f} s, a stopped "
        f"stage's grace {GRACE_S:.0f} s) = {total:.0f} s, {verdict}",
        "each stage is given its cap plus what the stages before it left unused (the time left less the later "
        "stages' caps), never more than is left; with less than its least left it is skipped",
        *([f"given as their own --budget (less a margin for their ending): {', '.join(budgeted)}"] if budgeted else []),
        "",
        "commands (at their caps):",
        *[f"  {s.name}: {shlex.join(['python', *s.command(w, s.cap)])}" for s in stages],
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    start = time.monotonic()  # the window's clock: its own start counts against the budget
    args = parse_args(argv)
    if args.plan:
        print(plan(args.stages, args.budget, args.device))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_window_") as tmp:  # the wheels' install, the stages' cwd
        return run_window(args, Window(args.device, args.out.resolve()), Path(tmp), start)


def run_window(
    args: argparse.Namespace,
    w: Window,
    tmp: Path,
    start: float,
    clock: Callable[[], float] = time.monotonic,
    runner: Callable[..., tuple[str, float]] = run_stage,
) -> int:
    """Run the chosen stages in order, each given `seconds_for` of the time left (the budget from `start` less one
    stop's grace, by `clock`), each through `runner` (`run_stage`); the summary rewritten around each."""
    env, notes = stage_env(args, tmp)
    cwd = tmp / "cwd"  # lightning_logs/ and the like land here, not in the out folder
    cwd.mkdir(exist_ok=True)
    head = [
        *machine(args.device),
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, budget {args.budget:.0f} s (planned "
        f"{planned(args.stages):.0f} s), {'the dry run (tiny sizes)' if w.dry else 'full sizes'}",
        *notes,
    ]
    # the report's cell stays "—" unless the stage ended ok: an older report of the same name may lie in the folder
    rows = [[s.name, "not reached", "", "", "—", f"gpu_window_{s.name}.log", s.what] for s in args.stages]

    def terminated(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, terminated)
    for i, (row, s) in enumerate(zip(rows, args.stages)):
        left = args.budget - (clock() - start) - GRACE_S  # a stage stopped at its time takes its grace beyond
        seconds = seconds_for(args.stages, i, left)
        if seconds < s.least:
            row[1] = (
                f"skipped: {max(0.0, left):.0f} s of the {args.budget:.0f} s budget left, the stage needs {s.least:.0f} s"
            )
            continue
        row[1], row[3] = f"running since {datetime.datetime.now().strftime('%H:%M:%S')}", f"{seconds:.0f}"
        write_summary(w.out, head, rows, args.archive)
        print(f"gpu_window: {s.name} (at most {seconds:.0f} s)", file=sys.stderr, flush=True)
        began = time.time()
        try:
            row[1], took = runner(
                [sys.executable, *s.command(w, seconds)],
                w.out / row[5],
                seconds,
                {**env, **s.env},
                str(cwd),
                s.stop_signal,
            )
        except (KeyboardInterrupt, Terminated):
            row[1] = "stopped: the window was interrupted"
            write_summary(w.out, head, rows, args.archive)
            return 130
        kept = row[1] == "ok" or (row[1].startswith("timed out") and written_since(w.out / s.report(w), began))
        row[2], row[4] = f"{took:.1f}", s.report(w) if kept else "—"
        write_summary(w.out, head, rows, args.archive)
        print(f"gpu_window: {s.name}: {row[1]} ({took:.0f} s)", file=sys.stderr, flush=True)
    head.append(f"used {clock() - start:.0f} s of {args.budget:.0f}")
    write_summary(w.out, head, rows, args.archive)
    print(f"written: {w.out / SUMMARY}")
    return 0 if all(row[1] == "ok" or row[1].startswith("skipped") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

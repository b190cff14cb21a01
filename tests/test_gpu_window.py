"""scripts/gpu_window.py (docs/bench.md, "The GPU window"): its plan fits the 6-minute window, kernel compilation
included, with the stages in the order of what they decide; each stage is given the time actually left (a fake clock
and a fake stage runner); --plan prints it and runs nothing; its dry run on the CPU writes the summary and each
stage's report and log; a stage whose imports fail is recorded with its ImportError while the others run; a hung
stage is stopped at its time. And what the window carries (scripts/pack_site.py): every distribution its stages
import is on the lent GPUs' image or carried, and what is carried needs nothing else. Nothing here asserts a time."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_window.py"
TIMEOUT = 1200  # seconds for a whole dry window (3-4 minutes on a 2-core machine, more when others share it)
# the dry runs here take the GPU's plan but a budget that no loaded CPU runs into: its stages are given their caps and
# all the budget beyond (the rule), so a stage's status never depends on this machine's speed (no time is asserted)
LONG = ["--budget", "3600"]
ORDER = [  # what the stages decide, most important first (issue 53)
    "warm_kernels",
    "activations",
    "activations_per_channel",
    "train_vgg8_rational",
    "fill_vgg8",
    "train_convnext_t_hermite",
    "sweep_vgg8",
    "kernel_tests",
]


def window(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def statuses(out: Path) -> dict[str, str]:
    """The summary's status cell by stage."""
    rows = [r.strip("|").split(" | ") for r in (out / "gpu_window.md").read_text().splitlines() if r.startswith("| ")]
    return {cells[0].strip(): cells[1].strip() for cells in rows[2:]}


def load_script(monkeypatch):
    """A fresh copy of the script as a module, with a fresh registry of stages (scripts/window_stages.py)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts scripts/ first: undone after the test
    monkeypatch.delitem(sys.modules, "window_stages", raising=False)
    spec = importlib.util.spec_from_file_location("gpu_window", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_window", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------- the plan
def test_the_plan_fits_six_minutes_with_the_stages_in_the_order_of_what_they_decide(monkeypatch):
    gw = load_script(monkeypatch)
    stages = gw.STAGES
    assert [s.name for s in stages] == ORDER
    assert gw.planned(stages) == gw.OVERHEAD_S + sum(s.cap for s in stages) <= 360 == gw.BUDGET_S
    assert all(0 < s.least <= s.cap for s in stages)
    # the warm-up compiles what the activation stages run: their shape, and fp32
    w = gw.Window("cuda", Path("/out"))
    warm, act = (" ".join(s.command(w, s.cap)) for s in stages[:2])
    assert "--shape 64,128,32,32 --dtype float32" in warm and "--shape 64,128,32,32 --dtype float32" in act
    # fill takes a budget: the time it is given, less its margin; no stage has a fixed one
    fill = next(s for s in stages if s.name == "fill_vgg8")
    assert fill.command(w, 85)[-2:] == ["--budget", "75"] and fill.command(w, 120)[-2:] == ["--budget", "110"]
    assert all(s.command(w, s.cap).count("--budget") <= 1 for s in stages)


def test_each_stage_gets_its_cap_plus_what_the_ones_before_left_never_more_than_is_left(monkeypatch):
    gw = load_script(monkeypatch)
    three = [
        gw.Stage(n, "", "", lambda w, s: [], lambda w: "", cap, least)
        for n, cap, least in (("a", 100, 50), ("b", 50, 20), ("c", 30, 20))
    ]
    assert gw.seconds_for(three, 0, 180) == 100  # exactly the caps left: each its own
    assert gw.seconds_for(three, 0, 200) == 120  # 20 s more than the caps: the first takes them
    assert gw.seconds_for(three, 1, 110) == 80  # `a` left 30 s unused: `b` gets them, `c` keeps its 30
    assert gw.seconds_for(three, 1, 60) == 50  # `a` overran: `b` still its cap, `c` gets what is left after
    assert gw.seconds_for(three, 2, 12) == 12  # never past the window's end (then skipped: less than its least)


def run_fake_window(gw, tmp_path, budget: float, takes: dict[str, float], stages=None):
    """run_window with a fake clock and a fake stage runner: stage X "runs" `takes[X]` seconds (its whole time
    where that is more: timed out) and writes its report. Returns (exit code, {stage: (seconds given, command)})."""
    now = [0.0]
    given: dict[str, tuple[float, list[str]]] = {}
    stages = gw.STAGES if stages is None else stages
    out = tmp_path / "out"
    out.mkdir()

    def runner(command, log, timeout, env, cwd, stop_signal):
        name = log.name.removeprefix("gpu_window_").removesuffix(".log")
        given[name] = (timeout, command)
        took = min(takes.get(name, 1.0), timeout)
        now[0] += took
        (out / next(s for s in stages if s.name == name).report(w)).write_text("rows\n")
        return ("ok" if took < timeout else f"timed out after {timeout:.0f} s"), took

    args = Namespace(budget=budget, stages=stages, archive=None, device="cpu", site=[], wheels=None)
    w = gw.Window("cpu", out)
    rc = gw.run_window(args, w, tmp_path, start=0.0, clock=lambda: now[0], runner=runner)
    return rc, given, statuses(out)


def test_the_time_left_is_handed_on_stage_by_stage(monkeypatch, tmp_path):
    gw = load_script(monkeypatch)
    caps = {s.name: s.cap for s in gw.STAGES}
    # every stage takes half its cap: each later one gets its cap plus what the ones before left
    rc, given, status = run_fake_window(gw, tmp_path, 360, {n: c / 2 for n, c in caps.items()})
    assert rc == 0 and set(status.values()) == {"ok"}
    left = 360 - gw.GRACE_S
    for i, name in enumerate(ORDER):
        later = sum(caps[n] for n in ORDER[i + 1 :])
        assert given[name][0] == min(left, max(caps[name], left - later))
        left -= caps[name] / 2
    assert given["warm_kernels"][0] == caps["warm_kernels"] + gw.START_S  # the 5 s the window's start did not take
    assert given["kernel_tests"][0] > caps["kernel_tests"]  # the slack of all the others
    fill_seconds, fill_command = given["fill_vgg8"]
    assert fill_command[-2:] == ["--budget", f"{fill_seconds - 10:.0f}"]  # the time it was given, not a fixed 150


def test_a_stage_that_runs_out_of_time_keeps_its_rows_and_the_later_ones_their_caps(monkeypatch, tmp_path):
    gw = load_script(monkeypatch)
    rc, given, status = run_fake_window(gw, tmp_path, 360, {"activations": 1e9})
    assert status["activations"].startswith("timed out after")
    report = (tmp_path / "out" / "gpu_window.md").read_text()
    assert "| activations_cpu.md |" in report  # the rows it measured, named in the summary
    assert all(given[s.name][0] >= s.cap for s in gw.STAGES[2:])
    assert rc == 1


def test_a_short_budget_runs_the_first_stages_and_skips_the_rest_with_the_reason(monkeypatch, tmp_path):
    gw = load_script(monkeypatch)
    rc, given, status = run_fake_window(gw, tmp_path, 150, {n: 1e9 for n in ORDER})  # each takes all it gets
    assert list(given) == ["warm_kernels", "activations", "activations_per_channel", "kernel_tests"]
    assert [given[n][0] for n in given] == [35, 50, 35, 20]  # the last: what was left, its least fits in it
    assert status["train_vgg8_rational"] == "skipped: 20 s of the 150 s budget left, the stage needs 25 s"
    assert all(status[n].startswith("skipped: ") for n in ORDER[3:7]) and rc == 1


def test_plan_prints_the_stages_their_times_and_the_total_and_runs_nothing(tmp_path):
    done = subprocess.run(  # --device cuda (the default) on a machine without one: the plan needs none
        [sys.executable, str(SCRIPT), "--plan", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = [line.split() for line in lines if re.match(r"\s*\d+\s", line)]
    assert [row[1] for row in table] == ORDER
    assert table[1][2:5] == ["50", "25", "each"]  # activations: cap, least, what it decides
    assert (
        "total: 345 s of caps + 15 s of the window's own" in done.stdout and "= 360 s, within the budget" in done.stdout
    )
    assert "fill_vgg8: python -m visionbench bench fill" in done.stdout and "--budget 75" in done.stdout
    assert not (tmp_path / "out").exists()
    chosen = subprocess.run(
        [sys.executable, str(SCRIPT), "--plan", "--budget", "200", "--stages", "activations,fill_vgg8"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "2 stage(s)" in chosen and "= 150 s, within the budget of 200 s" in chosen
    short = subprocess.run(
        [sys.executable, str(SCRIPT), "--plan", "--budget", "300"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "= 360 s, 60 s over the budget of 300 s: the last stages get what is left" in short


# ---------------------------------------------------------------------------------------------- running
# slow: 12 s of stages; the window's plan and parsing are tested above in the default suite
@pytest.mark.slow
def test_dry_window_writes_each_report_and_a_failed_import_stops_only_its_stage(tmp_path):
    fake = tmp_path / "site" / "hydra"  # a hydra that cannot be imported, as on a lent GPU without it
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'hydra' (this test's)\")\n")
    out = tmp_path / "out"
    done = window(out, "--stages", "activations,train_vgg8_rational", "--site", str(tmp_path / "site"), *LONG)
    assert done.returncode == 1, done.stderr  # a stage failed
    status = statuses(out)
    assert status["activations"] == "ok"
    assert status["train_vgg8_rational"] == "failed (rc 1): ImportError: No module named 'hydra' (this test's)"
    report = (out / "activations_cpu.md").read_text()
    assert "visionbench bench activations" in report and "input [2, 8, 8, 8] float32" in report
    assert "| rational A |" in report and "| star_relu |" in report  # every family
    assert "deterministic algorithms on" in report and "partial" not in report
    summary = (out / "gpu_window.md").read_text()
    assert "card: none: the dry run on the CPU" in summary and "triton" in summary and "TRITON_INTERPRET=1" in summary
    assert "visionbench bench activations" in (out / "gpu_window_activations.log").read_text()
    assert "ImportError" in (out / "gpu_window_train_vgg8_rational.log").read_text()
    assert not (out / "train_vgg8_rational_cpu.md").exists()


def test_a_budget_too_small_skips_each_stage_with_its_reason(tmp_path):
    done = window(tmp_path, "--budget", "5")
    assert done.returncode == 0, done.stderr
    status = statuses(tmp_path)
    assert list(status) == ORDER
    assert status["warm_kernels"].startswith("skipped: ") and "the stage needs 15 s" in status["warm_kernels"]
    assert all(s.startswith("skipped: ") for s in status.values())


def test_a_hung_stage_is_stopped_at_its_timeout(tmp_path, monkeypatch):
    gpu_window = load_script(monkeypatch)
    status, _ = gpu_window.run_stage(
        [sys.executable, "-c", "import time; print('hung', flush=True); time.sleep(600)"],
        tmp_path / "log",
        1,
        dict(os.environ),
        str(tmp_path),
    )
    assert status == "timed out after 1 s"
    assert "hung" in (tmp_path / "log").read_text()


def test_the_stages_are_a_registry_a_later_issue_appends_to(monkeypatch):
    gpu_window = load_script(monkeypatch)
    stages = sys.modules["window_stages"]  # the registry the script runs (fresh: load_script)
    w = gpu_window.Window("cpu", Path("/out"))
    added = stages.bench_stage(
        "extra", "one more", "nothing", ["activations"], ["--shape", "2,2,2,2"], cap=10, least=5, budget_margin=2
    )
    assert gpu_window.STAGES[-1] is added and added.report(w) == "extra_cpu.md"
    assert added.command(w, 10)[-4:] == ["--shape", "2,2,2,2", "--budget", "8"]  # the dry run's sizes win
    with pytest.raises(ValueError, match="registered twice"):
        stages.bench_stage("extra", "again", "", ["activations"], [], cap=10, least=5)
    with pytest.raises(ValueError, match="at most its cap"):
        stages.bench_stage("more", "", "", ["activations"], [], cap=10, least=20)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_gpu_window_runs_the_script_on_its_device():
    out = subprocess.run(
        ["make", "-n", "gpu-window", "DEVICE=cpu"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "scripts/gpu_window.py --device cpu" in out


@pytest.mark.slow
@pytest.mark.serial  # its stages run under time caps: alone, not beside another worker
def test_the_whole_dry_window(tmp_path):
    """Every stage of the window, dry: each report says what ran (about three minutes on 2 cores: the warm-up's
    processes, the ConvNeXt-T step, the fill stage's worker processes, the sweep stage's runs)."""
    done = window(tmp_path, *LONG)
    assert done.returncode == 0, done.stderr
    assert set(statuses(tmp_path).values()) == {"ok"}
    expect = {
        "warm_kernels_cpu.md": "38 tasks on",
        "activations_cpu.md": "shared coefficients",
        "activations_per_channel_cpu.md": "per-channel coefficients",
        "train_vgg8_rational_cpu.md": "vgg8 with rational vs ReLU",
        "train_convnext_t_hermite_cpu.md": "convnext_t with hermite vs GELU",
        "fill_vgg8_cpu.md": "bit check: the same",
        "sweep_vgg8_cpu.md": "bit check: every seed gave the same bits at every K",
        "kernel_tests_cpu.xml": 'failures="0"',
    }
    for name, says in expect.items():
        assert says in (tmp_path / name).read_text(), name
    assert "kernels triton (VISIONBENCH_KERNELS=triton)" in (tmp_path / "activations_cpu.md").read_text()
    assert "deterministic algorithms on" in (tmp_path / "train_vgg8_rational_cpu.md").read_text()
    assert not any("partial:" in p.read_text() for p in tmp_path.glob("*_cpu.md"))
    assert len(list(tmp_path.glob("gpu_window_*.log"))) == len(ORDER)


# ---------------------------------------------------------------------------------------------- what is carried
def pack_site(monkeypatch):
    spec = importlib.util.spec_from_file_location("pack_site", ROOT / "scripts" / "pack_site.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pack_site", module)
    spec.loader.exec_module(module)
    return module


def dist_name(name: str) -> str:
    """A distribution's name as pip normalises it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> set[str]:
    text = (ROOT / "scripts" / "gpu_image_packages.txt").read_text()
    return {dist_name(line) for line in text.splitlines() if line.strip() and not line.startswith("#")}


# imported by a stage's code only on a path no stage takes: (top-level import name, why)
OPTIONAL = {
    "mlflow": "trainer.loggers=mlflow (train/trackers.py): no stage logs to a tracker",
    "wandb": "trainer.loggers=wandb, as mlflow",
    "torchortho": "bench activations' references, the `reference` extra: skipped where absent (bench/references.py)",
    "rational": "as torchortho",
}


def module_file(name: str) -> Path | None:
    """The checkout's file of a first-party module (visionbench.*, tests.*, scripts' own), None for any other."""
    base = ROOT.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py", ROOT / "scripts" / f"{name}.py"):
        if f.is_file():
            return f
    return None


def stage_entries(gw) -> tuple[list[Path], set[str]]:
    """What the stages' commands run: first-party files (a `-m` module, a test file and the conftest.py files above
    it, the window's own scripts) and the top-level names they load by name (`-m pytest`, `-p xdist.plugin`)."""
    files, names = [SCRIPT, ROOT / "scripts" / "window_stages.py"], set()
    for s in gw.STAGES:
        command = s.command(gw.Window("cuda", Path("/out")), s.cap)
        for flag, value in zip(command, command[1:]):
            if flag in ("-m", "-p") and not value.startswith("no:"):
                f = module_file(value)
                if f is None:
                    names.add(value.split(".")[0])
                else:  # `python -m package` runs its __main__.py
                    files += [f, f.parent / "__main__.py"] if f.name == "__init__.py" else [f]
        for arg in command:
            if arg.endswith(".py") and Path(arg).is_file():
                files.append(Path(arg))
                files += [d / "conftest.py" for d in Path(arg).parents if d.is_relative_to(ROOT)]
    return [f for f in files if f.is_file()], names


def import_closure(files: list[Path]) -> set[str]:
    """The top-level names of every module the files import, anywhere in them (function-level imports included),
    following the checkout's own modules: the stages' import closure, read from the source."""
    seen, todo, external = set(), list(files), set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        package = ".".join(f.relative_to(ROOT).parts[:-1])  # what a relative import starts from
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
                targets = [base, *[f"{base}.{a.name}" for a in node.names]]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module, *[f"{node.module}.{a.name}" for a in node.names]]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                own = [module_file(".".join(parts[: i + 1])) for i in range(len(parts))]
                if own[0] is not None:  # the checkout's: the module and the packages above it run
                    todo += [m for m in own if m is not None]
                elif parts[0] not in sys.stdlib_module_names and parts[0] != "__future__":
                    external.add(parts[0])
    return external


def test_every_distribution_the_stages_import_is_on_the_image_or_carried(monkeypatch):
    gw = load_script(monkeypatch)
    files, names = stage_entries(gw)
    assert ROOT / "visionbench" / "__main__.py" in files and {"pytest", "xdist"} <= names
    imported = import_closure(files) | names
    assert {"torch", "triton", "hydra", "omegaconf", "lightning", "pytest"} <= imported  # the closure reaches them
    by_module = importlib.metadata.packages_distributions()
    carried = {dist_name(d) for d in pack_site(monkeypatch).WINDOW}
    there = image_packages() | carried
    missing = {}
    for name in sorted(imported - set(OPTIONAL)):
        dists = {dist_name(d) for d in by_module.get(name, [])}
        if not dists & there:
            missing[name] = sorted(dists) or "not installed here"
    assert not missing, f"the stages import these, neither on the lent GPUs' image nor carried: {missing}"


def test_what_is_carried_needs_nothing_the_image_lacks_on_its_python(monkeypatch):
    """Each carried distribution's requirements, read for the image's Python 3.12 on Linux, are carried or there."""
    carried = pack_site(monkeypatch).WINDOW
    there = image_packages() | {dist_name(d) for d in carried}
    env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3", "extra": ""}
    env.update(sys_platform="linux", platform_system="Linux")
    needs = {
        (name, Requirement(r).name)
        for name in carried
        for r in importlib.metadata.requires(name) or []
        if Requirement(r).marker is None or Requirement(r).marker.evaluate(env)
    }
    assert ("pytest", "pluggy") in needs and ("pytest-xdist", "execnet") in needs
    assert not {(d, r) for d, r in needs if dist_name(r) not in there}
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime", "pytest", "pluggy", "iniconfig"} <= set(carried)


def test_pack_site_packs_the_window_by_default_and_refuses_compiled_code(tmp_path, monkeypatch):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_site.py"), str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()[:-1]] == list(pack_site(monkeypatch).WINDOW)
    where = subprocess.run(
        [sys.executable, "-c", "import omegaconf, pytest, xdist; print(pytest.__file__)"],
        text=True,
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")),
        check=True,
        timeout=60,
    ).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "site")
    refused = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_site.py"), str(tmp_path / "t"), "torch"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "torch is not pure Python" in refused.stderr

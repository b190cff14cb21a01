"""scripts/gpu_window.py (docs/bench.md, "The GPU window"): its dry run on the CPU writes the summary and each stage's
report and log; a stage whose imports fail is recorded with its ImportError while the others run; a stage the
budget cannot hold is skipped with its reason; a hung stage is stopped at its timeout. And scripts/pack_site.py,
which packs what the lent GPUs lack. Nothing here asserts a time."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_window.py"
TIMEOUT = 240  # seconds for a whole dry window (about 60 s on a loaded 2-core machine)


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
    """A fresh copy of the script as a module (its own registry of stages)."""
    spec = importlib.util.spec_from_file_location("gpu_window", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_window", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_dry_window_writes_each_report_and_a_failed_import_stops_only_its_stage(tmp_path):
    fake = tmp_path / "site" / "hydra"  # a hydra that cannot be imported, as on a lent GPU without it
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'hydra' (this test's)\")\n")
    out = tmp_path / "out"
    done = window(out, "--stages", "activations,train_vgg8_rational", "--site", str(tmp_path / "site"))
    assert done.returncode == 1, done.stderr  # a stage failed
    status = statuses(out)
    assert status["activations"] == "ok"
    assert status["train_vgg8_rational"] == "failed (rc 1): ImportError: No module named 'hydra' (this test's)"
    report = (out / "activations_cpu.md").read_text()
    assert "visionbench bench activations" in report and "input [2, 8, 8, 8] float32" in report
    assert "| rational A |" in report and "| star_relu |" in report  # every family
    summary = (out / "gpu_window.md").read_text()
    assert "card: none: the dry run on the CPU" in summary and "triton" in summary and "TRITON_INTERPRET=1" in summary
    assert "visionbench.bench activations" in (out / "gpu_window_activations.log").read_text()
    assert "ImportError" in (out / "gpu_window_train_vgg8_rational.log").read_text()
    assert not (out / "train_vgg8_rational_cpu.md").exists()


def test_a_budget_too_small_skips_each_stage_with_its_reason(tmp_path):
    done = window(tmp_path, "--budget", "5")
    assert done.returncode == 0, done.stderr
    status = statuses(tmp_path)
    assert list(status) == [
        "activations",
        "activations_per_channel",
        "train_vgg8_rational",
        "train_convnext_t_hermite",
        "fill_vgg8",
        "sweep_vgg8",
        "kernel_tests",
    ]
    assert (
        status["activations"].startswith("skipped: ")
        and "of the 5 s budget left, the stage needs 60 s" in status["activations"]
    )
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
    w = gpu_window.Window("cpu", Path("/out"))
    added = gpu_window.bench_stage("extra", "one more", ["activations"], ["--shape", "2,2,2,2"], seconds=10, least=5)
    assert gpu_window.STAGES[-1] is added and added.report(w) == "extra_cpu.md"
    assert added.command(w)[-2:] == ["--shape", "2,2,2,2"]  # the dry run's sizes come last and win
    with pytest.raises(ValueError, match="registered twice"):
        gpu_window.bench_stage("extra", "again", ["activations"], [], seconds=10, least=5)


def test_pack_site_copies_a_pure_python_package_importable_from_pythonpath(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_site.py"), str(tmp_path), "omegaconf"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    where = subprocess.run(
        [sys.executable, "-c", "import omegaconf; print(omegaconf.__file__)"],
        text=True,
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
        check=True,
        timeout=60,
    ).stdout
    assert Path(where.strip()).is_relative_to(tmp_path)
    refused = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_site.py"), str(tmp_path / "t"), "torch"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "torch is not pure Python" in refused.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_gpu_window_runs_the_script_on_its_device():
    out = subprocess.run(
        ["make", "-n", "gpu-window", "DEVICE=cpu"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "scripts/gpu_window.py --device cpu" in out


@pytest.mark.slow
def test_the_whole_dry_window(tmp_path):
    """Every stage of the window, dry: each report says what ran (about two minutes on 2 cores: the ConvNeXt-T
    step, the fill stage's worker processes, the sweep stage's runs)."""
    done = window(tmp_path)
    assert done.returncode == 0, done.stderr
    assert set(statuses(tmp_path).values()) == {"ok"}
    expect = {
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
    assert len(list(tmp_path.glob("gpu_window_*.log"))) == 7

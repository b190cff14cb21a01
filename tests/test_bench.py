"""`visionbench bench` end to end on tiny inputs (eager kernels: no timing is asserted), and the
reference implementations it compares against, loaded with visionbench's coefficients. Its errors on
bad flags: test_bad_inputs.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import torch

from visionbench import activations as A
from visionbench.activations import fused
from visionbench.bench import main
from visionbench.bench.references import reference_for
from visionbench.cli import main as cli_main


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.setattr(fused, "BACKEND", "eager")


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """A benchmark table's rows by their first cell, each a dict of the cells by column header."""
    rows = [
        [c.strip() for c in re.split(r"(?<!\\)\|", r.strip()[1:-1])]
        for r in text.splitlines()
        if r.startswith("| ") and "---" not in r
    ]  # a cell's own pipe is escaped: \|
    return {cells[0]: dict(zip(rows[0], cells)) for cells in rows[1:]}


def test_bench_activations_writes_a_table(tmp_path):
    args = [
        "activations",
        "--shape",
        "2,4,6,6",
        "--repeats",
        "2",
        "--families",
        "rational,hermite,slaf",
        "--out",
        str(tmp_path),
        "--name",
        "tiny",
    ]
    assert cli_main(["bench", *args]) == 0
    text = (tmp_path / "tiny.md").read_text()
    rows = table_rows(text)
    assert set(rows) == {
        "gelu (baseline)",
        "rational A",
        "rational B",
        "rational C",
        "rational D",
        "hermite",
        "hermite clamp",
        "slaf",
    }
    assert all(float(r["× GELU"]) > 0 for r in rows.values())
    assert float(rows["rational A"]["saved (× input)"]) == pytest.approx(1.0, abs=0.1)  # its input, 10 coefficients
    # CUDA events and kernel counts: none on a CPU, and the table says so instead of failing
    assert {r[c] for r in rows.values() for c in ("GPU ms", "× GELU (GPU)", "kernels")} == {"—"}
    assert "kernels eager (VISIONBENCH_KERNELS=eager)" in text


def test_bench_train_smoke(tmp_path):
    args = [
        "train",
        "recipe=digits_vgg4",
        "act=rational",
        "--compare-to",
        "relu",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
        "--name",
        "train",
    ]
    assert main(args) == 0
    rows = table_rows((tmp_path / "train.md").read_text())
    assert set(rows) == {"relu", "rational"} and float(rows["rational"]["× baseline step"]) > 0
    assert rows["rational"]["GPU ms"] == rows["rational"]["× baseline (GPU)"] == rows["rational"]["kernels"] == "—"


def test_bench_train_refuses_baseline_which_is_the_reports_key(tmp_path, capsys):
    assert main(["train", "recipe=digits_vgg4", "act=rational", "baseline=relu", "--out", str(tmp_path)]) == 2
    assert "give --compare-to NAME" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_bench_train_without_baseline_compares_with_the_models_own_activation(tmp_path):
    assert (
        main(
            [
                "train",
                "recipe=digits_vgg4",
                "act=hermite",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--out",
                str(tmp_path),
                "--name",
                "own",
            ]
        )
        == 0
    )
    assert "ReLU (model's own)" in (tmp_path / "own.md").read_text()


def test_paper_polycom_references_match():
    x = torch.randn(2, 5, 3, 3)
    for name in ("polyrelu", "polynorm"):
        act = A.create(name)
        with torch.no_grad():
            act.weight.add_(0.1 * torch.randn_like(act.weight))
        ref, _ = reference_for(act, channel_dim=1)
        torch.testing.assert_close(ref(x), act(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("hermite", {}),
        ("hermite", {"clamp": True}),
        ("fourier", {}),
        ("tropical", {}),
        ("tropical_rational", {}),
        ("rational", {}),
    ],
)
def test_package_references_match(name, kwargs):
    pytest.importorskip("rational.torch" if name == "rational" else "torchortho")
    act = A.create(name, **kwargs).eval()
    ref, _ = reference_for(act, channel_dim=1)
    x = torch.randn(2, 5, 3, 3)
    torch.testing.assert_close(ref(x), act(x), rtol=1e-4, atol=1e-5)


def test_no_reference_for_per_channel_or_slaf():
    assert reference_for(A.create("slaf"), 1) is None
    assert reference_for(A.create("hermite", per_channel=True, num_channels=3), 1) is None
    assert reference_for(A.create("rational", version="B"), 1) is None


def test_bench_fit_reports_each_fit_time_against_a_gelu_step(tmp_path):
    args = ["fit", "--families", "hermite,rational", "--repeats", "1", "--out", str(tmp_path), "--name", "fit"]
    assert cli_main(["bench", *args]) == 0
    text = (tmp_path / "fit.md").read_text()
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in text.splitlines() if r.startswith("| ")][2:]
    assert {(r[0], r[1]) for r in rows} == {
        ("hermite", "gelu"),
        ("hermite", "relu"),
        ("rational", "gelu"),
        ("rational", "relu"),
    }
    for r in rows:
        assert float(r[2]) > 0 and float(r[3]) > 0  # ms and the ratio to GELU's step, no bound asserted
        assert float(r[4]) <= type(A.create(r[0])).fit_tolerance[r[1]][0]


def test_the_kernel_label_names_what_ran_and_the_setting_that_chose_it(monkeypatch):
    """One label (`fused.ran_on`, `fused.switch`) for the benchmark's notes; `visionbench check`'s speed figure names
    the same kernels (check/speed.py, with this benchmark's `Step`)."""
    from visionbench.bench.act_speed import kernel_backend

    monkeypatch.setattr(fused, "BACKEND", "compile")
    monkeypatch.setattr(fused, "SOURCE", "default")
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 100)
    assert kernel_backend(torch.randn(10)) == "eager (VISIONBENCH_KERNELS=compile; compiled from 100 elements)"
    assert kernel_backend(torch.randn(100)) == "compiled (VISIONBENCH_KERNELS=compile)"
    with fused.use_backend("reference", "trainer.kernels"):
        assert kernel_backend(torch.randn(100)) == "reference (trainer.kernels=reference)"


# ---- rows written as they go, and the determinism a run sets ---------------------------------------------------
TINY = ["--shape", "2,4,6,6", "--repeats", "1", "--families", "rational,hermite"]


def test_bench_activations_rewrites_its_table_after_each_case_so_a_stopped_run_keeps_its_rows(tmp_path, monkeypatch):
    """Stopped two cases in (a timeout's signal, as KeyboardInterrupt): the file holds GELU's row and the two done,
    and says which are missing; every case and GELU were timed with deterministic algorithms on (as a run)."""
    from visionbench.bench import act_speed

    real_case, real_gelu, flags = act_speed.bench_case, act_speed.gelu_row, []

    def gelu_row(*args):
        flags.append(("gelu", torch.are_deterministic_algorithms_enabled()))
        return real_gelu(*args)

    def bench_case(label, *args):
        if len(flags) == 3:
            raise KeyboardInterrupt
        flags.append((label, torch.are_deterministic_algorithms_enabled()))
        return real_case(label, *args)

    monkeypatch.setattr(act_speed, "gelu_row", gelu_row)
    monkeypatch.setattr(act_speed, "bench_case", bench_case)
    with pytest.raises(KeyboardInterrupt):
        main(["activations", *TINY, "--out", str(tmp_path), "--name", "cut"])
    text = (tmp_path / "cut.md").read_text()
    assert set(table_rows(text)) == {"gelu (baseline)", "rational A", "rational B"}
    assert "- partial: 2 of 6 cases done; not yet: rational C, rational D, hermite, hermite clamp" in text
    assert flags == [("gelu", True), ("rational A", True), ("rational B", True)]
    assert not torch.are_deterministic_algorithms_enabled()  # put back as it was


def test_a_failed_case_is_its_note_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    from visionbench.bench import act_speed

    real = act_speed.bench_case

    def bench_case(label, *args):
        if label == "rational B":
            raise RuntimeError("no kernel for this\nsecond line")
        return real(label, *args)

    monkeypatch.setattr(act_speed, "bench_case", bench_case)
    assert main(["activations", *TINY, "--out", str(tmp_path), "--name", "one_failed"]) == 1
    text = (tmp_path / "one_failed.md").read_text()
    assert "rational B" not in table_rows(text) and {"rational C", "hermite clamp"} <= set(table_rows(text))
    assert "- failed: rational B: RuntimeError: no kernel for this\n" in text and "partial" not in text
    assert "rational B: failed" in capsys.readouterr().err


@pytest.mark.slow
def test_a_killed_bench_activations_leaves_the_rows_it_finished(tmp_path):
    """The real thing: a benchmark process killed part way (SIGTERM, as the window's timeout) leaves its file with
    the rows done and the partial note (no time asserted: it is killed once a row is there)."""
    from .helpers import ROOT

    report = tmp_path / "killed.md"
    env = dict(os.environ, PYTHONPATH=str(ROOT), VISIONBENCH_KERNELS="eager")
    command = [sys.executable, "-m", "visionbench", "bench", "activations", "--shape", "2,4,6,6", "--repeats", "200"]
    proc = subprocess.Popen(
        [*command, "--families", "rational,hermite", "--out", str(tmp_path), "--name", "killed"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if report.exists() and "| rational A |" in report.read_text():
                break
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    text = report.read_text()
    assert {"gelu (baseline)", "rational A"} <= set(table_rows(text)) and "hermite clamp" not in table_rows(text)
    assert "- partial: " in text and "hermite clamp" in text.split("- partial: ")[1].splitlines()[0]


def test_bench_activations_times_either_determinism_or_both(tmp_path):
    args = ["activations", *TINY[:4], "--families", "prelu", "--out", str(tmp_path)]
    assert main([*args, "--name", "both", "--deterministic", "both"]) == 0
    text = (tmp_path / "both.md").read_text()
    assert text.index("### deterministic algorithms on") < text.index("### deterministic algorithms off")
    assert text.count("| gelu (baseline) |") == 2 and text.count("| prelu |") == 2  # GELU under each, beside it
    assert main([*args, "--name", "off", "--deterministic", "off"]) == 0
    off = (tmp_path / "off.md").read_text()
    assert "- deterministic algorithms off" in off and "###" not in off
    with pytest.raises(SystemExit) as stop:
        main([*args, "--deterministic", "sometimes"])
    assert stop.value.code == 2


def test_bench_train_writes_each_phase_and_times_what_the_config_sets(tmp_path, monkeypatch):
    """Stopped after its warm-up: the warm-up column is there, the rest "—" and said missing. Without
    --deterministic it times what a run of the config sets: on with trainer.deterministic (true unless overridden) or
    trainer.portable."""
    from visionbench.bench import timing

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    args = ["train", "recipe=digits_vgg4", "act=rational", "--compare-to", "relu", "--steps", "1", "--warmup", "1"]
    with monkeypatch.context() as patch:
        patch.setattr(timing, "rounds", stopped)
        with pytest.raises(KeyboardInterrupt):
            main([*args, "--out", str(tmp_path), "--name", "cut"])
    text = (tmp_path / "cut.md").read_text()
    rows = table_rows(text)
    assert float(rows["rational"]["warm-up s (1 steps, incl. compile)"]) > 0 and rows["rational"]["step ms"] == "—"
    assert "- partial: 1 of 3 phases done; not yet: timed steps, GPU time and memory" in text
    assert "- deterministic algorithms on" in text
    # digits_vgg4 runs under trainer.portable, which sets them whatever trainer.deterministic says
    assert (
        main([*args, "trainer.portable=false", "trainer.deterministic=false", "--out", str(tmp_path), "--name", "off"])
        == 0
    )
    text = (tmp_path / "off.md").read_text()
    assert "- deterministic algorithms off" in text and "partial" not in text


def test_bench_sweep_keeps_the_k_it_finished(tmp_path, monkeypatch):
    """A sweep benchmark stopped during its second K: the first K's row is in the report, the rest said missing."""
    from types import SimpleNamespace

    from visionbench.bench import sweep_speed

    def sweep_once(overrides, k, seeds, device, results):
        if k > 1:
            raise KeyboardInterrupt
        summary = {"throughput_img_s": 100.0, "train_time_s": 2.0, "environment": {"placement": {"workers": 1}}}
        return 4.0, [
            SimpleNamespace(act="relu", seed=s, status="completed", summary=summary, run_dir=results)
            for s in range(seeds)
        ]

    monkeypatch.setattr(sweep_speed, "sweep_once", sweep_once)
    with pytest.raises(KeyboardInterrupt):
        main(["sweep", "recipe=digits_vgg4", "--k", "1,2", "--seeds", "2", "--out", str(tmp_path), "--name", "cut"])
    text = (tmp_path / "cut.md").read_text()
    assert "| 1 | 1 | — | 2 | 4 | 100 | 1 | — |" in text
    assert "- partial: 1 of 3 parts done; not yet: K=2, bit check" in text and "bit check: not yet made" in text


@pytest.mark.slow  # a pool of processes (9 s): make test-slow
def test_bench_warm_runs_every_learnable_family_of_the_registry_in_a_pool_of_processes(tmp_path, monkeypatch):
    """The warm-up's tasks come from the registry (every learnable name; the benchmark's cases of it), and each runs
    in a process of the pool (here one task, one process: the code path; on a GPU it fills Triton's cache)."""
    from visionbench.bench import warm_kernels
    from visionbench.bench.act_speed import CASES

    cases = warm_kernels.warm_cases()
    assert {name for _, name, _ in cases} == {n for n in A.names() if A.is_learnable(n)}
    assert {label for label, _, _ in cases} >= set(CASES)  # every case `bench activations` times
    monkeypatch.setattr(warm_kernels, "warm_cases", lambda: [("rational B", "rational", {"version": "B"})])
    args = ["warm", "--shape", "2,4,6,6", "--jobs", "4", "--out", str(tmp_path), "--name", "warm"]
    assert main(args) == 0
    text = (tmp_path / "warm.md").read_text()
    rows = [r for r in text.splitlines() if r.startswith("| rational B |")]
    assert [r.split(" | ")[1] for r in rows] == ["shared", "per-channel"] and "2 tasks on 2 processes" in text
    assert "partial" not in text

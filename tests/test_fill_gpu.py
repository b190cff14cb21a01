"""`visionbench bench fill` (visionbench/bench/fill_gpu.py, docs/bench.md "Filling the GPU"): its dry run on the CPU
end to end in a subprocess (worker processes, a case per K, the bit check, the CUDA-only rows said so), its one-line
refusals, and its pure parts — the --k list, the private MPS daemon's start and quit (a fake
nvidia-cuda-mps-control), the GPU-busy sampler's fallback from NVML to nvidia-smi to "—", the state digest and the
report's rows and verdicts. No GPU here: nothing asserts a time or a speed-up."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from visionbench.bench import fill_gpu as F
from visionbench.bench import fill_workers as W
from visionbench.bench import timing
from visionbench.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def table_rows(text: str, first: str) -> list[dict[str, str]]:
    """The rows of the pipe table whose header starts with `first`, each a dict by column header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    block = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        block.append([c.strip() for c in line.strip()[1:-1].split(" | ")])
    header, rows = block[0], block[2:]
    return [dict(zip(header, r)) for r in rows]


@pytest.mark.slow  # ~17 s of processes; the default suite keeps its arguments' refusals (below) and the workers' units
def test_the_dry_run_writes_a_row_per_case_and_the_bit_check(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "visionbench",
            "bench",
            "fill",
            "recipe=cifar10_vgg8",
            "act=relu",
            "--device",
            "cpu",
            "--k",
            "2,1",
            "--seconds",
            "0.3",
            "--bits",
            "2",
            "--bit-steps",
            "2",
            "--mps",
            "--capture",
            "batch_size=2",
            "--out",
            str(out),
            "--name",
            "dry",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = (out / "dry.md").read_text()
    assert text.startswith("# Filling the CPU: K training processes of vgg8 at once")
    assert "torch " in text and "triton " in text and "batch 2 x 3x32x32" in text
    rows = {(r["mode"], r["K"]): r for r in table_rows(text, "activation | mode")}
    assert set(rows) == {
        ("eager", "1"),
        ("eager", "2"),
        ("eager, MPS", "1"),
        ("eager, MPS", "2"),
        ("CUDA graph (whole step)", "1"),
        ("torch.compile reduce-overhead", "1"),
    }
    for k in ("1", "2"):
        row = rows[("eager", k)]
        assert float(row["img/s (all K)"]) > 0 and row["GPU busy %"] == "—" and row["note"] == "—", row
    assert rows[("eager", "1")]["× 1 process"] == "1"
    assert all(
        rows[key]["note"] == "CUDA only" and rows[key]["img/s (all K)"] == "—" for key in rows if key[0] != "eager"
    )
    bits = table_rows(text, "activation | seed")
    assert [(b["seed"], b["bits"]) for b in bits] == [("0", "same"), ("1", "same")]
    assert bits[0]["alone (sha256)"] != bits[1]["alone (sha256)"]  # two seeds, two networks
    assert "bit check: the same — every seed's final weights (2 seeds, 2 steps each)" in text
    assert "targets: aggregate ≥ 3× one process" in text
    assert "| relu | eager | 1 |" in done.stdout and "written: " in done.stdout  # printed too


OUT = "--out={tmp}/out"


@pytest.mark.parametrize(
    "argv, text",
    [
        (["--k", "0"], "argument --k: must be comma-separated integers >= 1 (e.g. 1,4,8,16), got '0'"),
        (["--k", "1,x"], "argument --k: must be comma-separated integers >= 1"),
        (["--bits", "1"], "argument --bits: must be an integer >= 2 (seeds trained alone, then all at once), got '1'"),
        (["--seconds", "0"], "argument --seconds: must be a number of seconds > 0, got '0'"),
        (["--device", "nope"], "argument --device: not a torch device, got 'nope'"),
        (["act=relux"], "visionbench bench fill: unknown activation 'relux'"),
        (["recipe=nope"], "visionbench bench fill: unknown recipe 'nope'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_bad_input_fails_in_one_line_and_writes_nothing(argv, text, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(["bench", "fill", "recipe=cifar10_vgg8", "act=relu", *argv, f"--out={out}"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
    assert len(lines) == 1 and text in lines[0], err
    assert "Traceback" not in err and not out.exists()


def test_fill_is_a_known_benchmark(capsys):
    assert cli_main(["bench", "nope"]) == 2
    assert "benchmarks: activations, train, fit, data, fill" in capsys.readouterr().err


# ---- pure parts -------------------------------------------------------------------------------------------------
def test_k_list_sorted_each_once_and_seed_count():
    assert timing.k_list("1,4,8,16") == [1, 4, 8, 16]
    assert timing.k_list("8,1,8") == [1, 8]
    for bad in ("", "0", "1,,2", "-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            timing.k_list(bad)
    assert F.seed_count("2") == 2
    with pytest.raises(argparse.ArgumentTypeError):
        F.seed_count("1")


def fake_tool(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_private_mps_daemon_is_started_with_its_own_pipe_and_quit_even_on_error(tmp_path, monkeypatch):
    log = tmp_path / "calls"
    fake_tool(
        tmp_path / "bin",
        "nvidia-cuda-mps-control",
        f'echo "args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY logdir=$CUDA_MPS_LOG_DIRECTORY stdin=$(cat)" >> {log}\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    folder = tmp_path / "mps"
    with pytest.raises(RuntimeError, match="a case failed"), F.mps_daemon(folder) as (env, why):
        assert why == "" and env == F.mps_env(folder)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(folder / "pipe") and (folder / "pipe").is_dir()
        raise RuntimeError("a case failed")
    start, quit_ = log.read_text().splitlines()
    assert start.startswith(f"args=-d pipe={folder / 'pipe'} logdir={folder / 'log'}")
    assert quit_ == f"args= pipe={folder / 'pipe'} logdir={folder / 'log'} stdin=quit"  # the same daemon, told to quit


def test_mps_absent_or_failing_is_said_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with F.mps_daemon(tmp_path / "mps") as (env, why):
        assert env is None and why == "MPS absent (no nvidia-cuda-mps-control on PATH)"
    log = tmp_path / "calls"
    fake_tool(tmp_path / "bin", "nvidia-cuda-mps-control", f'echo "$*" >> {log}\necho "no GPU" >&2\nexit 3\n')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with F.mps_daemon(tmp_path / "mps") as (env, why):
        assert env is None and why == "MPS daemon did not start (rc 3): no GPU"
    assert log.read_text().splitlines() == ["-d"]  # nothing to quit


def test_the_busy_sampler_falls_back_from_nvml_to_nvidia_smi_to_nothing(tmp_path, monkeypatch):
    assert F.BusySampler(torch.device("cpu")).read() is None  # the CPU: "—", nothing asked

    def no_nvml(device=None):
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    log = tmp_path / "smi"
    fake_tool(tmp_path / "bin", "nvidia-smi", f'echo "$*" > {log}\necho 42\n')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    sampler = F.BusySampler(torch.device("cuda:1"))
    assert sampler.read() == 42.0 and sampler.method == "nvidia-smi"
    assert log.read_text().split() == ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "--id=3"]

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sampler = F.BusySampler(torch.device("cuda"))
    assert sampler.read() is None and sampler.method is None
    assert sampler.mean_until(0.0, 0.0) is None  # and no loop of failing reads

    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: 77)
    sampler = F.BusySampler(torch.device("cuda"))
    assert sampler.read() == 77.0 and sampler.method == "nvml"


def test_nvml_index_maps_cuda_visible_devices():
    cuda = torch.device("cuda:1")
    assert F.nvml_index(cuda, {"CUDA_VISIBLE_DEVICES": "4,6"}) == 6
    assert F.nvml_index(cuda, {}) == 1
    assert F.nvml_index(torch.device("cuda"), {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == 0  # UUIDs: left as given


def test_the_workers_environment(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = W.worker_env(3, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"]
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and env["OMP_NUM_THREADS"] == "3"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/p"


def test_state_digest_is_the_bits():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    state = model.state_dict()
    same = {k: v.clone() for k, v in state.items()}
    assert W.state_digest(state) == W.state_digest(same)
    same["0.weight"][0, 0] = torch.nextafter(same["0.weight"][0, 0], torch.tensor(1.0))  # one ulp
    assert W.state_digest(state) != W.state_digest(same)
    assert re.fullmatch(r"[0-9a-f]{64}", W.state_digest(state))


def test_rows_ratios_and_verdicts():
    rows = [
        F.Row("relu", "mps", 4, img_s=400.0, busy=95.0),
        F.Row("relu", "eager", 4, img_s=250.0, busy=60.0),
        F.Row("relu", "eager", 1, img_s=100.0, busy=30.0),
        F.Row("relu", "graph", 1, note="CUDA only"),
    ]
    table = F.throughput_rows(rows)
    assert [(r[1], r[2]) for r in table] == [
        ("eager", 1),
        ("eager", 4),
        ("eager, MPS", 4),
        ("CUDA graph (whole step)", 1),
    ]
    assert [r[4] for r in table] == [1.0, 2.5, 4.0, None]
    (line,) = F.verdicts(rows, torch.device("cuda"))
    assert line == (
        "relu: best 400 img/s (eager, MPS, K=4), 4.00× one process (met: ≥ 3×); GPU busy at most 95 % (met: ≥ 90 %)"
    )
    same = [F.BitRow("relu", 0, "a" * 64, "a" * 64), F.BitRow("relu", 1, "b" * 64, "c" * 64)]
    assert F.bit_verdict(same[:1], 10).startswith("bit check: the same — every seed's final weights (1 seeds")
    assert F.bit_verdict(same, 10) == "bit check: DIFFERENT — 1 of 2 seed runs changed with 2 at once: relu seed 1"
    assert F.bit_verdict([F.BitRow("relu", 0, note="CUDA only")], 10) == "bit check: not run (CUDA only)"


# ---- the cases' order and what a row says, with the worker pools faked (the CUDA path's bookkeeping, no GPU) --------
class FakePool:
    """Stands for `Pool`: every worker takes 1 s for 10 steps; `fail` makes a command's reply an error."""

    made: ClassVar[list[FakePool]] = []

    def __init__(self, size, device, env, fail=None):
        self.size, self.env, self.fail, self.mps, self.commands = size, env, fail, bool(env), []
        self.info, self.start_s = {"environment": "torch x, cuda (a fake card)", "triton": "y"}, 0.0
        FakePool.made.append(self)

    def call(self, workers, command, kwargs=None, timeout=None):
        self.send(workers, command, kwargs)
        return self.collect(workers)

    def send(self, workers, command, kwargs=None):
        if command == self.fail:
            raise W.WorkerError("worker 1: OutOfMemoryError: CUDA out of memory")
        self.commands.append((command, [kwargs(i) if kwargs else {} for i in workers]))

    def collect(self, workers, timeout=None):
        command, sent = self.commands[-1]
        if command == "prepare":
            return [{"seconds": 0.5} for _ in workers]
        return [{"steps": 10, "seconds": 1.0, "peak": 3 * 2**20, "digest": f"{s.get('seed', 0):064d}"} for s in sent]

    def close(self):
        pass


def fake_bench(monkeypatch, tmp_path, device="cuda", budget=None, **flags):
    FakePool.made = []
    monkeypatch.setattr(F, "Pool", FakePool)
    monkeypatch.setattr(
        F.BusySampler, "mean_until", lambda self, start, end: 50.0 if self.device.type == "cuda" else None
    )
    monkeypatch.setattr(F, "START_LEAD_S", 0.0)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    args = argparse.Namespace(
        k=[1, 4, 8, 16],
        seconds=0.01,
        mps=False,
        capture=False,
        capture_k=[1, 8],
        bits=None,
        bit_steps=2,
        budget=budget,
        device=device,
    )
    vars(args).update(flags)

    def spec(act, mode, seed):
        return W.Spec(act, None, mode, seed, (8, 3, 32, 32), 10)

    return F.Bench(args, spec, 8, lambda: None)


def test_the_cuda_cases_in_order_mps_absent_said(monkeypatch, tmp_path):
    bench = fake_bench(monkeypatch, tmp_path, mps=True, capture=True, bits=8)
    bench.run_all(["relu", "rational"])
    assert [(r.act, r.mode, r.k) for r in bench.rows] == [
        *[(a, "eager", k) for a in ("relu", "rational") for k in (1, 4, 8, 16)],
        *[(a, "graph", k) for a in ("relu", "rational") for k in (1, 8)],
        *[(a, "mps", k) for a in ("relu", "rational") for k in (1, 4, 8, 16)],
        ("relu", "compile", 1),
        ("rational", "compile", 1),
    ]
    by = {(r.act, r.mode, r.k): r for r in bench.rows}
    assert by[("relu", "eager", 8)].img_s == 8 * 10 * 8 / 1.0 and by[("relu", "eager", 8)].busy == 50.0
    assert by[("relu", "eager", 8)].peak_mb == 3.0 and by[("relu", "eager", 8)].steps == (10, 10)
    assert by[("relu", "graph", 8)].img_s and by[("rational", "compile", 1)].img_s
    assert {r.note for r in bench.rows if r.mode == "mps"} == {"MPS absent (no nvidia-cuda-mps-control on PATH)"}
    assert [p.size for p in FakePool.made] == [16, 1]  # the plain pool (max K, bits), torch.compile's of one
    prepared = [sent[0]["spec"] for command, sent in FakePool.made[0].commands if command == "prepare"]
    assert {s.mode for s in prepared} == {"eager", "bits", "graph"}
    assert [(r.seed, r.alone == r.together) for r in bench.bit_rows[:8]] == [(s, True) for s in range(8)]
    alone = [
        sent
        for command, sent in FakePool.made[0].commands
        if command == "prepare" and len(sent) == 1 and sent[0]["spec"].mode == "bits"
    ]
    assert [s[0]["spec"].seed for s in alone[:8]] == list(range(8))  # alone: seed by seed, in worker 0


def test_the_mps_pool_gets_the_private_daemons_variables(monkeypatch, tmp_path):
    bench = fake_bench(monkeypatch, tmp_path, k=[1, 2], mps=True)
    fake_tool(tmp_path / "no-tools", "nvidia-cuda-mps-control", "exit 0\n")
    bench.run_all(["relu"])
    plain, mps = FakePool.made
    assert plain.env == {} and mps.env["CUDA_MPS_PIPE_DIRECTORY"].endswith("/pipe")
    assert [(r.mode, r.k, r.note) for r in bench.rows] == [
        ("eager", 1, ""),
        ("eager", 2, ""),
        ("mps", 1, ""),
        ("mps", 2, ""),
    ]


def test_a_failing_worker_or_the_budget_is_said_in_the_row(monkeypatch, tmp_path):
    bench = fake_bench(monkeypatch, tmp_path, device="cpu", k=[1, 2])
    failing = FakePool(2, None, {}, fail="run")
    row = bench.case(failing, "relu", "eager", 2, need=1.0)
    assert row.img_s is None and row.note == "failed: worker 1: OutOfMemoryError: CUDA out of memory"
    bench = fake_bench(monkeypatch, tmp_path, device="cpu", k=[1, 2], budget=5.0, capture=True)
    row = bench.case(FakePool(2, None, {}), "relu", "eager", 2, need=60.0)
    assert row.img_s is None and re.fullmatch(r"skipped: \d s of the 5 s budget left, needs ~60 s", row.note)
    bench.run_all(["relu"])  # the CPU: the graph and torch.compile rows say so, and no compile pool is started
    assert [r.note for r in bench.rows if r.mode in ("graph", "compile")] == ["CUDA only", "CUDA only"]

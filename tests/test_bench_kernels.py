"""`visionbench bench kernels` (visionbench/bench/kernel_card.py), the Triton kernels' cost card made without a GPU, and
what it is built from: the launches of one forward + backward recorded on the Triton path (kernel_capture.py), and
the kernels compiled for sm_90 and read by ptxas (kernel_compile.py). The committed card regenerates in part:
tests/test_committed_results.py (slow)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
from torch import nn

from visionbench import activations
from visionbench.bench import kernel_capture

from .helpers import ROOT

GELU_BYTES = 20


def test_gelu_moves_20_bytes_an_element_in_two_launches():
    launches = kernel_capture.launches_of(nn.GELU(), torch.empty(4, 8, 6, 5))
    assert [op.name for op in launches.aten] == ["gelu", "gelu_backward"] and not launches.triton
    assert launches.bytes == GELU_BYTES * 4 * 8 * 6 * 5


@pytest.mark.parametrize("per_channel", [False, True], ids=["shared", "per_channel"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
def test_a_template_family_is_three_launches_and_about_gelus_bytes(per_channel, memory_format):
    # the two kernels and the sum of the backward's partial rows; the coefficient tensors go in as they are (no cat, no
    # copy), their gradients come back as views that autograd keeps without a copy
    extra = {"per_channel": True, "num_channels": 8} if per_channel else {}
    act = activations.create("rational", **extra)
    x = torch.empty(64, 8, 16, 16).contiguous(memory_format=memory_format)
    launches = kernel_capture.launches_of(act, x)
    assert [launch.name for launch in launches.triton] == ["rational_forward_kernel", "rational_backward_kernel"]
    assert [op.name for op in launches.aten] == ["sum"]
    assert GELU_BYTES <= launches.bytes / x.numel() <= 1.05 * GELU_BYTES


def test_slaf_is_six_launches_and_no_aten_op():
    act = activations.create("slaf", per_channel=True, num_channels=8)
    x = torch.empty(16, 8, 6, 6)
    launches = kernel_capture.launches_of(act, x)
    assert len(launches.triton) == 6 and not launches.aten, [op.name for op in launches.aten]


def _bench(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiling takes Triton's real JIT
    return subprocess.run(
        [sys.executable, "-m", "visionbench", "bench", "kernels", "--out", str(tmp_path), "--name", "card", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_card_of_one_family(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    done = _bench(tmp_path, "--families", "prelu", "--arch", "90", "--jobs", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    card = (tmp_path / "card.md").read_text()
    rows = [r for r in card.splitlines() if r.startswith("| prelu |")]
    summary = [r for r in rows if "launches" not in r and ("met" in r or "missed" in r)]
    assert len(summary) == 3 and all(r.endswith("| met |") for r in summary), summary  # three layouts
    assert all("3 (2 Triton, sum)" in r for r in summary)
    kernels = [r for r in rows if "_kernel |" in r]
    assert len(kernels) == 6 and all(r.endswith("| yes |") for r in kernels), kernels  # Inductor's copy compiles
    registers = [int(m) for m in re.findall(r"\| (\d+), 0 B \|", "\n".join(kernels))]
    assert len(registers) == 6 and max(registers) <= 128


@pytest.mark.parametrize(
    "args,says",
    [
        (["--arch", "ninety"], "--arch takes comma-separated compute capabilities"),
        (["--families", "nope"], "unknown family 'nope'"),
        (["--also-triton", "/nonexistent"], "no triton package there"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path, capsys, args, says):
    from visionbench.bench import main

    try:
        code = main(["kernels", "--out", str(tmp_path), "--name", "card", *args])
    except SystemExit as e:  # argparse's refusal
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and says in err.strip().splitlines()[-1] and "Traceback" not in err, err  # argparse: usage first
    assert not (tmp_path / "card.md").exists()

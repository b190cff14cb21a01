"""`visionbench check`: every registered activation passes every check (quick mode here; the full sizes in the
slow test), and deliberately broken activations fail the check that catches them, with the reason."""

import pytest
import torch
from torch import nn

from visionbench import activations as A
from visionbench.activations import registry
from visionbench.check import Subject, run_checks
from visionbench.cli import main

ALL = A.names()
# options that take other code paths: noisy numerator, learnable clamp, per-channel coefficients and statistics
VARIANTS = [
    ("rational", {"version": "D"}),
    ("hermite", {"clamp": True}),
    ("polynorm", {"per_channel": True}),
    ("slaf", {"per_channel": True}),
    ("bspline", {"per_channel": True}),
    ("rational", {"init": "relu"}),
]


def failures(results) -> list[str]:
    return [r.line() for r in results if r.passed is False]


@pytest.mark.parametrize("name", ALL)
def test_every_registered_activation_passes_quick(name):
    results = run_checks(Subject(name), quick=True)
    assert not failures(results), "\n".join(failures(results))
    assert [r.check for r in results if r.passed is None] == ["speed"]  # a figure without --max-ratio


@pytest.mark.parametrize("name, options", VARIANTS, ids=[f"{n}-{o}" for n, o in VARIANTS])
def test_variants_pass_quick(name, options):
    results = run_checks(
        Subject(name, options),
        quick=True,
        only=[
            "shape+dtype",
            "finite",
            "gradcheck",
            "param grads",
            "meta device",
            "deterministic",
            "init fit",
            "smoke train",
        ],
    )
    assert not failures(results), "\n".join(failures(results))


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_registered_activation_passes_full(name):
    results = run_checks(Subject(name))
    assert not failures(results), "\n".join(failures(results))


# ---- deliberately broken activations -------------------------------------------------------------------------
class WrongShape(nn.Module):
    def forward(self, x):
        return x.mean(dim=1)  # drops the channel dim


class NaNAtZero(nn.Module):
    def forward(self, x):
        return x * x.abs() / x  # |x| everywhere but 0/0 at 0


class ParamWithoutGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.shift = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return torch.relu(x) * self.scale + self.shift.detach()  # shift never learns


class FixedDeviceBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.zeros(1, device="cpu"))  # ignores torch.device(...) and .to() callers

    def forward(self, x):
        return torch.relu(x) + self.offset


class FixedDeviceForward(nn.Module):
    def forward(self, x):
        return torch.relu(x) * torch.ones(x.shape[1:], device="cpu")  # a tensor made on the CPU whatever x is on


BROKEN = {
    "broken_shape": WrongShape,
    "broken_nan": NaNAtZero,
    "broken_grad": ParamWithoutGrad,
    "broken_device": FixedDeviceBuffer,
    "broken_device_forward": FixedDeviceForward,
}


@pytest.fixture
def broken():
    """The broken activations in the registry for one test (removed after it: the registry tests never see them)."""
    with registry.preserved():
        for name, cls in BROKEN.items():
            registry.register(name)(cls)
        yield BROKEN


@pytest.mark.parametrize(
    "name, check, reason",
    [
        ("broken_shape", "shape+dtype", r"output shape \(16,\), expected \(16, 8\)"),
        ("broken_nan", "finite", r"output NaN at x = 0 \(train mode"),
        ("broken_grad", "param grads", r"parameter 'shift' gets no gradient"),
        ("broken_device", "meta device", r"offset on cpu: a tensor created on a fixed device"),
        ("broken_device_forward", "meta device", r"forward on a meta input .* raised"),
    ],
)
def test_broken_activation_fails_with_its_reason(broken, name, check, reason):
    results = {r.check: r for r in run_checks(Subject(name), quick=True)}
    assert results[check].passed is False, results[check].line()
    assert results[check].status == "FAIL"
    assert __import__("re").search(reason, results[check].detail), results[check].detail


def test_broken_parameter_also_fails_gradcheck(broken):
    (result,) = run_checks(Subject("broken_grad"), only=["gradcheck"])
    assert result.passed is False and "with respect to 'shift'" in result.detail, result.detail


def test_cli_exit_codes(broken, capsys):
    assert main(["check", "act=relu,rational[version=B]", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "  PASS  gradcheck" in out and "rational[version=B]: 10 passed, 0 failed" in out
    assert main(["check", "act=relu,broken_nan", "--quick"]) == 1
    out = capsys.readouterr().out
    assert "  FAIL  finite" in out and "1 of 2 activations pass every check; failing: broken_nan" in out
    assert main(["check", "act=relu", "--quick", "--max-ratio", "1e-9"]) == 1  # nothing is 1e9 times faster than GELU
    assert "  FAIL  speed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["act=relux"], "unknown activation 'relux'"),
        (["act=rational[degree=3]"], "does not take degree"),
        ([], "give act=NAME"),
        (["recipe=x", "act=relu"], "expected act=NAME"),
        (["act=relu", "--max-ratio", "0"], "--max-ratio must be > 0"),
        (["act=relu", "imports=no_such_module_here"], "no module named 'no_such_module_here'"),
    ],
)
def test_cli_usage_errors_exit_2(args, message, capsys):
    assert main(["check", *args]) == 2
    assert message in capsys.readouterr().err


def test_speed_names_the_kernels_that_ran(monkeypatch):
    """The speed figure's kernels are the benchmark's label (`fused.ran_on`): the quick input is under compile's
    threshold, so the fused kernels ran eagerly; on the reference backend the plain formulas ran."""
    from visionbench.activations import fused

    monkeypatch.setattr(fused, "BACKEND", "compile")
    (result,) = run_checks(Subject("rational"), quick=True, only=["speed"])
    assert result.passed is None and "float32 on cpu, eager kernels, median of 4 rounds" in result.detail, result.detail
    with fused.use_backend("reference"):
        (result,) = run_checks(Subject("rational"), quick=True, only=["speed"])
    assert ", reference kernels, " in result.detail, result.detail

"""The fused fast path computes the plain formulas' numbers: values, input and coefficient gradients.

Eager kernels are checked for every family and configuration (cheap); compiled kernels for a few
representative families in the default run (each compilation costs seconds on a CPU) and for
all of them under `-m slow`.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from visionbench import activations as A
from visionbench.activations import fused, triton_ops

from .families import CASES, IDS
from .fixtures import gradcheck_module

TOL = {torch.float32: {"rtol": 2e-4, "atol": 2e-5}, torch.float64: {"rtol": 1e-9, "atol": 1e-10}}


def build(name: str, kwargs: dict, dtype: torch.dtype, per_channel: bool, channels: int = 4):
    """A module with perturbed coefficients (channels differ), so every term and gradient matters."""
    extra = {"per_channel": True, "num_channels": channels} if per_channel else {}
    act = A.create(name, **kwargs, **extra).to(dtype)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=dtype))
    return act


def run(act, x: torch.Tensor, g: torch.Tensor, fast: bool, seed: int = 3):
    """y, dL/dx and dL/dcoefficients for L = <y, g>, on one path; the RNG is reset so that rational
    D draws the same noise on both paths."""
    act.fast = fast
    torch.manual_seed(seed)
    x = x.detach().clone().requires_grad_(True)
    y = act(x)
    params = [p for p in act.parameters() if p.requires_grad]
    grads = torch.autograd.grad(y, [x, *params], g)
    return [y.detach(), *grads]


def compare(name: str, kwargs: dict, dtype: torch.dtype, per_channel: bool, training: bool, shape=(3, 4, 5, 6)):
    act = build(name, kwargs, dtype, per_channel, channels=shape[A.create(name).channel_axis(torch.empty(shape))])
    act.train(training)
    ref = copy.deepcopy(act)  # SLAF updates running statistics: each path gets its own copy
    gen = torch.Generator().manual_seed(2)
    x = 1.5 * torch.randn(shape, generator=gen, dtype=dtype)
    g = torch.randn(shape, generator=gen, dtype=dtype)
    got, want = run(act, x, g, fast=True), run(ref, x, g, fast=False)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and a.dtype == b.dtype, i
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m: f"output {i} (y, dx, coefficients...): {m}")
    for (n, a), b in zip(act.named_buffers(), ref.buffers()):
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m: f"buffer {n}: {m}")


@pytest.fixture
def eager(monkeypatch):
    monkeypatch.setattr(fused, "BACKEND", "eager")


@pytest.fixture
def compiled(monkeypatch):
    """Compile every kernel call, however small, and fail if any compilation falls back to eager."""
    monkeypatch.setattr(fused, "BACKEND", "compile")
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_eager_kernels_match_reference(eager, name, kwargs, dtype, per_channel, training):
    compare(name, kwargs, dtype, per_channel, training)


@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_tokens_channels_last_per_channel(eager, name, kwargs):
    compare(name, kwargs, torch.float64, True, True, shape=(2, 7, 5))


@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_non_contiguous_per_channel(eager, name, kwargs):
    """channels_last NCHW: per-channel coefficients broadcast instead of the row layout."""
    act = build(name, kwargs, torch.float64, per_channel=True, channels=4)
    x = torch.randn(3, 4, 5, 6, dtype=torch.float64).to(memory_format=torch.channels_last)
    g = torch.randn(3, 4, 5, 6, dtype=torch.float64)
    ref = copy.deepcopy(act)
    for a, b in zip(run(act, x, g, fast=True), run(ref, x, g, fast=False)):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_gradcheck_fast_path(eager, name, kwargs):
    act = build(name, kwargs, torch.float64, per_channel=True, channels=3).eval()
    x = torch.rand(2, 3, 2, 2, dtype=torch.float64) * 4 - 2
    assert gradcheck_module(act, x, eps=1e-6, atol=1e-5)


def test_compile_switch_off_compiles_nothing(monkeypatch):
    monkeypatch.setattr(fused, "BACKEND", "eager")
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 0)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("torch.compile called"))
    compare("rational", {"version": "A"}, torch.float32, False, True)


def test_failed_compilation_falls_back_to_eager(monkeypatch):
    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler")

        return run

    monkeypatch.setattr(fused, "BACKEND", "compile")
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 0)
    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", broken)
    with pytest.warns(UserWarning, match="using the eager kernel"):
        compare("hermite", {}, torch.float32, False, True)
    assert fused._COMPILED and all(v is None for v in fused._COMPILED.values())


def test_reference_switches():
    act = A.create("polyrelu")
    calls = []
    act.fast_forward = lambda x: calls.append(x) or act.reference_forward(x)
    act(torch.randn(3))
    with fused.reference_path():
        act(torch.randn(3))
    act.fast = False
    act(torch.randn(3))
    assert len(calls) == 1


def test_fast_path_saves_only_the_input():
    act = A.create("rational")
    x = torch.randn(8, 16, 8, 8, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        act(x).sum().backward()
    assert max(saved) == x.numel() and sum(saved) < x.numel() + 100


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_computes_in_float32(eager, dtype):
    act = A.create("rational")
    x = torch.randn(2, 4, 3, 3).to(dtype)
    with torch.autocast("cpu", dtype=dtype):
        y = act(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y, act(x.float()).to(dtype), rtol=0, atol=0)


def test_fit_runs_on_reference_path():
    act = A.create("hermite")
    act.fast_forward = lambda x: pytest.fail("fit must not use the fused path")
    assert act.fit("gelu").max_abs_error < A.get_class("hermite").fit_tolerance["gelu"][0]


# ---- compiled kernels: a few representative families by default, the rest marked slow ------------
DEFAULT_COMPILED = {"rational-A", "hermite-True", "slaf"}


@pytest.mark.parametrize(
    "name,kwargs",
    [
        pytest.param(n, k, id=i, marks=() if i in DEFAULT_COMPILED else pytest.mark.slow)
        for (n, k), i in zip(CASES, IDS)
    ],
)
def test_compiled_kernels_match_reference(compiled, name, kwargs):
    compare(name, kwargs, torch.float32, per_channel=False, training=True)
    family = A.get_class(name).registry_name
    assert any(family.startswith(key[0]) and fn is not None for key, fn in fused._COMPILED.items())


@pytest.mark.slow
@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_compiled_kernels_per_channel_float64(compiled, name, kwargs):
    compare(name, kwargs, torch.float64, per_channel=True, training=True)


def test_compiled_gradcheck(compiled):
    act = A.create("rational", version="A").double()
    x = (torch.rand(2, 3, 2, 2, dtype=torch.float64) * 4 - 2).requires_grad_(True)
    a = act.numerator.detach().clone().requires_grad_(True)
    b = act.denominator.detach().clone().requires_grad_(True)

    def f(x, a, b):
        return torch.func.functional_call(act, {"numerator": a, "denominator": b}, (x,))

    assert torch.autograd.gradcheck(f, (x, a, b), eps=1e-6, atol=1e-5)


SWITCHES = ("VISIONBENCH_KERNELS", "VISIONBENCH_COMPILE", "VISIONBENCH_FAST")


@pytest.fixture
def no_switches(monkeypatch):
    """None of the kernel variables set, and the process's backend restored after the test."""
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(fused, "BACKEND", fused.BACKEND)
    monkeypatch.setattr(fused, "SOURCE", fused.SOURCE)


@pytest.mark.parametrize(
    "env,backend,source",
    [
        ({}, "auto", "default"),
        ({"VISIONBENCH_KERNELS": "Triton"}, "triton", "VISIONBENCH_KERNELS"),
        ({"VISIONBENCH_COMPILE": "0"}, "eager", "VISIONBENCH_COMPILE"),
        ({"VISIONBENCH_FAST": "0"}, "reference", "VISIONBENCH_FAST"),
        ({"VISIONBENCH_KERNELS": "compile", "VISIONBENCH_FAST": "0"}, "compile", "VISIONBENCH_KERNELS"),
    ],
)
def test_one_switch_picks_the_kernels(env, backend, source, no_switches, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert fused.resolve(None) == (backend, source)
    # the variable wins over a run's key; without one, the key decides
    assert fused.resolve("reference") == ((backend, source) if env else ("reference", "trainer.kernels"))
    monkeypatch.setattr(fused, "BACKEND", backend)
    x = torch.randn(3)  # a CPU tensor: auto takes the compiled kernels; triton only under the interpreter
    want = {"auto": "compile", "triton": "triton" if triton_ops.runs_on(x) else "compile"}.get(backend, backend)
    assert fused.backend() == backend and fused.backend_for(x) == want


@pytest.mark.parametrize("variable,backend", [("VISIONBENCH_FAST", "reference"), ("VISIONBENCH_COMPILE", "eager")])
def test_an_older_spelling_still_sets_the_kernels_and_says_once_which_to_use(
    variable, backend, no_switches, monkeypatch
):
    monkeypatch.setattr(fused, "_TOLD", set())  # this process has said nothing yet
    monkeypatch.setenv(variable, "0")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert fused.resolve(None) == fused.resolve("compile") == (backend, variable)  # read twice, said once
    assert [str(w.message) for w in said if issubclass(w.category, FutureWarning)] == [
        f"visionbench: {variable}=0 is the older spelling of VISIONBENCH_KERNELS={backend} (it still sets {backend}); "
        f"set VISIONBENCH_KERNELS={backend} instead"
    ]
    monkeypatch.setenv("VISIONBENCH_KERNELS", backend)  # the one switch: no word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(fused, "_TOLD", set())
        assert fused.resolve(None) == (backend, "VISIONBENCH_KERNELS")


def test_the_schema_offers_the_backends_fused_knows():
    from visionbench.config.schema import KERNELS, RunConfig

    assert KERNELS == fused.BACKENDS and RunConfig().trainer.kernels == "auto" == fused.BACKENDS[0]


def test_set_backend_and_use_backend_are_the_one_setter(no_switches):
    fused.set_backend("eager")
    assert (fused.backend(), fused.source()) == ("eager", "set_backend")
    with fused.use_backend("reference", "trainer.kernels"):
        assert fused.record() == {
            "backend": "reference",
            "from": "trainer.kernels",
            "compile_min_numel": fused.COMPILE_MIN_NUMEL,
        }
        assert fused.switch() == "trainer.kernels=reference"
        assert not fused.fast_enabled(torch.randn(3))  # every reader asks backend()
    assert (fused.backend(), fused.source()) == (
        "eager",
        "set_backend",
    ) and fused.switch() == "VISIONBENCH_KERNELS=eager"
    with pytest.raises(ValueError, match=r"^set_backend='fast' is not a kernel backend; accepted: auto, triton, "):
        fused.set_backend("fast")
    assert fused.backend() == "eager"


def test_compile_min_numel_is_read_through_the_query(monkeypatch):
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 7)
    assert fused.compile_min_numel() == 7 and fused.record()["compile_min_numel"] == 7
    monkeypatch.setattr(fused, "BACKEND", "compile")
    assert fused.ran_on(torch.randn(6)) == "eager" and fused.ran_on(torch.randn(7)) == "compiled"


@pytest.mark.parametrize("env", [{}, {"VISIONBENCH_KERNELS": "eager"}])
def test_a_run_trains_with_its_key_unless_the_variable_says_otherwise(env, no_switches, monkeypatch, tmp_path):
    """train_run sets the backend before anything is built and restores the process's after (a worker's next run
    starts from its own key); environment.kernels(run) records the same."""
    from visionbench.train import run as train
    from visionbench.train.environment import kernels

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen = []
    monkeypatch.setattr(train, "_train", lambda cfg, run_dir, progress: seen.append(fused.record()))
    before = fused.record()
    cfg = {"trainer": {"kernels": "reference"}}
    train.train_run(cfg, tmp_path)
    want = (
        {"backend": "eager", "from": "VISIONBENCH_KERNELS"}
        if env
        else {"backend": "reference", "from": "trainer.kernels"}
    )
    assert seen == [{**want, "compile_min_numel": fused.COMPILE_MIN_NUMEL}]
    assert fused.record() == before
    recorded = kernels(cfg)
    assert {k: recorded[k] for k in ("backend", "from")} == want and fused.record() == before


def test_every_family_with_a_fast_path_is_in_the_cases():
    """A learnable family whose class has its own `fast_forward` (fused or Triton kernels) is in CASES (tests/families.py), so a new family
    cannot skip the tests above; the benchmark (bench/act_speed.py) times each of them too."""
    from visionbench.activations.base import LearnableActivation
    from visionbench.bench.act_speed import CASES as BENCH_CASES

    fast = {
        A.get_class(name).registry_name
        for name in A.names()
        if issubclass(cls := A.get_class(name), LearnableActivation)
        and cls.__module__.startswith("visionbench.")
        and (cls.fast_forward is not LearnableActivation.fast_forward or cls.triton_kernels)
    }
    assert fast >= {"rational", "hermite", "slaf", "bspline", "prelu"}  # the rule finds them
    tested = {A.get_class(name).registry_name for name, _ in CASES}
    benched = {A.get_class(name).registry_name for name, _ in BENCH_CASES.values()}
    assert fast - tested == set(), "families with a fast path missing from tests/families.py CASES"
    assert fast - benched == set(), "families with a fast path missing from bench/act_speed.py CASES"


def test_a_bad_kernels_switch_is_one_line(monkeypatch, capsys):
    from visionbench import cli

    monkeypatch.setenv("VISIONBENCH_KERNELS", "fast")
    monkeypatch.setattr(fused, "BACKEND", "fast")
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert "VISIONBENCH_KERNELS='fast' is not a kernel backend; accepted: auto, triton, compile" in err
    assert "Traceback" not in err

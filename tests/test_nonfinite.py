"""NaN and +-inf propagate on every kernel path as the plain formulas do (issue 53, item 4).

The reference path (`reference_forward`, differentiated by autograd) defines every activation, at non-finite inputs
too. Every other path (`fused.use_backend`: eager, compile, triton where the family has Triton kernels) must give its
pattern of NaN and inf, position by position: no clamp, max or mask that turns a NaN into a number, no `0 * x` that
turns an inf into a NaN, unless the plain formula does the same.

The property, for every learnable family of the registry in every configuration whose kernel differs
(tests/families.py's CASES, and SLAF in eval mode, whose kernel is a polynomial), with shared and with
per-channel coefficients (nudged off their init, so that no coefficient is 0), on an NCHW input of ordinary values
(1.5 N(0, 1)) holding NaN, +inf or -inf at known entries in two channels (KINDS: one kind at a time, and the three
together), with a finite random upstream gradient:

(a) forward: y is NaN exactly where the reference's y is NaN, +inf / -inf exactly where the reference's is +inf / -inf
    (same sign), finite where it is finite, and there within float32 rounding of it;
(b) backward: grad_x has the reference's NaN / +inf / -inf / finite pattern entry by entry, and every coefficient
    gradient entry (per channel with per-channel coefficients) is finite exactly where the reference's is (so a NaN or
    inf anywhere in the input reaches a coefficient gradient exactly when it does in the reference); finite entries of
    both within rounding of the reference's (a NaN input adds to a finite sum what the plain formula's autograd adds).

What the reference does at the non-finite entries, run and pinned here (`REFERENCE`, `test_reference_path`): y, then
grad_x, for a NaN / +inf / -inf input ("inf" of either sign; the sign follows the coefficients and the gradient):

    rational A-D                 nan nan | nan nan | nan nan      P / Q at +-inf is inf / inf
    polyrelu, star_relu          nan nan | inf inf | fin fin      relu(-inf) = 0
    hermite (degree 3)           nan nan | nan inf | nan inf      the recurrence's inf - inf in y; autograd's adjoint
                                                                  recurrence nests the powers: dL/dx is +-inf
    hermite degree 6             nan nan | nan nan | nan nan
    hermite clamp                nan nan | fin fin | fin fin      L tanh(x / 2) is finite
    fourier                      nan nan | nan nan | nan nan      cos(inf)
    tropical                     nan fin | nan fin | nan fin      line 0 is a_0 + 0 x (NaN), no line beats a NaN: the
                                                                  element keeps line 0 (slope 0) in the backward
    tropical_rational            nan fin | nan fin | inf fin      grad_x p_i - q_j of the selected lines
    prelu                        nan fin | inf fin | inf fin      autograd's relu passes g at a NaN, its clamp drops it
    swish_beta                   nan nan | inf nan | nan nan      -inf sigmoid(-inf) = -inf * 0
    acon_c (p2 < 0 < p1)         nan nan | nan nan | nan nan      + p2 x: inf - inf at +inf (p1 > p2 > 0: swish_beta's)
    apl                          nan fin | inf fin | nan fin      sum_s a_s relu(b_s + inf), a_s of both signs here
    kaf                          nan nan | fin nan | fin nan      y = 0, but dF/dx = E_i (x - d_i) ... = 0 * inf
    bspline (any residual)       nan nan | nan nan | nan nan      Cox-de Boor's (x - t_i) / h times an indicator 0
    polynorm                     nan nan | nan nan | nan nan      NaN: y and grad_x over the entry's channel vector
                                                                  (its mean over channels); +-inf: y at the entry
                                                                  (inf / inf), grad_x over the channel vector
    slaf (training)              nan nan | nan nan | nan nan      over the entry's whole channel (batch statistics)
    slaf (eval)                  nan nan | inf inf | inf inf      a polynomial with fixed statistics

Where the plain formula gives a NaN that its definition would not (tropical at +-inf, where max_k (a_k + k x) is +inf
or a_0; bspline at +-inf, where every B_i is 0 and phi = w_b b(x); kaf's NaN derivative where its value is a clean 0;
tropical's finite gradients, and coefficient gradients that ignore the NaN, at a NaN input), the paths follow the
reference anyway: it is the definition, and this test says what it does.

The Triton bodies have it too (under TRITON_INTERPRET=1 here, on CUDA where there is a GPU): no tl.maximum or
tl.minimum without propagate_nan=ALL, a relu's derivative as autograd has it (g where x is NaN), Horner derivatives
started without 0 * x, Hermite's F' by the adjoint recurrence, KAF's slope factor unclamped. The compiled kernels run
the eager ones through torch.compile, checked in full under `-m slow` (a cold compilation costs seconds per
configuration) and for a few families by default (DEFAULT_COMPILED).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from visionbench import activations
from visionbench.activations import fused, triton_ops

from .families import CASES as KERNEL_CASES
from .families import case_id as kernel_case_id

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the Triton path's; the others run on the CPU
SHAPE = (2, 3, 4, 5)  # NCHW; channel 2 holds no non-finite entry in the single kinds
NAN, INF = float("nan"), float("inf")
KINDS = {
    "nan": {(0, 0, 1, 2): NAN, (1, 1, 3, 4): NAN},
    "+inf": {(0, 0, 1, 2): INF, (1, 1, 3, 4): INF},
    "-inf": {(0, 0, 1, 2): -INF, (1, 1, 3, 4): -INF},
    "mixed": {(0, 0, 1, 2): NAN, (1, 1, 3, 4): INF, (0, 2, 0, 0): -INF},
}
# (registry name, constructor arguments, training): every configuration whose kernel differs
CASES = [(name, kwargs, True) for name, kwargs in KERNEL_CASES] + [("slaf", {}, False)]


def case_id(name: str, kwargs: dict, training: bool) -> str:
    return kernel_case_id(name, kwargs) + ("" if training else "-eval")


IDS = [case_id(*case) for case in CASES]

# ---- the reference at the non-finite entries (the module docstring's table) ------------------------------------------
ALL_NAN = {"nan": ("nan", "nan"), "+inf": ("nan", "nan"), "-inf": ("nan", "nan")}
RELU_POLY = {"nan": ("nan", "nan"), "+inf": ("inf", "inf"), "-inf": ("fin", "fin")}
GATED = {"nan": ("nan", "nan"), "+inf": ("inf", "nan"), "-inf": ("nan", "nan")}
REFERENCE = {
    **{i: ALL_NAN for i in IDS if i.startswith("rational-")},
    "polyrelu": RELU_POLY,
    "hermite": {"nan": ("nan", "nan"), "+inf": ("nan", "inf"), "-inf": ("nan", "inf")},
    "hermite-True": {"nan": ("nan", "nan"), "+inf": ("fin", "fin"), "-inf": ("fin", "fin")},
    "hermite-6": ALL_NAN,
    "fourier": ALL_NAN,
    "tropical": {"nan": ("nan", "fin"), "+inf": ("nan", "fin"), "-inf": ("nan", "fin")},
    "tropical_rational": {"nan": ("nan", "fin"), "+inf": ("nan", "fin"), "-inf": ("inf", "fin")},
    "prelu": {"nan": ("nan", "fin"), "+inf": ("inf", "fin"), "-inf": ("inf", "fin")},
    "swish_beta": GATED,
    "acon_c": ALL_NAN,
    "star_relu": RELU_POLY,
    "apl": {"nan": ("nan", "fin"), "+inf": ("inf", "fin"), "-inf": ("nan", "fin")},
    "kaf": {"nan": ("nan", "nan"), "+inf": ("fin", "nan"), "-inf": ("fin", "nan")},
    "bspline": ALL_NAN,
    "bspline-linear": ALL_NAN,
    "bspline-none": ALL_NAN,
    "bspline-2": ALL_NAN,
    "polynorm": ALL_NAN,
    "slaf": ALL_NAN,
    "slaf-eval": {"nan": ("nan", "nan"), "+inf": ("inf", "inf"), "-inf": ("inf", "inf")},
}
# how far a non-finite entry spreads in the normalised families: (y, grad_x) per kind; "entry" elsewhere
SPREAD = {
    "polynorm": {"nan": ("position", "position"), "+inf": ("entry", "position"), "-inf": ("entry", "position")},
    "slaf": {kind: ("channel", "channel") for kind in ("nan", "+inf", "-inf")},
}

# the kinds of the default run: "mixed" puts a NaN, a +inf and a -inf in one input (every entry's pattern checked), "+inf"
# alone keeps the coefficient gradients' finiteness at an infinity apart from the NaN's; the others: `make test-slow`
DEFAULT_KINDS = {"mixed", "+inf"}
# compiled in the default run, shared coefficients (a cold compilation costs ~3 s per function): one family per kind of
# fix made for the property (a relu mask, the adjoint recurrence, an unclamped factor, an index and a NaN off the grid)
DEFAULT_COMPILED = {"polyrelu", "hermite", "kaf", "bspline-none"}
HAVE_TRITON = triton_ops.HAVE_TRITON and (triton_ops.interpreting() or torch.cuda.is_available())


# ---- building and running ------------------------------------------------------------------------------------------
def build(name: str, kwargs: dict, training: bool, per_channel: bool) -> torch.nn.Module:
    """The module, coefficients nudged off their init (no coefficient exactly 0, channels differ); the same ones on
    every call (ACON-C draws its init from the global generator)."""
    extra = {"per_channel": True, "num_channels": SHAPE[1]} if per_channel else {}
    torch.manual_seed(0)
    act = activations.create(name, **kwargs, **extra)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return act.train(training)


def inputs(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x: 1.5 N(0, 1) with the kind's non-finite entries; g: a finite upstream gradient."""
    gen = torch.Generator().manual_seed(2)
    x = 1.5 * torch.randn(SHAPE, generator=gen)
    for where, value in KINDS[kind].items():
        x[where] = value
    return x, torch.randn(SHAPE, generator=gen)


def run(act: torch.nn.Module, x: torch.Tensor, g: torch.Tensor, backend: str, device: str = "cpu") -> list:
    """[y, grad_x, *coefficient gradients] of a fresh copy of `act` (SLAF's statistics, D's noise) under `backend` on
    `device`, returned on the CPU."""
    act = copy.deepcopy(act).to(device)
    x = x.to(device).requires_grad_(True)
    with fused.use_backend(backend):
        if backend != "reference":
            assert fused.backend_for(x) == backend
        torch.manual_seed(3)  # rational D: the same noise on every path
        y = act(x)
        params = [p for p in act.parameters() if p.requires_grad]
        grads = torch.autograd.grad(y, [x, *params], g.to(device))
    return [t.detach().cpu() for t in (y, *grads)]


def labels(act: torch.nn.Module) -> list[str]:
    return ["y", "grad_x"] + [f"d/d{n}" for n, p in act.named_parameters() if p.requires_grad]


CLASSES = ("finite", "nan", "+inf", "-inf")


def classes(t: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +inf, 3 -inf, entry by entry."""
    out = torch.zeros(t.shape, dtype=torch.int8)
    out[t.isnan()] = 1
    out[t == INF] = 2
    out[t == -INF] = 3
    return out


def mismatches(label: str, got: torch.Tensor, want: torch.Tensor) -> list[str]:
    """What breaks the property for one output: y and grad_x by class, coefficient gradients by finiteness, and the
    finite entries of both by value."""
    cg, cw = classes(got), classes(want)
    bad = (cg != cw) if label in ("y", "grad_x") else ((cg == 0) != (cw == 0))
    out = [
        f"{label}{tuple(i)}: {CLASSES[int(cg[tuple(i)])]}, the reference's {CLASSES[int(cw[tuple(i)])]}"
        for i in bad.nonzero().tolist()[:6]
    ]
    both = got.isfinite() & want.isfinite()
    if both.any():
        scale = float(want[both].abs().max()) + 1e-6
        err = float((got[both] - want[both]).abs().max()) / scale
        if err > 2e-4:
            out.append(f"{label}: finite entries off by {err:.1e} of the largest")
    return out


def check_path(name: str, kwargs: dict, training: bool, per_channel: bool, kind: str, backend: str) -> None:
    act = build(name, kwargs, training, per_channel)
    x, g = inputs(kind)
    device = DEVICE if backend == "triton" else "cpu"
    want = run(act, x, g, "reference", device)
    got = run(act, x, g, backend, device)
    problems = [m for label, a, b in zip(labels(act), got, want) for m in mismatches(label, a, b)]
    assert not problems, f"{backend} against the reference, {kind} input: " + "; ".join(problems)


def _params(backend: str):
    """(name, kwargs, training, kind, per_channel) of every case the path runs, with the compile path's slow marks."""
    for case, i in zip(CASES, IDS):
        if backend == "triton" and not activations.get_class(case[0]).triton_kernels:
            continue
        for kind in KINDS:
            for per_channel in (False, True):
                marks = []
                if backend == "compile" and (i not in DEFAULT_COMPILED or per_channel):
                    marks.append(pytest.mark.slow)
                elif kind not in DEFAULT_KINDS:
                    marks.append(pytest.mark.slow)
                layout = "per_channel" if per_channel else "shared"
                yield pytest.param(*case, kind, per_channel, id=f"{i}-{kind}-{layout}", marks=marks)


PARAMS = "name,kwargs,training,kind,per_channel"


# ---- the tests -------------------------------------------------------------------------------------------------------
def test_every_learnable_family_has_a_case():
    learnable = {n for n in activations.names() if activations.is_learnable(n)}
    assert learnable <= {name for name, _, _ in CASES}
    assert set(REFERENCE) == set(IDS)


def _spread(kind: str, where: str) -> set:
    """The entries a non-finite input entry reaches: itself, its channel vector (polynorm), its channel (slaf)."""
    out = set()
    for n, c, h, w in KINDS[kind]:
        if where == "entry":
            out.add((n, c, h, w))
        elif where == "position":
            out |= {(n, k, h, w) for k in range(SHAPE[1])}
        else:
            out |= {(i, c, j, k) for i in range(SHAPE[0]) for j in range(SHAPE[2]) for k in range(SHAPE[3])}
    return out


@pytest.mark.parametrize("kind", ["nan", "+inf", "-inf"])
@pytest.mark.parametrize("name,kwargs,training", CASES, ids=IDS)
def test_reference_path(name, kwargs, training, kind):
    """The plain formulas at the non-finite entries, as the module docstring's table says; nothing else non-finite
    (but for the normalised families' spread)."""
    act = build(name, kwargs, training, per_channel=False)
    x, g = inputs(kind)
    y, grad_x = run(act, x, g, "reference")[:2]
    pinned = REFERENCE[case_id(name, kwargs, training)][kind]
    spread = SPREAD.get(name if training else "", {}).get(kind, ("entry", "entry"))
    for label, t, want, where in zip(("y", "grad_x"), (y, grad_x), pinned, spread):
        c = classes(t)
        at = {CLASSES[int(c[i])].lstrip("+-") for i in KINDS[kind]}
        assert at == {"finite" if want == "fin" else want}, f"{label} at the {kind} entries: {at}"
        nonfinite = {tuple(i) for i in (c != 0).nonzero().tolist()}
        assert nonfinite == (set() if want == "fin" else _spread(kind, where)), label


@pytest.mark.parametrize(PARAMS, list(_params("eager")))
def test_eager_path(name, kwargs, training, kind, per_channel):
    check_path(name, kwargs, training, per_channel, kind, "eager")


@pytest.mark.parametrize(PARAMS, list(_params("compile")))
def test_compile_path(name, kwargs, training, kind, per_channel, monkeypatch):
    """Every kernel call compiled, however small; a compilation that fell back to eager fails the test."""
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check_path(name, kwargs, training, per_channel, kind, "compile")


@pytest.mark.skipif(not HAVE_TRITON, reason="needs Triton and a GPU or TRITON_INTERPRET=1")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's numpy
@pytest.mark.parametrize(PARAMS, list(_params("triton")))
def test_triton_path(name, kwargs, training, kind, per_channel):
    check_path(name, kwargs, training, per_channel, kind, "triton")

"""Replace a model's activation modules by fresh, independent instances of a registered activation.

    >>> report = swap_activations(model, "rational", {"init": "gelu"})
    >>> len(report), report.paths[:2], report.functional
    (18, ['stages.0.blocks.0.mlp.act', 'stages.0.blocks.1.mlp.act'], [])

What is swapped (the activations the papers swap): every module of an elementwise activation
type in `SWAPPABLE` -- torch's ReLU family, GELU, SiLU, Mish, ..., timm's own wrappers
(`timm.layers.activations.GELU`, ...) and anything from visionbench's activation registry (so a
swapped model can be swapped again). In the supported models that is the ReLUs of the CNNs
(ResNet stem + blocks, VGG) and the GELU of every transformer / ConvNeXt block MLP.
Not swapped: attention softmax, gates (Sigmoid/Tanh, e.g. squeeze-excite), and anything inside
the classifier (`head`, `pre_logits`) -- timm hard-codes those (ConvNeXt's `NormMlpClassifierHead`
builds its hidden-layer act from the fixed string 'gelu', whatever the model's act_layer), and
none of the papers changes them. The supported models have no head activation at all.

Each new module gets, unless `act_kwargs` sets them: `num_channels` (output size of the
conv/linear/norm registered just before the activation; used by `per_channel` and SLAF) and
`channel_dim=-1` where that layer is a `Linear` (its output has features last: token MLPs and
ConvNeXt's NHWC block MLP); conv/norm outputs keep the NCHW default.

Which sites (`layers`, default all): the swappable modules are numbered 0..n-1 in module order
(`named_modules`, i.e. forward order in every supported model) and `layers` picks some of them; the
others keep the model's own activation. Paper 003 swaps one site only (Table 5: the first ReLU of
ResNet-32; Table 6: the last one of its Fashion-MNIST net):

    >>> swap_activations(model, "slaf", {"degree": 2}, layers="last").paths      # ['fc2.act']

Accepted: None or "all"; "first" / "last"; an int i (negative counts from the end); a list of ints;
a slice "a:b" / "a:b:c" (Python's rules, "-1:" = the last). A swept activation variant carries it as
the reserved option `swap_layers` (`act=relu,slaf[swap_layers=last]`): `split_swap_options` takes it
out of the activation's options before the activation sees them.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import activations as timm_acts
from timm.layers import activations_me as timm_acts_me
from torch import nn

from .. import activations
from ..activations import FitResult, LearnableActivation
from .scan import functional_activations

_TORCH = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.RReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Hardswish,
)
_TIMM = tuple(
    getattr(mod, n)
    for mod, names in (
        (timm_acts, ("Swish", "Mish", "HardSwish", "HardMish", "PReLU", "GELU", "GELUTanh", "QuickGELU")),
        (timm_acts_me, ("SwishMe", "MishMe", "HardSwishMe", "HardMishMe")),
    )
    for n in names
    if hasattr(mod, n)
)
DEFAULT_EXCLUDE = ("head", "pre_logits")
SWAP_OPTION = "swap_layers"  # reserved key of an activation's options: which sites a swap replaces (`layers`)


def split_swap_options(act_kwargs: dict[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """(the activation's own options, the `swap_layers` value or None): `slaf[degree=2,swap_layers=last]`
    reaches the swap as act_kwargs {degree: 2, swap_layers: last}; only {degree: 2} is the activation's."""
    kwargs = dict(act_kwargs or {})
    return kwargs, kwargs.pop(SWAP_OPTION, None)


ACCEPTED_LAYERS = "all, first, last, an int, a list of ints, or a slice 'a:b' / 'a:b:c'"


def parse_layers(layers: Any) -> Any:
    """`layers` in one canonical form, checked without a model: None (all), "first", "last", a
    `slice`, or a tuple of ints. ValueError (one line) for anything else; `check_layers` in a
    config check, `select_sites` once the model's site count is known."""

    def bad(why: str) -> ValueError:
        return ValueError(f"swap layers={layers!r}: {why}; accepted: {ACCEPTED_LAYERS}")

    if layers is None:
        return None
    if isinstance(layers, str):
        text = layers.strip()
        if text in ("all", "first", "last"):
            return None if text == "all" else text
        if ":" in text:
            parts = text.split(":")
            try:
                if len(parts) > 3:
                    raise ValueError
                bounds = [int(p) if p.strip() else None for p in parts]
            except ValueError:
                raise bad("not a slice of integers") from None
            if len(bounds) == 3 and bounds[2] == 0:
                raise bad("slice step 0")
            return slice(*bounds)
        try:
            layers_int = int(text)
        except ValueError:
            raise bad("unknown word") from None
        return (layers_int,)
    items = list(layers) if isinstance(layers, (list, tuple)) else [layers]
    if not items:
        raise bad("empty list")
    for i in items:
        if isinstance(i, bool) or not isinstance(i, int):
            raise bad(f"{i!r} is not an integer index")
    return tuple(items)


def check_layers(layers: Any) -> None:
    """Raise ValueError if `layers` can select sites in no model (what a config check can say)."""
    parse_layers(layers)


def select_sites(layers: Any, n: int) -> list[int]:
    """Indices (sorted, distinct) of the `n` swappable sites that `layers` picks (module docstring).

    Raises:
        ValueError: one line naming the value, the number of sites and what is accepted (an index out of
            range, an empty selection, a value of another type).
    """
    spec = parse_layers(layers)

    def bad(why: str) -> ValueError:
        return ValueError(
            f"swap layers={layers!r}: {why}; the model has {n} activation site(s), numbered 0..{n - 1} (or -{n}..-1)"
        )

    if spec is None:
        return list(range(n))
    if spec in ("first", "last"):
        return [0 if spec == "first" else n - 1]
    if isinstance(spec, slice):
        picked = list(range(n))[spec]
        if not picked:
            raise bad("the slice selects no site")
        return sorted(set(picked))
    for i in spec:
        if not -n <= i < n:
            raise bad(f"index {i} is out of range")
    return sorted({i % n for i in spec})


def swappable_types() -> tuple[type, ...]:
    """Activation module types a swap replaces (visionbench's registry read at call time)."""
    registered = tuple(activations.get_class(n) for n in activations.names())
    return tuple(dict.fromkeys(_TORCH + _TIMM + registered))


@dataclass
class SwapEntry:
    """One replaced module."""

    path: str
    original: str  # qualified type name of the replaced module
    new: str
    num_channels: int | None = None
    channel_dim: int | None = None
    fit: FitResult | None = None


@dataclass
class SwapReport:
    """What `swap_activations` replaced; `len(report)` is the number of swapped modules.

    Attributes:
        act: registry name of the new activation.
        entries: one `SwapEntry` per replaced module, in module order.
        functional: functional activation calls found in the model's classes (a swap cannot
            reach them); empty for every supported model.
    """

    act: str
    entries: list[SwapEntry] = field(default_factory=list)
    functional: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # every swappable site's path, swapped or not
    layers: Any = None  # the `layers` selection (None = all)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[SwapEntry]:
        return iter(self.entries)

    @property
    def paths(self) -> list[str]:
        return [e.path for e in self.entries]

    def counts(self) -> dict[str, int]:
        """Number of replaced modules per original type."""
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.original] = out.get(e.original, 0) + 1
        return out

    @property
    def kept(self) -> list[str]:
        """Sites left with the model's own activation (`layers` picked others)."""
        swapped = set(self.paths)
        return [p for p in self.sites if p not in swapped]

    def summary(self) -> str:
        by_type = ", ".join(f"{n} x {k}" for k, n in self.counts().items())
        of = f" of {len(self.sites)}" if len(self.sites) > len(self) else ""
        return f"swapped {len(self)}{of} activations -> {self.act} ({by_type})"


def _qualname(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def _out_channels(module: nn.Module) -> int | None:
    if isinstance(module, nn.modules.conv._ConvNd):
        return module.out_channels
    if isinstance(module, nn.Linear):
        return module.out_features
    if isinstance(module, nn.modules.batchnorm._NormBase):
        return module.num_features
    if isinstance(module, nn.GroupNorm):
        return module.num_channels
    if isinstance(module, nn.LayerNorm):
        return int(module.normalized_shape[-1])
    return None


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def fit_target(module: nn.Module) -> tuple[Any, Any]:
    """(cache key, target) to fit a new activation to `module`: a registry target name for the
    classical activations, else a float64 copy of the module used as a callable."""
    if isinstance(module, (nn.GELU, timm_acts.GELU, timm_acts.GELUTanh)):
        tanh = isinstance(module, timm_acts.GELUTanh) or getattr(module, "approximate", "none") == "tanh"
        return ("gelu_tanh", _gelu_tanh) if tanh else ("gelu", "gelu")
    if isinstance(module, nn.LeakyReLU):
        slope = float(module.negative_slope)
        if slope == 0.01:
            return "leaky_relu", "leaky_relu"
        return f"leaky_relu({slope})", lambda x: F.leaky_relu(x, slope)
    simple = (
        (nn.ReLU, "relu"),
        (nn.SiLU, "silu"),
        (timm_acts.Swish, "silu"),
        (nn.Mish, "mish"),
        (timm_acts.Mish, "mish"),
        (nn.Tanh, "tanh"),
        (nn.Sigmoid, "sigmoid"),
        (nn.Identity, "identity"),
    )
    for cls, name in simple:
        if isinstance(module, cls):
            return name, name
    if getattr(module, "per_channel", False):
        raise ValueError(f"cannot fit to a per-channel {type(module).__name__}: it is not one scalar function")
    ref = copy.deepcopy(module).to(torch.float64).eval()
    state = tuple((k, tuple(v.flatten().tolist())) for k, v in ref.state_dict().items())
    return (_qualname(module), ref.extra_repr(), state), ref


# The registry's validation (canonical name; ValueError naming a bad name or option), under the
# name models/ callers already use.
check_act = activations.check

PROBE_CHANNELS = 4  # the channels of `probe_shape`'s input when neither the site nor the module gives them


def probe_shape(
    module: nn.Module, act: str, channels: int | None = None, features_last: bool = False, check: str | None = None
) -> None:
    """One forward of a tiny input, (2, C, 3, 3) (or (2, 3, C) after a Linear), through a copy of the activation
    `module` (the module itself, its state and the random generators untouched): ValueError, one line naming `act`,
    both shapes and `check` (default `visionbench check act=ACT`), when the output is not a tensor of the input's
    shape, as an elementwise activation's is. A forward that raises is left to the model's own forward to report."""
    c = channels or getattr(module, "num_channels", None) or PROBE_CHANNELS
    shape = (2, 3, c) if features_last else (2, c, 3, 3)
    ref = next(itertools.chain(module.parameters(), module.buffers()), None)
    device = ref.device if ref is not None else torch.device("cpu")
    dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.get_default_dtype()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            x = torch.linspace(-3.0, 3.0, int(torch.Size(shape).numel()), device=device, dtype=dtype).reshape(shape)
            y = copy.deepcopy(module)(x)
    except Exception:  # noqa: BLE001 - not this check's to judge: the model's forward raises it with its own words
        return
    got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
    if got != shape:
        raise ValueError(
            f"activation {act!r} returns {'shape ' if isinstance(y, torch.Tensor) else 'a '}{got} for "
            f"an input of shape {shape}; an activation must return a tensor of its input's shape "
            f"(elementwise), or the layer after it fails; run `{check or f'visionbench check act={act}'}`"
        )


@dataclass(frozen=True)
class _Site:
    """One swappable activation module found in a model, with what its replacement needs to know."""

    path: str
    module: nn.Module
    channels: int | None  # output size of the conv/linear/norm registered just before it
    after_linear: bool  # that layer is a Linear: features last


def swap_options(act_kwargs: dict[str, Any] | None, layers: Any, keyword: str = "layers") -> tuple[dict[str, Any], Any]:
    """(the activation's own options, the sites to swap): `split_swap_options`, the `swap_layers` option
    reconciled with the `layers` argument (named `keyword` in the error): one of the two may be given, or both
    with the same value; ValueError otherwise."""
    kwargs, from_options = split_swap_options(act_kwargs)
    if from_options is None:
        return kwargs, layers
    if layers is not None and layers != from_options:
        raise ValueError(f"{keyword} given twice: {layers!r} and act option {SWAP_OPTION}={from_options!r}")
    return kwargs, from_options


def _find_sites(model: nn.Module, name: str, types: tuple[type, ...], exclude: tuple[str, ...]) -> list[_Site]:
    """Every module of a swappable type outside `exclude`, in module order (a module registered at two paths
    is two sites: each gets its own replacement); ValueError when there is none."""

    def excluded(path: str) -> bool:
        return any(path == p or path.startswith(p + ".") for p in exclude)

    sites: list[_Site] = []
    last_channels, after_linear = None, False
    for path, module in model.named_modules(remove_duplicate=False):
        channels = _out_channels(module)
        if channels is not None:
            last_channels, after_linear = channels, isinstance(module, nn.Linear)
        elif path and isinstance(module, types) and not excluded(path):
            sites.append(_Site(path, module, last_channels, after_linear))
    if not sites:
        raise ValueError(
            f"swap to {name!r} matched no activation module in {type(model).__name__} "
            f"(looked for {', '.join(sorted({t.__name__ for t in types}))} outside {', '.join(exclude)})"
        )
    return sites


def _site_kwargs(act_kwargs: dict[str, Any], name: str, site: _Site) -> dict[str, Any]:
    """The options of the activation replacing `site`: `act_kwargs`, plus `num_channels`, `channel_dim` and
    `inplace` from the site where the activation takes them and `act_kwargs` does not set them."""
    accepted = set(activations.accepted_kwargs(name))
    kwargs = dict(act_kwargs)
    if "num_channels" in accepted and site.channels is not None:
        kwargs.setdefault("num_channels", site.channels)
    if "channel_dim" in accepted and site.after_linear:
        kwargs.setdefault("channel_dim", -1)
    if "inplace" in accepted and not activations.is_learnable(name) and getattr(site.module, "inplace", False):
        kwargs.setdefault("inplace", True)  # keep the memory behaviour of the baseline it replaces
    return kwargs


FitCache = dict[Any, tuple[dict[str, torch.Tensor], FitResult]]


def _fit_to_replaced(new: LearnableActivation, old: nn.Module, cache: FitCache) -> FitResult:
    """Fit `new` to the activation `old` it replaces, function and derivative on [-3, 3]; a target fitted
    before (same target, same coefficient shapes) is copied from `cache`, not fitted again."""
    key, target = fit_target(old)
    key = (key, tuple((k, tuple(v.shape)) for k, v in new.state_dict().items()))
    if key not in cache:
        result = new.fit(target, interval=(-3.0, 3.0), derivative=True)
        cache[key] = ({k: v.detach().clone() for k, v in new.state_dict().items()}, result)
    else:
        new.load_state_dict(cache[key][0])
    return cache[key][1]


def _install(model: nn.Module, replacements: list[tuple[str, nn.Module]]) -> None:
    """Put each new module at its path in `model`."""
    for path, new in replacements:
        parent_path, _, attr = path.rpartition(".")
        setattr(model.get_submodule(parent_path) if parent_path else model, attr, new)


def swap_activations(
    model: nn.Module,
    act: str,
    act_kwargs: dict[str, Any] | None = None,
    fit_to_replaced: bool = False,
    *,
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE,
    warn_functional: bool = True,
    layers: Any = None,
) -> SwapReport:
    """Replace every swappable activation module of `model`, in place, by a new `act` instance.

    Args:
        model: any nn.Module (timm models, the CIFAR VGGs/ResNet).
        act: visionbench activation registry name (fixed or learnable).
        act_kwargs: options for every new activation (e.g. {"init": "gelu"}); `num_channels`,
            `channel_dim` and `inplace` are filled in per site unless given here.
        fit_to_replaced: fit each new learnable activation to the one it replaces, function and
            derivative on [-3, 3] (paper 001 Sec 3.5, App O). Each distinct target is fitted once
            and the fitted state copied to every other site with the same target.
        exclude: path prefixes left alone (the classifier).
        warn_functional: warn if functional activation calls are found (they stay unswapped).
        layers: which of the swappable sites to replace, in module order: None / "all", "first",
            "last", an index, a list of indices or a slice "a:b" (module docstring); the others keep
            their activation. `act_kwargs["swap_layers"]` is the same (one of the two may be given).

    Returns:
        A `SwapReport`. ValueError if `act` is unknown, nothing matched or `layers` is bad.
    """
    act_kwargs, layers = swap_options(act_kwargs, layers)
    name = activations.check(act, act_kwargs)
    types = swappable_types()
    ref_param = next(model.parameters(), None)
    sites = _find_sites(model, name, types, exclude)
    report = SwapReport(act=name, sites=[site.path for site in sites], layers=layers)
    cache: FitCache = {}
    replacements: list[tuple[str, nn.Module]] = []
    probed: set[bool] = set()
    for site in (sites[i] for i in select_sites(layers, len(sites))):
        kwargs = _site_kwargs(act_kwargs, name, site)
        new = activations.create(name, **kwargs)
        if site.after_linear not in probed:  # one tiny forward per site kind: a wrong shape named here, not in a conv
            probed.add(site.after_linear)
            probe_shape(new, act, site.channels, features_last=kwargs.get("channel_dim") == -1 or site.after_linear)
        fit = (
            _fit_to_replaced(new, site.module, cache)
            if fit_to_replaced and isinstance(new, LearnableActivation)
            else None
        )
        if ref_param is not None:
            new = new.to(device=ref_param.device, dtype=ref_param.dtype if ref_param.is_floating_point() else None)
        new.train(site.module.training)
        replacements.append((site.path, new))
        report.entries.append(
            SwapEntry(
                site.path,
                _qualname(site.module),
                _qualname(new),
                kwargs.get("num_channels"),
                kwargs.get("channel_dim"),
                fit,
            )
        )
    _install(model, replacements)  # only once every new module was built: a failed swap leaves no trace

    report.functional = functional_activations(model, skip=types)
    if report.functional and warn_functional:
        warnings.warn(
            f"{type(model).__name__}: {len(report.functional)} functional activation call(s) cannot be swapped: "
            + "; ".join(report.functional),
            stacklevel=2,
        )
    return report

"""The one-pass Triton template that every elementwise family's GPU kernels are written in.

A family supplies two `@triton.jit` bodies (`triton_polynomial.py`, `triton_gated.py`, `triton_piecewise.py`,
`triton_basis.py`), elementwise given its coefficients:

    forward(x, C, cb, *params) -> y
    backward(x, g, C, cb, acc, MODE: tl.constexpr, *params) -> (grad_x, acc)

x and g arrive as float32 tiles (any input dtype; the math is fp32). C is the coefficient context, a tuple of the four
coefficient tensors (the module's parameters as they are: no copy gathers them into one block) and their sizes
K0..K3; coefficient k of the tile's elements is `coef(C, cb, k)` (a scalar when shared, a row or column of per-channel
values otherwise). params are the family's compile-time parameters, none to four (degrees, forms, grid constants:
each its own `tl.constexpr` argument, since Triton's compiler keeps no constexpr inside a tuple), which the kernels
take as P0..P3 and pass on, as many as the bodies declare (`Body`). The backward adds dL/dc_k, as a tile
v = g * dF/dc_k, into its accumulator with `acc = emit(acc, MODE, k, v)`;
masked lanes carry x = 0 and g = 0, so a body's contributions vanish there as long as each is g times a value that is
finite at x = 0.

The input is seen as a row-major matrix (`Layout`):

    MODE 0  shared coefficients: the flat buffer, tiles of BN elements (NCHW and channels_last alike);
    MODE 1  per-channel, channels before the contiguous dims (NCHW): (pre, C, post), a tile is BM channels of one
            `pre` index by BN positions of post;
    MODE 2  per-channel, channels last (NHWC memory, tokens [..., C]): (rows, C), a tile is BM rows by BN channels.

Tiles come in groups that share their channels (MODE 1: a channel block; MODE 2: a column block; MODE 0: one group).
The forward launches one program per tile. The backward is persistent: a fixed number of programs per group (the
splits, at most `RESIDENT_WARPS` warps in all: a constant, not read from the device, so every GPU gives the same bits),
each looping over every splits-th tile of its group, adding the tiles' coefficient partial sums into registers, and
writing them once, as one row of the partial-sum buffer. The host sums those rows in a fixed order: no atomics, the
same bits every run, and partials a few hundred rows long however large the input.

The kernels are generated per family from one source (`KERNEL_SOURCE`) with the family's body called by its own name:
what torch.compile's Inductor re-emits for a user Triton kernel is the kernel's source and the functions it names, so
the kernel must name its body (a global alias would be lost in that copy). `kernels(forward, backward)` builds them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import linecache
import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl

TILE = 2048  # elements per tile: 8 KB of fp32 in, as Liger's and inductor's pointwise kernels take
WARPS = 8  # 8 elements of a 2048-element tile per thread: half the registers of 4 warps, in the heavy backwards
# persistent backward: 2112 warps in all, 16 per SM of an H100 / H200 (132 SMs; two 8-warp programs per SM at <= 128
# registers a thread), fixed rather than read from the device so that every GPU gives the same bits
RESIDENT_WARPS = 2112
TILES_PER_PROGRAM = 4  # fewer persistent programs on a small input: its partial rows stay a small share of its bytes
SLOTS = 4  # coefficient tensors a family may have (C0..C3)
PARAMS = 4  # compile-time parameters a family may have (P0..P3)
FORWARD_ARGS, BACKWARD_ARGS = 3, 6  # a body's arguments before its params: (x, C, cb), (x, g, C, cb, acc, MODE)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """A family's fixed launch configuration (chosen offline from the sm_90 cost card, results/bench/kernels_sm90.md:
    no autotuning, whose choice would change the bits from run to run)."""

    forward: tuple[int, int] = (TILE, WARPS)  # (elements per tile, warps)
    backward: tuple[int, int] = (TILE, WARPS)  # shared coefficients and per channel NCHW (MODE 0, 1)
    backward_last: tuple[int, int] = (TILE, WARPS)  # per channel, channels last or tokens (MODE 2)

    def of(self, backward: bool, mode: int) -> tuple[int, int]:
        if not backward:
            return self.forward
        return self.backward_last if mode == 2 else self.backward


# family (its bodies' name before _forward / _backward) -> its Tuning: the first of (2048, 8), (1024, 8), (512, 8),
# (1024, 4), (512, 4) whose backward compiles for sm_90 to <= 128 registers without spills (`visionbench bench kernels`
# shows it)
TUNING: dict[str, Tuning] = {
    "kaf": Tuning(backward=(1024, 8), backward_last=(512, 8)),  # 172 and 188 registers at (2048, 8), 150 at (1024, 8)
    "bspline": Tuning(backward_last=(1024, 8)),  # 166 at (2048, 8)
    "fourier": Tuning(backward_last=(512, 8)),  # 163 at (2048, 8), 172 at (1024, 8)
    "tropical_rational": Tuning(backward_last=(512, 8)),  # 255 at (2048, 8), 161 at (1024, 8)
}


def tuning(body) -> Tuning:
    return TUNING.get(body.__name__.rsplit("_", 1)[0], Tuning())


@dataclasses.dataclass(frozen=True)
class Body:
    """A family's Triton bodies, as its body module lists them (`BODIES = {name: Body(...)}`, the name its kernel object
    `fused.Elementwise` has): the forward and the backward above, and `params`, which turns the family's kernel
    configuration (the keyword arguments of its fused kernel) into the values of the bodies' params."""

    forward: Callable
    backward: Callable
    params: Callable[..., tuple]

    def launch_params(self, **config) -> tuple:
        """P0..P3 of a configuration: the values of the bodies' params, 0 for the slots they leave."""
        values = tuple(self.params(**config))
        return values + (0,) * (PARAMS - len(values))


# ---- what the bodies call ----------------------------------------------------------------------------------------
@triton.jit
def coef(C, cb, k: tl.constexpr):
    """Coefficient k (a compile-time index over the concatenated coefficient tensors) of the elements whose channel
    offset is cb (0 when shared): tensor i holds K_i coefficients per channel, C = (C0..C3, K0..K3). The sizes are
    constants of the compiled code, so the compiler folds the branches to one load."""
    if k < C[4]:
        v = tl.load(C[0] + cb * C[4] + k)
    elif k < C[4] + C[5]:
        v = tl.load(C[1] + cb * C[5] + (k - C[4]))
    elif k < C[4] + C[5] + C[6]:
        v = tl.load(C[2] + cb * C[6] + (k - C[4] - C[5]))
    else:
        v = tl.load(C[3] + cb * C[7] + (k - C[4] - C[5] - C[6]))
    return v


@triton.jit
def emit(acc, MODE: tl.constexpr, k: tl.constexpr, v):
    """acc plus coefficient k's partial sum of the tile v: one number (MODE 0), one per row (MODE 1: a row is a
    channel) or one per column (MODE 2: a column is a channel)."""
    if MODE == 0:
        acc = acc + tl.where(tl.arange(0, acc.shape[0]) == k, tl.sum(v), 0.0)
    elif MODE == 1:
        acc = acc + tl.where(tl.arange(0, acc.shape[1])[None, :] == k, tl.sum(v, 1)[:, None], 0.0)
    else:
        acc = acc + tl.where(tl.arange(0, acc.shape[0])[:, None] == k, tl.sum(v, 0)[None, :], 0.0)
    return acc


# ---- the template's own pieces -------------------------------------------------------------------------------------
@triton.jit
def tile(grp, j, M, N, CH, NBC, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Tile j of group grp: element offsets [BM, BN], their mask and the coefficient offsets cb of their channels."""
    if MODE == 0:  # the flat buffer, M = BM = 1
        cols = tl.cast(j, tl.int64) * BN + tl.arange(0, BN)
        offs = cols[None, :]
        mask = offs < N
        cb = 0
    elif MODE == 1:  # (pre, C, post): channels grp*BM.., pre index j // NBC, positions of column block j % NBC
        c = grp * BM + tl.arange(0, BM)
        cols = (j % NBC) * BN + tl.arange(0, BN)
        cmask = c < CH
        offs = (tl.cast(j // NBC, tl.int64) * CH + c)[:, None] * N + cols[None, :]
        mask = cmask[:, None] & (cols[None, :] < N)
        cb = tl.where(cmask, c, 0)[:, None]
    else:  # (rows, C): rows of row block j, channels of column block grp
        rows = tl.cast(j, tl.int64) * BM + tl.arange(0, BM)
        c = grp * BN + tl.arange(0, BN)
        cmask = c < N
        offs = rows[:, None] * N + c[None, :]
        mask = (rows[:, None] < M) & cmask[None, :]
        cb = tl.where(cmask, c, 0)[None, :]
    return offs, mask, cb


@triton.jit
def zero_partials(MODE: tl.constexpr, KP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The backward's accumulator: [KP] (MODE 0), [BM, KP] (MODE 1) or [KP, BN] (MODE 2)."""
    if MODE == 0:
        acc = tl.zeros([KP], dtype=tl.float32)
    elif MODE == 1:
        acc = tl.zeros([BM, KP], dtype=tl.float32)
    else:
        acc = tl.zeros([KP, BN], dtype=tl.float32)
    return acc


@triton.jit
def _slot(k, ch, CH, C):
    """Where coefficient k of channel ch lands in a row of partial sums: the coefficient tensors one after another,
    each (channels, K_i) row-major, as the host splits the row back (`Layout.split`)."""
    start = tl.where(k < C[4], 0, tl.where(k < C[4] + C[5], C[4], tl.where(k < C[4] + C[5] + C[6], C[4] + C[5], 0)))
    start = tl.where(k >= C[4] + C[5] + C[6], C[4] + C[5] + C[6], start)
    size = tl.where(k < C[4], C[4], tl.where(k < C[4] + C[5], C[5], tl.where(k < C[4] + C[5] + C[6], C[6], C[7])))
    return start * CH + ch * size + (k - start)


@triton.jit
def store_partials(PART, acc, grp, CH, C, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Write the program's accumulator into its row PART (the group's channels of it)."""
    KT = C[4] + C[5] + C[6] + C[7]
    if MODE == 0:
        k = tl.arange(0, acc.shape[0])
        tl.store(PART + _slot(k, 0, 1, C), acc, mask=k < KT)
    elif MODE == 1:
        k = tl.arange(0, acc.shape[1])[None, :]
        c = (grp * BM + tl.arange(0, BM))[:, None]
        tl.store(PART + _slot(k, c, CH, C), acc, mask=(k < KT) & (c < CH))
    else:
        k = tl.arange(0, acc.shape[0])[:, None]
        c = (grp * BN + tl.arange(0, BN))[None, :]
        tl.store(PART + _slot(k, c, CH, C), acc, mask=(k < KT) & (c < CH))


# ---- the kernels, one pair per family ------------------------------------------------------------------------------
KERNEL_SOURCE = """
def {forward_kernel}(
    X, Y, C0, C1, C2, C3, M, N, CH, NG, NBC,
    K0: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr, K3: tl.constexpr,
    P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr,
    MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):
    pid = tl.program_id(0)
    offs, mask, cb = tile(pid % NG, pid // NG, M, N, CH, NBC, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    y = {forward}(x, (C0, C1, C2, C3, K0, K1, K2, K3), cb{forward_params})
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


def {backward_kernel}(
    X, G, GX, C0, C1, C2, C3, PART, M, N, CH, NG, NBC, STEPS, SPLITS, ROW,
    K0: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr, K3: tl.constexpr,
    P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr,
    MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, KP: tl.constexpr,
):
    pid = tl.program_id(0)
    grp = pid % NG
    split = pid // NG
    C = (C0, C1, C2, C3, K0, K1, K2, K3)
    acc = zero_partials(MODE, KP, BM, BN)
    for j in range(split, STEPS, SPLITS):
        offs, mask, cb = tile(grp, j, M, N, CH, NBC, MODE, BM, BN)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        gx, acc = {backward}(x, g, C, cb, acc, MODE{backward_params})
        tl.store(GX + offs, gx.to(GX.dtype.element_ty), mask=mask)
    store_partials(PART + tl.cast(split, tl.int64) * ROW, acc, grp, CH, C, MODE, BM, BN)
"""


@functools.cache
def kernels(forward_body, backward_body) -> tuple:
    """The template's forward and backward kernels calling this family's bodies, `<forward>_kernel` and
    `<backward>_kernel`: generated from `KERNEL_SOURCE` into a namespace holding the template's pieces and the two
    bodies, their source registered with `linecache` so that Triton (and Inductor, which copies it) can read it."""
    names = {
        "forward": forward_body.__name__,
        "backward": backward_body.__name__,
        "forward_kernel": f"{forward_body.__name__}_kernel",
        "backward_kernel": f"{backward_body.__name__}_kernel",
        "forward_params": _params(forward_body, FORWARD_ARGS),
        "backward_params": _params(backward_body, BACKWARD_ARGS),
    }
    source = KERNEL_SOURCE.format(**names).lstrip("\n")
    filename = f"<visionbench triton kernels: {names['forward']}, {names['backward']}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {**globals(), names["forward"]: forward_body, names["backward"]: backward_body}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own template, formatted with two names
    return triton.jit(namespace[names["forward_kernel"]]), triton.jit(namespace[names["backward_kernel"]])


def _params(body, fixed: int) -> str:
    """ ", P0, ..., P<n-1>": the kernel's P0..P3 that the body declares after its `fixed` first arguments."""
    count = len(body.arg_names) - fixed
    if not 0 <= count <= PARAMS:
        raise ValueError(f"{body.__name__} takes {count} params after its first {fixed} arguments; at most {PARAMS}")
    return "".join(f", P{i}" for i in range(count))


# ---- the host side -----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layout:
    """How a call sees x: MODE, the matrix (M, N), channel count, tile [BM, BN], groups and tiles per group."""

    mode: int
    m: int
    n: int
    channels: int
    bm: int
    bn: int
    groups: int  # tiles sharing their channels: channel blocks (MODE 1), column blocks (MODE 2), or 1
    steps: int  # tiles per group
    nbc: int = 1  # MODE 1: column blocks per (pre, channel) row
    warps: int = WARPS

    @property
    def programs(self) -> int:
        """The forward's programs: one per tile."""
        return self.groups * self.steps

    @property
    def splits(self) -> int:
        """The backward's programs per group: at most `RESIDENT_WARPS` warps in all, and each with at least
        `TILES_PER_PROGRAM` tiles where the group has that many (a small input then writes few partial rows)."""
        return max(1, min(self.steps // TILES_PER_PROGRAM, RESIDENT_WARPS // (self.warps * self.groups)))

    @property
    def per_channel(self) -> bool:
        return self.mode != 0

    @property
    def tiles(self) -> tuple[int, ...]:
        """The tiling arguments every kernel of this layout takes, in order: M, N, CH, NG, NBC."""
        return self.m, self.n, self.channels, self.groups, self.nbc

    @property
    def persistent(self) -> tuple[int, ...]:
        """The persistent kernels' tiling arguments: `tiles`, then STEPS and SPLITS."""
        return *self.tiles, self.steps, self.splits

    def partial_row(self, sizes: tuple[int, ...]) -> int:
        """Length of one row of partial sums: every coefficient of every channel."""
        return (self.channels if self.per_channel else 1) * sum(sizes)

    def split(self, flat: torch.Tensor, coefs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The summed row cut back into one gradient per coefficient tensor, each a contiguous view shaped like it."""
        lengths = [(self.channels if self.per_channel else 1) * c.shape[-1] for c in coefs]
        return tuple(g.view(c.shape) for g, c in zip(flat.split(lengths), coefs))


def layout(
    x: torch.Tensor, channel_axis: int, per_channel: bool, tune: Tuning = Tuning(), backward: bool = False
) -> tuple[Layout, torch.Tensor]:
    """The layout of x (made dense first if it is neither contiguous nor channels_last) and x itself, with the tile and
    warps `tune` gives the forward or the backward in that layout's MODE."""
    if not (x.is_contiguous() or (_channels_last(x) and (not per_channel or channel_axis == 1))):
        x = x.contiguous()  # per channel, channels_last memory is a layout only when its channels are dim 1
    # plain ints: under a compiler's symbolic shapes, bit tricks (next_power_of_2) on SymInts grow without end;
    # training shapes are static, so specialising costs nothing
    numel = int(x.numel())
    if not per_channel:
        size, warps = tune.of(backward, 0)
        return Layout(0, 1, numel, 1, 1, size, 1, triton.cdiv(numel, size), warps=warps), x
    channels = int(x.shape[channel_axis])
    if (channel_axis == x.dim() - 1 and x.is_contiguous()) or (
        channel_axis == 1 and _channels_last(x) and not x.is_contiguous()
    ):
        size, warps = tune.of(backward, 2)
        rows = numel // max(channels, 1)
        bn = channel_block(channels)
        bm = max(size // bn, 1)
        groups, steps = triton.cdiv(channels, bn), triton.cdiv(rows, bm)
        return Layout(2, rows, channels, channels, bm, bn, groups, steps, warps=warps), x
    size, warps = tune.of(backward, 1)
    post = int(math.prod(x.shape[channel_axis + 1 :]))
    pre = numel // max(post * channels, 1)
    bn = min(triton.next_power_of_2(max(post, 1)), size)
    bm = min(max(size // bn, 1), triton.next_power_of_2(max(channels, 1)))
    nbc = triton.cdiv(post, bn)
    return Layout(1, pre, post, channels, bm, bn, triton.cdiv(channels, bm), pre * nbc, nbc, warps), x


def channel_block(channels: int) -> int:
    """Channels per tile when they are the contiguous dim: the power of two in 32..256 that pads them least (the
    largest on ties), e.g. 96 -> 32, 384 -> 128, 768 -> 256, 100 -> 128."""
    options = [b for b in (256, 128, 64, 32) if b <= max(32, triton.next_power_of_2(channels))]
    return min(options, key=lambda b: triton.cdiv(channels, b) * b)


def _channels_last(x: torch.Tensor) -> bool:
    return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)


def _format(x: torch.Tensor) -> torch.memory_format:
    return torch.contiguous_format if x.is_contiguous() else torch.channels_last


_RECORD = None  # `recording`: a function taking (kernel, grid, args, options) instead of the launch


def _plain(kernel):
    """The default launcher: the kernel itself, or a recorder of its launch inside `recording`."""
    return kernel if _RECORD is None else _Recorder(kernel, _RECORD)


class _Recorder:
    def __init__(self, kernel, record):
        self.kernel, self.record = kernel, record

    def __getitem__(self, grid):
        return lambda *args, **options: self.record(self.kernel, grid, args, options)


@contextlib.contextmanager
def recording(record):
    """Every launch of the kernels inside this block goes to `record(kernel, grid, args, options)` instead of the
    device (visionbench/bench/kernel_capture.py: the launches of a call, on a machine without a GPU)."""
    global _RECORD
    before, _RECORD = _RECORD, record
    try:
        yield
    finally:
        _RECORD = before


def buffer(shape_or_like, **kwargs) -> torch.Tensor:
    """A buffer the kernels overwrite whole, allocated without the NaN fill that deterministic mode
    (`torch.use_deterministic_algorithms(True)`, on in every run by default) gives `torch.empty`: that fill writes
    every output a second time. Only the fill is turned off, for this allocation: deterministic algorithms stay on."""
    with unfilled():
        if isinstance(shape_or_like, torch.Tensor):
            return torch.empty_like(shape_or_like, **kwargs)
        return torch.empty(shape_or_like, **kwargs)


class unfilled:  # noqa: N801 - a context manager, used as `with unfilled():`
    """torch.utils.deterministic.fill_uninitialized_memory off inside the block (restored after)."""

    def __enter__(self):
        self.before = torch.utils.deterministic.fill_uninitialized_memory
        if self.before:
            torch.utils.deterministic.fill_uninitialized_memory = False
        return self

    def __exit__(self, *exc):
        if self.before:
            torch.utils.deterministic.fill_uninitialized_memory = True
        return False


def context_args(coefs: tuple[torch.Tensor, ...]) -> tuple[list, list]:
    """(the four coefficient pointers, their four sizes K0..K3): unused slots repeat the first tensor, size 0."""
    if not 1 <= len(coefs) <= SLOTS:
        raise ValueError(f"a Triton body takes 1 to {SLOTS} coefficient tensors, got {len(coefs)}")
    pointers = list(coefs) + [coefs[0]] * (SLOTS - len(coefs))
    sizes = [int(c.shape[-1]) for c in coefs] + [0] * (SLOTS - len(coefs))
    return pointers, sizes


def launch_forward(
    body: tuple, params: tuple, x: torch.Tensor, coefs: tuple[torch.Tensor, ...], lay: Layout, launch=None
) -> torch.Tensor:
    """y = F(x) on the layout; body the family's (forward, backward) bodies, coefs its coefficient tensors ((K_i,)
    shared or (C, K_i) per channel, float32, contiguous). `launch` wraps the kernel for `torch.library.triton_op`
    (`wrap_triton`); None: a plain launch."""
    y = buffer(x)
    pointers, sizes = context_args(coefs)
    kernel = (launch or _plain)(kernels(*body)[0])
    kernel[(lay.programs,)](
        x,
        y,
        *pointers,
        *lay.tiles,
        *sizes,
        *params,
        lay.mode,
        lay.bm,
        lay.bn,
        num_warps=lay.warps,
    )
    return y


def launch_backward(
    body: tuple,
    params: tuple,
    x: torch.Tensor,
    g: torch.Tensor,
    coefs: tuple[torch.Tensor, ...],
    lay: Layout,
    launch=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, the coefficient gradients as one flat float32 row, `Layout.split` cuts it) in one pass over x and g."""
    if not g.is_contiguous(memory_format=_format(x)):
        g = g.contiguous(memory_format=_format(x))
    pointers, sizes = context_args(coefs)
    row = lay.partial_row(tuple(sizes))
    grad_x = buffer(x)
    part = buffer((lay.splits, row), device=x.device, dtype=torch.float32)
    kernel = (launch or _plain)(kernels(*body)[1])
    kernel[(lay.groups * lay.splits,)](
        x,
        g,
        grad_x,
        *pointers,
        part,
        *lay.persistent,
        row,
        *sizes,
        *params,
        lay.mode,
        lay.bm,
        lay.bn,
        triton.next_power_of_2(sum(sizes)),
        num_warps=lay.warps,
    )
    return grad_x, part.sum(0)

"""The one-pass Triton template that every elementwise family's GPU kernels are written in.

A family supplies two `@triton.jit` bodies (`triton_polynomial.py`, `triton_gated.py`, `triton_piecewise.py`,
`triton_basis.py`), elementwise given its coefficients:

    forward(x, C, cb, KT, P0, P1, P2, P3) -> y
    backward(x, g, C, cb, PART, pofs, pmask, KT, MODE, P0, P1, P2, P3) -> grad_x

x and g arrive as float32 tiles (any input dtype; the math is fp32). Coefficient k of the tile's
elements is `coef(C, cb, k, KT)` (a scalar when shared, a row or column of per-channel values
otherwise). The backward writes dL/dc_k, as a tile v = g * dF/dc_k, through `emit(PART, k, v, pofs,
pmask, KT, MODE)`, which sums the tile and stores one partial sum per program (and channel): no
atomics, so the host's final `sum` over programs gives the same bits every run. g is 0 on the
tile's masked lanes (x is 0 there), so a body's contributions vanish there as long as each is g
times a value that is finite at x = 0. P0..P3 are the family's compile-time parameters (degrees,
forms, grid constants).

A call reads x once (forward) or x and g once (backward). The input is seen as a row-major matrix
[M, N] (`Layout`):

    MODE 0  shared coefficients: the flat buffer, one row (NCHW and channels_last alike);
    MODE 1  per-channel, channels before the contiguous dims (NCHW): rows (pre, C), cols H*W;
    MODE 2  per-channel, channels last (NHWC memory, tokens [..., C]): rows N*H*W, cols C.

Each program takes one [BM, BN] tile (programs on a 1-D grid, so any size fits the grid limits).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types

import torch
import triton
import triton.language as tl

TILE = 2048  # elements per program: 8 KB of fp32 in, as Liger's and inductor's pointwise kernels take
WARPS = 4


@triton.jit
def coef(C, cb, k, KT: tl.constexpr):
    """Coefficient k of the elements whose channel offset is cb (0 when shared)."""
    return tl.load(C + cb * KT + k)


@triton.jit
def emit(PART, k, v, pofs, pmask, KT: tl.constexpr, MODE: tl.constexpr):
    """One coefficient's partial sum of the tile v (0 where masked): a scalar per program (MODE 0),
    per row (MODE 1: a row is one channel) or per column (MODE 2: a column is one channel)."""
    if MODE == 0:
        tl.store(PART + pofs * KT + k, tl.sum(tl.sum(v, 1), 0))
    elif MODE == 1:
        tl.store(PART + pofs * KT + k, tl.sum(v, 1), mask=pmask)
    else:
        tl.store(PART + pofs * KT + k, tl.sum(v, 0), mask=pmask)


@triton.jit
def _tile(M, N, CH, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """This program's tile: element offsets, mask, channel offsets cb and partial-sum slots."""
    pid = tl.program_id(0)
    nbn = tl.cdiv(N, BN)
    pid_m = pid // nbn
    pid_n = pid % nbn
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offs = rows[:, None].to(tl.int64) * N + cols[None, :]
    if MODE == 0:
        cb = 0
        pofs = pid
        pmask = True
    elif MODE == 1:
        cb = (rows % CH)[:, None]
        pofs = pid_n * M + rows
        pmask = rows < M
    else:
        cb = tl.where(cols < N, cols, 0)[None, :]
        pofs = pid_m * N + cols
        pmask = cols < N
    return offs, mask, cb, pofs, pmask


@triton.jit
def forward_kernel(
    X,
    Y,
    C,
    M,
    N,
    CH,
    KT: tl.constexpr,
    P0: tl.constexpr,
    P1: tl.constexpr,
    P2: tl.constexpr,
    P3: tl.constexpr,
    MODE: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    offs, mask, cb, pofs, pmask = _tile(M, N, CH, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    y = BODY(x, C, cb, KT, P0, P1, P2, P3)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def backward_kernel(
    X,
    G,
    GX,
    C,
    PART,
    M,
    N,
    CH,
    KT: tl.constexpr,
    P0: tl.constexpr,
    P1: tl.constexpr,
    P2: tl.constexpr,
    P3: tl.constexpr,
    MODE: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    offs, mask, cb, pofs, pmask = _tile(M, N, CH, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    gx = BODY(x, g, C, cb, PART, pofs, pmask, KT, MODE, P0, P1, P2, P3)
    tl.store(GX + offs, gx.to(GX.dtype.element_ty), mask=mask)


BODY = None  # the template kernels' body: each family's copy binds its own (`kernels`)


@functools.cache
def kernels(forward_body, backward_body) -> tuple:
    """The template's forward and backward kernels with this family's bodies: copies of them whose global
    `BODY` is the body, compiled (and cached by Triton) apart. A body is a global the kernel calls, as in
    any Triton code, not a kernel argument: torch.compile's code generation for `wrap_triton` kernels
    takes plain constants as arguments and finds called functions among the kernel's globals."""
    return _bound(forward_kernel, forward_body), _bound(backward_kernel, backward_body)


def _bound(kernel, body):
    fn = kernel.fn
    copy = types.FunctionType(
        fn.__code__, {**fn.__globals__, "BODY": body}, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__qualname__ = f"{fn.__qualname__}__{body.__name__}"  # the GPU kernel's name: an identifier
    return triton.jit(copy)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a call sees x: MODE, the matrix [M, N], channel count CH and tile [BM, BN]."""

    mode: int
    m: int
    n: int
    channels: int
    bm: int
    bn: int

    @property
    def programs(self) -> int:
        return triton.cdiv(self.m, self.bm) * triton.cdiv(self.n, self.bn)

    def partial_rows(self) -> int:
        """Rows of the partial-sum buffer: one per program (0), per (column block, row) (1) or (row block, col) (2)."""
        if self.mode == 0:
            return self.programs
        if self.mode == 1:
            return triton.cdiv(self.n, self.bn) * self.m
        return triton.cdiv(self.m, self.bm) * self.n

    def reduce(self, part: torch.Tensor, kt: int) -> torch.Tensor:
        """The partial sums summed over programs in a fixed order: (KT,) shared or (C, KT) per channel."""
        if self.mode == 0:
            return part.sum(0)
        if self.mode == 1:
            return part.view(-1, self.channels, kt).sum(0)
        return part.view(-1, self.n, kt).sum(0)


def layout(x: torch.Tensor, channel_axis: int, per_channel: bool) -> tuple[Layout, torch.Tensor]:
    """The layout of x (made dense first if it is neither contiguous nor channels_last) and x itself."""
    if not (x.is_contiguous() or (_channels_last(x) and (not per_channel or channel_axis == 1))):
        x = x.contiguous()  # per channel, channels_last memory is a layout only when its channels are dim 1
    # plain ints: under a compiler's symbolic shapes, bit tricks (next_power_of_2) on SymInts grow without end;
    # training shapes are static, so specialising costs nothing
    numel = int(x.numel())
    if not per_channel:
        return Layout(0, 1, numel, 1, 1, TILE), x
    channels = int(x.shape[channel_axis])
    if (channel_axis == x.dim() - 1 and x.is_contiguous()) or (
        channel_axis == 1 and _channels_last(x) and not x.is_contiguous()
    ):
        bn = min(triton.next_power_of_2(channels), 256)
        return Layout(2, numel // max(channels, 1), channels, channels, max(TILE // bn, 1), bn), x
    post = int(math.prod(x.shape[channel_axis + 1 :]))
    bn = min(triton.next_power_of_2(max(post, 1)), TILE)
    return Layout(1, numel // max(post, 1), post, channels, max(TILE // bn, 1), bn), x


def _channels_last(x: torch.Tensor) -> bool:
    return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)


def launch_forward(
    body: tuple, params: tuple, x: torch.Tensor, c: torch.Tensor, lay: Layout, launch=None
) -> torch.Tensor:
    """y = F(x) on the layout; body the family's (forward, backward) bodies, c the coefficient block (KT,) or
    (C, KT), float32, contiguous.
    `launch` wraps the kernel for `torch.library.triton_op` (`wrap_triton`); None: a plain launch."""
    y = torch.empty_like(x)
    kernel = (launch or _plain)(kernels(*body)[0])
    kernel[(lay.programs,)](
        x, y, c, lay.m, lay.n, lay.channels, c.shape[-1], *params, lay.mode, lay.bm, lay.bn, num_warps=WARPS
    )
    return y


def launch_backward(
    body: tuple, params: tuple, x: torch.Tensor, g: torch.Tensor, c: torch.Tensor, lay: Layout, launch=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, coefficient gradients shaped like c, float32) in one pass over x and g."""
    kt = c.shape[-1]
    if not g.is_contiguous(memory_format=_format(x)):
        g = g.contiguous(memory_format=_format(x))
    grad_x = torch.empty_like(x)
    part = torch.empty((lay.partial_rows(), kt), device=x.device, dtype=torch.float32)
    kernel = (launch or _plain)(kernels(*body)[1])
    kernel[(lay.programs,)](
        x, g, grad_x, c, part, lay.m, lay.n, lay.channels, kt, *params, lay.mode, lay.bm, lay.bn, num_warps=WARPS
    )
    return grad_x, lay.reduce(part, kt)


def _format(x: torch.Tensor) -> torch.memory_format:
    return torch.contiguous_format if x.is_contiguous() else torch.channels_last


def _plain(kernel):
    return kernel

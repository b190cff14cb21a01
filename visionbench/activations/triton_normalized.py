"""Triton kernels of the two families whose output depends on statistics of the input: PolyNorm (a norm per
position, over the channels) and SLAF in training (BatchNorm-like moments per channel, over every other dim).

    y = triton_normalized.polynorm(x, channel_axis, weight, eps)
    y, mean_1, var_1, ..., mean_k, var_k = triton_normalized.slaf_train(x, channel_axis, weight, eps)

`PolyNorm.fast_forward` and `SLAF.fast_forward` (training) call these when `fused.backend_for(x)` is "triton";
SLAF's eval mode is a plain polynomial and already takes `triton_polynomial.poly_*` through `run_poly`. The math
is fp32 whatever the input dtype (fp32, bf16, fp16); coefficients are (K,) shared or (C, K) per channel; x is NCHW
contiguous, channels_last, or tokens [..., C] (any rank, any channel axis: other layouts are made dense first).

SLAF, two passes each way. The statistics span the whole tensor, so no single program can normalise its own
tile: pass 1 reduces, the host (a few (C, k) tensors) turns the result into per-channel constants, pass 2 is
elementwise on them.
  forward 1  `_slaf_moments_kernel`: per channel and per program (the template's per-channel tiles, `_tile`, MODE
             1 for NCHW and 2 for channels-last/tokens), the count and, per power x^i, the tile's sum and its
             sum of squared deviations from the tile's own mean. The host merges these partials in float64 in a
             fixed order (Chan's parallel variance), with no atomics, so every run gives the same bits. This
             replaces raw power sums (sum x^j, j = 1..2k, var = E[p^2] - E[p]^2) at the same cost (one read of x,
             2k + 1 partials per slot) because raw sums lose var(x^i) to cancellation in fp32 when |mean(x^i)| >>
             std(x^i) (inputs with an offset; x^2 always has a positive mean).
  forward 2  the template's forward with the `poly` body (relu=0; the same spec SLAF's eval mode uses) on the
             per-channel coefficients c_0 = a_0 - sum_i a_i r_i m_i, c_i = a_i r_i (r_i = rsqrt(var_i + eps)).
  backward 1 `_slaf_sums_kernel`: per channel, sum g and sum g (x^i - m_i), i = 1..k (centred on the saved means
             for the same reason), merged on the host: dL/da_0 = sum g, dL/da_i = r_i sum g (x^i - m_i).
  backward 2 `_slaf_grad_x_kernel`: grad_x = g A(x) + B(x), per channel, evaluated as `_train_backward` writes it,
             sum_i w_i x^(i-1) (g - mean(g) - (x^i - m_i) q_i) with w_i = i a_i r_i, q_i = r_i^2 mean(g (x^i - m_i)):
             the factored form keeps (x^i - m_i) as one difference instead of expanding B into powers of x.
  The forward returns each power's batch mean and biased variance (float32, the keepdim shapes of
  `_train_forward`) for the module's running averages.

PolyNorm, one kernel each way. The norm of x^i is over the channels of one position, so a program owns a block of
positions and loops over all channels of them: x seen as (pre, C, post) (`_geometry`): NCHW has post = H*W
contiguous (a program: one `pre` and BP consecutive positions of post, a [BC, BP] tile per channel chunk),
tokens and channels_last have C contiguous (post = 1: BP positions, each a row of C). Forward: loop 1 over the
channel chunks accumulates sum_c x^(2i) per position, loop 2 reads the chunks again (from cache: the block is
C * BP elements) and writes y. Backward: loop 1 accumulates sum_c x^(2i) and T_i = sum_c g a_i x^i per position,
loop 2 writes grad_x = sum_i i x^(i-1) n_i (a_i g - n_i^2 x^i T_i / C) and the coefficient gradients as
per-program partial sums (a row (C, K) per program when per channel, K values when shared), summed on the host
in a fixed order. Nothing but x is saved: the norms are recomputed by the backward's first loop, which reads x
anyway.

Ops: `visionbench::polynorm_forward/backward` and `visionbench::slaf_forward/backward`, defined as in
`triton_ops.py` (`triton_op` + `wrap_triton` on a GPU; under the CPU interpreter a plain `custom_op` with a fake
implementation), autograd by `register_autograd`. Eager calls take lean `autograd.Function`s to the same
launches; inside torch.compile the ops are what the compiler sees.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import triton_ops
from .triton_template import _channels_last, _format, _tile, coef, launch_forward, layout

TILE = 2048  # elements of x per program and channel chunk (the template's size)
WARPS = 4
CL_CHUNK = 32  # channels per chunk when C is contiguous: a 128-byte fp32 row per position


# ==== SLAF (training): per-channel statistics over every other dim ============================================
@triton.jit
def _slot_sum(v, MODE: tl.constexpr):
    """The tile summed per channel slot: over the columns (MODE 1: a row is a channel) or the rows (MODE 2)."""
    if MODE == 1:
        s = tl.sum(v, 1)
    else:
        s = tl.sum(v, 0)
    return s


@triton.jit
def _slot_bcast(s, MODE: tl.constexpr):
    """A per-slot vector broadcast back over the tile."""
    if MODE == 1:
        b = s[:, None]
    else:
        b = s[None, :]
    return b


@triton.jit
def _slaf_moments_kernel(
    X, PART, M, N, CH, K: tl.constexpr, KT: tl.constexpr, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    """Per slot: count, then per power i = 1..K the sum of x^i and the sum of squared deviations from the slot mean."""
    offs, mask, cb, pofs, pmask = _tile(M, N, CH, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    cnt = _slot_sum(mask.to(tl.float32), MODE)
    inv = 1.0 / tl.maximum(cnt, 1.0)
    row = PART + pofs.to(tl.int64) * KT
    tl.store(row, cnt, mask=pmask)
    p = x
    for i in tl.static_range(K):
        if i > 0:
            p = p * x
        s = _slot_sum(p, MODE)
        d = tl.where(mask, p - _slot_bcast(s * inv, MODE), 0.0)
        tl.store(row + 1 + 2 * i, s, mask=pmask)
        tl.store(row + 2 + 2 * i, _slot_sum(d * d, MODE), mask=pmask)


@triton.jit
def _slaf_sums_kernel(
    X, G, S, PART, M, N, CH, K: tl.constexpr, KT: tl.constexpr, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    """Per slot: sum g, then sum g (x^i - m_i), i = 1..K (S: the per-channel means, (C, K))."""
    offs, mask, cb, pofs, pmask = _tile(M, N, CH, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    row = PART + pofs.to(tl.int64) * KT
    tl.store(row, _slot_sum(g, MODE), mask=pmask)
    p = x
    for i in tl.static_range(K):
        if i > 0:
            p = p * x
        tl.store(row + 1 + i, _slot_sum(g * (p - coef(S, cb, i, K)), MODE), mask=pmask)


@triton.jit
def _slaf_grad_x_kernel(
    X, G, GX, D, M, N, CH, K: tl.constexpr, KT: tl.constexpr, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    """grad_x = sum_i w_i x^(i-1) (g - mean(g) - (x^i - m_i) q_i); D per channel: mean(g), then (w_i, m_i, q_i)."""
    offs, mask, cb, pofs, pmask = _tile(M, N, CH, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    gc = g - coef(D, cb, 0, KT)
    out = 0.0 * x
    prev = 1.0 + 0.0 * x
    p = x
    for i in tl.static_range(K):
        if i > 0:
            prev = p
            p = p * x
        term = coef(D, cb, 1 + 3 * i, KT) * (gc - (p - coef(D, cb, 2 + 3 * i, KT)) * coef(D, cb, 3 + 3 * i, KT))
        out = out + term * prev
    tl.store(GX + offs, out.to(GX.dtype.element_ty), mask=mask)


def _plain(kernel):
    return kernel


def _slaf_layout(x: torch.Tensor, channel_axis: int):
    """The template's per-channel layout (a channels_last map whose channels are not dim 1 made dense first)."""
    if _channels_last(x) and not x.is_contiguous() and channel_axis != 1:
        x = x.contiguous()
    return layout(x, channel_axis, True)


def _poly_spec(degree: int):
    """SLAF's eval-mode polynomial body (poly, relu=0) and its P0..P3, through triton_ops' spec registry."""
    return triton_ops._SPECS[triton_ops.spec_id("poly", {"degree": degree, "relu": False})]


def _per_channel(a: torch.Tensor, channels: int) -> torch.Tensor:
    """Coefficients (K,) or (C, K) as (C, K) float64."""
    if a.dim() == 2 and a.shape[0] != channels:
        raise ValueError(f"coefficients are for {a.shape[0]} channels, input has {channels}")
    return a.double().expand(channels, a.shape[-1])


def _slaf_forward(x, a, channel_axis: int, eps: float, launch=None):
    """(y, mean (C, k), var (C, k)): var biased, both float32."""
    k = int(a.shape[-1]) - 1  # the degree: static (an int also under dynamic shapes)
    lay, xd = _slaf_layout(x, channel_axis)
    channels, kt = lay.channels, 1 + 2 * k
    part = torch.empty((lay.partial_rows(), kt), device=x.device, dtype=torch.float32)
    (launch or _plain)(_slaf_moments_kernel)[(lay.programs,)](
        xd, part, lay.m, lay.n, lay.channels, k, kt, lay.mode, lay.bm, lay.bn, num_warps=WARPS
    )
    part = part.view(-1, channels, kt).double()
    cnt = part[..., :1]  # (T, C, 1), T partial slots per channel, each >= 1 element
    sums, m2 = part[..., 1::2], part[..., 2::2]  # (T, C, k)
    n = cnt.sum(0)
    mean = sums.sum(0) / n
    var = (m2.sum(0) + (cnt * (sums / cnt.clamp_min(1.0) - mean).square()).sum(0)) / n  # Chan's merge
    r = torch.rsqrt(var + eps)
    a64 = _per_channel(a, channels)
    scale = a64[:, 1:] * r
    c = torch.cat([a64[:, :1] - (scale * mean).sum(1, keepdim=True), scale], 1).float().contiguous()
    body, params = _poly_spec(k)
    y = launch_forward((body.forward, body.backward), params, xd, c, lay, launch)
    return y, mean.float(), var.float()


def _slaf_backward(x, g, a, mean, var, channel_axis: int, eps: float, launch=None):
    """(grad_x, grad_a), grad_a shaped like a."""
    k = int(a.shape[-1]) - 1  # the degree: static (an int also under dynamic shapes)
    lay, xd = _slaf_layout(x, channel_axis)
    if not g.is_contiguous(memory_format=_format(xd)):
        g = g.contiguous(memory_format=_format(xd))
    channels = lay.channels
    means = mean.float().contiguous()
    part = torch.empty((lay.partial_rows(), k + 1), device=x.device, dtype=torch.float32)
    (launch or _plain)(_slaf_sums_kernel)[(lay.programs,)](
        xd, g, means, part, lay.m, lay.n, channels, k, k + 1, lay.mode, lay.bm, lay.bn, num_warps=WARPS
    )
    sums = part.view(-1, channels, k + 1).double().sum(0)  # (C, k+1): sum g, sum g (x^i - m_i)
    n = x.numel() // max(channels, 1)
    r = torch.rsqrt(var.double() + eps)
    grad = torch.cat([sums[:, :1], r * sums[:, 1:]], 1)  # dL/da per channel
    a64 = _per_channel(a, channels)
    powers = torch.arange(1, k + 1, device=x.device, dtype=torch.float64)
    w = powers * a64[:, 1:] * r
    q = r * grad[:, 1:] / n
    d = torch.cat([sums[:, :1] / n, torch.stack([w, mean.double(), q], 2).reshape(channels, 3 * k)], 1)
    d = d.float().contiguous()
    grad_x = torch.empty_like(xd)
    (launch or _plain)(_slaf_grad_x_kernel)[(lay.programs,)](
        xd, g, grad_x, d, lay.m, lay.n, channels, k, 1 + 3 * k, lay.mode, lay.bm, lay.bn, num_warps=WARPS
    )
    grad_a = grad if a.dim() == 2 else grad.sum(0)
    return grad_x, grad_a.to(a.dtype)


# ==== PolyNorm: a norm per position, over the channels =========================================================
@triton.jit
def _positions(P, C, POST, NQB, CL: tl.constexpr, BP: tl.constexpr):
    """This program's positions: the offset of channel 0 of each, their mask and the channel stride."""
    pid = tl.program_id(0)
    if CL:  # channels contiguous: BP consecutive positions, each a row of C
        pos = pid * BP + tl.arange(0, BP)
        pmask = pos < P
        base = pos.to(tl.int64) * C
        cs = 1
    else:  # (pre, C, post): one pre, BP consecutive positions of post, channels POST apart
        pre = pid // NQB
        q = (pid % NQB) * BP + tl.arange(0, BP)
        pmask = q < POST
        base = pre.to(tl.int64) * C * POST + q
        cs = POST
    return base, pmask, cs


@triton.jit
def _chunk(base, pmask, cs, c0, C, PER_CHANNEL: tl.constexpr, BC: tl.constexpr):
    """Channels c0..c0+BC of the program's positions: [BC, BP] offsets and mask, channels, coefficient rows."""
    c = c0 + tl.arange(0, BC)
    cmask = c < C
    offs = base[None, :] + c.to(tl.int64)[:, None] * cs
    mask = cmask[:, None] & pmask[None, :]
    if PER_CHANNEL:
        cb = tl.where(cmask, c, 0)[:, None]
    else:
        cb = 0
    return offs, mask, c, cmask, cb


@triton.jit
def _pick(acc, kidx, j):
    """Row j of a [KP, BP] per-position accumulator, as a [1, BP] row."""
    return tl.sum(tl.where(kidx == j, acc, 0.0), 0)[None, :]


@triton.jit
def _polynorm_forward_kernel(
    X,
    Y,
    A,
    P,
    C,
    POST,
    NQB,
    eps,
    K: tl.constexpr,
    KT: tl.constexpr,
    KP: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    CL: tl.constexpr,
    BC: tl.constexpr,
    BP: tl.constexpr,
):
    base, pmask, cs = _positions(P, C, POST, NQB, CL, BP)
    kidx = tl.arange(0, KP)[:, None]
    ssq = tl.zeros([KP, BP], dtype=tl.float32)  # row j: sum_c x^(2(j+1)) per position
    for c0 in range(0, C, BC):
        offs, mask, c, cmask, cb = _chunk(base, pmask, cs, c0, C, PER_CHANNEL, BC)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        p = x
        for j in tl.static_range(K):
            if j > 0:
                p = p * x
            ssq += tl.where(kidx == j, tl.sum(p * p, 0)[None, :], 0.0)
    norm = tl.rsqrt(ssq / C + eps)
    for c0 in range(0, C, BC):
        offs, mask, c, cmask, cb = _chunk(base, pmask, cs, c0, C, PER_CHANNEL, BC)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        y = coef(A, cb, 0, KT) + 0.0 * x
        p = x
        for j in tl.static_range(K):
            if j > 0:
                p = p * x
            y = y + coef(A, cb, j + 1, KT) * (p * _pick(norm, kidx, j))
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _polynorm_backward_kernel(
    X,
    G,
    GX,
    A,
    PART,
    P,
    C,
    POST,
    NQB,
    eps,
    K: tl.constexpr,
    KT: tl.constexpr,
    KP: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    CL: tl.constexpr,
    BC: tl.constexpr,
    BP: tl.constexpr,
):
    """grad_x = sum_i i x^(i-1) n_i (a_i g - n_i^2 x^i T_i / C), T_i = sum_c g a_i x^i; dL/da_0 = g,
    dL/da_i = g x^i n_i as per-program partial sums: PART (programs, C, KT) per channel, (programs, KT) shared."""
    base, pmask, cs = _positions(P, C, POST, NQB, CL, BP)
    pid = tl.program_id(0).to(tl.int64)
    kidx = tl.arange(0, KP)[:, None]
    ssq = tl.zeros([KP, BP], dtype=tl.float32)
    dot = tl.zeros([KP, BP], dtype=tl.float32)  # row j: T_(j+1)
    for c0 in range(0, C, BC):
        offs, mask, c, cmask, cb = _chunk(base, pmask, cs, c0, C, PER_CHANNEL, BC)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        p = x
        for j in tl.static_range(K):
            if j > 0:
                p = p * x
            ssq += tl.where(kidx == j, tl.sum(p * p, 0)[None, :], 0.0)
            dot += tl.where(kidx == j, tl.sum(g * coef(A, cb, j + 1, KT) * p, 0)[None, :], 0.0)
    norm = tl.rsqrt(ssq / C + eps)
    mdot = dot / C
    kv = tl.arange(0, KP)
    total = tl.zeros([KP], dtype=tl.float32)  # shared coefficients: this program's sums
    for c0 in range(0, C, BC):
        offs, mask, c, cmask, cb = _chunk(base, pmask, cs, c0, C, PER_CHANNEL, BC)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        row = PART + (pid * C + c) * KT
        if PER_CHANNEL:
            tl.store(row, tl.sum(g, 1), mask=cmask)
        else:
            total += tl.where(kv == 0, tl.sum(tl.sum(g, 1), 0), 0.0)
        grad_x = 0.0 * x
        prev = 1.0 + 0.0 * x
        p = x
        for j in tl.static_range(K):
            if j > 0:
                prev = p
                p = p * x
            n = _pick(norm, kidx, j)
            term = (coef(A, cb, j + 1, KT) * g - (n * n) * p * _pick(mdot, kidx, j)) * (n * (j + 1))
            grad_x = grad_x + term * prev
            v = g * p * n
            if PER_CHANNEL:
                tl.store(row + j + 1, tl.sum(v, 1), mask=cmask)
            else:
                total += tl.where(kv == j + 1, tl.sum(tl.sum(v, 1), 0), 0.0)
        tl.store(GX + offs, grad_x.to(GX.dtype.element_ty), mask=mask)
    if not PER_CHANNEL:
        tl.store(PART + pid * KT + kv, total, mask=kv < KT)


def _geometry(x: torch.Tensor, channel_axis: int):
    """x (made dense where needed) as (pre, C, post) in memory: (x, cl, positions, C, post, nqb, BC, BP, programs).
    cl: channels contiguous (tokens, channels_last with channels on dim 1), else NCHW-like with post contiguous."""
    if _channels_last(x) and not x.is_contiguous() and channel_axis == 1:
        channels = x.shape[1]
        positions, post, cl = x.numel() // max(channels, 1), 1, True
    else:
        x = x.contiguous()
        channels = x.shape[channel_axis]
        post = 1
        for s in x.shape[channel_axis + 1 :]:
            post *= s
        positions, cl = x.numel() // max(channels, 1), post == 1
    if cl:
        bc = min(triton.next_power_of_2(max(channels, 1)), CL_CHUNK)
        bp = TILE // bc
        nqb, programs = 1, triton.cdiv(positions, bp)
    else:
        bp = min(triton.next_power_of_2(post), 256)
        bc = min(max(TILE // bp, 1), triton.next_power_of_2(max(channels, 1)))
        nqb = triton.cdiv(post, bp)
        programs = (positions // post) * nqb
    return x, cl, positions, channels, post, nqb, bc, bp, programs


def _polynorm_forward(x, a, channel_axis: int, eps: float, launch=None):
    k = int(a.shape[-1]) - 1  # the degree: static (an int also under dynamic shapes)
    xd, cl, positions, channels, post, nqb, bc, bp, programs = _geometry(x, channel_axis)
    if a.dim() == 2 and a.shape[0] != channels:
        raise ValueError(f"polynorm: coefficients are for {a.shape[0]} channels, input has {channels}")
    y = torch.empty_like(xd)
    if programs:
        (launch or _plain)(_polynorm_forward_kernel)[(programs,)](
            xd,
            y,
            a,
            positions,
            channels,
            post,
            nqb,
            eps,
            k,
            k + 1,
            triton.next_power_of_2(k + 1),
            a.dim() == 2,
            cl,
            bc,
            bp,
            num_warps=WARPS,
        )
    return y


def _polynorm_backward(x, g, a, channel_axis: int, eps: float, launch=None):
    kt = int(a.shape[-1])
    k = kt - 1
    xd, cl, positions, channels, post, nqb, bc, bp, programs = _geometry(x, channel_axis)
    if not g.is_contiguous(memory_format=_format(xd)):
        g = g.contiguous(memory_format=_format(xd))
    grad_x = torch.empty_like(xd)
    per_channel = a.dim() == 2
    part = torch.empty((programs,) + ((channels,) if per_channel else ()) + (kt,), device=x.device, dtype=torch.float32)
    if programs:
        (launch or _plain)(_polynorm_backward_kernel)[(programs,)](
            xd,
            g,
            grad_x,
            a,
            part,
            positions,
            channels,
            post,
            nqb,
            eps,
            k,
            kt,
            triton.next_power_of_2(kt),
            per_channel,
            cl,
            bc,
            bp,
            num_warps=WARPS,
        )
    return grad_x, part.sum(0).to(a.dtype)


# ==== entry points: the ops under torch.compile, lean autograd Functions in eager ==============================
def _block(weight: torch.Tensor) -> torch.Tensor:
    """The coefficients as the kernels read them: float32, contiguous (autograd maps the gradient back)."""
    return weight.to(torch.float32).contiguous()


def polynorm(x: torch.Tensor, channel_axis: int, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """PolyNorm's F(x) (`polycom._polynorm_forward`); weight (r+1,) or (C, r+1)."""
    a = _block(weight)
    channel_axis = channel_axis % x.dim()
    if torch.compiler.is_compiling():
        return torch.ops.visionbench.polynorm_forward(x, a, channel_axis, float(eps))
    if torch.is_grad_enabled() and (x.requires_grad or a.requires_grad):
        return _PolyNormEager.apply(x, a, channel_axis, float(eps))
    return _polynorm_forward(x, a, channel_axis, float(eps))


def slaf_train(x: torch.Tensor, channel_axis: int, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """SLAF's training forward with batch statistics: (y, mean_1, var_1, ..., mean_k, var_k) as
    `slaf._train_forward` returns them (keepdim shapes, biased variances; float32, no gradient)."""
    a = _block(weight)
    channel_axis = channel_axis % x.dim()
    if torch.compiler.is_compiling():
        y, mean, var = torch.ops.visionbench.slaf_forward(x, a, channel_axis, float(eps))
    elif torch.is_grad_enabled() and (x.requires_grad or a.requires_grad):
        y, mean, var = _SLAFEager.apply(x, a, channel_axis, float(eps))
    else:
        y, mean, var = _slaf_forward(x, a, channel_axis, float(eps))
    shape = [1] * x.dim()
    shape[channel_axis] = -1
    stats = []
    for i in range(mean.shape[1]):
        stats += [mean[:, i].reshape(shape), var[:, i].reshape(shape)]
    return (y, *stats)


class _PolyNormEager(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a, channel_axis: int, eps: float):
        ctx.save_for_backward(x, a)
        ctx.channel_axis, ctx.eps = channel_axis, eps
        return _polynorm_forward(x, a, channel_axis, eps)

    @staticmethod
    def backward(ctx, grad_y):
        x, a = ctx.saved_tensors
        grad_x, grad_a = _polynorm_backward(x, grad_y, a, ctx.channel_axis, ctx.eps)
        return grad_x, grad_a, None, None


class _SLAFEager(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a, channel_axis: int, eps: float):
        y, mean, var = _slaf_forward(x, a, channel_axis, eps)
        ctx.save_for_backward(x, a, mean, var)
        ctx.channel_axis, ctx.eps = channel_axis, eps
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(ctx, grad_y, grad_mean, grad_var):
        x, a, mean, var = ctx.saved_tensors
        grad_x, grad_a = _slaf_backward(x, grad_y, a, mean, var, ctx.channel_axis, ctx.eps)
        return grad_x, grad_a, None, None


if triton_ops.OPS:
    _define, _launch = triton_ops.define_op, triton_ops.op_launch  # triton_op on a GPU, custom_op interpreted

    @_define("visionbench::polynorm_forward", mutates_args=())
    def polynorm_forward(x: torch.Tensor, a: torch.Tensor, channel_axis: int, eps: float) -> torch.Tensor:
        return _polynorm_forward(x, a, channel_axis, eps, _launch)

    @_define("visionbench::polynorm_backward", mutates_args=())
    def polynorm_backward(
        x: torch.Tensor, g: torch.Tensor, a: torch.Tensor, channel_axis: int, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _polynorm_backward(x, g, a, channel_axis, eps, _launch)

    @_define("visionbench::slaf_forward", mutates_args=())
    def slaf_forward(
        x: torch.Tensor, a: torch.Tensor, channel_axis: int, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _slaf_forward(x, a, channel_axis, eps, _launch)

    @_define("visionbench::slaf_backward", mutates_args=())
    def slaf_backward(
        x: torch.Tensor,
        g: torch.Tensor,
        a: torch.Tensor,
        mean: torch.Tensor,
        var: torch.Tensor,
        channel_axis: int,
        eps: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _slaf_backward(x, g, a, mean, var, channel_axis, eps, _launch)

    triton_ops.register_fakes(
        (polynorm_forward, _polynorm_forward),
        (polynorm_backward, _polynorm_backward),
        (slaf_forward, _slaf_forward),
        (slaf_backward, _slaf_backward),
    )

    def _polynorm_setup(ctx, inputs, output):
        x, a, channel_axis, eps = inputs
        ctx.save_for_backward(x, a)
        ctx.channel_axis, ctx.eps = channel_axis, eps

    def _polynorm_op_backward(ctx, grad_y):
        x, a = ctx.saved_tensors
        grad_x, grad_a = torch.ops.visionbench.polynorm_backward(x, grad_y, a, ctx.channel_axis, ctx.eps)
        return grad_x, grad_a, None, None

    def _slaf_setup(ctx, inputs, output):
        x, a, channel_axis, eps = inputs
        _, mean, var = output
        ctx.save_for_backward(x, a, mean, var)
        ctx.channel_axis, ctx.eps = channel_axis, eps
        ctx.mark_non_differentiable(mean, var)

    def _slaf_op_backward(ctx, grad_y, grad_mean, grad_var):
        x, a, mean, var = ctx.saved_tensors
        grad_x, grad_a = torch.ops.visionbench.slaf_backward(x, grad_y, a, mean, var, ctx.channel_axis, ctx.eps)
        return grad_x, grad_a, None, None

    polynorm_forward.register_autograd(_polynorm_op_backward, setup_context=_polynorm_setup)
    slaf_forward.register_autograd(_slaf_op_backward, setup_context=_slaf_setup)

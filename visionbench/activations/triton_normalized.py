"""Triton kernels of the two families whose output depends on statistics of the input: PolyNorm (a norm per
position, over the channels) and SLAF in training (BatchNorm-like moments per channel, over every other dim).

    y = triton_normalized.polynorm(x, channel_axis, weight, eps)
    y, mean_1, var_1, ..., mean_k, var_k = triton_normalized.slaf_train(x, channel_axis, weight, eps,
                                                                        running_mean, running_var, momentum)

`PolyNorm.fast_forward` and `SLAF.fast_forward` (training) call these when `fused.backend_for(x)` is "triton";
SLAF's eval mode is a plain polynomial and already takes `triton_polynomial.poly_*` through `run_poly`. The math
is fp32 whatever the input dtype (fp32, bf16, fp16); coefficients are (K,) shared or (C, K) per channel; x is NCHW
contiguous, channels_last, or tokens [..., C] (any rank, any channel axis: other layouts are made dense first).

SLAF, three launches each way. The statistics span the whole tensor, so no single program can normalise its own
tile: a persistent reduction, one finalize program set that merges its partials and computes every per-channel
constant (no ATen op between), then one elementwise pass.
  forward 1  `_slaf_moments_kernel`: the template's persistent tiling (`triton_template.tile`, MODE 1 for NCHW and 2
             for channels-last/tokens); each program keeps, per channel slot and power x^i, the count, the mean and
             the sum of squared deviations from it, merging tile after tile (Chan's parallel update, fp32), and
             writes them once. Centred sums instead of raw power sums (var = E[p^2] - E[p]^2) because raw sums lose
             var(x^i) to cancellation in fp32 when |mean(x^i)| >> std(x^i) (inputs with an offset; x^2 always has a
             positive mean).
  forward 2  `_slaf_finalize_kernel`: per channel block, the programs' partials merged in float64 in a fixed order
             (Chan again), then the batch mean and biased variance, the polynomial's per-channel coefficients
             c_0 = a_0 - sum_i a_i r_i m_i, c_i = a_i r_i (r_i = rsqrt(var_i + eps)), and the running averages
             updated in place (unbiased variance, as BatchNorm's), as `SLAF._update_running` does on other paths.
  forward 3  the template's forward with the `poly` body (relu=0; the spec SLAF's eval mode uses) on those c.
  backward 1 `_slaf_sums_kernel`: persistent, per channel: sum g and sum g (x^i - m_i), i = 1..k (centred on the
             saved means for the same reason).
  backward 2 `_slaf_gradients_kernel`: one program over every channel block: the partials merged in float64,
             dL/da_0 = sum g, dL/da_i = r_i sum g (x^i - m_i) (summed over channels, in order, for shared a), and
             the per-channel constants of grad_x.
  backward 3 `_slaf_grad_x_kernel`: grad_x = g A(x) + B(x), per channel, evaluated as `_train_backward` writes it,
             sum_i w_i x^(i-1) (g - mean(g) - (x^i - m_i) q_i) with w_i = i a_i r_i, q_i = r_i^2 mean(g (x^i - m_i)):
             the factored form keeps (x^i - m_i) as one difference instead of expanding B into powers of x.
  The forward returns each power's batch mean and biased variance (float32, the keepdim shapes of
  `_train_forward`).

PolyNorm, one kernel each way (and the sum of the backward's partial rows). The norm of x^i is over the channels of
one position, so a program owns a block of positions and loops over all channels of them: x seen as (pre, C, post)
(`_geometry`): NCHW has post = H*W contiguous (a program: one `pre` and BP consecutive positions of post, a [BC, BP]
tile per channel chunk), tokens and channels_last have C contiguous (post = 1: BP positions, each a row of C).
Forward: loop 1 over the channel chunks accumulates sum_c x^(2i) per position, loop 2 reads the chunks again (from
cache: the block is C * BP elements) and writes y. Backward: loop 1 accumulates sum_c x^(2i) and T_i = sum_c g a_i x^i
per position, loop 2 writes grad_x = sum_i i x^(i-1) n_i (a_i g - n_i^2 x^i T_i / C) and the coefficient gradients as
per-program partial sums (a row (C, K) per program when per channel, K values when shared), summed on the host in a
fixed order. Nothing but x is saved: the norms are recomputed by the backward's first loop, which reads x anyway.

Ops: `visionbench::polynorm_forward/backward` and `visionbench::slaf_forward/backward`, defined as in
`triton_ops.py` (`triton_op` + `wrap_triton` on a GPU; under the CPU interpreter a plain `custom_op` with a fake
implementation), with its `OpPair`: autograd by `register_autograd`, eager calls a lean `autograd.Function` to the same
launches; inside torch.compile the ops are what the compiler sees.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import triton_ops
from .triton_polynomial import BODIES as POLYNOMIALS
from .triton_template import Tuning, _channels_last, _format, _plain, buffer, launch_forward, layout, tile, tuning

TILE = 2048  # elements of x per program and channel chunk (the template's size)
WARPS = 8
CL_CHUNK = 32  # channels per chunk when C is contiguous: a 128-byte fp32 row per position
NCHW_POSITIONS = 64  # positions per PolyNorm program when post is contiguous: a 256-byte fp32 row per channel
FINALIZE_CHANNELS = 128  # channels per program of SLAF's finalize kernels
SLAF = Tuning(backward=(TILE, WARPS), backward_last=(TILE, WARPS))


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
def _group_channels(grp, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """The channels of group grp, one per slot."""
    if MODE == 1:
        c = grp * BM + tl.arange(0, BM)
    else:
        c = grp * BN + tl.arange(0, BN)
    return c


@triton.jit
def _repeat(v, COUNT: tl.constexpr):
    """(v, v, ..., v): COUNT times."""
    out = ()
    for _ in tl.static_range(COUNT):
        out = out + (v,)
    return out


@triton.jit
def _slot_zeros(MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    if MODE == 1:
        z = tl.zeros([BM], dtype=tl.float32)
    else:
        z = tl.zeros([BN], dtype=tl.float32)
    return z


@triton.jit
def _slaf_moments_kernel(
    X, PART, M, N, CH, NG, NBC, STEPS, SPLITS, K: tl.constexpr, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    """Per program and channel slot: count, then per power i = 1..K the mean of x^i and the sum of squared deviations
    from it, over the program's tiles (Chan's update after each tile); PART (SPLITS, CH, 1 + 2K)."""
    pid = tl.program_id(0)
    grp = pid % NG
    split = pid // NG
    n = _slot_zeros(MODE, BM, BN)
    means = _repeat(n, K)
    m2s = _repeat(n, K)
    for j in range(split, STEPS, SPLITS):
        offs, mask, cb = tile(grp, j, M, N, CH, NBC, MODE, BM, BN)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        cnt = _slot_sum(mask.to(tl.float32), MODE)
        total = n + cnt
        w = cnt / tl.maximum(total, 1.0)
        inv = 1.0 / tl.maximum(cnt, 1.0)
        new_means = ()
        new_m2s = ()
        p = x
        for i in tl.static_range(K):
            if i > 0:
                p = p * x
            mt = _slot_sum(p, MODE) * inv
            d = tl.where(mask, p - _slot_bcast(mt, MODE), 0.0)
            delta = mt - means[i]
            new_means = new_means + (means[i] + delta * w,)
            new_m2s = new_m2s + (m2s[i] + _slot_sum(d * d, MODE) + delta * delta * (n * w),)
        means = new_means
        m2s = new_m2s
        n = total
    c = _group_channels(grp, MODE, BM, BN)
    row = PART + (tl.cast(split, tl.int64) * CH + c) * (1 + 2 * K)
    ok = c < CH
    tl.store(row, n, mask=ok)
    for i in tl.static_range(K):
        tl.store(row + 1 + 2 * i, means[i], mask=ok)
        tl.store(row + 2 + 2 * i, m2s[i], mask=ok)


@triton.jit
def _coefficient(A, c, i: tl.constexpr, KA: tl.constexpr, PER_CHANNEL: tl.constexpr, ok):
    """Coefficient i of the channels c (float64): a (C, KA) row each, or the one shared (KA,) vector."""
    if PER_CHANNEL:
        v = tl.load(A + c * KA + i, mask=ok, other=0.0)
    else:
        v = tl.load(A + i + 0 * c)
    return v.to(tl.float64)


@triton.jit
def _slaf_finalize_kernel(
    PART,
    A,
    COEF,
    MEAN,
    VAR,
    RMEAN,
    RVAR,
    NEW_RMEAN,
    NEW_RVAR,
    CH,
    SPLITS,
    eps,
    momentum,
    unbiased,
    K: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    BC: tl.constexpr,
):
    """Per channel of this program's block: the SPLITS partial rows merged in float64 (Chan), the batch mean and
    biased variance (MEAN, VAR: (CH, K) float32), the polynomial's coefficients (COEF: (CH, K + 1) float32) and the
    running averages (RMEAN, RVAR: (CH, K) float32) updated into NEW_RMEAN, NEW_RVAR (the same tensors, in eager
    calls): r = (1 - m) r + m b (variance: b unbiased)."""
    c = tl.program_id(0) * BC + tl.arange(0, BC)
    ok = c < CH
    KT: tl.constexpr = 1 + 2 * K
    n = tl.zeros([BC], dtype=tl.float64)
    means = _repeat(n, K)
    m2s = _repeat(n, K)
    for s in range(0, SPLITS):
        row = PART + (tl.cast(s, tl.int64) * CH + c) * KT
        cnt = tl.load(row, mask=ok, other=0.0).to(tl.float64)
        total = n + cnt
        w = cnt / tl.maximum(total, 1.0)
        new_means = ()
        new_m2s = ()
        for i in tl.static_range(K):
            delta = tl.load(row + 1 + 2 * i, mask=ok, other=0.0).to(tl.float64) - means[i]
            m2 = tl.load(row + 2 + 2 * i, mask=ok, other=0.0).to(tl.float64)
            new_means = new_means + (means[i] + delta * w,)
            new_m2s = new_m2s + (m2s[i] + m2 + delta * delta * (n * w),)
        means = new_means
        m2s = new_m2s
        n = total
    shift = _coefficient(A, c, 0, K + 1, PER_CHANNEL, ok)
    keep = 1.0 - momentum
    for i in tl.static_range(K):
        var = m2s[i] / tl.maximum(n, 1.0)
        scale = _coefficient(A, c, i + 1, K + 1, PER_CHANNEL, ok) / tl.sqrt(var + eps)
        shift = shift - scale * means[i]
        tl.store(COEF + c * (K + 1) + i + 1, scale.to(tl.float32), mask=ok)
        mean32 = means[i].to(tl.float32)
        var32 = var.to(tl.float32)
        tl.store(MEAN + c * K + i, mean32, mask=ok)
        tl.store(VAR + c * K + i, var32, mask=ok)
        old_mean = tl.load(RMEAN + c * K + i, mask=ok, other=0.0)
        old_var = tl.load(RVAR + c * K + i, mask=ok, other=0.0)
        tl.store(NEW_RMEAN + c * K + i, old_mean * keep + momentum * mean32, mask=ok)
        tl.store(NEW_RVAR + c * K + i, old_var * keep + momentum * (var32 * unbiased), mask=ok)
    tl.store(COEF + c * (K + 1), shift.to(tl.float32), mask=ok)


@triton.jit
def _slaf_sums_kernel(
    X,
    G,
    S,
    PART,
    M,
    N,
    CH,
    NG,
    NBC,
    STEPS,
    SPLITS,
    K: tl.constexpr,
    MODE: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    """Per program and channel slot: sum g, then sum g (x^i - m_i), i = 1..K (S: the batch means, (CH, K)), over the
    program's tiles; PART (SPLITS, CH, K + 1)."""
    pid = tl.program_id(0)
    grp = pid % NG
    split = pid // NG
    sums = _repeat(_slot_zeros(MODE, BM, BN), K + 1)
    for j in range(split, STEPS, SPLITS):
        offs, mask, cb = tile(grp, j, M, N, CH, NBC, MODE, BM, BN)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        new = (sums[0] + _slot_sum(g, MODE),)
        p = x
        for i in tl.static_range(K):
            if i > 0:
                p = p * x
            new = new + (sums[i + 1] + _slot_sum(g * (p - tl.load(S + cb * K + i)), MODE),)
        sums = new
    c = _group_channels(grp, MODE, BM, BN)
    row = PART + (tl.cast(split, tl.int64) * CH + c) * (K + 1)
    for i in tl.static_range(K + 1):
        tl.store(row + i, sums[i], mask=c < CH)


@triton.jit
def _slaf_gradients_kernel(
    PART, A, MEAN, VAR, D, GA, CH, SPLITS, inv_n, eps, K: tl.constexpr, PER_CHANNEL: tl.constexpr, BC: tl.constexpr
):
    """One program: per channel, the partial rows merged in float64, the coefficient gradient (GA: (CH, K + 1), or
    (K + 1,) summed over the channels in order when shared) and grad_x's constants D (CH, 1 + 3K): mean(g), then per
    power (w_i, m_i, q_i)."""
    KD: tl.constexpr = 1 + 3 * K
    total = _repeat(tl.zeros([BC], dtype=tl.float64), K + 1)
    for c0 in range(0, CH, BC):
        c = c0 + tl.arange(0, BC)
        ok = c < CH
        sums = _repeat(tl.zeros([BC], dtype=tl.float64), K + 1)
        for s in range(0, SPLITS):
            row = PART + (tl.cast(s, tl.int64) * CH + c) * (K + 1)
            new = ()
            for i in tl.static_range(K + 1):
                new = new + (sums[i] + tl.load(row + i, mask=ok, other=0.0).to(tl.float64),)
            sums = new
        tl.store(D + c * KD, (sums[0] * inv_n).to(tl.float32), mask=ok)
        grads = (sums[0],)
        for i in tl.static_range(K):
            r = 1.0 / tl.sqrt(tl.load(VAR + c * K + i, mask=ok, other=1.0).to(tl.float64) + eps)
            grad = r * sums[i + 1]
            grads = grads + (grad,)
            w = (i + 1) * _coefficient(A, c, i + 1, K + 1, PER_CHANNEL, ok) * r
            tl.store(D + c * KD + 1 + 3 * i, w.to(tl.float32), mask=ok)
            tl.store(D + c * KD + 2 + 3 * i, tl.load(MEAN + c * K + i, mask=ok, other=0.0), mask=ok)
            tl.store(D + c * KD + 3 + 3 * i, (r * grad * inv_n).to(tl.float32), mask=ok)
        if PER_CHANNEL:
            for i in tl.static_range(K + 1):
                tl.store(GA + c * (K + 1) + i, grads[i].to(tl.float32), mask=ok)
        else:
            new = ()
            for i in tl.static_range(K + 1):
                new = new + (total[i] + tl.where(ok, grads[i], 0.0),)
            total = new
    if not PER_CHANNEL:
        for i in tl.static_range(K + 1):
            tl.store(GA + i, tl.sum(total[i], 0).to(tl.float32))


@triton.jit
def _slaf_grad_x_kernel(
    X, G, GX, D, M, N, CH, NG, NBC, K: tl.constexpr, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    """grad_x = sum_i w_i x^(i-1) (g - mean(g) - (x^i - m_i) q_i); D per channel: mean(g), then (w_i, m_i, q_i)."""
    pid = tl.program_id(0)
    offs, mask, cb = tile(pid % NG, pid // NG, M, N, CH, NBC, MODE, BM, BN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    KD: tl.constexpr = 1 + 3 * K
    row = D + cb * KD
    gc = g - tl.load(row)
    out = tl.zeros_like(x)
    prev = tl.zeros_like(x) + 1.0
    p = x
    for i in tl.static_range(K):
        if i > 0:
            prev = p
            p = p * x
        term = tl.load(row + 1 + 3 * i) * (gc - (p - tl.load(row + 2 + 3 * i)) * tl.load(row + 3 + 3 * i))
        out = out + term * prev
    tl.store(GX + offs, out.to(GX.dtype.element_ty), mask=mask)


def _slaf_layout(x: torch.Tensor, channel_axis: int, backward: bool = False):
    """The template's per-channel layout (a channels_last map whose channels are not dim 1 made dense first)."""
    if _channels_last(x) and not x.is_contiguous() and channel_axis != 1:
        x = x.contiguous()
    return layout(x, channel_axis, True, SLAF, backward)


def _check_coefficients(a: torch.Tensor, channels: int) -> None:
    if a.dim() == 2 and a.shape[0] != channels:
        raise ValueError(f"coefficients are for {a.shape[0]} channels, input has {channels}")


def _slaf_forward(
    x, a, running_mean, running_var, channel_axis: int, eps: float, momentum: float, launch=None, in_place=False
):
    """(y, mean (C, k), var (C, k), new running_mean, new running_var): var biased, all float32; the running averages
    (C, k) float32 updated in place with `in_place` (then the last two are they), else into new tensors."""
    k = int(a.shape[-1]) - 1  # the degree: static (an int also under dynamic shapes)
    run = launch or _plain
    lay, xd = _slaf_layout(x, channel_axis, backward=True)
    channels = lay.channels
    _check_coefficients(a, channels)
    part = buffer((lay.splits, channels, 1 + 2 * k), device=x.device, dtype=torch.float32)
    run(_slaf_moments_kernel)[(lay.groups * lay.splits,)](
        xd, part, *lay.persistent, k, lay.mode, lay.bm, lay.bn, num_warps=lay.warps
    )
    coef = buffer((channels, k + 1), device=x.device, dtype=torch.float32)
    mean = buffer((channels, k), device=x.device, dtype=torch.float32)
    var = buffer((channels, k), device=x.device, dtype=torch.float32)
    n = x.numel() // max(channels, 1)
    new_mean, new_var = (running_mean, running_var) if in_place else (buffer(running_mean), buffer(running_var))
    run(_slaf_finalize_kernel)[(triton.cdiv(channels, FINALIZE_CHANNELS),)](
        part,
        a,
        coef,
        mean,
        var,
        running_mean,
        running_var,
        new_mean,
        new_var,
        channels,
        lay.splits,
        float(eps),
        float(momentum),
        n / max(n - 1, 1),
        k,
        a.dim() == 2,
        FINALIZE_CHANNELS,
        num_warps=4,
    )
    body = POLYNOMIALS["poly"]
    params = body.launch_params(degree=k, relu=False)
    forward, _ = layout(xd, channel_axis, True, tuning(body.forward))
    y = launch_forward((body.forward, body.backward), params, xd, (coef,), forward, launch)
    return y, mean, var, new_mean, new_var


def _slaf_backward(x, g, a, mean, var, channel_axis: int, eps: float, launch=None):
    """(grad_x, grad_a), grad_a shaped like a."""
    k = int(a.shape[-1]) - 1  # the degree: static (an int also under dynamic shapes)
    run = launch or _plain
    lay, xd = _slaf_layout(x, channel_axis, backward=True)
    if not g.is_contiguous(memory_format=_format(xd)):
        g = g.contiguous(memory_format=_format(xd))
    channels = lay.channels
    part = buffer((lay.splits, channels, k + 1), device=x.device, dtype=torch.float32)
    run(_slaf_sums_kernel)[(lay.groups * lay.splits,)](
        xd, g, mean, part, *lay.persistent, k, lay.mode, lay.bm, lay.bn, num_warps=lay.warps
    )
    d = buffer((channels, 1 + 3 * k), device=x.device, dtype=torch.float32)
    grad_a = buffer(a.shape, device=x.device, dtype=torch.float32)
    n = x.numel() // max(channels, 1)
    run(_slaf_gradients_kernel)[(1,)](
        part,
        a,
        mean,
        var,
        d,
        grad_a,
        channels,
        lay.splits,
        1.0 / n,
        float(eps),
        k,
        a.dim() == 2,
        FINALIZE_CHANNELS,
        num_warps=4,
    )
    grad_x = buffer(xd)
    fwd, _ = _slaf_layout(xd, channel_axis)
    run(_slaf_grad_x_kernel)[(fwd.programs,)](
        xd, g, grad_x, d, *fwd.tiles, k, fwd.mode, fwd.bm, fwd.bn, num_warps=fwd.warps
    )
    return grad_x, grad_a.to(a.dtype)


# ==== PolyNorm: a norm per position, over the channels =========================================================
@triton.jit
def _acoef(A, cb, k: tl.constexpr, KT: tl.constexpr):
    """Coefficient k of the channels at offsets cb (0 when shared): A is (KT,) or (C, KT)."""
    return tl.load(A + cb * KT + k)


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
def _channel_sums(
    X,
    G,
    A,
    base,
    pmask,
    cs,
    C,
    kidx,
    DOT: tl.constexpr,
    K: tl.constexpr,
    KT: tl.constexpr,
    KP: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    BC: tl.constexpr,
    BP: tl.constexpr,
):
    """The kernels' first loop, over the channel chunks of the program's positions: per position, row j of ssq is
    sum_c x^(2(j+1)) and, with DOT (the backward), row j of dot is T_(j+1) = sum_c g a_(j+1) x^(j+1)."""
    ssq = tl.zeros([KP, BP], dtype=tl.float32)
    dot = tl.zeros([KP, BP], dtype=tl.float32)
    for c0 in range(0, C, BC):
        offs, mask, c, cmask, cb = _chunk(base, pmask, cs, c0, C, PER_CHANNEL, BC)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        if DOT:
            g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        p = x
        for j in tl.static_range(K):
            if j > 0:
                p = p * x
            ssq += tl.where(kidx == j, tl.sum(p * p, 0)[None, :], 0.0)
            if DOT:
                dot += tl.where(kidx == j, tl.sum(g * _acoef(A, cb, j + 1, KT) * p, 0)[None, :], 0.0)
    return ssq, dot


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
    ssq, _ = _channel_sums(X, X, A, base, pmask, cs, C, kidx, False, K, KT, KP, PER_CHANNEL, BC, BP)
    norm = tl.rsqrt(ssq / C + eps)
    for c0 in range(0, C, BC):
        offs, mask, c, cmask, cb = _chunk(base, pmask, cs, c0, C, PER_CHANNEL, BC)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.zeros_like(x) + _acoef(A, cb, 0, KT)
        p = x
        for j in tl.static_range(K):
            if j > 0:
                p = p * x
            y = y + _acoef(A, cb, j + 1, KT) * (p * _pick(norm, kidx, j))
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
    ssq, dot = _channel_sums(X, G, A, base, pmask, cs, C, kidx, True, K, KT, KP, PER_CHANNEL, BC, BP)
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
        grad_x = tl.zeros_like(x)
        prev = tl.zeros_like(x) + 1.0
        p = x
        for j in tl.static_range(K):
            if j > 0:
                prev = p
                p = p * x
            n = _pick(norm, kidx, j)
            term = (_acoef(A, cb, j + 1, KT) * g - (n * n) * p * _pick(mdot, kidx, j)) * (n * (j + 1))
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
        bp = min(triton.next_power_of_2(post), NCHW_POSITIONS)
        bc = min(max(TILE // bp, 1), triton.next_power_of_2(max(channels, 1)))
        nqb = triton.cdiv(post, bp)
        programs = (positions // post) * nqb
    return x, cl, positions, channels, post, nqb, bc, bp, programs


def _polynorm_launch(x, a, channel_axis: int, eps: float) -> tuple:
    """(x made dense where needed, the programs, the channels, the arguments both kernels take after their tensors)."""
    kt = int(a.shape[-1])  # the degree + 1: static (an int also under dynamic shapes)
    xd, cl, positions, channels, post, nqb, bc, bp, programs = _geometry(x, channel_axis)
    args = (positions, channels, post, nqb, eps, kt - 1, kt, triton.next_power_of_2(kt), a.dim() == 2, cl, bc, bp)
    return xd, programs, channels, args


def _polynorm_forward(x, a, channel_axis: int, eps: float, launch=None):
    xd, programs, channels, args = _polynorm_launch(x, a, channel_axis, eps)
    if a.dim() == 2 and a.shape[0] != channels:
        raise ValueError(f"polynorm: coefficients are for {a.shape[0]} channels, input has {channels}")
    y = buffer(xd)
    if programs:
        (launch or _plain)(_polynorm_forward_kernel)[(programs,)](xd, y, a, *args, num_warps=WARPS)
    return y


def _polynorm_backward(x, g, a, channel_axis: int, eps: float, launch=None):
    xd, programs, channels, args = _polynorm_launch(x, a, channel_axis, eps)
    if not g.is_contiguous(memory_format=_format(xd)):
        g = g.contiguous(memory_format=_format(xd))
    grad_x = buffer(xd)
    rows = (channels,) if a.dim() == 2 else ()
    part = buffer((programs, *rows, int(a.shape[-1])), device=x.device, dtype=torch.float32)
    if programs:
        (launch or _plain)(_polynorm_backward_kernel)[(programs,)](xd, g, grad_x, a, part, *args, num_warps=WARPS)
    return grad_x, part.sum(0).to(a.dtype)


# ==== entry points: the ops under torch.compile, lean autograd Functions in eager ==============================
def _block(weight: torch.Tensor) -> torch.Tensor:
    """The coefficients as the kernels read them: float32, contiguous (autograd maps the gradient back)."""
    return weight.to(torch.float32).contiguous()


def polynorm(x: torch.Tensor, channel_axis: int, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """PolyNorm's F(x) (`polycom._polynorm_forward`); weight (r+1,) or (C, r+1)."""
    return triton_ops.call(POLYNORM_OPS, x, _block(weight), channel_axis % x.dim(), float(eps))


def slaf_train(
    x: torch.Tensor,
    channel_axis: int,
    weight: torch.Tensor,
    eps: float,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
) -> tuple[torch.Tensor, ...]:
    """SLAF's training forward with batch statistics: (y, mean_1, var_1, ..., mean_k, var_k) as
    `slaf._train_forward` returns them (keepdim shapes, biased variances; float32, no gradient), the running averages
    (C, k) updated in place as `SLAF._update_running` updates them."""
    channel_axis = channel_axis % x.dim()
    rm, rv = (_block(t) for t in (running_mean, running_var))  # themselves when float32 and contiguous
    # eager calls update rm, rv in place; the op is functional: the new averages come back, copied into the buffers
    y, mean, var, *new = triton_ops.call(SLAF_OPS, x, _block(weight), rm, rv, channel_axis, float(eps), float(momentum))
    for kept, updated in zip((running_mean, running_var), new or (rm, rv)):
        if kept is not updated:
            kept.copy_(updated)
    shape = [1] * x.dim()
    shape[channel_axis] = -1
    stats = []
    for i in range(mean.shape[1]):
        stats += [mean[:, i].reshape(shape), var[:, i].reshape(shape)]
    return (y, *stats)


def _polynorm_save(ctx, inputs, output) -> None:
    x, a, channel_axis, eps = inputs
    ctx.save_for_backward(x, a)
    ctx.channel_axis, ctx.eps = channel_axis, eps


def _polynorm_grads(ctx, grad_outputs, backward) -> tuple:
    x, a = ctx.saved_tensors
    return *backward(x, grad_outputs[0], a, ctx.channel_axis, ctx.eps), None, None


def _slaf_save(ctx, inputs, output) -> None:
    x, a, _, _, channel_axis, eps, _ = inputs
    _, mean, var, *new = output  # the op's output holds the new running averages too
    ctx.save_for_backward(x, a, mean, var)
    ctx.channel_axis, ctx.eps = channel_axis, eps
    ctx.mark_non_differentiable(mean, var, *new)


def _slaf_grads(ctx, grad_outputs, backward) -> tuple:
    x, a, mean, var = ctx.saved_tensors
    return *backward(x, grad_outputs[0], a, mean, var, ctx.channel_axis, ctx.eps), None, None, None, None, None


def _slaf_in_place(*inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The eager forward: the running averages updated in place, (y, mean, var)."""
    return _slaf_forward(*inputs, in_place=True)[:3]


POLYNORM_OPS = triton_ops.OpPair(_polynorm_forward, _polynorm_backward, _polynorm_save, _polynorm_grads)
SLAF_OPS = triton_ops.OpPair(_slaf_forward, _slaf_backward, _slaf_save, _slaf_grads, eager=_slaf_in_place)
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
        x: torch.Tensor,
        a: torch.Tensor,
        running_mean: torch.Tensor,
        running_var: torch.Tensor,
        channel_axis: int,
        eps: float,
        momentum: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return _slaf_forward(x, a, running_mean, running_var, channel_axis, eps, momentum, _launch)

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

    triton_ops.register(POLYNORM_OPS, "polynorm")
    triton_ops.register(SLAF_OPS, "slaf")

"""mmrt's int8 encoder blocks, for the PyTorch references of the towers (qwen2_vl_ref.py,
llava_ref.py, qwen2_audio_ref.py): weights quantised per output channel and activations per
token by the same symmetric rule, the integer products summed exactly."""
import torch


def quantise_rows(t):
    """Symmetric int8 per row (last dimension), as mmrt quantises weights (per output channel)
    and the int8 encoder blocks' activations (per token): scale = amax / 127 in float32, q =
    round-half-even(t / scale) (float32 division) clamped to +-127, 0 for an all-zero row."""
    amax = t.abs().amax(dim=-1, keepdim=True)
    scale = amax / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.where(scale > 0, torch.round(t / safe).clamp(-127, 127), torch.zeros_like(t))
    return q, scale


def int8_linear(x, weight, bias=None):
    """x . W^T + b as an int8 block computes it: x and W quantised per row, the integer products
    summed exactly (float64 holds them), scaled by both scales, plus the bias; float32 out."""
    qx, sx = quantise_rows(x)
    qw, sw = quantise_rows(weight)
    y = (qx.double() @ qw.double().T) * sx.double() * sw.double().T
    return (y if bias is None else y + bias.double()).float()


def bf16(t):
    """t rounded to bfloat16 (to nearest, ties to even), back in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


def int8_attention(q, k, v, scale):
    """One segment's attention as mmrt's int8 encoder blocks compute it (VarlenAttentionArgs::
    int8_scores): q [..., n_q, hd], k and v [..., n_k, hd] float32 (leading dims: batch, heads).
    The keys less their mean over the segment (per head and dim; the softmax cannot see it),
    q and those keys quantised per row (quantise_rows), the integer products summed exactly and
    scaled by both scales and `scale`; P = exp(s - max) and v rounded to bf16, their products
    summed exactly and divided by the sum of the rounded P; float32 out."""
    mean = k.double().mean(dim=-2, keepdim=True).float()
    qq, sq = quantise_rows(q)
    kq, sk = quantise_rows(k - mean)
    s = (qq.double() @ kq.double().transpose(-1, -2)) * sq.double() * sk.double().transpose(-1, -2)
    s = s * scale
    p = bf16(torch.exp(s - s.amax(dim=-1, keepdim=True)).float()).double()
    return ((p @ bf16(v).double()) / p.sum(dim=-1, keepdim=True)).float()


def int8_attention_segments(q, k, v, scale, cu):
    """int8_attention within each segment [cu[i], cu[i+1]) of the rows (dim -2) of q, k, v."""
    return torch.cat([int8_attention(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], scale)
                      for a, b in zip(cu[:-1], cu[1:]) if b > a], dim=-2)

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

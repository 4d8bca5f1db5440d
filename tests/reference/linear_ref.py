#!/usr/bin/env python3
"""Reference linear layers for the kernel tests (tests/linear), computed with PyTorch in float64.

usage: linear_ref.py CASES.bin OUT.bin

CASES.bin: int64 case count, then per case: int64 n, in, out, has_bias; float32 x [n, in],
float32 W [out, in], float32 b [out] (only if has_bias). All little-endian.

OUT.bin, per case in order:
  float64 y_f32      [n, out]  x . W^T + b
  float64 y_bf16w    [n, out]  x . bf16(W)^T + b                     (bf16 weights, x exact)
  float64 y_bf16     [n, out]  bf16(x) . bf16(W)^T + b               (bf16 GEMM)
  float64 y_i8       [n, out]  x . (q * scale)^T + b                 (int8 weights, x exact)
  float64 y_i8_xbf16 [n, out]  bf16(x) . (q * scale)^T + b           (int8 GEMM)
  float64 y_i8_xq8   [n, out]  q8(x) . (q * scale)^T + b             (int8 decode on Q8 blocks of x)
  float64 q8_bound   [n, out]  |q * scale| . (amax_block(x) / 254)^T  (bound on |y_i8_xq8 - y_i8|)
  float64 y_i8_xrow  [n, out]  q8row(x) . (q * scale)^T + b          (int8 GEMM on x quantised per row)
  float64 row_bound  [n, out]  |q * scale| . (amax_row(x) / 254)^T    (bound on |y_i8_xrow - y_i8|)
  float64 mag        [n, out]  |x| . |W|^T + |b|   (scale for the tolerances)
  int8    q          [out, in] symmetric per-row quantisation of W: scale = amax / 127 (float32),
                               q = round-half-even(W / scale) (float32 division), 0 for a zero row
  float32 scale      [out]
  float64 y_fp8      [n, out]  bf16(x) . (e4m3(W / s8) * s8)^T + b       (fp8 weights, x in bf16)
  uint8   q_fp8      [out, in] FP8 E4M3 codes of W / s8 (float32 division): the nearest of the
                               format's values, ties to the even mantissa, saturating at 448;
                               0 for a zero row
  float32 s8         [out]     amax / 448 (float32)
"""
import sys

import numpy as np
import torch

Q8_BLOCK = 64  # kernels::kQ8Block


def q8(x):
    """x [n, k] float32 quantised per block of Q8_BLOCK along k (zero padded): scale = amax / 127
    (float32), q = round-half-even(x / scale) (float32 division), clamped to +-127, 0 for a zero
    block. Returns (dequantised x as float64 [n, k], amax per element's block [n, k])."""
    n, k = x.shape
    kp = (k + Q8_BLOCK - 1) // Q8_BLOCK * Q8_BLOCK
    xp = torch.zeros(n, kp, dtype=torch.float32)
    xp[:, :k] = x
    blocks = xp.reshape(n, kp // Q8_BLOCK, Q8_BLOCK)
    amax = blocks.abs().amax(dim=2, keepdim=True)
    scale = amax / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / safe).clamp(-127, 127)
    q = torch.where(scale > 0, q, torch.zeros_like(q))
    deq = (q.double() * scale.double()).reshape(n, kp)[:, :k]
    amax_el = amax.expand(n, kp // Q8_BLOCK, Q8_BLOCK).reshape(n, kp)[:, :k].double()
    return deq, amax_el


def q8_row(x):
    """x [n, k] float32 quantised per row (Int8Gemm::kQ8Row): scale = amax_row / 127 (float32),
    q = round-half-even(x / scale) (float32 division), clamped to +-127, 0 for a zero row.
    Returns (dequantised x as float64 [n, k], amax of each element's row [n, k])."""
    amax = x.abs().amax(dim=1, keepdim=True)
    scale = amax / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x / safe).clamp(-127, 127)
    q = torch.where(scale > 0, q, torch.zeros_like(q))
    return q.double() * scale.double(), amax.expand_as(x).double()


# FP8 E4M3's positive finite values by code (0..126), from the format's definition: 4 exponent
# bits with bias 7, 3 mantissa bits, subnormals below 2^-6, no infinities, 448 the largest.
E4M3 = np.array([(c & 7) * 2.0 ** -9 if c >> 3 == 0 else (1 + (c & 7) / 8) * 2.0 ** ((c >> 3) - 7)
                 for c in range(127)])


def e4m3(v):
    """float32 array -> E4M3 codes (uint8): the nearest value, ties to the even code."""
    a = np.abs(v.astype(np.float64))
    i = np.clip(np.searchsorted(E4M3, a), 1, 126)
    lo, hi = E4M3[i - 1], E4M3[i]
    up = (hi - a < a - lo) | ((hi - a == a - lo) & (i % 2 == 0))
    code = np.where(a >= 448.0, 126, np.where(up, i, i - 1)).astype(np.uint8)
    return code | np.where(np.signbit(v), 0x80, 0).astype(np.uint8)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    raw = open(src, 'rb').read()
    off = 0

    def take(dtype, count):
        nonlocal off
        a = np.frombuffer(raw, dtype=dtype, count=count, offset=off)
        off += a.nbytes
        return a

    (n_cases,) = take('<i8', 1)
    out_parts = []
    for _ in range(int(n_cases)):
        n, k, m, has_bias = (int(v) for v in take('<i8', 4))
        x = torch.from_numpy(take('<f4', n * k).reshape(n, k).copy())
        w = torch.from_numpy(take('<f4', m * k).reshape(m, k).copy())
        b = torch.from_numpy(take('<f4', m).copy()) if has_bias else torch.zeros(m)

        amax = w.abs().amax(dim=1)                       # float32
        scale = amax / 127.0                             # float32, as at pack time
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round(w / safe[:, None]).clamp(-127, 127)  # half-to-even
        q = torch.where(scale[:, None] > 0, q, torch.zeros_like(q))
        deq = q.double() * scale.double()[:, None]

        def bf(t):
            return t.to(torch.bfloat16).double()

        xd, wd, bd = x.double(), w.double(), b.double()
        xq, amax_x = q8(x)
        xr, amax_r = q8_row(x)
        outs = [
            xd @ wd.T + bd,
            xd @ bf(w).T + bd,
            bf(x) @ bf(w).T + bd,
            xd @ deq.T + bd,
            bf(x) @ deq.T + bd,
            xq @ deq.T + bd,
            (amax_x / 254.0) @ deq.abs().T,
            xr @ deq.T + bd,
            (amax_r / 254.0) @ deq.abs().T,
            xd.abs() @ wd.abs().T + bd.abs(),
        ]
        for o in outs:
            out_parts.append(o.numpy().astype('<f8').tobytes())
        out_parts.append(q.to(torch.int8).numpy().tobytes())
        out_parts.append(scale.numpy().astype('<f4').tobytes())
        s8 = (amax / 448.0).numpy().astype(np.float32)   # float32, as at pack time
        wn = w.numpy()
        q8c = np.zeros(wn.shape, dtype=np.uint8)
        for o in range(m):
            if s8[o] > 0:
                q8c[o] = e4m3((wn[o] / s8[o]).astype(np.float32))
        mag8 = E4M3[q8c & 0x7f] * np.where(q8c & 0x80, -1.0, 1.0)
        deq8 = torch.from_numpy(mag8 * s8.astype(np.float64)[:, None])
        out_parts.append((bf(x) @ deq8.T + bd).numpy().astype('<f8').tobytes())
        out_parts.append(q8c.tobytes())
        out_parts.append(s8.astype('<f4').tobytes())
    assert off == len(raw), 'trailing bytes in cases file'
    with open(dst, 'wb') as f:
        for p in out_parts:
            f.write(p)


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""PyTorch reference computations for the kernel tests in tests/ops.

usage: ops_ref.py DIR
Reads DIR/cases.json (written by the C++ test) and, for every case, its input files (raw
little-endian arrays) from DIR; writes each case's output to DIR/<case["out"]>.

Every op is computed independently of the C++ code, following the Hugging Face modelling code:
  rms_norm     Qwen2RMSNorm: weight * (x * rsqrt(mean(x^2) + eps)), fp32
  layer_norm   torch.nn.functional.layer_norm
  silu_mul     silu(gate) * up, gate/up the two halves of each input row
  gelu_erf     torch.nn.functional.gelu (exact, erf)
  quick_gelu   x * sigmoid(1.702 x)
  softmax      torch.softmax over the last dim
  embedding    torch.nn.functional.embedding
  argmax       torch.argmax (int32 output)
  inv_freq     1 / base ** (arange(0, dim, 2) / dim) in fp32
  rope         cos/sin of cat(freqs, freqs), x * cos + rotate_half(x) * sin; kinds: plain, mrope
               (Qwen2-VL apply_multimodal_rotary_pos_emb), vision (Qwen2-VL 2-D rotary)
  attention    softmax(q k^T * scale + dense mask) v in float64, the mask built here from the
               per-sequence description (causal, bidirectional spans, full); grouped-query heads
               via repeat_interleave; optional bf16 rounding of k/v first
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

NP_TYPES = {'f32': '<f4', 'i32': '<i4', 'bf16': '<u2'}


def load(d, spec):
    a = np.fromfile(os.path.join(d, spec['file']), dtype=NP_TYPES[spec['dtype']])
    a = a.reshape(spec['shape'])
    if spec['dtype'] == 'bf16':
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).float()
    return torch.from_numpy(a.copy())


def save(d, name, t):
    arr = t.detach().cpu().numpy()
    if arr.dtype in (np.int64, np.int32):
        arr.astype('<i4').tofile(os.path.join(d, name))
    else:
        arr.astype('<f4').tofile(os.path.join(d, name))


def hf_inv_freq(dim, base):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, pos, p):
    """x: [n, heads, hd] float32; pos: [components, n] int32."""
    hd = p['head_dim']
    kind = p['kind']
    if kind == 'plain':
        inv = hf_inv_freq(hd, p['theta'])
        freqs = (inv[:, None] @ pos[0].float()[None, :]).transpose(0, 1)  # [n, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    elif kind == 'mrope':
        inv = hf_inv_freq(hd, p['theta'])
        n = pos.shape[1]
        inv_e = inv[None, None, :, None].float().expand(3, 1, -1, 1)
        pos_e = pos.float()[:, None, None, :]  # [3, 1, 1, n]
        freqs = (inv_e @ pos_e).transpose(2, 3)  # [3, 1, n, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos3, sin3 = emb.cos(), emb.sin()
        section = list(p['section']) * 2
        cos = torch.cat([m[i % 3] for i, m in enumerate(cos3.split(section, dim=-1))], dim=-1)
        sin = torch.cat([m[i % 3] for i, m in enumerate(sin3.split(section, dim=-1))], dim=-1)
        cos, sin = cos[0], sin[0]  # [n, hd]
        assert cos.shape == (n, hd)
    elif kind == 'vision':
        inv = hf_inv_freq(hd // 2, p['theta'])  # VisionRotaryEmbedding(head_dim // 2)
        max_grid = int(pos.max().item()) + 1
        seq = torch.arange(max_grid, dtype=inv.dtype)
        full = torch.outer(seq, inv)  # [max_grid, hd/4]
        rpe = full[pos.t().long()].flatten(1)  # [n, hd/2] = [row*inv, col*inv]
        emb = torch.cat((rpe, rpe), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    else:
        raise ValueError(kind)
    cos, sin = cos[:, None, :].float(), sin[:, None, :].float()
    return (x * cos) + (rotate_half(x) * sin)


def attention(q, k, v, p):
    nh, nkv, hd = p['n_heads'], p['n_kv_heads'], p['head_dim']
    g = nh // nkv
    scale = p['scale']
    if p.get('bf16_kv'):
        k = k.to(torch.bfloat16).float()
        v = v.to(torch.bfloat16).float()
    out = torch.zeros(q.shape[0], nh, hd, dtype=torch.float64)
    for s in p['seqs']:
        nq, L = s['n_q'], s['kv_len']
        if nq == 0:
            continue
        qs = q[s['q_begin']:s['q_begin'] + nq].double()  # [nq, nh, hd]
        ks = k[s['kv_off']:s['kv_off'] + L].double().repeat_interleave(g, dim=1)  # [L, nh, hd]
        vs = v[s['kv_off']:s['kv_off'] + L].double().repeat_interleave(g, dim=1)
        allowed = torch.zeros(nq, L, dtype=torch.bool)
        if s['kind'] == 'full':
            allowed[:] = True
        else:
            qpos = torch.arange(L - nq, L)
            kpos = torch.arange(L)
            allowed = kpos[None, :] <= qpos[:, None]
            for b, e in s['spans']:
                inq = (qpos >= b) & (qpos < e)
                ink = (kpos >= b) & (kpos < e)
                allowed = allowed | (inq[:, None] & ink[None, :])
        mask = torch.zeros(nq, L, dtype=torch.float64)
        mask[~allowed] = float('-inf')
        scores = torch.einsum('qhd,khd->hqk', qs, ks) * scale + mask[None]
        probs = torch.softmax(scores, dim=-1)
        out[s['q_begin']:s['q_begin'] + nq] = torch.einsum('hqk,khd->qhd', probs, vs)
    return out


def run_case(d, c):
    op, p = c['op'], c.get('params', {})
    x = {k: load(d, spec) for k, spec in c.get('inputs', {}).items()}
    if op == 'rms_norm':
        h = x['x']
        var = h.pow(2).mean(-1, keepdim=True)
        return x['w'] * (h * torch.rsqrt(var + p['eps']))
    if op == 'layer_norm':
        return F.layer_norm(x['x'], (x['x'].shape[-1],), x['w'], x['b'], p['eps'])
    if op == 'silu_mul':
        gu = x['x']
        inter = gu.shape[-1] // 2
        return F.silu(gu[:, :inter]) * gu[:, inter:]
    if op == 'gelu_erf':
        return F.gelu(x['x'])
    if op == 'quick_gelu':
        return x['x'] * torch.sigmoid(1.702 * x['x'])
    if op == 'softmax':
        return torch.softmax(x['x'], dim=-1)
    if op == 'embedding':
        return F.embedding(x['ids'].long(), x['table'])
    if op == 'argmax':
        return torch.argmax(x['x']).to(torch.int32).reshape(1)
    if op == 'inv_freq':
        return hf_inv_freq(p['dim'], p['theta'])
    if op == 'rope':
        return rope(x['x'], x['pos'], p)
    if op == 'attention':
        return attention(x['q'], x['k'], x['v'], p)
    raise ValueError('unknown op ' + op)


def main():
    d = sys.argv[1]
    torch.set_num_threads(1)
    with open(os.path.join(d, 'cases.json')) as f:
        cases = json.load(f)['cases']
    for c in cases:
        save(d, c['out'], run_case(d, c))


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Independent PyTorch reference for Qwen2.5-VL, written from the Hugging Face definition
(modeling_qwen2_5_vl.py: Qwen2_5_VisionTransformerPretrainedModel with get_window_index,
Qwen2_5_VLVisionBlock, Qwen2RMSNorm, Qwen2_5_VLMLP, Qwen2_5_VLPatchMerger; the language model is
Qwen2-VL's, shared with qwen2_vl_ref.py). Everything in float32.

The vision tower: Qwen2-VL's patch embedding and 2-D rotary; the patches reordered by window
(windows of window_size / patch_size / spatial_merge_size merged tokens per side, per frame; the
edge windows cut short) before the blocks; RMSNorm blocks with a gated SiLU MLP (biases);
attention within each window, except in fullatt_block_indexes (within each frame); the RMSNorm
merger; the merged tokens back in the image's order. Attention here is a dense masked softmax per
block: the independent formulation of what mmrt runs as segments.

usage:
  qwen2_5_vl_ref.py vision   --model DIR --pixels P.npy --grid G.npy --out FILE [--int8-blocks N]
        # float32 [n_merged_tokens, out_hidden_size]; --int8-blocks N: the first N blocks'
        # linears quantised as mmrt's int8 encoder blocks (int8_ref.int8_linear); with
        # --int8-attention their attention scores too (int8_ref.int8_attention)
  qwen2_5_vl_ref.py windows  --model DIR --grid G.npy --out FILE
        # int64: window_index (merged tokens), then cu_window_seqlens (deduplicated), then the
        # count of each (the two lengths last)
  qwen2_5_vl_ref.py logits|generate|hidden --model DIR --ids ... [--pixels P --grid G]
        [--video-pixels V --video-grid VG --second-per-grid S1,..] [--out FILE] [--max-new N]
        # as qwen2_vl_ref.py, with this tower and time-scaled video positions
        # (tokens_per_second from config.json)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int8_ref import int8_attention_segments, int8_linear  # noqa: E402
from qwen2_vl_ref import Qwen2VLFull, Qwen2VLText, Qwen2VLVision, parse_ids  # noqa: E402


def rms_norm(x, w, eps=1e-6):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


class Qwen25VLVision:
    def __init__(self, model_dir, weights):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        v = cfg["vision_config"]
        self.w = weights
        self.embed = v["hidden_size"]
        self.depth = v["depth"]
        self.n_heads = v["num_heads"]
        self.hd = self.embed // self.n_heads
        self.merge = v.get("spatial_merge_size", 2)
        self.patch = v.get("patch_size", 14)
        self.window_size = v.get("window_size", 112)
        self.fullatt = set(v.get("fullatt_block_indexes", [7, 15, 23, 31]))
        self.int8_blocks = 0  # the first N blocks' linears as mmrt's int8 encoder blocks
        self.int8_attention = False  # their attention scores too (int8_ref.int8_attention)

    def rot_pos_emb(self, grid):
        # Qwen2-VL's (the same VisionRotaryEmbedding and position ids)
        return Qwen2VLVision.rot_pos_emb(self, grid)

    def window_index(self, grid):
        """HF get_window_index, as written there (padding with -100, then dropped)."""
        window_index, cu = [], [0]
        base = 0
        ws = self.window_size // self.merge // self.patch
        unit = self.merge * self.merge
        for t, h, w in grid:
            gh, gw = h // self.merge, w // self.merge
            index = torch.arange(t * gh * gw).reshape(t, gh, gw)
            pad_h, pad_w = ws - gh % ws, ws - gw % ws
            nh, nw = (gh + pad_h) // ws, (gw + pad_w) // ws
            padded = torch.nn.functional.pad(index, (0, pad_w, 0, pad_h), "constant", -100)
            padded = padded.reshape(t, nh, ws, nw, ws).permute(0, 1, 3, 2, 4).reshape(t, nh * nw, ws, ws)
            seqlens = (padded != -100).sum([2, 3]).reshape(-1)
            padded = padded.reshape(-1)
            window_index.append(padded[padded != -100] + base)
            cu.extend((seqlens.cumsum(0) * unit + cu[-1]).tolist())
            base += t * gh * gw
        cu = torch.unique_consecutive(torch.tensor(cu, dtype=torch.int64))
        return torch.cat(window_index), cu

    def forward(self, pixels, grid):
        w = self.w
        pw = w["visual.patch_embed.proj.weight"]
        x = pixels @ pw.reshape(pw.shape[0], -1).T
        N = x.shape[0]
        unit = self.merge * self.merge
        rot = self.rot_pos_emb(grid)
        widx, cu_window = self.window_index(grid)
        x = x.reshape(N // unit, unit, -1)[widx].reshape(N, -1)
        rot = rot.reshape(N // unit, unit, -1)[widx].reshape(N, -1)
        emb = torch.cat((rot, rot), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        cu_frame = [0]
        for t, h, ww in grid:
            for _ in range(t):
                cu_frame.append(cu_frame[-1] + h * ww)

        def mask_of(cu):
            m = torch.full((N, N), float("-inf"))
            for a, b in zip(cu[:-1], cu[1:]):
                m[a:b, a:b] = 0
            return m

        cus = {"window": cu_window.tolist(), "frame": cu_frame}
        masks = {"window": mask_of(cus["window"]), "frame": mask_of(cu_frame)}
        for i in range(self.depth):
            p = f"visual.blocks.{i}."

            def lin(t, name):
                if i < self.int8_blocks:
                    return int8_linear(t, w[p + name + ".weight"], w[p + name + ".bias"])
                return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            h = rms_norm(x, w[p + "norm1.weight"])
            qkv = lin(h, "attn.qkv")
            q, k, v = qkv.reshape(N, 3, self.n_heads, self.hd).permute(1, 0, 2, 3).unbind(0)
            q = q * cos[:, None] + Qwen2VLText.rotate_half(q) * sin[:, None]
            k = k * cos[:, None] + Qwen2VLText.rotate_half(k) * sin[:, None]
            kind = "frame" if i in self.fullatt else "window"
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            if i < self.int8_blocks and self.int8_attention:
                o = int8_attention_segments(q, k, v, self.hd ** -0.5, cus[kind])
            else:
                o = torch.softmax(q @ k.transpose(1, 2) / (self.hd ** 0.5) + masks[kind], dim=-1) @ v
            o = o.transpose(0, 1).reshape(N, -1)
            x = x + lin(o, "attn.proj")
            h = rms_norm(x, w[p + "norm2.weight"])
            gated = torch.nn.functional.silu(lin(h, "mlp.gate_proj")) * lin(h, "mlp.up_proj")
            x = x + lin(gated, "mlp.down_proj")
        x = rms_norm(x, w["visual.merger.ln_q.weight"])
        x = x.reshape(-1, self.embed * unit)
        x = x @ w["visual.merger.mlp.0.weight"].T + w["visual.merger.mlp.0.bias"]
        x = torch.nn.functional.gelu(x)
        x = x @ w["visual.merger.mlp.2.weight"].T + w["visual.merger.mlp.2.bias"]
        return x[torch.argsort(widx)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["vision", "windows", "logits", "generate", "hidden"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", default="")
    ap.add_argument("--pixels")
    ap.add_argument("--grid")
    ap.add_argument("--video-pixels")
    ap.add_argument("--video-grid")
    ap.add_argument("--second-per-grid", help="one per video, comma separated (default 1.0 each)")
    ap.add_argument("--out")
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--int8-blocks", type=int, default=0,
                    help="vision: the first N blocks' linears as mmrt's int8 encoder blocks")
    ap.add_argument("--int8-attention", action="store_true",
                    help="vision: the int8 blocks' attention scores in int8 too")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    grid = np.load(a.grid).astype(np.int64).tolist() if a.grid else None
    pixels = torch.from_numpy(np.load(a.pixels).astype(np.float32)) if a.pixels else None
    vgrid = np.load(a.video_grid).astype(np.int64).tolist() if a.video_grid else None
    vpixels = torch.from_numpy(np.load(a.video_pixels).astype(np.float32)) if a.video_pixels else None
    full = Qwen2VLFull(a.model, Qwen25VLVision)
    if a.mode == "windows":
        idx, cu = full.vision.window_index(grid)
        np.concatenate([idx.numpy(), cu.numpy(), [len(idx), len(cu)]]).astype(np.int64).tofile(a.out)
        return
    if a.mode == "vision":
        full.vision.int8_blocks = a.int8_blocks
        full.vision.int8_attention = a.int8_attention
        full.vision.forward(pixels, grid).numpy().astype(np.float32).tofile(a.out)
        return
    full.tokens_per_second = full.cfg["vision_config"].get("tokens_per_second", 4)
    if vgrid:
        full.second_per_grid = ([float(s) for s in a.second_per_grid.split(",")]
                                if a.second_per_grid else [1.0] * len(vgrid))
    ids = parse_ids(open(a.ids[1:]).read() if a.ids.startswith("@") else a.ids)
    media = dict(video_pixels=vpixels, video_grid=vgrid)
    if a.mode == "logits":
        full.forward(ids, pixels, grid, **media).numpy().astype(np.float32).tofile(a.out)
    elif a.mode == "hidden":
        _, states = full.forward(ids, pixels, grid, collect=True, **media)
        states.numpy().astype(np.float32).tofile(a.out)
    else:
        json.dump(full.generate(ids, pixels, grid, a.max_new, **media), sys.stdout)
        print()


if __name__ == "__main__":
    main()

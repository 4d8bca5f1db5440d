#!/usr/bin/env python3
"""Independent PyTorch reference for the Qwen2-VL language model, written from the Hugging Face
definition (modeling_qwen2_vl.py: Qwen2RMSNorm, Qwen2MLP, Qwen2VLAttention with M-RoPE,
Qwen2VLDecoderLayer, Qwen2VLModel) so mmrt's C++ runtime can be checked against it. It reads a
checkpoint directory in the Hugging Face layout (config.json + safetensors, sharded or not, old or
new tensor prefixes) with nothing but json/numpy/torch, and computes everything in float32.

The vision tower (Qwen2VisionTransformerPretrainedModel: Conv3d patch embedding, 2-D rotary,
per-frame bidirectional attention, PatchMerger) and get_rope_index (M-RoPE positions of a prompt
with images and videos, in order of appearance; Qwen2.5-VL's scaled video time index as well)
are implemented here too, from the same HF files. A video is a grid with t > 1: attention is
block-diagonal per 2-frame slice (cu_seqlens repeats h*w per t) and the rotary positions of the
(h, w) grid repeat for every slice.

usage:
  qwen2_vl_ref.py logits   --model DIR --ids 1,2,3 --out FILE      # float32 [S, vocab] logits
  qwen2_vl_ref.py generate --model DIR --ids 1,2,3 --max-new N     # greedy ids, JSON on stdout
  qwen2_vl_ref.py hidden   --model DIR --ids 1,2,3 --out FILE      # float32 [L+1, S, hidden]:
        the embeddings and the output of every decoder layer (for naming the failing layer)
  qwen2_vl_ref.py vision   --model DIR --pixels P.npy --grid G.npy --out FILE [--int8-blocks N]
        # float32 [n_merged_tokens, hidden] image embeddings (pixels [N,1176], grid [n_img,3]);
        # --int8-blocks N: the first N blocks' linears quantised as mmrt's int8 encoder blocks
        # (weights per output channel, x per row, integer sums; see int8_linear); with
        # --int8-attention their attention scores too (int8_attention)
  qwen2_vl_ref.py hidden|logits ... --int8-decoder   # the decoder layers' linears the same way
        # (mmrt's --weights int8 --int8-prefill q8 on a prompt chunk of more than 8 tokens)
  qwen2_vl_ref.py positions --model DIR --ids ... --grid G.npy --out FILE
        # int64 [3, S] M-RoPE position ids followed by rope_delta (get_rope_index)
  With --pixels/--grid, `logits` and `generate` run the full multimodal model: the ids must
  already hold the expanded <|image_pad|> runs.
  Videos: --video-pixels V.npy (pixel_values_videos [N, 1176]) --video-grid VG.npy
  (video_grid_thw [n_videos, 3]) with `logits`, `generate`, `hidden` and `positions` (with or
  without images): the video embeddings replace the <|video_pad|> runs (config video_token_id),
  get_rope_index walks images and videos in order of appearance; --video-keep K.npy (logits,
  generate; one video) then removes the video rows not kept (token pruning: the kept rows keep
  the full prompt's positions, later tokens too). `vision` encodes the video
  when --pixels is absent. `positions` takes --second-per-grid S1,S2,.. (one per video) for
  Qwen2.5-VL's time index t * second_per_grid_t * tokens_per_second (--tokens-per-second,
  default 2), computed as HF does in float32 (--interval f32) or in double (--interval f64).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

from int8_ref import int8_attention_segments, int8_linear

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I32": np.int32,
          "I64": np.int64, "I8": np.int8, "U8": np.uint8}


def read_safetensors(path):
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data, dtype=DTYPES[info["dtype"]], count=(e - b) // np.dtype(
            DTYPES[info["dtype"]]).itemsize, offset=base + b).reshape(info["shape"])
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(arr.astype(np.float32))
    return out


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for fn in files:
        tensors.update(read_safetensors(os.path.join(model_dir, fn)))
    # Normalise new-style names (model.language_model.*, model.visual.*) to the original ones.
    norm = {}
    for k, v in tensors.items():
        if k.startswith("model.language_model."):
            k = "model." + k[len("model.language_model."):]
        elif k.startswith("model.visual."):
            k = "visual." + k[len("model.visual."):]
        norm[k] = v
    return norm


def text_config(cfg):
    t = dict(cfg)
    if "text_config" in cfg:
        t.update(cfg["text_config"])
    return t


class Qwen2VLText:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = text_config(json.load(f))
        self.w = load_weights(model_dir)
        c = self.cfg
        self.hidden = c["hidden_size"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c["num_key_value_heads"]
        self.head_dim = self.hidden // self.n_heads
        self.n_layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        rs = c.get("rope_scaling") or {}
        self.mrope_section = rs.get("mrope_section")
        lm = self.w.get("lm_head.weight")
        self.lm_head = lm if lm is not None else self.w["model.embed_tokens.weight"]
        self.int8 = False  # the decoder layers' linears as mmrt's int8 prefill (int8_linear)

    def linear(self, x, name, bias=True):
        w, b = self.w[name + ".weight"], self.w[name + ".bias"] if bias else None
        if getattr(self, "int8", False):  # (qwen2_audio_ref's text model shares layer())
            return int8_linear(x, w, b)
        return x @ w.T + b if bias else x @ w.T

    def rms_norm(self, x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + self.eps))

    def rotary(self, position_ids):
        # position_ids: [3, S] -> cos, sin [3, S, head_dim] as Qwen2VLRotaryEmbedding
        dim = self.head_dim
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        freqs = position_ids[:, :, None].float() * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def apply_mrope(self, q, k, cos, sin):
        # q: [H, S, D]; cos/sin [3, S, D]
        if self.mrope_section:
            sec = list(self.mrope_section) * 2
            cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1)
            sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1)
        else:
            cos, sin = cos[0], sin[0]
        cos, sin = cos[None], sin[None]
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin

    def layer(self, i, x, cos, sin):
        p = f"model.layers.{i}."
        w = self.w
        S = x.shape[0]
        h = self.rms_norm(x, w[p + "input_layernorm.weight"])
        q = self.linear(h, p + "self_attn.q_proj")
        k = self.linear(h, p + "self_attn.k_proj")
        v = self.linear(h, p + "self_attn.v_proj")
        q = q.view(S, self.n_heads, self.head_dim).transpose(0, 1)
        k = k.view(S, self.n_kv, self.head_dim).transpose(0, 1)
        v = v.view(S, self.n_kv, self.head_dim).transpose(0, 1)
        q, k = self.apply_mrope(q, k, cos, sin)
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        scores = (q @ k.transpose(1, 2)) * (self.head_dim ** -0.5)
        mask = torch.full((S, S), float("-inf")).triu(1)
        attn = torch.softmax(scores + mask, dim=-1, dtype=torch.float32)
        o = (attn @ v).transpose(0, 1).reshape(S, self.hidden)
        x = x + self.linear(o, p + "self_attn.o_proj", bias=False)
        h = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate = self.linear(h, p + "mlp.gate_proj", bias=False)
        up = self.linear(h, p + "mlp.up_proj", bias=False)
        x = x + self.linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj", bias=False)
        return x

    def forward(self, ids, position_ids=None, inputs_embeds=None, collect=False):
        ids = torch.tensor(ids, dtype=torch.int64)
        x = self.w["model.embed_tokens.weight"][ids] if inputs_embeds is None else inputs_embeds
        S = x.shape[0]
        if position_ids is None:
            position_ids = torch.arange(S)[None].expand(3, S)
        cos, sin = self.rotary(position_ids)
        states = [x]
        for i in range(self.n_layers):
            x = self.layer(i, x, cos, sin)
            states.append(x)
        x = self.rms_norm(x, self.w["model.norm.weight"])
        logits = x @ self.lm_head.T
        return (logits, torch.stack(states)) if collect else logits


class Qwen2VLVision:
    def __init__(self, model_dir, weights):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        v = cfg["vision_config"]
        self.w = weights
        self.embed = v.get("embed_dim", v.get("hidden_size"))
        self.depth = v["depth"]
        self.n_heads = v["num_heads"]
        self.hd = self.embed // self.n_heads
        self.merge = v.get("spatial_merge_size", 2)
        self.act = v.get("hidden_act", "quick_gelu")
        self.int8_blocks = 0  # the first N blocks' linears in int8 (int8_linear)
        self.int8_attention = False  # their attention scores too (int8_attention)

    def rot_pos_emb(self, grid):
        pos_ids = []
        m = self.merge
        for t, h, w in grid:
            hpos = torch.arange(h).unsqueeze(1).expand(-1, w)
            hpos = hpos.reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
            wpos = torch.arange(w).unsqueeze(0).expand(h, -1)
            wpos = wpos.reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
            pos_ids.append(torch.stack([hpos, wpos], dim=-1).repeat(t, 1))
        pos_ids = torch.cat(pos_ids, dim=0)
        max_grid = int(max(max(h, w) for _, h, w in grid))
        dim = self.hd // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        seq = torch.arange(max_grid, dtype=inv_freq.dtype)
        freqs = torch.outer(seq, inv_freq)
        return freqs[pos_ids].flatten(1)

    @staticmethod
    def layer_norm(x, w, b):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=1e-6)

    def forward(self, pixels, grid):
        w = self.w
        pw = w["visual.patch_embed.proj.weight"]
        x = pixels @ pw.reshape(pw.shape[0], -1).T
        rot = self.rot_pos_emb(grid)
        emb = torch.cat((rot, rot), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        lens = []
        for t, h, ww in grid:
            lens += [h * ww] * t
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        N = x.shape[0]
        for i in range(self.depth):
            p = f"visual.blocks.{i}."

            def lin(t, name):
                if i < self.int8_blocks:
                    return int8_linear(t, w[p + name + ".weight"], w[p + name + ".bias"])
                return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            h = self.layer_norm(x, w[p + "norm1.weight"], w[p + "norm1.bias"])
            qkv = lin(h, "attn.qkv")
            q, k, v = qkv.reshape(N, 3, self.n_heads, self.hd).permute(1, 0, 2, 3).unbind(0)
            q = q * cos[:, None] + Qwen2VLText.rotate_half(q) * sin[:, None]
            k = k * cos[:, None] + Qwen2VLText.rotate_half(k) * sin[:, None]
            mask = torch.full((N, N), float("-inf"))
            for a, b in zip(cu[:-1], cu[1:]):
                mask[a:b, a:b] = 0
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            if i < self.int8_blocks and self.int8_attention:
                o = int8_attention_segments(q, k, v, self.hd ** -0.5, cu)
            else:
                o = torch.softmax(q @ k.transpose(1, 2) / (self.hd ** 0.5) + mask, dim=-1) @ v
            o = o.transpose(0, 1).reshape(N, -1)
            x = x + lin(o, "attn.proj")
            h = self.layer_norm(x, w[p + "norm2.weight"], w[p + "norm2.bias"])
            h = lin(h, "mlp.fc1")
            h = h * torch.sigmoid(1.702 * h) if self.act == "quick_gelu" else torch.nn.functional.gelu(h)
            x = x + lin(h, "mlp.fc2")
        x = self.layer_norm(x, w["visual.merger.ln_q.weight"], w["visual.merger.ln_q.bias"])
        x = x.reshape(-1, self.embed * self.merge * self.merge)
        x = x @ w["visual.merger.mlp.0.weight"].T + w["visual.merger.mlp.0.bias"]
        x = torch.nn.functional.gelu(x)
        return x @ w["visual.merger.mlp.2.weight"].T + w["visual.merger.mlp.2.bias"]


def get_rope_index(cfg, ids, grid, video_grid=None, second_per_grid_ts=None,
                   tokens_per_second=2, interval="f32"):
    """HF get_rope_index for one unpadded sequence: images (`grid`, image_grid_thw) and videos
    (`video_grid`, video_grid_thw) in order of appearance, each counted by a <|vision_start|>
    followed by its pad (Qwen2VLModel.get_rope_index). With second_per_grid_ts (one per video)
    it is Qwen2.5-VL's: a video's time index is (arange(t) * second_per_grid_t *
    tokens_per_second).long(), which HF computes in float32 (second_per_grid_ts is a float32
    tensor, the product of an int64 arange with it is float32); interval="f64" computes the
    same product in double instead. Images keep t index 0."""
    image_token = cfg.get("image_token_id", 151655)
    video_token = cfg.get("video_token_id", 151656)
    vision_start = cfg.get("vision_start_token_id", 151652)
    merge = cfg["vision_config"].get("spatial_merge_size", 2)
    grid = list(grid or [])
    video_grid = list(video_grid or [])
    input_tokens = list(ids)
    vision_starts = [i for i, t in enumerate(input_tokens) if t == vision_start]
    following = [input_tokens[i + 1] for i in vision_starts if i + 1 < len(input_tokens)]
    image_nums = sum(1 for t in following if t == image_token)
    video_nums = sum(1 for t in following if t == video_token)
    spg = None
    if second_per_grid_ts is not None:
        spg = torch.tensor(list(second_per_grid_ts), dtype=torch.float32)
    llm_pos_ids_list = []
    st = 0
    image_index = video_index = 0
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        if image_token in input_tokens and remain_images > 0:
            ed_image = input_tokens.index(image_token, st)
        else:
            ed_image = len(input_tokens) + 1
        if video_token in input_tokens and remain_videos > 0:
            ed_video = input_tokens.index(video_token, st)
        else:
            ed_video = len(input_tokens) + 1
        if ed_image < ed_video:
            t, h, w = grid[image_index]
            image_index += 1
            remain_images -= 1
            ed = ed_image
            second_per_grid_t = 0.0
            second_per_grid_t_f64 = 0.0
        else:
            t, h, w = video_grid[video_index]
            if spg is not None:
                second_per_grid_t = spg[video_index]
                second_per_grid_t_f64 = float(second_per_grid_ts[video_index])
            video_index += 1
            remain_videos -= 1
            ed = ed_video
        llm_grid_t, llm_grid_h, llm_grid_w = int(t), int(h) // merge, int(w) // merge
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        if spg is None:  # Qwen2-VL: the raw slice index
            t_index = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w).flatten()
        elif interval == "f32":  # Qwen2.5-VL as HF computes it
            expanded = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w)
            time_tensor = expanded * second_per_grid_t * tokens_per_second
            t_index = time_tensor.long().flatten()
        else:  # the same in double
            per_t = [int(k * second_per_grid_t_f64 * tokens_per_second) for k in range(llm_grid_t)]
            t_index = torch.tensor(per_t, dtype=torch.int64).view(-1, 1).expand(
                -1, llm_grid_h * llm_grid_w).flatten()
        h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
        w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(input_tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        text_len = len(input_tokens) - st
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
    pos = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
    delta = int(pos.max()) + 1 - len(input_tokens)
    return pos, delta


class Qwen2VLFull:
    """Text model + vision tower: the embeddings of <|image_pad|> replaced by the image features
    and those of <|video_pad|> by the video features (Qwen2VLForConditionalGeneration.forward:
    each kind through the vision tower on its own, masked_scatter in order)."""

    def __init__(self, model_dir, vision_class=None):
        self.text = Qwen2VLText(model_dir)
        self.vision = (vision_class or Qwen2VLVision)(model_dir, self.text.w)
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        # Qwen2.5-VL: second_per_grid_ts (one per video) and tokens_per_second for get_rope_index
        self.second_per_grid = None
        self.tokens_per_second = 2

    def media_features(self, pixels, grid, video_pixels=None, video_grid=None):
        img = self.vision.forward(pixels, grid) if pixels is not None else None
        vid = self.vision.forward(video_pixels, video_grid) if video_pixels is not None else None
        return img, vid

    def embed(self, seq, feats):
        img, vid = feats
        ids = torch.tensor(seq)
        emb = self.text.w["model.embed_tokens.weight"][ids].clone()
        if img is not None:
            emb[ids == self.cfg.get("image_token_id", 151655)] = img
        if vid is not None:
            emb[ids == self.cfg.get("video_token_id", 151656)] = vid
        return emb

    def prompt(self, ids, pixels, grid, video_pixels=None, video_grid=None, video_keep=None):
        """Prompt embeddings and get_rope_index positions; with video_keep (indices of the kept
        tokens among the video's <|video_pad|> run, one video) the other video rows are removed
        afterwards, so the kept ones keep the positions of the full prompt."""
        feats = self.media_features(pixels, grid, video_pixels, video_grid)
        emb = self.embed(ids, feats)
        pos, delta = get_rope_index(self.cfg, ids, grid, video_grid, self.second_per_grid,
                                    self.tokens_per_second)
        ids = list(ids)
        if video_keep is not None:
            vt = self.cfg.get("video_token_id", 151656)
            rows = [i for i, t in enumerate(ids) if t == vt]
            drop = set(rows) - {rows[k] for k in video_keep}
            keep = [i for i in range(len(ids)) if i not in drop]
            delta += len(ids) - len(keep)  # later tokens: the same positions as unpruned
            ids, emb, pos = [ids[i] for i in keep], emb[keep], pos[:, keep]
        return ids, emb, pos, delta

    def forward(self, ids, pixels, grid, collect=False, video_pixels=None, video_grid=None,
                video_keep=None):
        ids, emb, pos, _ = self.prompt(ids, pixels, grid, video_pixels, video_grid, video_keep)
        return self.text.forward(ids, position_ids=pos, inputs_embeds=emb, collect=collect)

    def generate(self, ids, pixels, grid, n, video_pixels=None, video_grid=None, video_keep=None):
        """Greedy decoding: prefill with get_rope_index positions, then cache index + delta."""
        ids, emb0, pos, delta = self.prompt(ids, pixels, grid, video_pixels, video_grid,
                                            video_keep)
        seq = list(ids)
        out = []
        for _ in range(n):
            new = self.text.w["model.embed_tokens.weight"][torch.tensor(seq[len(ids):], dtype=torch.long)]
            emb = torch.cat([emb0, new], dim=0)
            extra = torch.arange(len(ids), len(seq)).view(1, -1).expand(3, -1) + delta
            full = torch.cat([pos, extra], dim=1)
            nxt = int(torch.argmax(self.text.forward(seq, position_ids=full, inputs_embeds=emb)[-1]))
            out.append(nxt)
            seq.append(nxt)
        return out


def parse_ids(s):
    return [int(t) for t in s.replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["logits", "generate", "hidden", "vision", "positions"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", default="", help="comma/space separated prompt ids, or @FILE")
    ap.add_argument("--pixels", help="pixel_values .npy [N, 1176] float32")
    ap.add_argument("--grid", help="image_grid_thw .npy [n_images, 3] int64")
    ap.add_argument("--video-pixels", help="pixel_values_videos .npy [N, 1176] float32")
    ap.add_argument("--video-grid", help="video_grid_thw .npy [n_videos, 3] int64")
    ap.add_argument("--video-keep", help="logits/generate: kept video tokens .npy int64 (one video)")
    ap.add_argument("--second-per-grid", help="positions: Qwen2.5-VL second_per_grid_ts, comma separated")
    ap.add_argument("--tokens-per-second", type=int, default=2)
    ap.add_argument("--interval", choices=["f32", "f64"], default="f32")
    ap.add_argument("--out")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--int8-blocks", type=int, default=0,
                    help="vision: the first N blocks' linears as mmrt's int8 encoder blocks")
    ap.add_argument("--int8-attention", action="store_true",
                    help="vision: the int8 blocks' attention scores in int8 too (int8_attention)")
    ap.add_argument("--int8-decoder", action="store_true",
                    help="text logits/hidden: the decoder layers' linears as mmrt's int8 prefill "
                         "(--int8-prefill q8: weights per output channel, x per token)")
    a = ap.parse_args()
    ids_text = open(a.ids[1:]).read() if a.ids.startswith("@") else a.ids
    ids = parse_ids(ids_text)
    torch.set_grad_enabled(False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    grid = np.load(a.grid).astype(np.int64).tolist() if a.grid else None
    pixels = torch.from_numpy(np.load(a.pixels).astype(np.float32)) if a.pixels else None
    vgrid = np.load(a.video_grid).astype(np.int64).tolist() if a.video_grid else None
    vpixels = torch.from_numpy(np.load(a.video_pixels).astype(np.float32)) if a.video_pixels else None
    if a.mode == "positions":
        with open(os.path.join(a.model, "config.json")) as f:
            cfg = json.load(f)
        spg = [float(x) for x in a.second_per_grid.split(",")] if a.second_per_grid else None
        pos, delta = get_rope_index(cfg, ids, grid or [], vgrid or [], spg, a.tokens_per_second,
                                    a.interval)
        np.concatenate([pos.numpy().astype(np.int64).ravel(), [delta]]).astype(np.int64).tofile(a.out)
        return
    if a.mode == "vision" or pixels is not None or vpixels is not None:
        full = Qwen2VLFull(a.model)
        media = dict(video_pixels=vpixels, video_grid=vgrid)
        keep = np.load(a.video_keep).astype(np.int64).tolist() if a.video_keep else None
        if a.mode == "vision":
            full.vision.int8_blocks = a.int8_blocks
            full.vision.int8_attention = a.int8_attention
            out = full.vision.forward(pixels, grid) if pixels is not None else full.vision.forward(vpixels, vgrid)
            out.numpy().astype(np.float32).tofile(a.out)
        elif a.mode == "logits":
            full.forward(ids, pixels, grid, video_keep=keep, **media).numpy().astype(np.float32).tofile(a.out)
        elif a.mode == "hidden":
            _, states = full.forward(ids, pixels, grid, collect=True, **media)
            states.numpy().astype(np.float32).tofile(a.out)
        else:
            json.dump(full.generate(ids, pixels, grid, a.max_new, video_keep=keep, **media), sys.stdout)
            print()
        return
    m = Qwen2VLText(a.model)
    m.int8 = a.int8_decoder
    if a.mode == "logits":
        m.forward(ids).numpy().astype(np.float32).tofile(a.out)
    elif a.mode == "hidden":
        _, states = m.forward(ids, collect=True)
        states.numpy().astype(np.float32).tofile(a.out)
    else:
        seq = list(ids)
        out = []
        for _ in range(a.max_new):
            nxt = int(torch.argmax(m.forward(seq)[-1]))
            out.append(nxt)
            seq.append(nxt)
        json.dump(out, sys.stdout)
        print()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Independent PyTorch reference for the Qwen2-VL language model, written from the Hugging Face
definition (modeling_qwen2_vl.py: Qwen2RMSNorm, Qwen2MLP, Qwen2VLAttention with M-RoPE,
Qwen2VLDecoderLayer, Qwen2VLModel) so mmrt's C++ runtime can be checked against it. It reads a
checkpoint directory in the Hugging Face layout (config.json + safetensors, sharded or not, old or
new tensor prefixes) with nothing but json/numpy/torch, and computes everything in float32.

usage:
  qwen2_vl_ref.py logits   --model DIR --ids 1,2,3 --out FILE      # float32 [S, vocab] logits
  qwen2_vl_ref.py generate --model DIR --ids 1,2,3 --max-new N     # greedy ids, JSON on stdout
  qwen2_vl_ref.py hidden   --model DIR --ids 1,2,3 --out FILE      # float32 [L+1, S, hidden]:
        the embeddings and the output of every decoder layer (for naming the failing layer)
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

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
        q = h @ w[p + "self_attn.q_proj.weight"].T + w[p + "self_attn.q_proj.bias"]
        k = h @ w[p + "self_attn.k_proj.weight"].T + w[p + "self_attn.k_proj.bias"]
        v = h @ w[p + "self_attn.v_proj.weight"].T + w[p + "self_attn.v_proj.bias"]
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
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
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


def parse_ids(s):
    return [int(t) for t in s.replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["logits", "generate", "hidden"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma/space separated prompt ids, or @FILE")
    ap.add_argument("--out")
    ap.add_argument("--max-new", type=int, default=32)
    a = ap.parse_args()
    ids_text = open(a.ids[1:]).read() if a.ids.startswith("@") else a.ids
    ids = parse_ids(ids_text)
    torch.set_grad_enabled(False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    m = Qwen2VLText(a.model)
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

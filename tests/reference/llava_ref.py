#!/usr/bin/env python3
"""Independent PyTorch / numpy reference for LLaVA-1.5 (LlavaForConditionalGeneration) and
LLaVA-NeXT (LlavaNextForConditionalGeneration, llava-v1.6-mistral style), written from the
Hugging Face definitions so mmrt's C++ runtime can be checked against it:
  clip/modeling_clip.py   CLIPVisionEmbeddings (bias-free conv patch embedding, class token,
      position_embedding), pre_layrnorm, CLIPEncoderLayer (pre-LN, q/k/v/out with bias, scale
      head_dim^-0.5, fc1 -> act -> fc2); hidden_states[0] is the pre_layrnorm output and
      post_layernorm is never used by LLaVA;
  llava/modeling_llava.py   get_image_features (hidden_states[vision_feature_layer], an int or a
      list concatenated on the feature axis; "default" drops the CLS row), the projector
      linear_1 -> projector_hidden_act -> linear_2, masked_scatter into the image-token rows;
  llava_next/modeling_llava_next.py   image_size_to_num_patches, unpad_image (int(round(x, 7))),
      pack_image_features (base crop first, no newline; grid crops viewed [nph, npw, side, side,
      D], permuted to one [D, nph*side, npw*side] map, unpadded, an image_newline column per row,
      flattened row-major; a lone crop gets one trailing newline);
  image_processing_utils.py   select_best_resolution (pinpoints are (height, width));
  llava_next/processing_llava_next.py, llava/processing_llava.py   the image token counts;
  llama/modeling_llama.py, mistral/modeling_mistral.py   RMSNorm, rotate_half RoPE (inv_freq =
      theta^(-2i/head_dim), linear scaling), GQA by repeat_kv, causal mask (Mistral: and
      kv > q - sliding_window when set), SwiGLU MLP, biases only where the checkpoint has them,
      final norm, lm_head (embed_tokens when text_config or the top level ties them).
Missing config fields take the HF config classes' defaults (LlamaConfig / MistralConfig by
text_config.model_type, CLIPVisionConfig, LlavaConfig / LlavaNextConfig). Tensors may use the
original llava-hf names (language_model.model.*, language_model.lm_head.weight,
vision_tower.vision_model.*, multi_modal_projector.*, image_newline) or the newer ones
(model.language_model.*, lm_head.weight, model.vision_tower.vision_model.*,
model.multi_modal_projector.*, model.image_newline); safetensors may be sharded; F16/BF16 tensors
are widened and everything is computed in float32.

usage:
  llava_ref.py tower    --model DIR --pixels PV.npy [--image-size H,W] --out OUT.npy
        # float32 [n_tokens, text_hidden]: one image's pixel_values [n_crops, 3, S, S] through
        # CLIP + projector (+ pack_image_features for llava_next, which needs --image-size, the
        # original H,W); for llava the rows of every crop, concatenated
  llava_ref.py logits   --model DIR --ids @IDS|CSV [--pixels PV.npy [--image-size H,W]]...
                        --out OUT.npy
        # float32 [vocab]: last-token logits; the ids hold the expanded image_token_index runs,
        # filled in order by the images (--pixels/--image-size repeat, one pair per image)
  llava_ref.py hidden   --model DIR --ids ... [--pixels ...] --out OUT.npy
        # float32 [layers+1, S, hidden]: embeddings, then every decoder layer's output (no norm)
  llava_ref.py generate --model DIR --ids ... [--pixels ...] --max-new N
        # greedy ids (argmax, first index on ties; exactly N, no stop on eos), JSON on stdout
  llava_ref.py tokens   --model DIR --sizes "H,W;H,W;..."
        # JSON list: the processor's image token count per original image size (crop size from
        # preprocessor_config.json crop_size, default 336; patch_size, strategy and
        # num_additional_image_tokens from processor_config.json, defaulting to the vision
        # patch_size, the model's strategy and 1 = the CLIP class token)
  llava_ref.py chat --template mistral|vicuna|FILE [--no-generation-prompt] [--raw-content]
                    < messages.json
        # or {"batch": [{"messages": [...], "add_generation_prompt": bool}, ...]} on stdin: a
        # JSON list of the renderings
        # JSON string on stdout: messages ([{role, content: str | [{type: text, text} |
        # {type: image}]}]) rendered with jinja2 as apply_chat_template does (sandboxed,
        # trim_blocks, lstrip_blocks, loopcontrols, raise_exception, the {% generation %} tag).
        # A str content becomes [{type: text, text}] unless --raw-content. FILE is a
        # tokenizer_config.json / chat_template.json ("chat_template" key) or a raw jinja file.

Chat templates (the llava-hf hub chat_template.json texts):
  mistral  llava-hf/llava-v1.6-mistral-7b-hf: "[INST] <image>\\n{text} [/INST]" per user turn,
           "<<SYS>>\\n..\\n<</SYS>>\\n\\n" for a system turn, " {text}</s> " per assistant turn; no
           generation prompt. (An older revision of that file ended assistant turns with the
           literal "<\\s> " instead of "</s> ".)
  vicuna   llava-hf/llava-1.5-7b-hf (also llava-v1.6-vicuna): "USER: <image>\\n{text} " per turn,
           a system turn's text without a role prefix, "ASSISTANT:" as the generation prompt.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int8_ref import int8_attention, int8_linear  # noqa: E402
from qwen2_vl_ref import parse_ids, read_safetensors  # noqa: E402

# ---- HF config class defaults -------------------------------------------------------------------
LLAMA_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                      head_dim=None, max_position_embeddings=2048, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None,
                      hidden_act="silu")
MISTRAL_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=None, max_position_embeddings=4096 * 32, rms_norm_eps=1e-6,
                        rope_theta=10000.0, tie_word_embeddings=False, sliding_window=4096,
                        hidden_act="silu")
CLIP_VISION_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                            num_attention_heads=12, num_channels=3, image_size=224, patch_size=32,
                            hidden_act="quick_gelu", layer_norm_eps=1e-5)
# LlavaConfig / LlavaNextConfig build this CLIPVisionConfig when vision_config is absent.
LLAVA_VISION_FALLBACK = dict(CLIP_VISION_DEFAULTS, hidden_size=1024, intermediate_size=4096,
                             num_hidden_layers=24, num_attention_heads=16, image_size=336,
                             patch_size=14)
LLAVA_DEFAULTS = dict(image_token_index=32000, projector_hidden_act="gelu",
                      vision_feature_select_strategy="default", vision_feature_layer=-2,
                      image_seq_length=576, multimodal_projector_bias=True,
                      tie_word_embeddings=False)
LLAVA_NEXT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]

OLD_NAMES = [("language_model.model.", "lm."), ("language_model.lm_head.", "lm_head."),
             ("vision_tower.vision_model.", "vt."), ("multi_modal_projector.", "proj."),
             ("image_newline", "image_newline")]
NEW_NAMES = [("model.language_model.", "lm."), ("lm_head.", "lm_head."),
             ("model.vision_tower.vision_model.", "vt."), ("model.multi_modal_projector.", "proj."),
             ("model.image_newline", "image_newline")]


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def load_config(model_dir):
    cfg = read_json(os.path.join(model_dir, "config.json"))
    arch = (cfg.get("architectures") or [""])[0]
    kind = cfg.get("model_type") or ("llava_next" if "Next" in arch else "llava")
    if kind not in ("llava", "llava_next"):
        raise ValueError(f"not a llava / llava_next checkpoint: model_type {kind!r}")
    top = {**LLAVA_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    if "image_token_index" not in cfg and cfg.get("image_token_id") is not None:
        top["image_token_index"] = cfg["image_token_id"]
    if kind == "llava_next" and not cfg.get("image_grid_pinpoints"):
        top["image_grid_pinpoints"] = LLAVA_NEXT_PINPOINTS
    t_in = cfg.get("text_config")
    t_type = (t_in or {}).get("model_type", "llama")
    if t_type not in ("llama", "mistral"):
        raise ValueError(f"text_config.model_type {t_type!r} is not llama or mistral")
    text = {**(MISTRAL_DEFAULTS if t_type == "mistral" else LLAMA_DEFAULTS), **(t_in or {})}
    text["model_type"] = t_type
    v_in = cfg.get("vision_config")
    if v_in is not None and v_in.get("model_type", "clip_vision_model") != "clip_vision_model":
        raise ValueError(f"vision_config.model_type {v_in.get('model_type')!r} is not CLIP")
    vision = LLAVA_VISION_FALLBACK if v_in is None else {**CLIP_VISION_DEFAULTS, **v_in}
    return kind, top, text, vision


def load_weights(model_dir):
    """All tensors (sharded or not) renamed to lm.* / lm_head.* / vt.* / proj.* / image_newline."""
    index = read_json(os.path.join(model_dir, "model.safetensors.index.json"))
    files = sorted(set(index["weight_map"].values())) if index else ["model.safetensors"]
    raw = {}
    for fn in files:
        raw.update(read_safetensors(os.path.join(model_dir, fn)))
    new = any(k.startswith(("model.language_model.", "model.vision_tower.")) for k in raw)
    out = {}
    for k, v in raw.items():
        for src, dst in NEW_NAMES if new else OLD_NAMES:
            if k.startswith(src):
                out[dst + k[len(src):]] = v
                break
    return out


ACTIVATIONS = {"quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
               "gelu": F.gelu,  # exact (erf) GELU, ACT2FN["gelu"]
               "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "silu": F.silu, "relu": F.relu}


def linear(x, w, name):
    y = x @ w[name + ".weight"].T
    b = w.get(name + ".bias")
    return y if b is None else y + b


def int8_linear_named(x, w, name):
    """linear() as an int8 encoder block computes it (int8_ref.int8_linear)."""
    return int8_linear(x, w[name + ".weight"], w.get(name + ".bias"))


# ---- anyres geometry ----------------------------------------------------------------------------

def select_best_resolution(original_size, possible_resolutions):
    """image_processing_utils.select_best_resolution: (height, width) in, (height, width) out."""
    original_height, original_width = original_size
    best_fit = None
    max_effective = 0
    min_wasted = float("inf")
    for height, width in possible_resolutions:
        scale = min(width / original_width, height / original_height)
        dw, dh = int(original_width * scale), int(original_height * scale)
        effective = min(dw * dh, original_width * original_height)
        wasted = width * height - effective
        if effective > max_effective or (effective == max_effective and wasted < min_wasted):
            max_effective, min_wasted = effective, wasted
            best_fit = (height, width)
    return best_fit


def num_patches(image_size, pinpoints, tile):
    """image_size_to_num_patches: grid crops of the best resolution plus the base crop."""
    height, width = select_best_resolution(image_size, pinpoints)
    return len(range(0, height, tile)) * len(range(0, width, tile)) + 1


def unpad_image(tensor, original_size):
    """modeling_llava_next.unpad_image on a [D, h, w] map against the original (H, W)."""
    original_height, original_width = original_size
    current_height, current_width = tensor.shape[1:]
    if original_width / original_height > current_width / current_height:
        new_height = int(round(original_height * (current_width / original_width), 7))
        padding = (current_height - new_height) // 2
        return tensor[:, padding:current_height - padding, :]
    new_width = int(round(original_width * (current_height / original_height), 7))
    padding = (current_width - new_width) // 2
    return tensor[:, :, padding:current_width - padding]


def unpadded_features(height, width, patches_height, patches_width, scale_height, scale_width):
    """processing_llava_next._get_unpadded_features (the int(round(., 7)) form of current HF)."""
    current_height = patches_height * scale_height
    current_width = patches_width * scale_width
    if width / height > current_width / current_height:
        new_height = int(round(height * (current_width / width), 7))
        current_height -= (current_height - new_height) // 2 * 2
    else:
        new_width = int(round(width * (current_height / height), 7))
        current_width -= (current_width - new_width) // 2 * 2
    return current_height * current_width, current_height


# ---- CLIP vision tower + projector --------------------------------------------------------------

class ClipVision:
    def __init__(self, v, w):
        self.v = v
        self.w = {k[3:]: t for k, t in w.items() if k.startswith("vt.")}
        self.d = v["hidden_size"]
        self.n_heads = v["num_attention_heads"]
        self.hd = self.d // self.n_heads
        self.n_layers = v["num_hidden_layers"]
        self.eps = v["layer_norm_eps"]
        self.act = ACTIVATIONS[v["hidden_act"]]
        self.int8_layers = 0  # the first N layers' linears as mmrt's int8 blocks (int8_linear)
        self.int8_attention = False  # their attention scores too (int8_ref.int8_attention)

    def ln(self, x, name):
        return F.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"],
                            eps=self.eps)

    def embeddings(self, pixels):
        w, v = self.w, self.v
        n, _, h, wd = pixels.shape
        if h != v["image_size"] or wd != v["image_size"]:
            raise ValueError(f"Input image size ({h}*{wd}) doesn't match model "
                             f"({v['image_size']}*{v['image_size']}).")
        x = F.conv2d(pixels, w["embeddings.patch_embedding.weight"], stride=v["patch_size"])
        x = x.flatten(2).transpose(1, 2)  # [n, grid*grid, D], raster order
        cls = w["embeddings.class_embedding"].view(1, 1, -1).expand(n, 1, -1)
        x = torch.cat([cls, x], dim=1)
        return x + w["embeddings.position_embedding.weight"][:x.shape[1]]

    def layer(self, i, x):
        p = f"encoder.layers.{i}."
        w = self.w
        linear = int8_linear_named if i < self.int8_layers else globals()["linear"]
        n, S, _ = x.shape
        h = self.ln(x, p + "layer_norm1")
        q, k, vv = (linear(h, w, p + f"self_attn.{t}_proj").view(n, S, self.n_heads, self.hd)
                    .transpose(1, 2) for t in ("q", "k", "v"))
        if i < self.int8_layers and self.int8_attention:
            o = int8_attention(q, k, vv, self.hd ** -0.5)
        else:
            o = torch.softmax((q @ k.transpose(2, 3)) * self.hd ** -0.5, dim=-1,
                              dtype=torch.float32) @ vv
        o = o.transpose(1, 2).reshape(n, S, self.d)
        x = x + linear(o, w, p + "self_attn.out_proj")
        h = self.act(linear(self.ln(x, p + "layer_norm2"), w, p + "mlp.fc1"))
        return x + linear(h, w, p + "mlp.fc2")

    def hidden_states(self, pixels, wanted):
        """hidden_states[k] for every k in `wanted` (python indices into n_layers + 1 states)."""
        total = self.n_layers + 1
        idx = [k % total for k in wanted]
        x = self.ln(self.embeddings(pixels), "pre_layrnorm")
        states = {0: x}
        for i in range(max(idx)):
            x = self.layer(i, x)
            states[i + 1] = x
        return [states[k] for k in idx]


class Llava:
    def __init__(self, model_dir):
        self.kind, self.top, self.tcfg, self.vcfg = load_config(model_dir)
        w = load_weights(model_dir)
        self.clip = ClipVision(self.vcfg, w)
        self.proj = {k[5:]: t for k, t in w.items() if k.startswith("proj.")}
        self.newline = w.get("image_newline")
        self.text = Decoder(self.tcfg, w, tie=bool(self.tcfg.get("tie_word_embeddings")
                                                   or self.top.get("tie_word_embeddings")))
        self.image_token = self.top["image_token_index"]
        self.act = ACTIVATIONS[self.top["projector_hidden_act"]]

    def crop_features(self, pixels):
        """get_image_features up to the projector: [n_crops, tokens_per_crop, text_hidden]."""
        layer = self.top["vision_feature_layer"]
        strategy = self.top["vision_feature_select_strategy"]
        if strategy not in ("default", "full"):
            raise ValueError(f"Unexpected select feature strategy: {strategy}")
        layers = [layer] if isinstance(layer, int) else list(layer)
        hs = self.clip.hidden_states(pixels, layers)
        if strategy == "default":
            hs = [h[:, 1:] for h in hs]
        x = torch.cat(hs, dim=-1)
        return linear(self.act(linear(x, self.proj, "linear_1")), self.proj, "linear_2")

    def image_features(self, pixels, image_size=None):
        """One image's rows as the LM receives them: [n_tokens, text_hidden]."""
        if self.kind == "llava":
            return self.crop_features(pixels).reshape(-1, self.tcfg["hidden_size"])
        if image_size is None:
            raise ValueError("llava_next needs the original image size (--image-size H,W)")
        tile = self.vcfg["image_size"]
        pinpoints = self.top["image_grid_pinpoints"]
        n = num_patches(image_size, pinpoints, tile)
        if pixels.dim() == 5:  # [1, max_patches, 3, S, S] as the processor pads a batch
            pixels = pixels[0, :n]
        if pixels.shape[0] != n:
            raise ValueError(f"{tuple(image_size)} takes {n} crops, pixel_values has "
                             f"{pixels.shape[0]}")
        feats = self.crop_features(pixels)
        return self.pack(feats, image_size)

    def pack(self, feats, image_size):
        """pack_image_features for one image."""
        newline = self.newline
        if feats.shape[0] == 1:
            out = feats[0]
            return out if newline is None else torch.cat([out, newline[None]], dim=0)
        base, grid = feats[0], feats[1:]
        side = self.vcfg["image_size"] // self.vcfg["patch_size"]
        bh, bw = select_best_resolution(image_size, self.top["image_grid_pinpoints"])
        nph, npw = bh // self.vcfg["image_size"], bw // self.vcfg["image_size"]
        if grid.numel() % (nph * npw * side * side) != 0 or grid.shape[1] != side * side:
            raise ValueError("image feature shape does not line up with the crop grid "
                             "(the 'full' strategy keeps the CLS row of every crop)")
        x = grid.reshape(nph, npw, side, side, -1).permute(4, 0, 2, 1, 3).contiguous()
        x = x.flatten(1, 2).flatten(2, 3)  # [D, nph*side, npw*side]
        x = unpad_image(x, image_size)
        if newline is not None:
            x = torch.cat([x, newline[:, None, None].expand(x.shape[0], x.shape[1], 1)], dim=-1)
        x = x.flatten(1, 2).transpose(0, 1)
        return torch.cat([base, x], dim=0)

    def embeds(self, ids, feats):
        ids_t = torch.tensor(ids, dtype=torch.int64)
        e = self.text.w["embed_tokens.weight"][ids_t].clone()
        mask = ids_t == self.image_token
        n = int(mask.sum())
        got = 0 if feats is None else feats.shape[0]
        if n != got:
            raise ValueError(f"Image features and image tokens do not match: tokens: {n}, "
                             f"features {got}")
        if n:
            e[mask] = feats  # masked_scatter: feature rows in order of the image tokens
        return e

    def generate(self, ids, feats, n):
        """Greedy: image features go into the prompt only (HF passes pixel_values on the first
        step), a generated token is embedded by its own row even if it is the image token."""
        emb = self.embeds(ids, feats)
        out = []
        for _ in range(n):
            nxt = int(np.argmax(self.text.run(emb).numpy()))  # first maximal index
            out.append(nxt)
            emb = torch.cat([emb, self.text.w["embed_tokens.weight"][nxt][None]], dim=0)
        return out


# ---- Llama / Mistral decoder --------------------------------------------------------------------

class Decoder:
    def __init__(self, t, w, tie):
        self.w = {k[3:]: v for k, v in w.items() if k.startswith("lm.")}
        self.hidden = t["hidden_size"]
        self.n_heads = t["num_attention_heads"]
        self.n_kv = t["num_key_value_heads"] or self.n_heads
        self.head_dim = t.get("head_dim") or self.hidden // self.n_heads
        self.n_layers = t["num_hidden_layers"]
        self.eps = t["rms_norm_eps"]
        rope = t.get("rope_parameters") or {}
        self.theta = float(t.get("rope_theta") or rope.get("rope_theta") or 10000.0)
        scaling = t.get("rope_scaling") or rope
        rtype = scaling.get("rope_type", scaling.get("type", "default"))
        if rtype not in ("default", "linear"):
            raise NotImplementedError(f"rope type {rtype!r}")
        self.rope_factor = float(scaling.get("factor", 1.0)) if rtype == "linear" else 1.0
        self.sliding_window = t.get("sliding_window") if t["model_type"] == "mistral" else None
        self.act = ACTIVATIONS[t.get("hidden_act") or "silu"]
        lm = w.get("lm_head.weight")
        if tie or lm is None:
            if lm is None and not tie:
                print("warning: no lm_head.weight and tie_word_embeddings false; using "
                      "embed_tokens", file=sys.stderr)
            lm = self.w["embed_tokens.weight"]
        self.lm_head = lm

    def rms_norm(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def rotary(self, S):
        dim = self.head_dim
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        inv_freq = inv_freq / self.rope_factor
        freqs = torch.arange(S, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def mask(self, S):
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
        allowed = j <= i
        if self.sliding_window is not None:
            allowed &= j > i - self.sliding_window
        return torch.zeros(S, S).masked_fill(~allowed, float("-inf"))

    def layer(self, i, x, cos, sin, mask):
        p = f"layers.{i}."
        w = self.w
        S = x.shape[0]
        h = self.rms_norm(x, w[p + "input_layernorm.weight"])
        q, k, v = (linear(h, w, p + f"self_attn.{t}_proj").view(S, n, self.head_dim).transpose(0, 1)
                   for t, n in (("q", self.n_heads), ("k", self.n_kv), ("v", self.n_kv)))
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        rep = self.n_heads // self.n_kv  # repeat_kv: kv head g serves query heads g*rep..
        k = k[:, None].expand(self.n_kv, rep, S, self.head_dim).reshape(self.n_heads, S, -1)
        v = v[:, None].expand(self.n_kv, rep, S, self.head_dim).reshape(self.n_heads, S, -1)
        scores = (q @ k.transpose(1, 2)) * self.head_dim ** -0.5 + mask
        att = torch.softmax(scores, dim=-1, dtype=torch.float32)
        o = (att @ v).transpose(0, 1).reshape(S, self.n_heads * self.head_dim)
        x = x + linear(o, w, p + "self_attn.o_proj")
        h = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
        up = linear(h, w, p + "mlp.up_proj")
        gate = self.act(linear(h, w, p + "mlp.gate_proj"))
        return x + linear(gate * up, w, p + "mlp.down_proj")

    def run(self, embeds, collect=False):
        """Positions 0..S-1, causal: last-token logits [vocab] (and the [L+1, S, H] states)."""
        S = embeds.shape[0]
        cos, sin = self.rotary(S)
        mask = self.mask(S)
        x = embeds
        states = [x]
        for i in range(self.n_layers):
            x = self.layer(i, x, cos, sin, mask)
            states.append(x)
        last = self.rms_norm(x[-1:], self.w["norm.weight"]) @ self.lm_head.T
        return (last[0], torch.stack(states)) if collect else last[0]


# ---- processor token counts ---------------------------------------------------------------------

def token_counts(model_dir, sizes):
    kind, top, _, vcfg = load_config(model_dir)
    pre = read_json(os.path.join(model_dir, "preprocessor_config.json"), {})
    proc = read_json(os.path.join(model_dir, "processor_config.json"), {})
    crop = pre.get("crop_size", 336)
    ch, cw = (crop["height"], crop["width"]) if isinstance(crop, dict) else (crop, crop)
    patch = proc.get("patch_size") or vcfg["patch_size"]
    strategy = proc.get("vision_feature_select_strategy") or top["vision_feature_select_strategy"]
    extra = proc.get("num_additional_image_tokens", 1)
    drop = extra if strategy == "default" else 0
    ph, pw = ch // patch, cw // patch
    if kind == "llava":
        return [ph * pw + extra - drop for _ in sizes]
    pinpoints = pre.get("image_grid_pinpoints") or top["image_grid_pinpoints"]
    out = []
    for H, W in sizes:
        bh, bw = select_best_resolution([H, W], pinpoints)
        unpadded, newlines = unpadded_features(H, W, ph, pw, bh // ch, bw // cw)
        out.append(unpadded + newlines + ph * pw + extra - drop)
    return out


# ---- chat templates -----------------------------------------------------------------------------

MISTRAL_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<<SYS>>\n' + message['content'][0]['text'] + '\n<</SYS>>\n\n' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' }}{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}{# Render all text next #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{{' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'][0]['text'] + '</s> '}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)
VICUNA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': '}}{% endif %}{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def load_template(arg):
    """Template text and special-token variables (bos_token, ... from a tokenizer_config)."""
    if arg == "mistral":
        return MISTRAL_TEMPLATE, {}
    if arg == "vicuna":
        return VICUNA_TEMPLATE, {}
    with open(arg) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        return text, {}
    tmpl = data["chat_template"]
    if isinstance(tmpl, list):  # [{name, template}, ...]
        tmpl = {t["name"]: t["template"] for t in tmpl}["default"]
    extra = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        tok = data.get(key)
        if isinstance(tok, dict):
            tok = tok.get("content")
        if tok is not None:
            extra[key] = tok
    return tmpl, extra


def render_chat(template_arg, messages, add_generation_prompt, raw_content=False):
    import datetime

    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """{% generation %}..{% endgeneration %}: renders its body (HF tracks the span)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise TemplateError(message)

    if not raw_content:
        messages = [dict(m, content=[{"type": "text", "text": m["content"]}])
                    if isinstance(m.get("content"), str) else m for m in messages]
    text, extra = load_template(template_arg)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(text).render(messages=messages,
                                        add_generation_prompt=add_generation_prompt, **extra)


# ---- command line -------------------------------------------------------------------------------

def parse_size(s):
    h, w = (int(t) for t in s.replace("x", ",").split(","))
    return [h, w]


def load_pixels(path):
    return torch.from_numpy(np.load(path).astype(np.float32))


def all_features(m, pixels, sizes):
    if not pixels:
        return None
    if m.kind == "llava_next" and len(sizes) != len(pixels):
        raise ValueError("llava_next: give one --image-size per --pixels")
    feats = [m.image_features(load_pixels(p), sizes[i] if sizes else None)
             for i, p in enumerate(pixels)]
    return torch.cat(feats, dim=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["tower", "logits", "hidden", "generate", "tokens", "chat"])
    ap.add_argument("--model")
    ap.add_argument("--ids", default="", help="comma/space separated prompt ids, or @FILE")
    ap.add_argument("--pixels", action="append", default=[],
                    help="pixel_values .npy [n_crops, 3, S, S] of one image (repeatable)")
    ap.add_argument("--image-size", action="append", default=[], type=parse_size,
                    help="original H,W of the matching --pixels (llava_next)")
    ap.add_argument("--sizes", default="", help="tokens: H,W;H,W;...")
    ap.add_argument("--template", default="mistral")
    ap.add_argument("--no-generation-prompt", action="store_true")
    ap.add_argument("--raw-content", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--int8-layers", type=int, default=0,
                    help="tower: the first N CLIP layers' linears as mmrt's int8 encoder blocks")
    ap.add_argument("--int8-attention", action="store_true",
                    help="tower: the int8 layers' attention scores in int8 too")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if a.mode == "chat":
        data = json.load(sys.stdin)
        if isinstance(data, dict) and "batch" in data:  # [{messages, add_generation_prompt}]
            text = [render_chat(a.template, r["messages"], r["add_generation_prompt"],
                                a.raw_content) for r in data["batch"]]
        else:
            text = render_chat(a.template, data, not a.no_generation_prompt, a.raw_content)
        json.dump(text, sys.stdout)
        print()
        return
    if a.mode == "tokens":
        sizes = [parse_size(s) for s in a.sizes.split(";") if s.strip()]
        json.dump(token_counts(a.model, sizes), sys.stdout)
        print()
        return
    m = Llava(a.model)
    m.clip.int8_layers = a.int8_layers
    m.clip.int8_attention = a.int8_attention
    if a.mode == "tower":
        if len(a.pixels) != 1:
            raise ValueError("tower takes exactly one --pixels")
        size = a.image_size[0] if a.image_size else None
        np.save(a.out, m.image_features(load_pixels(a.pixels[0]), size).numpy().astype(np.float32))
        return
    ids = parse_ids(open(a.ids[1:]).read() if a.ids.startswith("@") else a.ids)
    feats = all_features(m, a.pixels, a.image_size)
    if a.mode == "logits":
        np.save(a.out, m.text.run(m.embeds(ids, feats)).numpy().astype(np.float32))
    elif a.mode == "hidden":
        _, states = m.text.run(m.embeds(ids, feats), collect=True)
        np.save(a.out, states.numpy().astype(np.float32))
    else:
        json.dump(m.generate(ids, feats, a.max_new), sys.stdout)
        print()


if __name__ == "__main__":
    main()

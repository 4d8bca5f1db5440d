#!/usr/bin/env python3
"""Independent PyTorch / numpy reference for Fuyu-8B (FuyuForCausalLM), written from the Hugging
Face definitions so mmrt's C++ runtime can be checked against it:
  fuyu/modeling_fuyu.py   vision_embed_tokens = Linear(patch_size*patch_size*num_channels ->
      hidden_size, bias) applied to each flattened patch ((y, x, c) order, as patchify_image
      makes it); the patch rows replace the embeddings of the |SPEAKER| positions in order
      (gather_continuous_embeddings via image_patches_indices in older releases, masked_scatter on
      image_token_id in newer ones); |NEWLINE| tokens keep their own embedding; position_ids are
      0..S-1; lm_head (no bias) on the decoder output;
  persimmon/modeling_persimmon.py   PersimmonDecoderLayer: pre-LN with nn.LayerNorm (weight and
      bias, layer_norm_eps); self_attn.query_key_value [3*hidden, hidden] + bias whose output is
      viewed [S, heads, 3, head_dim], i.e. q, k, v interleaved per head (rows h*3*hd + {0: q,
      hd: k, 2*hd: v}); q_layernorm / k_layernorm (LayerNorm over head_dim, weight and bias) when
      qk_layernorm, before RoPE; partial rotary on the first int(head_dim*partial_rotary_factor)
      dims of every head (rotate_half within them, inv_freq = theta^(-2i/rot_dim), cos/sin =
      cat(freqs, freqs)), the rest passed through; scale head_dim^-0.5, causal, softmax in fp32;
      self_attn.dense + bias; MLP dense_h_to_4h -> hidden_act ("relu2" = relu(x)**2) ->
      dense_4h_to_h, both with bias; final_layernorm (LayerNorm) after the last layer;
  persimmon/configuration_persimmon.py, fuyu/configuration_fuyu.py   the config reading below;
  fuyu/image_processing_fuyu.py, fuyu/processing_fuyu.py   the image token layout.

Config: FuyuConfig builds its decoder from `text_config` (a PersimmonConfig: missing fields take
the PersimmonConfig defaults, NOT the top-level values); only when text_config is absent is it
built from the flat top-level fields (vocab_size, hidden_size, intermediate_size,
num_hidden_layers, num_attention_heads, hidden_act, max_position_embeddings, layer_norm_eps,
rope_theta / rope_scaling, qk_layernorm, partial_rotary_factor, bos/eos/pad, tie_word_embeddings;
missing ones take the FuyuConfig defaults). Both class defaults are Fuyu-8B's: vocab 262144,
hidden 4096, intermediate 16384, 36 layers, 64 heads, relu2, max_pos 16384, eps 1e-5, theta
25000, partial_rotary_factor 0.5, qk_layernorm true, tie false, bos 1, eos 2, pad None. The top
level alone gives patch_size (30), num_channels (3), hidden_size (the patch embedding's output,
4096), image_token_id (71011) and pad_token_id. lm_head is embed_tokens when either level sets
tie_word_embeddings (or when the checkpoint has no head). rope_theta / partial_rotary_factor /
rope_type are also read from a newer `rope_parameters` dict; rope types default and linear.
Tensors may use the original names (language_model.model.*, language_model.lm_head.weight,
vision_embed_tokens.*) or the newer ones (model.language_model.*, lm_head.weight,
model.vision_embed_tokens.*); safetensors may be sharded; F16/BF16 tensors are widened and
everything is computed in float32.

Processor token stream (processing_fuyu.py), one prompt with one image:
  1. the image grid: for each of `rows` patch rows, `cols` x |SPEAKER| then one |NEWLINE|;
  2. BOS, the id of "<s>" (add_BOS; "|ENDOFTEXT|" would be used without it, never by __call__);
  3. the prompt ids: <box>/</box>/<point>/</point> become <0x00>/<0x01>/<0x02>/<0x03>, the text
     is split at those tags and every text piece is tokenized on its own with
     add_special_tokens=False (the SentencePiece-style normalizer prepends "\u2581" and turns
     spaces into "\u2581", so each piece starts a new "\u2581"-word; no BOS, no EOS); the
     numbers inside a tag are halved, scaled by the resize factor, rounded and emitted one vocab
     piece each between the tag tokens;
  4. boa, the id of "<0x04>" (BEGINNING_OF_ANSWER_STRING, add_beginning_of_answer_token).
  Newer releases build the same ids from text: "|SPEAKER|" + prompt + "<0x04>", the placeholder
  replaced by the grid string followed by "<s>", the part up to "<s>" and the rest tokenized
  separately and the grid part's leading "\u2581" token dropped. Text without an image is a plain
  tokenizer call (the tokenizer's own BOS, no boa); batches are left-padded with id 0. HF takes
  one image per prompt; given several sizes, `prompt` emits their grids back to back, then one
  BOS (an mmrt convention).
  Image geometry (FuyuImageProcessor, size 1080x1920, patch 30x30 unless preprocessor_config.json
  says otherwise): an image larger than the target in either side is scaled by
  s = min(H_t/h, W_t/w) to int(h*s) x int(w*s) (aspect kept, truncated), never upscaled; then
  padded to the target and cropped back to min(H_t, ceil(h'/ph)*ph) x min(W_t, ceil(w'/pw)*pw);
  rows = that height / ph, cols = that width / pw, tokens = rows * (cols + 1).

usage:
  fuyu_ref.py embed    --model DIR --patches P.npy --out OUT.npy
        # float32 [n_patches, hidden]: vision_embed_tokens of P [n_patches, patch_dim]
  fuyu_ref.py logits   --model DIR --ids @IDS|CSV [--patches P.npy --patch-rows R0,R1,..]...
                       --out OUT.npy
        # float32 [vocab]: last-token logits. The ids are the whole stream (placeholders
        # included); each --patch-rows lists the 0-based positions whose embeddings the rows of
        # the matching --patches file replace, in order (one pair per image). Without any
        # --patch-rows, all patches fill the image_token_id positions in order (masked_scatter).
  fuyu_ref.py hidden   --model DIR --ids ... [--patches ... --patch-rows ...]... --out OUT.npy
        # float32 [layers+1, S, hidden]: the embeddings, then every decoder layer's output, all
        # before final_layernorm (HF's output_hidden_states differs in its last entry, which it
        # takes after final_layernorm)
  fuyu_ref.py generate --model DIR --ids ... [--patches ...]... --max-new N
        # greedy ids (argmax, first index on ties; exactly N, no stop on eos), JSON on stdout;
        # patches go into the prompt only, generated tokens use their own embedding rows
  fuyu_ref.py stream   --model DIR --sizes "H,W;H,W;..."
        # JSON list, per original image size: {"rows", "cols", "tokens"}
  fuyu_ref.py prompt   --model DIR [--text T] --image-size H,W [--image-size H,W]...
        # JSON {"image_ids": [...], "bos": id, "boa": id}: the |SPEAKER| / |NEWLINE| grid ids of
        # the images, the "<s>" id and the "<0x04>" id, looked up in the checkpoint's
        # tokenizer.json (added_tokens, then model.vocab as a dict or a Unigram [piece, score]
        # list). The prompt's own ids (step 3) go between bos and boa; --text is not tokenized.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen2_vl_ref import parse_ids, read_safetensors  # noqa: E402

# ---- HF config class defaults -------------------------------------------------------------------
PERSIMMON_DEFAULTS = dict(vocab_size=262144, hidden_size=4096, intermediate_size=16384,
                          num_hidden_layers=36, num_attention_heads=64, hidden_act="relu2",
                          max_position_embeddings=16384, layer_norm_eps=1e-5,
                          tie_word_embeddings=False, rope_theta=25000.0, rope_scaling=None,
                          qk_layernorm=True, partial_rotary_factor=0.5, pad_token_id=None,
                          bos_token_id=1, eos_token_id=2)
FUYU_DEFAULTS = dict(PERSIMMON_DEFAULTS, image_size=300, patch_size=30, num_channels=3,
                     image_token_id=71011)
# The FuyuConfig arguments it passes on when it builds text_config itself.
FLAT_TEXT_KEYS = ("vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size",
                  "num_hidden_layers", "num_attention_heads", "hidden_act", "layer_norm_eps",
                  "rope_theta", "rope_scaling", "rope_parameters", "qk_layernorm",
                  "partial_rotary_factor", "pad_token_id", "bos_token_id", "eos_token_id",
                  "tie_word_embeddings")
IMAGE_PROCESSOR_DEFAULTS = dict(size={"height": 1080, "width": 1920},
                                patch_size={"height": 30, "width": 30})
SPEAKER, NEWLINE, BOS, BOA = "|SPEAKER|", "|NEWLINE|", "<s>", "<0x04>"

OLD_NAMES = [("language_model.model.", "lm."), ("language_model.lm_head.", "lm_head."),
             ("vision_embed_tokens.", "vis.")]
NEW_NAMES = [("model.language_model.", "lm."), ("lm_head.", "lm_head."),
             ("model.vision_embed_tokens.", "vis.")]


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def first(*values):
    for v in values:
        if v is not None:
            return v
    return None


def load_config(model_dir):
    """(top, text): FuyuConfig's own fields and the PersimmonConfig the decoder is built from."""
    cfg = read_json(os.path.join(model_dir, "config.json"))
    if cfg is None:
        raise FileNotFoundError(f"{model_dir}/config.json")
    if cfg.get("model_type", "fuyu") != "fuyu":
        raise ValueError(f"not a fuyu checkpoint: model_type {cfg.get('model_type')!r}")
    top = {**FUYU_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    t_in = cfg.get("text_config")
    if t_in is None:  # FuyuConfig: text_config from the flat arguments (their defaults)
        t_in = {k: top[k] for k in FLAT_TEXT_KEYS if top.get(k) is not None}
    if t_in.get("model_type", "persimmon") != "persimmon":
        raise ValueError(f"text_config.model_type {t_in.get('model_type')!r} is not persimmon")
    text = {**PERSIMMON_DEFAULTS, **{k: v for k, v in t_in.items() if v is not None}}
    return top, text


def load_weights(model_dir):
    """All tensors (sharded or not) renamed to lm.* / lm_head.* / vis.*."""
    index = read_json(os.path.join(model_dir, "model.safetensors.index.json"))
    files = sorted(set(index["weight_map"].values())) if index else ["model.safetensors"]
    raw = {}
    for fn in files:
        raw.update(read_safetensors(os.path.join(model_dir, fn)))
    new = any(k.startswith(("model.language_model.", "model.vision_embed_tokens.")) for k in raw)
    out = {}
    for k, v in raw.items():
        for src, dst in NEW_NAMES if new else OLD_NAMES:
            if k.startswith(src):
                out[dst + k[len(src):]] = v
                break
    return out


ACTIVATIONS = {"relu2": lambda x: F.relu(x).pow(2),  # ReLUSquaredActivation
               "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
               "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
               "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


def linear(x, w, name):
    y = x @ w[name + ".weight"].T
    b = w.get(name + ".bias")
    return y if b is None else y + b


# ---- Persimmon decoder --------------------------------------------------------------------------

class Persimmon:
    def __init__(self, t, w, tie):
        self.w = {k[3:]: v for k, v in w.items() if k.startswith("lm.")}
        self.hidden = t["hidden_size"]
        self.n_heads = t["num_attention_heads"]
        if self.hidden % self.n_heads:
            raise ValueError(f"hidden_size {self.hidden} is not divisible by num_heads "
                             f"{self.n_heads}")
        self.head_dim = self.hidden // self.n_heads
        self.n_layers = t["num_hidden_layers"]
        self.eps = float(t["layer_norm_eps"])
        rope = t.get("rope_parameters") or {}
        self.theta = float(first(t.get("rope_theta"), rope.get("rope_theta"), 25000.0))
        partial = float(first(t.get("partial_rotary_factor"), rope.get("partial_rotary_factor"),
                              0.5))
        self.rot_dim = int(self.head_dim * partial)
        scaling = t.get("rope_scaling") or rope
        rtype = scaling.get("rope_type", scaling.get("type", "default"))
        if rtype not in ("default", "linear"):
            raise NotImplementedError(f"rope type {rtype!r}")
        self.rope_factor = float(scaling.get("factor", 1.0)) if rtype == "linear" else 1.0
        self.qk_ln = bool(t["qk_layernorm"])
        act = t.get("hidden_act") or "relu2"
        if act not in ACTIVATIONS:
            raise NotImplementedError(f"hidden_act {act!r}")
        self.act = ACTIVATIONS[act]
        for i in range(self.n_layers):  # nn.LayerNorm's own init when the file lacks them
            for n in ("q_layernorm", "k_layernorm") if self.qk_ln else ():
                p = f"layers.{i}.self_attn.{n}."
                if p + "weight" not in self.w:
                    print(f"warning: no {p}weight; using LayerNorm's init (1, 0)", file=sys.stderr)
                    self.w[p + "weight"] = torch.ones(self.head_dim)
                    self.w[p + "bias"] = torch.zeros(self.head_dim)
        lm = w.get("lm_head.weight")
        if tie or lm is None:
            if lm is None and not tie:
                print("warning: no lm_head.weight and tie_word_embeddings false; using "
                      "embed_tokens", file=sys.stderr)
            lm = self.w["embed_tokens.weight"]
        self.lm_head = lm

    def ln(self, x, name, dim=None):
        return F.layer_norm(x, (dim or self.hidden,), self.w[name + ".weight"],
                            self.w.get(name + ".bias"), self.eps)

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def rotary(self, S):
        d = self.rot_dim
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        inv_freq = inv_freq / self.rope_factor
        freqs = torch.arange(S, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def partial_rope(self, x, cos, sin):
        r = self.rot_dim
        rot, rest = x[..., :r], x[..., r:]
        return torch.cat((rot * cos + self.rotate_half(rot) * sin, rest), dim=-1)

    def split_qkv(self, fused):
        """_split_heads: [S, heads*3*hd] viewed [S, heads, 3, hd]."""
        qkv = fused.view(fused.shape[0], self.n_heads, 3, self.head_dim)
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]

    def layer(self, i, x, cos, sin, mask):
        p = f"layers.{i}."
        w = self.w
        S = x.shape[0]
        h = self.ln(x, p + "input_layernorm")
        q, k, v = self.split_qkv(linear(h, w, p + "self_attn.query_key_value"))
        if self.qk_ln:
            q = self.ln(q, p + "self_attn.q_layernorm", self.head_dim)
            k = self.ln(k, p + "self_attn.k_layernorm", self.head_dim)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [heads, S, hd]
        q = self.partial_rope(q, cos, sin)
        k = self.partial_rope(k, cos, sin)
        scores = (q @ k.transpose(1, 2)) * self.head_dim ** -0.5 + mask
        att = torch.softmax(scores, dim=-1, dtype=torch.float32)
        o = (att @ v).transpose(0, 1).reshape(S, self.hidden)
        x = x + linear(o, w, p + "self_attn.dense")
        h = self.ln(x, p + "post_attention_layernorm")
        return x + linear(self.act(linear(h, w, p + "mlp.dense_h_to_4h")), w,
                          p + "mlp.dense_4h_to_h")

    def run(self, embeds, collect=False, every=False):
        """Positions 0..S-1, causal: last-token logits [vocab] (every: [S, vocab], each
        position's; collect: also the [L+1, S, H] states)."""
        S = embeds.shape[0]
        cos, sin = self.rotary(S)
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
        mask = torch.zeros(S, S).masked_fill(j > i, float("-inf"))
        x = embeds
        states = [x]
        for n in range(self.n_layers):
            x = self.layer(n, x, cos, sin, mask)
            states.append(x)
        if every:
            return self.ln(x, "final_layernorm") @ self.lm_head.T
        last = self.ln(x[-1:], "final_layernorm") @ self.lm_head.T
        return (last[0], torch.stack(states)) if collect else last[0]


# ---- Fuyu ---------------------------------------------------------------------------------------

class Fuyu:
    def __init__(self, model_dir):
        self.top, self.tcfg = load_config(model_dir)
        w = load_weights(model_dir)
        self.vis = {k[4:]: t for k, t in w.items() if k.startswith("vis.")}
        tie = bool(self.tcfg.get("tie_word_embeddings") or self.top.get("tie_word_embeddings"))
        self.text = Persimmon(self.tcfg, w, tie)
        self.image_token = self.top["image_token_id"]
        pdim = self.top["patch_size"] ** 2 * self.top["num_channels"]
        vw = self.vis.get("weight")
        if vw is None:
            raise ValueError("checkpoint has no vision_embed_tokens.weight")
        if tuple(vw.shape) != (self.top["hidden_size"], pdim):
            print(f"warning: vision_embed_tokens.weight is {tuple(vw.shape)}, the config says "
                  f"({self.top['hidden_size']}, {pdim})", file=sys.stderr)
        if vw.shape[0] != self.text.hidden:
            raise ValueError(f"vision_embed_tokens gives {vw.shape[0]} wide rows, the decoder "
                             f"is {self.text.hidden} wide")

    def embed_patches(self, patches):
        if patches.dim() == 3 and patches.shape[0] == 1:  # [1, n, patch_dim] as HF batches it
            patches = patches[0]
        if patches.dim() != 2 or patches.shape[1] != self.vis["weight"].shape[1]:
            raise ValueError(f"patches must be [n, {self.vis['weight'].shape[1]}], got "
                             f"{tuple(patches.shape)}")
        y = patches @ self.vis["weight"].T
        return y if self.vis.get("bias") is None else y + self.vis["bias"]

    def embeds(self, ids, images):
        """images: [(patches [n, patch_dim], rows or None)]; rows None = masked_scatter."""
        ids_t = torch.tensor(ids, dtype=torch.int64)
        if len(ids) and (int(ids_t.min()) < 0 or int(ids_t.max()) >= self.text.w[
                "embed_tokens.weight"].shape[0]):
            raise ValueError("token id out of the vocabulary")
        e = self.text.w["embed_tokens.weight"][ids_t].clone()
        if not images:
            return e
        explicit = [r is not None for _, r in images]
        if any(explicit) and not all(explicit):
            raise ValueError("give --patch-rows for every --patches or for none")
        if not all(explicit):  # newer FuyuModel.forward: masked_scatter on image_token_id
            feats = torch.cat([self.embed_patches(p) for p, _ in images], dim=0)
            mask = ids_t == self.image_token
            if int(mask.sum()) != feats.shape[0]:
                raise ValueError(f"{int(mask.sum())} image tokens, {feats.shape[0]} patches")
            e[mask] = feats
            return e
        seen = set()
        for patches, rows in images:
            feats = self.embed_patches(patches)
            if len(rows) != feats.shape[0]:
                raise ValueError(f"{len(rows)} patch rows, {feats.shape[0]} patches")
            if any(r < 0 or r >= len(ids) for r in rows) or seen & set(rows) or len(
                    set(rows)) != len(rows):
                raise ValueError("patch rows must be distinct positions inside the prompt")
            seen.update(rows)
            e[torch.tensor(rows, dtype=torch.int64)] = feats
        return e

    def score(self, ids, images, continuation):
        """Teacher-forced: for each token of `continuation` (a greedy run by another
        implementation), the reference's logits at the step that chose it: its largest logit,
        its argmax and the logit of the chosen token."""
        emb = self.embeds(ids, images)
        if continuation:
            tail = torch.tensor(continuation[:-1], dtype=torch.int64)
            emb = torch.cat([emb, self.text.w["embed_tokens.weight"][tail]], dim=0)
        logits = self.text.run(emb, every=True)[len(ids) - 1:]
        out = []
        for k, t in enumerate(continuation):
            row = logits[k]
            out.append({"max": float(row.max()), "argmax": int(np.argmax(row.numpy())),
                        "chosen": float(row[t])})
        return out

    def generate(self, ids, images, n):
        emb = self.embeds(ids, images)
        out = []
        for _ in range(n):
            nxt = int(np.argmax(self.text.run(emb).numpy()))  # first maximal index
            out.append(nxt)
            emb = torch.cat([emb, self.text.w["embed_tokens.weight"][nxt][None]], dim=0)
        return out


# ---- processor geometry and special ids ---------------------------------------------------------

def hw(v, name):
    if isinstance(v, dict):
        return int(v["height"]), int(v["width"])
    if isinstance(v, int):
        return v, v
    raise ValueError(f"preprocessor_config.json {name}: {v!r}")


def image_processor_config(model_dir):
    pre = read_json(os.path.join(model_dir, "preprocessor_config.json"), {}) if model_dir else {}
    size = hw(pre.get("size") or IMAGE_PROCESSOR_DEFAULTS["size"], "size")
    patch = hw(pre.get("patch_size") or IMAGE_PROCESSOR_DEFAULTS["patch_size"], "patch_size")
    return size, patch


def image_grid(h, w, size, patch):
    """(rows, cols): FuyuImageProcessor.resize + pad, then the processor's crop to patches."""
    (th, tw), (ph, pw) = size, patch
    if h <= 0 or w <= 0:
        raise ValueError(f"bad image size {h}x{w}")
    if not (w <= tw and h <= th):
        scale = min(th / h, tw / w)
        h, w = int(h * scale), int(w * scale)
    new_h = min(th, math.ceil(h / ph) * ph)
    new_w = min(tw, math.ceil(w / pw) * pw)
    return new_h // ph, new_w // pw


def stream_layout(model_dir, sizes):
    size, patch = image_processor_config(model_dir)
    out = []
    for h, w in sizes:
        rows, cols = image_grid(h, w, size, patch)
        out.append({"rows": rows, "cols": cols, "tokens": rows * (cols + 1)})
    return out


def load_vocab(model_dir):
    tok = read_json(os.path.join(model_dir, "tokenizer.json"))
    if tok is None:
        raise FileNotFoundError(f"{model_dir}/tokenizer.json")
    vocab = tok.get("model", {}).get("vocab", {})
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the index
        pieces = {p[0]: i for i, p in enumerate(vocab)}
    else:
        pieces = dict(vocab)
    for t in tok.get("added_tokens", []):
        pieces[t["content"]] = t["id"]
    return pieces


def prompt_structure(model_dir, sizes):
    vocab = load_vocab(model_dir)
    missing = [p for p in (SPEAKER, NEWLINE, BOS, BOA) if p not in vocab]
    if missing:
        raise ValueError(f"tokenizer.json lacks {missing}")
    ids = []
    for g in stream_layout(model_dir, sizes):
        ids += ([vocab[SPEAKER]] * g["cols"] + [vocab[NEWLINE]]) * g["rows"]
    return {"image_ids": ids, "bos": vocab[BOS], "boa": vocab[BOA]}


# ---- command line -------------------------------------------------------------------------------

def parse_size(s):
    h, w = (int(t) for t in s.replace("x", ",").split(","))
    return [h, w]


def read_ids(arg):
    return parse_ids(open(arg[1:]).read() if arg.startswith("@") else arg)


def load_patches(path):
    return torch.from_numpy(np.load(path).astype(np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["embed", "logits", "hidden", "generate", "score", "stream",
                                     "prompt"])
    ap.add_argument("--model")
    ap.add_argument("--ids", default="", help="comma/space separated prompt ids, or @FILE")
    ap.add_argument("--patches", action="append", default=[],
                    help="one image's patches .npy [n_patches, patch_dim] (repeatable)")
    ap.add_argument("--patch-rows", action="append", default=[],
                    help="positions the matching --patches fill, CSV or @FILE (repeatable)")
    ap.add_argument("--sizes", default="", help="stream: H,W;H,W;...")
    ap.add_argument("--image-size", action="append", default=[], type=parse_size,
                    help="prompt: an image's original H,W (repeatable)")
    ap.add_argument("--text", default="", help="prompt: the text (not tokenized here)")
    ap.add_argument("--out")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--continuation", default="", help="score: the generated ids, CSV")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if a.mode == "stream":
        sizes = [parse_size(s) for s in a.sizes.split(";") if s.strip()]
        json.dump(stream_layout(a.model, sizes), sys.stdout)
        print()
        return
    if a.mode == "prompt":
        if not a.image_size:
            raise ValueError("prompt needs at least one --image-size")
        json.dump(prompt_structure(a.model, a.image_size), sys.stdout)
        print()
        return
    m = Fuyu(a.model)
    if a.mode == "embed":
        if len(a.patches) != 1:
            raise ValueError("embed takes exactly one --patches")
        np.save(a.out, m.embed_patches(load_patches(a.patches[0])).numpy().astype(np.float32))
        return
    if a.patch_rows and len(a.patch_rows) != len(a.patches):
        raise ValueError("give one --patch-rows per --patches")
    rows = [read_ids(r) for r in a.patch_rows] or [None] * len(a.patches)
    images = [(load_patches(p), r) for p, r in zip(a.patches, rows)]
    ids = read_ids(a.ids)
    if not ids:
        raise ValueError("empty --ids")
    if a.mode == "logits":
        np.save(a.out, m.text.run(m.embeds(ids, images)).numpy().astype(np.float32))
    elif a.mode == "hidden":
        _, states = m.text.run(m.embeds(ids, images), collect=True)
        np.save(a.out, states.numpy().astype(np.float32))
    elif a.mode == "score":
        json.dump(m.score(ids, images, read_ids(a.continuation)), sys.stdout)
        print()
    else:
        json.dump(m.generate(ids, images, a.max_new), sys.stdout)
        print()


if __name__ == "__main__":
    main()

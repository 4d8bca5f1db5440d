#!/usr/bin/env python3
"""Independent PyTorch / numpy reference for Qwen2-Audio, written from the Hugging Face
definitions so mmrt's C++ runtime can be checked against it:
  modeling_qwen2_audio.py     Qwen2AudioEncoder (conv1/conv2 + GELU, stored embed_positions,
                              Qwen2AudioEncoderLayer with Qwen2AudioAttention: q scaled by
                              head_dim^-0.5, k_proj without bias; AvgPool1d then layer_norm),
                              Qwen2AudioMultiModalProjector, the key-padding audio attention mask
                              and the audio-token merge of Qwen2AudioForConditionalGeneration;
  processing_qwen2_audio.py   the audio token count per clip and the chat template;
  feature_extraction_whisper.py  the log-mel (numpy float64 path) and its attention mask.
The Qwen2 language model is the one of qwen2_vl_ref.py (Qwen2RMSNorm, Qwen2 attention with q/k/v
bias and plain RoPE, SwiGLU MLP), fed with the checkpoint's language_model.* tensors. Everything
is computed in float32 (the log-mel in float64).

usage:
  qwen2_audio_ref.py tower    --model DIR --mel M.npy --frames L0,L1,.. --out OUT.npy [--all]
        # float32 [sum_k tokens(L_k), hidden]: each window [n_mels, n_frames] of M.npy
        # ([n_windows, n_mels, n_frames]) through the tower + projector, rows kept as HF keeps
        # them; --all: every pooled row of one window (padded queries included)
  qwen2_audio_ref.py logits   --model DIR --ids @IDS [--mel M.npy --frames ..] --out OUT.npy
        # float32 [vocab]: last-token logits; the ids hold the expanded <|AUDIO|> runs
  qwen2_audio_ref.py hidden   --model DIR --ids @IDS [--mel ..] --out OUT.npy  # [L+1, S, hidden]
  qwen2_audio_ref.py generate --model DIR --ids @IDS [--mel ..] --max-new N  # greedy ids (JSON)
  qwen2_audio_ref.py tokens   --samples 0,320,321,.. [--hop 160 --n-samples 480000]
        # JSON [[mel_frames, audio_tokens], ...] per clip length, as the HF processor counts
  qwen2_audio_ref.py features --model DIR --wav FILE --out M.npy [--split]
        # log-mel windows of a 16-bit PCM mono WAV at the extractor's rate; JSON frames per window
        # on stdout; --split cuts a long clip into consecutive windows (else HF's truncation)
  qwen2_audio_ref.py chat [--model DIR] < requests.json   # jinja2 rendering (JSON list) of
        # HF's template, or of the checkpoint's tokenizer_config.json chat_template
"""
import argparse
import json
import os
import sys
import wave

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int8_ref import int8_attention, int8_linear  # noqa: E402
from qwen2_vl_ref import Qwen2VLText, parse_ids, read_safetensors  # noqa: E402

# Qwen2AudioProcessor.default_chat_template (processing_qwen2_audio.py).
CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content or message['type'] == 'audio' "
    "or content['type'] == 'audio' %}"
    "{% set audio_count.value = audio_count.value + 1 %}"
    "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    "{% elif 'text' in content %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% endif %}"
)

ENCODER_DEFAULTS = dict(num_mel_bins=128, encoder_layers=32, encoder_attention_heads=20,
                        encoder_ffn_dim=5120, d_model=1280, max_source_positions=1500)
TEXT_DEFAULTS = dict(hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, rms_norm_eps=1e-6,
                     rope_theta=10000.0, vocab_size=151936)


def load_checkpoint(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for fn in files:
        w.update(read_safetensors(os.path.join(model_dir, fn)))
    return cfg, w


def audio_tokens(mel_frames):
    """_get_feat_extract_output_lengths: (conv output, pooled output) lengths."""
    conv = (mel_frames - 1) // 2 + 1
    return conv, (conv - 2) // 2 + 1


class Qwen2AudioEncoderRef:
    def __init__(self, cfg, w):
        a = dict(ENCODER_DEFAULTS)
        a.update(cfg.get("audio_config") or {})
        self.w = w
        self.d = a["d_model"]
        self.n_layers = a["encoder_layers"]
        self.n_heads = a["encoder_attention_heads"]
        self.hd = self.d // self.n_heads
        self.max_pos = a["max_source_positions"]
        self.int8_layers = 0  # the first N layers' linears as mmrt's int8 blocks (int8_ref)
        self.int8_attention = False  # their attention scores too (int8_ref.int8_attention)

    def ln(self, x, base):
        return F.layer_norm(x, (self.d,), self.w[base + ".weight"], self.w[base + ".bias"], eps=1e-5)

    def lin(self, i, x, name, bias=True):
        w = self.w
        b = w[name + ".bias"] if bias else None
        if i < self.int8_layers:
            return int8_linear(x, w[name + ".weight"], b)
        return x @ w[name + ".weight"].T + (0 if b is None else b)

    def attention(self, i, x, mask, keys):
        p = f"audio_tower.layers.{i}.self_attn."
        B, S, _ = x.shape
        q = self.lin(i, x, p + "q_proj")
        k = self.lin(i, x, p + "k_proj", bias=False)
        v = self.lin(i, x, p + "v_proj")
        q, k, v = (t.view(B, S, self.n_heads, self.hd).transpose(1, 2) for t in (q, k, v))
        if i < self.int8_layers and self.int8_attention:  # every query over the first `keys`
            o = int8_attention(q, k[..., :keys, :], v[..., :keys, :], self.hd ** -0.5)
        else:
            o = torch.softmax((q * self.hd ** -0.5) @ k.transpose(2, 3) + mask, dim=-1) @ v
        o = o.transpose(1, 2).reshape(B, S, self.d)
        return self.lin(i, o, p + "out_proj")

    def layer(self, i, x, mask, keys):
        p = f"audio_tower.layers.{i}."
        x = x + self.attention(i, self.ln(x, p + "self_attn_layer_norm"), mask, keys)
        h = F.gelu(self.lin(i, self.ln(x, p + "final_layer_norm"), p + "fc1"))
        return x + self.lin(i, h, p + "fc2")

    def window(self, mel, frames, all_rows=False):
        """mel [n_mels, n_frames] -> projected rows [tokens(frames) or all pooled, hidden]."""
        w = self.w
        if mel.shape[-1] != 2 * self.max_pos:
            raise ValueError(f"mel input must have {2 * self.max_pos} frames, got {mel.shape}")
        x = F.gelu(F.conv1d(mel[None], w["audio_tower.conv1.weight"], w["audio_tower.conv1.bias"],
                            padding=1))
        x = F.gelu(F.conv1d(x, w["audio_tower.conv2.weight"], w["audio_tower.conv2.bias"],
                            stride=2, padding=1))
        x = x.permute(0, 2, 1) + w["audio_tower.embed_positions.weight"]
        n = x.shape[1]
        conv_len, n_tokens = audio_tokens(frames)
        # Qwen2AudioForConditionalGeneration.forward: -inf on keys >= conv_len, for every query.
        padded = torch.arange(n)[None, :] >= conv_len
        mask = torch.zeros(1, 1, n, n)
        mask[padded.view(1, 1, 1, n).expand(1, 1, n, n)] = float("-inf")
        for i in range(self.n_layers):
            x = self.layer(i, x, mask, conv_len)
        x = F.avg_pool1d(x.permute(0, 2, 1), 2, stride=2).permute(0, 2, 1)
        x = self.ln(x, "audio_tower.layer_norm")
        x = x @ w["multi_modal_projector.linear.weight"].T + w["multi_modal_projector.linear.bias"]
        return x[0] if all_rows else x[0, :n_tokens]

    def encode(self, mel, frames):
        """mel [n_windows, n_mels, n_frames] -> concatenated kept rows of every window."""
        return torch.cat([self.window(mel[k], frames[k]) for k in range(len(frames))], dim=0)


class Qwen2TextRef(Qwen2VLText):
    """qwen2_vl_ref's Qwen2 language model on language_model.* with Qwen2Config defaults, no
    M-RoPE (position_ids repeat one row), logits of the last token only."""

    def __init__(self, cfg, w):
        t = dict(TEXT_DEFAULTS)
        t.update(cfg.get("text_config") or {})
        self.cfg = t
        self.w = {k[len("language_model."):]: v for k, v in w.items()
                  if k.startswith("language_model.")}
        self.hidden = t["hidden_size"]
        self.n_heads = t["num_attention_heads"]
        self.n_kv = t["num_key_value_heads"]
        self.head_dim = self.hidden // self.n_heads
        self.n_layers = t["num_hidden_layers"]
        self.eps = t["rms_norm_eps"]
        self.theta = t["rope_theta"]
        self.mrope_section = None
        lm = self.w.get("lm_head.weight")
        self.lm_head = lm if lm is not None else self.w["model.embed_tokens.weight"]

    def run(self, embeds, collect=False):
        S = embeds.shape[0]
        cos, sin = self.rotary(torch.arange(S)[None].expand(3, S))
        x = embeds
        states = [x]
        for i in range(self.n_layers):
            x = self.layer(i, x, cos, sin)
            states.append(x)
        last = self.rms_norm(x[-1:], self.w["model.norm.weight"]) @ self.lm_head.T
        return (last[0], torch.stack(states)) if collect else last[0]


class Qwen2AudioRef:
    def __init__(self, model_dir):
        self.cfg, w = load_checkpoint(model_dir)
        self.audio_token = self.cfg.get("audio_token_index", 151646)
        self.tower = Qwen2AudioEncoderRef(self.cfg, w)
        self.text = Qwen2TextRef(self.cfg, w)

    def embeds(self, ids, feats):
        e = self.text.w["model.embed_tokens.weight"][torch.tensor(ids)].clone()
        m = torch.tensor(ids) == self.audio_token
        n = int(m.sum())
        got = 0 if feats is None else feats.shape[0]
        if n != got:
            raise ValueError(f"Audio features and audio tokens do not match: tokens: {n}, "
                             f"features {got}")
        if n:
            e[m] = feats
        return e

    def generate(self, ids, feats, n):
        seq = list(ids)
        out = []
        for _ in range(n):
            nxt = int(torch.argmax(self.text.run(self.embeds(seq, feats))))
            out.append(nxt)
            seq.append(nxt)
        return out


# ---- the Whisper log-mel (numpy float64 path) -------------------------------------------------

def hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    lin = 3.0 * f / 200.0
    log = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) * 27.0 / np.log(6.4)
    return np.where(f >= 1000.0, log, lin)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), 200.0 * m / 3.0)


def mel_filters(n_mels, n_fft, sr):
    fft_freqs = np.linspace(0, sr // 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    diff = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    fb *= (2.0 / (edges[2:n_mels + 2] - edges[:n_mels]))[None, :]
    return fb  # [n_bins, n_mels]


def log_mel(x, n_mels, n_fft, hop, sr, n_samples):
    x = np.asarray(x, dtype=np.float32)[:n_samples]
    x = np.pad(x, (0, n_samples - len(x))).astype(np.float64)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    padded = np.pad(x, (n_fft // 2, n_fft // 2), mode="reflect")
    n_frames = 1 + (len(padded) - n_fft) // hop
    frames = np.stack([padded[t * hop:t * hop + n_fft] * window for t in range(n_frames)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [frames, bins]
    mel = mel_filters(n_mels, n_fft, sr).T @ power.T  # [n_mels, frames]
    logs = np.log10(np.maximum(mel, 1e-10))[:, :-1]
    logs = np.maximum(logs, logs.max() - 8.0)
    return ((logs + 4.0) / 4.0).astype(np.float32)


def mask_frames(n, hop, n_samples):
    """The feature extractor's attention mask (padding="max_length", truncation) summed."""
    mask = np.zeros(n_samples, dtype=np.int32)
    mask[:min(n, n_samples)] = 1
    rescaled = mask[::hop]
    if n_samples % hop != 0:
        rescaled = rescaled[:-1]
    return int(rescaled.sum())


def read_wav(path):
    with wave.open(path, "rb") as f:
        if f.getsampwidth() != 2 or f.getnchannels() != 1:
            raise ValueError("expected 16-bit PCM mono")
        data = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
        return data.astype(np.float32) / 32768.0, f.getframerate()


def preprocessor(model_dir):
    p = dict(feature_size=80, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=30)
    path = os.path.join(model_dir, "preprocessor_config.json")
    if os.path.exists(path):
        with open(path) as f:
            p.update(json.load(f))
    p["n_samples"] = int(round(p["chunk_length"] * p["sampling_rate"]))
    return p


def features(model_dir, wav, split):
    p = preprocessor(model_dir)
    x, sr = read_wav(wav)
    if sr != p["sampling_rate"]:
        raise ValueError(f"the WAV is {sr} Hz, the extractor takes {p['sampling_rate']}")
    N = p["n_samples"]
    pieces = [x[i:i + N] for i in range(0, max(len(x), 1), N)] if split else [x[:N]]
    mels, frames = [], []
    for piece in pieces:
        L = mask_frames(len(piece), p["hop_length"], N)
        if audio_tokens(L)[1] < 1:
            continue  # a trailing window too short for a token adds nothing
        mels.append(log_mel(piece, p["feature_size"], p["n_fft"], p["hop_length"], sr, N))
        frames.append(L)
    return np.stack(mels), frames


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["tower", "logits", "hidden", "generate", "tokens",
                                     "features", "chat"])
    ap.add_argument("--model")
    ap.add_argument("--ids", default="", help="comma/space separated prompt ids, or @FILE")
    ap.add_argument("--mel", help="log-mel windows .npy [n_windows, n_mels, n_frames] float32")
    ap.add_argument("--frames", default="", help="valid mel frames per window")
    ap.add_argument("--samples", default="", help="clip lengths in samples (tokens mode)")
    ap.add_argument("--hop", type=int, default=160)
    ap.add_argument("--n-samples", type=int, default=480000)
    ap.add_argument("--wav")
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--int8-layers", type=int, default=0,
                    help="tower: the first N layers' linears as mmrt's int8 encoder blocks")
    ap.add_argument("--int8-attention", action="store_true",
                    help="tower: the int8 layers' attention scores in int8 too")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if a.mode == "chat":
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        text = CHAT_TEMPLATE
        if a.model:  # the checkpoint's own template (tokenizer_config.json)
            with open(os.path.join(a.model, "tokenizer_config.json")) as f:
                text = json.load(f)["chat_template"]
        tmpl = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(text)
        json.dump([tmpl.render(messages=r["messages"],
                               add_generation_prompt=r.get("add_generation_prompt", False))
                   for r in json.load(sys.stdin)], sys.stdout)
        return
    if a.mode == "tokens":
        out = []
        for n in parse_ids(a.samples):
            L = mask_frames(n, a.hop, a.n_samples)
            out.append([L, audio_tokens(L)[1]])
        json.dump(out, sys.stdout)
        return
    if a.mode == "features":
        mel, frames = features(a.model, a.wav, a.split)
        np.save(a.out, mel)
        json.dump(frames, sys.stdout)
        return
    m = Qwen2AudioRef(a.model)
    m.tower.int8_layers = a.int8_layers
    m.tower.int8_attention = a.int8_attention
    mel = torch.from_numpy(np.load(a.mel).astype(np.float32)) if a.mel else None
    frames = parse_ids(a.frames)
    if a.mode == "tower":
        if a.all:
            out = m.tower.window(mel[0], frames[0], all_rows=True)
        else:
            out = m.tower.encode(mel, frames)
        np.save(a.out, out.numpy().astype(np.float32))
        return
    ids = parse_ids(open(a.ids[1:]).read() if a.ids.startswith("@") else a.ids)
    feats = m.tower.encode(mel, frames) if mel is not None else None
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

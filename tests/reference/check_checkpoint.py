#!/usr/bin/env python3
"""Independent check of a Qwen2-VL or Qwen2.5-VL checkpoint folder written by `mmrt make-tiny-model`.

usage: check_checkpoint.py DIR [--naming old|new] [--tied yes|no] [--dtype bf16|f32]

Reads the safetensors header(s) with the json module (single file or index + shards) and
compares every tensor name, shape and dtype against a list written here by hand from Hugging
Face's Qwen2VLForConditionalGeneration module layout, or Qwen2_5_VLForConditionalGeneration's
vision tower (RMSNorm without biases, gate/up/down MLP with biases, out_hidden_size) for a
Qwen2.5-VL config (shape formulas from config.json). Loads
every tensor with numpy (bf16 widened to f32 by a 16-bit shift) and checks the values are finite, norm weights are 1, norm biases
are 0 and random tensors look like N(0, 0.02). Also checks the side files (tokenizer ids match
config.json, the chat template renders the documented prompt with jinja2, tokenizer_config /
generation_config / preprocessor_config fields).
Prints one line per problem and exits 1 if there is any.
"""
import json
import os
import struct
import sys

import numpy as np

problems = []


def fail(msg):
    problems.append(msg)


def qwen25_vision_names(vc):
    """Qwen2_5_VisionTransformerPretrainedModel's parameters (modeling_qwen2_5_vl.py)."""
    D, I, O = vc["hidden_size"], vc["intermediate_size"], vc["out_hidden_size"]
    ctx = D * vc["spatial_merge_size"] ** 2
    out = {"visual.patch_embed.proj.weight": (D, vc.get("in_chans", 3), vc["temporal_patch_size"],
                                              vc["patch_size"], vc["patch_size"])}
    for i in range(vc["depth"]):
        p = f"visual.blocks.{i}."
        out[p + "norm1.weight"] = (D,)  # Qwen2RMSNorm: no bias
        out[p + "norm2.weight"] = (D,)
        out[p + "attn.qkv.weight"] = (3 * D, D)
        out[p + "attn.qkv.bias"] = (3 * D,)
        out[p + "attn.proj.weight"] = (D, D)
        out[p + "attn.proj.bias"] = (D,)
        for n, shape in (("gate_proj", (I, D)), ("up_proj", (I, D)), ("down_proj", (D, I))):
            out[p + "mlp." + n + ".weight"] = shape
            out[p + "mlp." + n + ".bias"] = (shape[0],)
    out["visual.merger.ln_q.weight"] = (D,)
    out["visual.merger.mlp.0.weight"] = (ctx, ctx)
    out["visual.merger.mlp.0.bias"] = (ctx,)
    out["visual.merger.mlp.2.weight"] = (O, ctx)
    out["visual.merger.mlp.2.bias"] = (O,)
    return out


def hf_names(cfg, tied):
    """Qwen2-VL parameter names (original checkpoint spelling) -> shape, from config.json."""
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd = H // nh
    inter = cfg["intermediate_size"]
    V = cfg["vocab_size"]
    vc = cfg["vision_config"]
    E = vc.get("embed_dim", vc["hidden_size"])
    mlp = int(E * vc.get("mlp_ratio", 4))
    ms = vc["spatial_merge_size"]
    ctx = E * ms * ms
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "self_attn.q_proj.weight"] = (nh * hd, H)
        out[p + "self_attn.q_proj.bias"] = (nh * hd,)
        out[p + "self_attn.k_proj.weight"] = (nkv * hd, H)
        out[p + "self_attn.k_proj.bias"] = (nkv * hd,)
        out[p + "self_attn.v_proj.weight"] = (nkv * hd, H)
        out[p + "self_attn.v_proj.bias"] = (nkv * hd,)
        out[p + "self_attn.o_proj.weight"] = (H, nh * hd)
        out[p + "mlp.gate_proj.weight"] = (inter, H)
        out[p + "mlp.up_proj.weight"] = (inter, H)
        out[p + "mlp.down_proj.weight"] = (H, inter)
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
    if not tied:
        out["lm_head.weight"] = (V, H)
    if cfg.get("model_type") == "qwen2_5_vl":
        out.update(qwen25_vision_names(vc))
        return out
    # Conv3d(in_chans, embed_dim, kernel=(temporal, patch, patch), bias=False)
    out["visual.patch_embed.proj.weight"] = (E, vc.get("in_chans", 3), vc["temporal_patch_size"],
                                             vc["patch_size"], vc["patch_size"])
    for i in range(vc["depth"]):
        p = f"visual.blocks.{i}."
        for n in ("norm1", "norm2"):
            out[p + n + ".weight"] = (E,)
            out[p + n + ".bias"] = (E,)
        out[p + "attn.qkv.weight"] = (3 * E, E)
        out[p + "attn.qkv.bias"] = (3 * E,)
        out[p + "attn.proj.weight"] = (E, E)
        out[p + "attn.proj.bias"] = (E,)
        out[p + "mlp.fc1.weight"] = (mlp, E)
        out[p + "mlp.fc1.bias"] = (mlp,)
        out[p + "mlp.fc2.weight"] = (E, mlp)
        out[p + "mlp.fc2.bias"] = (E,)
    out["visual.merger.ln_q.weight"] = (E,)
    out["visual.merger.ln_q.bias"] = (E,)
    out["visual.merger.mlp.0.weight"] = (ctx, ctx)
    out["visual.merger.mlp.0.bias"] = (ctx,)
    out["visual.merger.mlp.2.weight"] = (vc["hidden_size"], ctx)
    out["visual.merger.mlp.2.bias"] = (vc["hidden_size"],)
    return out


def rename_new(name):
    # transformers >= 4.52 save_pretrained spelling
    if name.startswith("visual."):
        return "model." + name
    if name.startswith("model."):
        return "model.language_model." + name[len("model."):]
    return name


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        (n,) = struct.unpack("<Q", raw)
        header_bytes = f.read(n)
    if n % 8 != 0:
        fail(f"{path}: header length {n} is not a multiple of 8")
    header = json.loads(header_bytes.decode("utf-8"))
    size = os.path.getsize(path)
    return header, 8 + n, size


def is_norm(name):
    return any(k in name for k in ("layernorm.", ".norm1.", ".norm2.", ".ln_q.")) or \
        name.endswith("model.norm.weight") or name.endswith("language_model.norm.weight")


def main():
    args = sys.argv[1:]
    d = args[0]
    opts = dict(zip(args[1::2], args[2::2]))
    cfg = json.load(open(os.path.join(d, "config.json")))
    qwen25 = cfg.get("model_type") == "qwen2_5_vl"
    want_arch = "Qwen2_5_VLForConditionalGeneration" if qwen25 else "Qwen2VLForConditionalGeneration"
    if cfg.get("architectures") != [want_arch]:
        fail(f"config.json architectures is {cfg.get('architectures')}")
    if cfg.get("rope_scaling", {}).get("type") != "mrope":
        fail("config.json rope_scaling.type is not mrope")
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    if sum(cfg["rope_scaling"]["mrope_section"]) * 2 != hd:
        fail("mrope_section does not sum to head_dim/2")
    out_key = "out_hidden_size" if qwen25 else "hidden_size"
    if cfg["vision_config"][out_key] != cfg["hidden_size"]:
        fail(f"vision_config.{out_key} != hidden_size")
    if qwen25:
        vc = cfg["vision_config"]
        for k in ("window_size", "fullatt_block_indexes", "tokens_per_second", "intermediate_size"):
            if k not in vc:
                fail(f"vision_config has no {k}")
        if any(not 0 <= b < vc["depth"] for b in vc.get("fullatt_block_indexes", [])):
            fail("vision_config.fullatt_block_indexes outside the depth")

    # Shards.
    index_path = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index_path):
        index = json.load(open(index_path))
        weight_map = index["weight_map"]
        shards = sorted(set(weight_map.values()))
    else:
        weight_map = None
        shards = ["model.safetensors"]
    tensors = {}  # name -> (file, dtype, shape, begin, end)
    total = 0
    for s in shards:
        path = os.path.join(d, s)
        header, data_start, size = read_header(path)
        spans = []
        for name, e in header.items():
            if name == "__metadata__":
                if e.get("format") != "pt":
                    fail(f"{s}: __metadata__ format is {e.get('format')}")
                continue
            if name in tensors:
                fail(f"{name} appears in two shards")
            b, en = e["data_offsets"]
            tensors[name] = (path, e["dtype"], tuple(e["shape"]), data_start + b, data_start + en)
            spans.append((b, en))
            total += en - b
            if weight_map is not None and weight_map.get(name) != s:
                fail(f"index maps {name} to {weight_map.get(name)} but it is in {s}")
        spans.sort()
        pos = 0
        for b, en in spans:
            if b != pos:
                fail(f"{s}: data section not contiguous at {b}")
            pos = en
        if data_start + pos != size:
            fail(f"{s}: file size {size} != header + data {data_start + pos}")
    if weight_map is not None:
        if set(weight_map) != set(tensors):
            fail("index weight_map and shard contents differ")
        if index["metadata"]["total_size"] != total:
            fail(f"index total_size {index['metadata']['total_size']} != {total}")

    # Names / shapes / dtypes against the hand-written list.
    new_style = any(n.startswith("model.language_model.") for n in tensors)
    naming = "new" if new_style else "old"
    tied = "lm_head.weight" not in tensors
    if "naming" in opts and opts["naming"] != naming:
        fail(f"naming is {naming}, expected {opts['naming']}")
    if "tied" in opts and (opts["tied"] == "yes") != tied:
        fail(f"tied is {tied}, expected {opts['tied']}")
    if tied != bool(cfg["tie_word_embeddings"]):
        fail(f"config tie_word_embeddings {cfg['tie_word_embeddings']} but lm_head present={not tied}")
    expected = hf_names(cfg, tied)
    if new_style:
        expected = {rename_new(k): v for k, v in expected.items()}
    want_dtype = {"bf16": "BF16", "f32": "F32"}.get(opts.get("dtype", ""),
                                                   {"bfloat16": "BF16", "float32": "F32"}[cfg["torch_dtype"]])
    for n in sorted(set(expected) - set(tensors)):
        fail(f"missing tensor {n}")
    for n in sorted(set(tensors) - set(expected)):
        fail(f"unexpected tensor {n}")
    for n in sorted(set(expected) & set(tensors)):
        _, dt, shape, _, _ = tensors[n]
        if shape != tuple(expected[n]):
            fail(f"{n}: shape {shape}, expected {tuple(expected[n])}")
        if dt != want_dtype:
            fail(f"{n}: dtype {dt}, expected {want_dtype}")

    # Values.
    n_big = n_within = 0
    for n, (path, dt, shape, b, en) in sorted(tensors.items()):
        with open(path, "rb") as f:
            f.seek(b)
            buf = f.read(en - b)
        if dt == "BF16":
            # bfloat16 is the top half of a float32
            t = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            t = np.frombuffer(buf, dtype="<f4")
        t = t.reshape(shape)
        if not np.isfinite(t).all():
            fail(f"{n}: non-finite values")
        if is_norm(n):
            want = 0.0 if n.endswith(".bias") else 1.0
            if not np.all(t == want):
                fail(f"{n}: norm parameter is not all {want}")
        elif t.size >= 4096:
            n_big += t.size
            n_within += int(np.count_nonzero(np.abs(t) < 0.02))
            sd, mean = float(t.std(dtype=np.float64)), float(t.mean(dtype=np.float64))
            if abs(sd - 0.02) > 0.002 or abs(mean) > 0.002:
                fail(f"{n}: mean {mean:.4g} std {sd:.4g}, expected ~N(0, 0.02)")
    if n_big:
        frac = n_within / n_big  # ~0.683 for a normal
        if abs(frac - 0.683) > 0.02:
            fail(f"fraction within one std is {frac:.3f}, expected ~0.683")

    # Side files.
    tok = json.load(open(os.path.join(d, "tokenizer.json")))
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    ids = {"bos_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>",
           "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>",
           "vision_token_id": "<|vision_pad|>", "image_token_id": "<|image_pad|>",
           "video_token_id": "<|video_pad|>"}
    for field, token in ids.items():
        if cfg.get(field) != added.get(token):
            fail(f"config.json {field} {cfg.get(field)} != tokenizer id of {token} {added.get(token)}")
    tok_size = max(list(tok["model"]["vocab"].values()) + list(added.values())) + 1
    if cfg["vocab_size"] < tok_size:
        fail(f"vocab_size {cfg['vocab_size']} < tokenizer size {tok_size}")
    tc = json.load(open(os.path.join(d, "tokenizer_config.json")))
    if tc.get("eos_token") != "<|im_end|>" or tc.get("pad_token") != "<|endoftext|>" or \
            tc.get("bos_token", "x") is not None:
        fail("tokenizer_config.json eos/pad/bos tokens are wrong")
    for tid, e in tc["added_tokens_decoder"].items():
        if added.get(e["content"]) != int(tid) or e.get("special") is not True:
            fail(f"tokenizer_config.json added_tokens_decoder[{tid}] = {e}")
    # The chat template renders the documented Qwen2-VL instruct prompt (jinja2, as transformers).
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    msgs = [{"role": "user", "content": [{"type": "image"},
                                         {"type": "text", "text": "Describe this image."}]}]
    got = env.from_string(tc.get("chat_template", "")).render(
        messages=msgs, add_generation_prompt=True, add_vision_id=False)
    want = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n"
            "<|im_start|>assistant\n")
    if got != want:
        fail(f"tokenizer_config.json chat_template renders {got!r}, expected {want!r}")
    if tc.get("model_max_length") != 32768 or tc.get("tokenizer_class") != "Qwen2Tokenizer":
        fail("tokenizer_config.json model_max_length / tokenizer_class wrong")
    gc = json.load(open(os.path.join(d, "generation_config.json")))
    if gc.get("eos_token_id") != [added["<|im_end|>"], added["<|endoftext|>"]] or \
            gc.get("pad_token_id") != added["<|endoftext|>"]:
        fail(f"generation_config.json ids wrong: {gc}")
    pc = json.load(open(os.path.join(d, "preprocessor_config.json")))
    want_pc = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
               "temporal_patch_size": 2, "merge_size": 2,
               "image_mean": [0.48145466, 0.4578275, 0.40821073],
               "image_std": [0.26862954, 0.26130258, 0.27577711],
               "rescale_factor": 1 / 255, "resample": 3, "do_resize": True, "do_rescale": True,
               "do_normalize": True, "do_convert_rgb": True,
               "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"}
    for k, v in want_pc.items():
        if pc.get(k) != v:
            fail(f"preprocessor_config.json {k} = {pc.get(k)}, expected {v}")

    for p in problems[:50]:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in {d}")
        sys.exit(1)
    print(f"ok: {len(tensors)} tensors, naming {naming}, tied {tied}, {len(shards)} file(s)")


if __name__ == "__main__":
    main()

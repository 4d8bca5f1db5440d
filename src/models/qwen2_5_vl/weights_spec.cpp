// Qwen2.5-VL tensor table (HF modeling_qwen2_5_vl.py module layout).
#include "models/qwen2_5_vl/weights_spec.h"

namespace mmrt::models::qwen2_5_vl {

std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied) {
  const VisionConfig& v = cfg.vision;
  std::vector<ExpectedTensor> out = qwen2_vl::text_tensors(cfg.qwen2, tied);
  auto add = [&](std::string name, Shape shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  const int64_t E = v.hidden_size, I = v.intermediate_size;
  const int64_t merged = E * v.spatial_merge_size * v.spatial_merge_size;  // 2x2 tokens -> one
  add("visual.patch_embed.proj.weight",
      {E, v.in_chans, v.temporal_patch_size, v.patch_size, v.patch_size});
  for (int64_t b = 0; b < v.depth; ++b) {
    const std::string p = "visual.blocks." + std::to_string(b) + ".";
    add(p + "norm1.weight", {E});
    add(p + "norm2.weight", {E});
    add(p + "attn.qkv.weight", {3 * E, E});
    add(p + "attn.qkv.bias", {3 * E});
    add(p + "attn.proj.weight", {E, E});
    add(p + "attn.proj.bias", {E});
    add(p + "mlp.gate_proj.weight", {I, E});
    add(p + "mlp.gate_proj.bias", {I});
    add(p + "mlp.up_proj.weight", {I, E});
    add(p + "mlp.up_proj.bias", {I});
    add(p + "mlp.down_proj.weight", {E, I});
    add(p + "mlp.down_proj.bias", {E});
  }
  add("visual.merger.ln_q.weight", {E});
  add("visual.merger.mlp.0.weight", {merged, merged});
  add("visual.merger.mlp.0.bias", {merged});
  add("visual.merger.mlp.2.weight", {v.out_hidden_size, merged});
  add("visual.merger.mlp.2.bias", {v.out_hidden_size});
  return out;
}

qwen2_vl::Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg) {
  return qwen2_vl::check_checkpoint(st, [&](bool tied) { return expected_tensors(cfg, tied); });
}

}  // namespace mmrt::models::qwen2_5_vl

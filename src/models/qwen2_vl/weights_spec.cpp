// Qwen2-VL tensor table (HF modeling_qwen2_vl.py module layout) and the checkpoint checker.
#include "models/qwen2_vl/weights_spec.h"

#include <map>
#include <set>

#include "core/error.h"

namespace mmrt::models {

std::vector<ExpectedTensor> qwen2_vl_expected_tensors(const io::Qwen2VLConfig& cfg, bool tied) {
  const io::Qwen2TextConfig& t = cfg.text;
  const io::Qwen2VLVisionConfig& v = cfg.vision;
  const int64_t H = t.hidden_size, I = t.intermediate_size, V = t.vocab_size;
  const int64_t q_out = t.num_attention_heads * t.head_dim();
  const int64_t kv_out = t.num_key_value_heads * t.head_dim();
  std::vector<ExpectedTensor> out;
  auto add = [&](std::string name, Shape shape) {
    out.push_back({std::move(name), std::move(shape)});
  };

  add("model.embed_tokens.weight", {V, H});
  for (int64_t l = 0; l < t.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {q_out, H});
    add(p + "self_attn.q_proj.bias", {q_out});
    add(p + "self_attn.k_proj.weight", {kv_out, H});
    add(p + "self_attn.k_proj.bias", {kv_out});
    add(p + "self_attn.v_proj.weight", {kv_out, H});
    add(p + "self_attn.v_proj.bias", {kv_out});
    add(p + "self_attn.o_proj.weight", {H, q_out});
    add(p + "mlp.gate_proj.weight", {I, H});
    add(p + "mlp.up_proj.weight", {I, H});
    add(p + "mlp.down_proj.weight", {H, I});
    add(p + "input_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
  }
  add("model.norm.weight", {H});
  if (!tied) add("lm_head.weight", {V, H});

  const int64_t E = v.embed_dim, M = v.mlp_hidden();
  const int64_t merged = E * v.spatial_merge_size * v.spatial_merge_size;  // 2x2 tokens -> one
  add("visual.patch_embed.proj.weight",
      {E, v.in_chans, v.temporal_patch_size, v.patch_size, v.patch_size});
  for (int64_t b = 0; b < v.depth; ++b) {
    const std::string p = "visual.blocks." + std::to_string(b) + ".";
    add(p + "norm1.weight", {E});
    add(p + "norm1.bias", {E});
    add(p + "norm2.weight", {E});
    add(p + "norm2.bias", {E});
    add(p + "attn.qkv.weight", {3 * E, E});
    add(p + "attn.qkv.bias", {3 * E});
    add(p + "attn.proj.weight", {E, E});
    add(p + "attn.proj.bias", {E});
    add(p + "mlp.fc1.weight", {M, E});
    add(p + "mlp.fc1.bias", {M});
    add(p + "mlp.fc2.weight", {E, M});
    add(p + "mlp.fc2.bias", {E});
  }
  add("visual.merger.ln_q.weight", {E});
  add("visual.merger.ln_q.bias", {E});
  add("visual.merger.mlp.0.weight", {merged, merged});
  add("visual.merger.mlp.0.bias", {merged});
  add("visual.merger.mlp.2.weight", {v.hidden_size, merged});
  add("visual.merger.mlp.2.bias", {v.hidden_size});
  return out;
}

bool qwen2_vl_is_norm_param(const std::string& n) {
  for (const char* key : {"layernorm.", ".norm1.", ".norm2.", "model.norm.", ".ln_q."})
    if (n.find(key) != std::string::npos) return true;
  return false;
}

namespace {

// "N what (first: a, b, c)" or "" when the list is empty.
std::string summarize(const std::vector<std::string>& items, const char* what) {
  if (items.empty()) return "";
  constexpr size_t kShow = 5;
  std::string s = std::to_string(items.size()) + " " + what + " (";
  for (size_t i = 0; i < items.size() && i < kShow; ++i) {
    if (i) s += ", ";
    s += items[i];
  }
  if (items.size() > kShow) s += ", ...";
  return s + ")";
}

}  // namespace

void check_qwen2_vl_checkpoint(const io::SafeTensors& st, const io::Qwen2VLConfig& cfg) {
  const std::vector<std::string> names = st.names();
  const io::Qwen2VLNaming naming = io::detect_qwen2_vl_naming(names, st.path());
  const bool tied = !st.contains("lm_head.weight");
  std::vector<std::string> missing, unexpected, wrong_shape, bad_dtype;
  std::set<std::string> expected_names;
  for (const ExpectedTensor& e : qwen2_vl_expected_tensors(cfg, tied)) {
    const std::string name = io::qwen2_vl_tensor_name(naming, e.canonical_name);
    expected_names.insert(name);
    if (!st.contains(name)) {
      missing.push_back(name);
      continue;
    }
    const io::TensorInfo& info = st.info(name);
    if (info.shape != e.shape)
      wrong_shape.push_back(name + " is " + shape_str(info.shape) + ", expected " +
                            shape_str(e.shape));
    if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16)
      bad_dtype.push_back(name + " is " + std::string(dtype_name(info.dtype)));
  }
  for (const auto& n : names)
    if (!expected_names.count(n)) unexpected.push_back(n);
  if (missing.empty() && unexpected.empty() && wrong_shape.empty() && bad_dtype.empty()) return;

  std::string msg = st.path() + ": checkpoint does not match its config.json (" +
                    (naming == io::Qwen2VLNaming::kOld ? "old" : "new") + "-style names, " +
                    (tied ? "tied" : "untied") + " lm_head):";
  for (const std::string& part :
       {summarize(missing, "missing"), summarize(unexpected, "unexpected"),
        summarize(wrong_shape, "with the wrong shape"),
        summarize(bad_dtype, "with an unsupported dtype (need F32, F16 or BF16)")})
    if (!part.empty()) msg += " " + part + ";";
  msg.pop_back();
  throw FormatError(msg);
}

}  // namespace mmrt::models

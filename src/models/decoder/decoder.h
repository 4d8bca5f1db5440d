// The shared decoder of Llama-shaped language models (Qwen2 / Qwen2-VL / Qwen2-Audio, Mistral and
// Vicuna for LLaVA, Persimmon for Fuyu): token embedding, pre-norm layers of norm -> GQA
// attention with rotary positions over the paged KV cache -> residual, norm -> MLP -> residual,
// final norm and the LM head. What differs between families is plain settings (DecoderConfig):
// sizes, RMSNorm or LayerNorm, biases, separate or fused per-head-interleaved q/k/v, q/k
// LayerNorm, SwiGLU or squared-ReLU MLP, the rotary kind (1-D, M-RoPE, partial), tied or untied
// head, and the map from canonical tensor names to the checkpoint's.
//
// The decoder reads and writes K/V in a kernels::KvCache its caller owns (the engine's
// executor); it owns only its weights and its activation scratch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "kernels/linear.h"
#include "models/model.h"

namespace mmrt::io {
class SafeTensors;
}

namespace mmrt::models {

enum class RotaryKind : uint8_t {
  k1D,       // RoPE on one position row
  kMrope,    // M-RoPE: frequency pairs split into sections, each driven by its own position row
  kPartial,  // RoPE on the first rotary_dim dims of each head, the rest passed through
};

enum class NormKind : uint8_t {
  kRms,    // RMSNorm, weight only (Llama, Qwen2)
  kLayer,  // LayerNorm with weight and bias (Persimmon)
};

enum class MlpKind : uint8_t {
  kSwiGlu,  // down(silu(gate(x)) * up(x)), no biases
  kRelu2,   // down(relu(up(x))²), biases per mlp_bias (Persimmon's "relu2")
};

struct DecoderConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;  // the eps of every norm (RMSNorm or LayerNorm)
  NormKind norm = NormKind::kRms;
  MlpKind mlp = MlpKind::kSwiGlu;
  double rope_theta = 10000.0;
  RotaryKind rotary = RotaryKind::k1D;
  std::vector<int32_t> mrope_section;  // kMrope: pairs per position row, summing to head_dim / 2
  int64_t rotary_dim = 0;              // kPartial: rotated dims per head (even, <= head_dim)
  bool qkv_bias = false;               // q/k/v projections carry biases (Qwen2)
  // One fused q/k/v weight whose rows are grouped per head as [q_h, k_h, v_h] (Persimmon's
  // query_key_value; needs num_kv_heads == num_heads); else separate q_proj, k_proj, v_proj.
  bool fused_qkv = false;
  bool qk_norm = false;          // LayerNorm over each head's q and k before the rotary (Persimmon)
  bool o_bias = false;           // the attention output projection carries a bias
  bool mlp_bias = false;         // the MLP projections carry biases
  bool tied_embeddings = false;  // the LM head is embed_tokens
  // Canonical (Llama-style) tensor name -> the checkpoint's name. Canonical names are
  // "model.embed_tokens.weight", "model.layers.{i}.input_layernorm.{weight,bias}",
  // "model.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}" (fused:
  // "self_attn.qkv_proj.{weight,bias}"), "model.layers.{i}.self_attn.{q,k}_norm.{weight,bias}",
  // "model.layers.{i}.post_attention_layernorm.{weight,bias}",
  // "model.layers.{i}.mlp.{gate,up,down}_proj.{weight,bias}", "model.norm.{weight,bias}",
  // "lm_head.weight" (biases only where the settings say). Unset: the identity.
  std::function<std::string(const std::string&)> tensor_name;

  int32_t position_rows() const {
    return rotary == RotaryKind::kMrope ? static_cast<int32_t>(mrope_section.size()) : 1;
  }
  // Throws FormatError naming the field when the settings are inconsistent.
  void validate(const std::string& origin) const;
};

// Every tensor the decoder reads, canonical name and shape (the lm_head only when untied).
struct DecoderTensor {
  std::string canonical_name;
  Shape shape;
};
std::vector<DecoderTensor> decoder_tensors(const DecoderConfig& cfg);

// Every op the shared decoder may run (its settings choose among the norms and MLPs).
inline constexpr kernels::Op kDecoderOps[] = {kernels::Op::kEmbedding,
                                              kernels::Op::kRmsNorm,
                                              kernels::Op::kLayerNorm,
                                              kernels::Op::kLayerNormHeads,
                                              kernels::Op::kAdd,
                                              kernels::Op::kSiluMul,
                                              kernels::Op::kReluSquared,
                                              kernels::Op::kLinear,
                                              kernels::Op::kRopeAngles,
                                              kernels::Op::kApplyRope,
                                              kernels::Op::kPagedAttention,
                                              kernels::Op::kKvWrite};

class Decoder {
 public:
  // Reads the decoder's tensors from an opened checkpoint whose tensors were already checked.
  // Kernels run on `be`, which must outlive the decoder.
  static std::unique_ptr<Decoder> load(const kernels::Backend& be, const io::SafeTensors& st,
                                       const DecoderConfig& cfg, const LoadOptions& opts);
  ~Decoder();

  const DecoderConfig& config() const;
  kernels::WeightFormat weight_format() const;
  size_t weight_bytes() const;  // bytes the linear layers stream per decode step
  // The cache layout: n_layers, n_kv_heads, head_dim (num_blocks, block_size, dtype: caller's).
  kernels::KvCacheConfig kv_config() const;

  // Runs every sequence's new tokens, writing their K/V into `kv`. Returns logits [n_want, vocab]
  // f32 for the sequences with want_logits, in batch order (a view of an internal buffer, valid
  // until the next call). InvalidArgument on inconsistent inputs (block table too short,
  // position count wrong, token id out of range, a cache of another layout).
  Tensor forward(std::span<const SeqStep> batch, kernels::KvCache& kv);

  // Debug aid: when set, forward() copies the hidden state after the embeddings and after every
  // layer ([n_layers + 1, n_tokens, hidden]) here, to name the first layer that diverges.
  void capture_hidden_states(Tensor* out) { capture_ = out; }

  // Embeds token ids ([n] -> [n, hidden] f32), as the first step of forward() does.
  void embed(std::span<const int32_t> ids, float* out) const;

 private:
  struct Impl;
  explicit Decoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Tensor* capture_ = nullptr;
};

}  // namespace mmrt::models

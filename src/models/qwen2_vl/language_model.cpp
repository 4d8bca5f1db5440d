#include "models/qwen2_vl/language_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "models/qwen2_vl/weights_spec.h"

namespace fs = std::filesystem;

namespace mmrt::models {

namespace {

struct Layer {
  Tensor input_norm, post_norm;   // [hidden]
  kernels::PackedLinear qkv;      // [(n_heads + 2 n_kv) * head_dim, hidden] + bias
  kernels::PackedLinear o;        // [hidden, n_heads * head_dim]
  kernels::PackedLinear gate_up;  // [2 * inter, hidden]
  kernels::PackedLinear down;     // [hidden, inter]
};

// Grow-only scratch buffer.
struct Scratch {
  std::vector<float> v;
  float* get(size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

}  // namespace

struct LanguageModel::Impl {
  io::Qwen2VLConfig cfg;
  io::SafeTensors st;  // keeps the mapped weights alive
  const kernels::Backend* be = nullptr;
  kernels::WeightFormat fmt = kernels::WeightFormat::kBF16;
  kernels::LinearOptions lin;     // how every linear layer runs
  Tensor embed_tokens;            // [vocab, hidden]
  Tensor final_norm;              // [hidden]
  kernels::PackedLinear lm_head;  // [vocab, hidden]
  std::vector<Layer> layers;
  kernels::RopeTable rope;
  std::unique_ptr<kernels::KvCache> kv;

  int64_t hidden = 0, n_heads = 0, n_kv = 0, head_dim = 0, inter = 0, vocab = 0;
  Scratch x, h, qkv, attn, tmp, gate_up, act, logits_in, logits;
  std::vector<int32_t> tokens, pos, slots;
  std::vector<kernels::AttnSeq> seqs;

  explicit Impl(io::SafeTensors s) : st(std::move(s)) {}
};

LanguageModel::LanguageModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LanguageModel::~LanguageModel() = default;

const io::Qwen2VLConfig& LanguageModel::config() const {
  return impl_->cfg;
}
const kernels::KvCache& LanguageModel::kv_cache() const {
  return *impl_->kv;
}
kernels::KvCache& LanguageModel::kv_cache() {
  return *impl_->kv;
}
kernels::WeightFormat LanguageModel::weight_format() const {
  return impl_->fmt;
}

size_t LanguageModel::weight_bytes() const {
  size_t b = impl_->lm_head.weight_bytes();
  for (const auto& l : impl_->layers)
    b += l.qkv.weight_bytes() + l.o.weight_bytes() + l.gate_up.weight_bytes() +
         l.down.weight_bytes();
  return b;
}

std::unique_ptr<LanguageModel> LanguageModel::load(const kernels::Backend& be,
                                                   const std::string& dir,
                                                   const LanguageModelOptions& opts) {
  fs::path cfg_path = fs::path(dir) / "config.json";
  if (!fs::exists(cfg_path)) throw NotFound("model folder '" + dir + "' has no config.json");
  io::Qwen2VLConfig cfg = io::load_qwen2_vl_config(cfg_path.string());
  auto impl = std::make_unique<Impl>(io::SafeTensors::open(dir));
  Impl& m = *impl;
  m.cfg = cfg;
  m.be = &be;
  check_qwen2_vl_checkpoint(m.st, cfg);  // every tensor, before any compute

  const auto& t = cfg.text;
  m.hidden = t.hidden_size;
  m.n_heads = t.num_attention_heads;
  m.n_kv = t.num_key_value_heads;
  m.head_dim = t.head_dim();
  m.inter = t.intermediate_size;
  m.vocab = t.vocab_size;

  std::vector<std::string> names = m.st.names();
  io::Qwen2VLNaming naming = io::detect_qwen2_vl_naming(names, dir);
  auto get = [&](const std::string& canonical) {
    return m.st.get(io::qwen2_vl_tensor_name(naming, canonical));
  };
  auto has = [&](const std::string& canonical) {
    return m.st.contains(io::qwen2_vl_tensor_name(naming, canonical));
  };

  m.embed_tokens = get("model.embed_tokens.weight");
  m.final_norm = get("model.norm.weight");
  if (opts.weight_format) {
    m.fmt = *opts.weight_format;
  } else {
    m.fmt = m.embed_tokens.dtype() == DType::kF32 ? kernels::WeightFormat::kF32
                                                  : kernels::WeightFormat::kBF16;
  }
  bool tied = !has("lm_head.weight");
  Tensor lm = tied ? m.embed_tokens : get("lm_head.weight");
  m.lin.int8_x = opts.int8_activations;
  m.lm_head = kernels::PackedLinear::pack(be, lm, nullptr, m.fmt, opts.weight_placement);

  m.layers.resize(static_cast<size_t>(t.num_hidden_layers));
  for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& L = m.layers[static_cast<size_t>(i)];
    L.input_norm = get(p + "input_layernorm.weight");
    L.post_norm = get(p + "post_attention_layernorm.weight");
    Tensor qw = get(p + "self_attn.q_proj.weight"), kw = get(p + "self_attn.k_proj.weight"),
           vw = get(p + "self_attn.v_proj.weight");
    Tensor qb = get(p + "self_attn.q_proj.bias"), kb = get(p + "self_attn.k_proj.bias"),
           vb = get(p + "self_attn.v_proj.bias");
    const Tensor* ws[] = {&qw, &kw, &vw};
    const Tensor* bs[] = {&qb, &kb, &vb};
    L.qkv = kernels::PackedLinear::pack_concat(be, ws, bs, m.fmt, opts.weight_placement);
    Tensor ow = get(p + "self_attn.o_proj.weight");
    L.o = kernels::PackedLinear::pack(be, ow, nullptr, m.fmt, opts.weight_placement);
    Tensor gw = get(p + "mlp.gate_proj.weight"), uw = get(p + "mlp.up_proj.weight");
    const Tensor* gu[] = {&gw, &uw};
    L.gate_up = kernels::PackedLinear::pack_concat(be, gu, {}, m.fmt, opts.weight_placement);
    Tensor dw = get(p + "mlp.down_proj.weight");
    L.down = kernels::PackedLinear::pack(be, dw, nullptr, m.fmt, opts.weight_placement);
  }

  if (t.mrope_section.empty()) {
    m.rope = kernels::make_rope_table(static_cast<int32_t>(m.head_dim), t.rope_theta);
  } else {
    std::vector<int32_t> sec(t.mrope_section.begin(), t.mrope_section.end());
    m.rope = kernels::make_mrope_table(static_cast<int32_t>(m.head_dim), t.rope_theta, sec);
  }
  // M-RoPE tables always take 3 position rows; a plain table takes 1 (we pass row 0).

  kernels::KvCacheConfig kc;
  kc.n_layers = static_cast<int32_t>(t.num_hidden_layers);
  kc.block_size = opts.kv_block_size;
  kc.n_kv_heads = static_cast<int32_t>(m.n_kv);
  kc.head_dim = static_cast<int32_t>(m.head_dim);
  kc.dtype = opts.kv_dtype;
  if (opts.kv_blocks > 0) {
    kc.num_blocks = opts.kv_blocks;
  } else {
    uint64_t per_block = 2ull * static_cast<uint64_t>(kc.n_layers) * kc.block_size * kc.n_kv_heads *
                         kc.head_dim * dtype_size(kc.dtype);
    kc.num_blocks = static_cast<int32_t>(std::max<uint64_t>(1, opts.kv_bytes / per_block));
  }
  m.kv = std::make_unique<kernels::KvCache>(kc);
  return std::unique_ptr<LanguageModel>(new LanguageModel(std::move(impl)));
}

void LanguageModel::embed(std::span<const int32_t> ids, float* out) const {
  kernels::embedding(impl_->embed_tokens, ids.data(), static_cast<int64_t>(ids.size()), out);
}

Tensor LanguageModel::forward(std::span<const SeqStep> batch) {
  Impl& m = *impl_;
  const kernels::Backend& be = *m.be;
  const int64_t H = m.hidden, hd = m.head_dim;
  const int64_t q_width = m.n_heads * hd, kv_width = m.n_kv * hd;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int32_t bs = m.kv->config().block_size;

  // Gather tokens, positions and cache slots of every sequence.
  int64_t N = 0, n_want = 0;
  for (const auto& s : batch) {
    if (s.tokens.empty()) throw InvalidArgument("forward: a sequence has no new tokens");
    N += static_cast<int64_t>(s.tokens.size());
    n_want += s.want_logits ? 1 : 0;
  }
  if (N == 0) return Tensor::empty(DType::kF32, {0, m.vocab});
  m.tokens.resize(static_cast<size_t>(N));
  m.pos.resize(static_cast<size_t>(3 * N));
  m.slots.resize(static_cast<size_t>(N));
  m.seqs.clear();
  int64_t row = 0;
  for (const auto& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int64_t kv_len = s.kv_before + n;
    if (s.kv_before < 0) throw InvalidArgument("forward: negative kv_before");
    if (static_cast<int64_t>(s.block_table.size()) * bs < kv_len)
      throw InvalidArgument("forward: block table of " + std::to_string(s.block_table.size()) +
                            " blocks cannot hold " + std::to_string(kv_len) + " tokens");
    if (!s.positions.empty() && static_cast<int64_t>(s.positions.size()) != 3 * n)
      throw InvalidArgument("forward: positions must be [3, n_tokens] (" + std::to_string(3 * n) +
                            " values), got " + std::to_string(s.positions.size()));
    for (int64_t i = 0; i < n; ++i) {
      const int32_t tok = s.tokens[static_cast<size_t>(i)];
      if (tok < 0 || tok >= m.vocab)
        throw InvalidArgument("forward: token id " + std::to_string(tok) +
                              " outside the vocabulary [0, " + std::to_string(m.vocab) + ")");
      m.tokens[static_cast<size_t>(row + i)] = tok;
      for (int c = 0; c < 3; ++c) {
        int32_t p = s.positions.empty() ? static_cast<int32_t>(s.kv_before + i + s.rope_delta)
                                        : s.positions[static_cast<size_t>(c * n + i)];
        m.pos[static_cast<size_t>(c * N + row + i)] = p;
      }
      const int64_t cache_idx = s.kv_before + i;
      const int32_t block = s.block_table[static_cast<size_t>(cache_idx / bs)];
      m.slots[static_cast<size_t>(row + i)] = static_cast<int32_t>(block * bs + cache_idx % bs);
    }
    kernels::AttnSeq a;
    a.q_begin = static_cast<int32_t>(row);
    a.n_q = static_cast<int32_t>(n);
    a.kv_len = static_cast<int32_t>(kv_len);
    a.block_table = s.block_table.data();
    m.seqs.push_back(a);
    row += n;
  }

  float* x = m.x.get(static_cast<size_t>(N * H));                   // [N, hidden]
  float* h = m.h.get(static_cast<size_t>(N * H));                   // [N, hidden]
  float* qkv = m.qkv.get(static_cast<size_t>(N * qkv_width));       // [N, q | k | v]
  float* attn = m.attn.get(static_cast<size_t>(N * q_width));       // [N, n_heads * head_dim]
  float* tmp = m.tmp.get(static_cast<size_t>(N * H));               // [N, hidden]
  float* gu = m.gate_up.get(static_cast<size_t>(N * 2 * m.inter));  // [N, 2 * inter]
  float* act = m.act.get(static_cast<size_t>(N * m.inter));         // [N, inter]

  kernels::embedding(m.embed_tokens, m.tokens.data(), N, x);
  row = 0;
  for (const auto& s : batch) {
    if (!s.embed_rows.empty()) {
      if (!s.embeds) throw InvalidArgument("forward: embed_rows given without embeds");
      for (size_t j = 0; j < s.embed_rows.size(); ++j) {
        int32_t r = s.embed_rows[j];
        if (r < 0 || r >= static_cast<int32_t>(s.tokens.size()))
          throw InvalidArgument("forward: embed row " + std::to_string(r) + " out of range");
        std::memcpy(x + (row + r) * H, s.embeds + static_cast<int64_t>(j) * H,
                    static_cast<size_t>(H) * sizeof(float));
      }
    }
    row += static_cast<int64_t>(s.tokens.size());
  }

  const int64_t L = static_cast<int64_t>(m.layers.size());
  if (capture_) {
    *capture_ = Tensor::empty(DType::kF32, {L + 1, N, H});
    std::memcpy(capture_->data<float>(), x, static_cast<size_t>(N * H) * sizeof(float));
  }

  // The M-RoPE table reads rows t, h, w; a plain table reads row 0 only.
  kernels::RopeAngles angles = kernels::rope_angles(be, m.rope, m.pos.data(), N);
  const float eps = static_cast<float>(m.cfg.text.rms_norm_eps);

  kernels::PagedAttentionArgs pa;
  pa.q = qkv;
  pa.q_stride = qkv_width;
  pa.out = attn;
  pa.n_tokens = N;
  pa.n_heads = static_cast<int32_t>(m.n_heads);

  for (int64_t li = 0; li < L; ++li) {
    const Layer& ly = m.layers[static_cast<size_t>(li)];
    kernels::rms_norm(be, x, ly.input_norm, eps, h, N, H);
    kernels::linear(be, h, N, ly.qkv, qkv, m.lin);
    kernels::apply_rope(be, angles, qkv, m.n_heads, qkv_width);
    kernels::apply_rope(be, angles, qkv + q_width, m.n_kv, qkv_width);
    m.kv->write(static_cast<int32_t>(li), qkv + q_width, qkv + q_width + kv_width, m.slots.data(),
                N, qkv_width, qkv_width);
    kernels::paged_attention(be, pa, m.kv->layer(static_cast<int32_t>(li)), m.seqs);
    kernels::linear(be, attn, N, ly.o, tmp, m.lin);
    kernels::add(be, x, tmp, N * H);
    kernels::rms_norm(be, x, ly.post_norm, eps, h, N, H);
    kernels::linear(be, h, N, ly.gate_up, gu, m.lin);
    kernels::silu_mul_fused(be, gu, act, N, m.inter);
    kernels::linear(be, act, N, ly.down, tmp, m.lin);
    kernels::add(be, x, tmp, N * H);
    if (capture_)
      std::memcpy(capture_->data<float>() + (li + 1) * N * H, x,
                  static_cast<size_t>(N * H) * sizeof(float));
  }

  // Final norm and lm_head for the last token of each sequence that wants logits.
  float* last =
      m.logits_in.get(static_cast<size_t>(std::max<int64_t>(n_want, 1) * H));  // [n_want, hidden]
  int64_t w = 0;
  row = 0;
  for (const auto& s : batch) {
    row += static_cast<int64_t>(s.tokens.size());
    if (s.want_logits)
      std::memcpy(last + (w++) * H, x + (row - 1) * H, static_cast<size_t>(H) * sizeof(float));
  }
  kernels::rms_norm(be, last, m.final_norm, eps, last, n_want, H);
  float* logits = m.logits.get(static_cast<size_t>(std::max<int64_t>(n_want, 1) * m.vocab));
  if (n_want > 0) kernels::linear(be, last, n_want, m.lm_head, logits, m.lin);
  return Tensor::view(logits, DType::kF32, {n_want, m.vocab});
}

}  // namespace mmrt::models

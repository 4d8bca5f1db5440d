#include "models/decoder/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/layout.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"

namespace mmrt::models {

namespace {

struct Layer {
  Tensor input_norm, post_norm;               // [hidden]
  Tensor input_norm_b, post_norm_b;           // [hidden] (LayerNorm)
  Tensor q_norm, q_norm_b, k_norm, k_norm_b;  // [head_dim] (qk_norm)
  kernels::PackedLinear qkv;      // [(n_heads + 2 n_kv) * head_dim, hidden] (+ bias), q | k | v
  kernels::PackedLinear o;        // [hidden, n_heads * head_dim] (+ bias)
  kernels::PackedLinear gate_up;  // SwiGLU: [2 * inter, hidden]; relu2: up [inter, hidden] (+ bias)
  kernels::PackedLinear down;     // [hidden, inter] (+ bias)
};

}  // namespace

struct Decoder::Impl {
  DecoderConfig cfg;
  bool encoders_only = false;  // LoadOptions::encoders_only: no layers, no head
  const kernels::Backend* be = nullptr;
  kernels::WeightFormat fmt = kernels::WeightFormat::kBF16;
  kernels::LinearOptions lin;       // how every linear layer runs
  kernels::LinearOptions residual;  // lin, added to its output (o and down: x += ...)
  Tensor embed_tokens;              // [vocab, hidden]
  Tensor final_norm, final_norm_b;  // [hidden] (the bias: LayerNorm)
  kernels::PackedLinear lm_head;    // [vocab, hidden]
  std::vector<Layer> layers;
  kernels::RopeTable rope;  // head_dim (or rotary_dim) wide

  int64_t hidden = 0, n_heads = 0, n_kv = 0, head_dim = 0, inter = 0, vocab = 0;
  int32_t rows = 1;                                                   // position rows
  kernels::Scratch x, h, qkv, attn, gate_up, act, logits_in, logits;  // the backend's memory
  std::vector<int32_t> tokens, pos, slots;
  std::vector<kernels::AttnSeq> seqs;
};

Decoder::Decoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Decoder::~Decoder() = default;

const DecoderConfig& Decoder::config() const {
  return impl_->cfg;
}
kernels::WeightFormat Decoder::weight_format() const {
  return impl_->fmt;
}

size_t Decoder::weight_bytes() const {
  size_t b = impl_->lm_head.weight_bytes();
  for (const auto& l : impl_->layers)
    b += l.qkv.weight_bytes() + l.o.weight_bytes() + l.gate_up.weight_bytes() +
         l.down.weight_bytes();
  return b;
}

kernels::KvCacheConfig Decoder::kv_config() const {
  kernels::KvCacheConfig kc;
  kc.n_layers = static_cast<int32_t>(impl_->cfg.num_layers);
  kc.n_kv_heads = static_cast<int32_t>(impl_->n_kv);
  kc.head_dim = static_cast<int32_t>(impl_->head_dim);
  return kc;
}

void DecoderConfig::validate(const std::string& origin) const {
  auto fail = [&](const std::string& what) { throw FormatError(origin + ": " + what); };
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) fail(std::string(field) + " must be positive, got " + std::to_string(v));
  };
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_layers);
  positive("num_attention_heads", num_heads);
  positive("num_key_value_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab_size);
  if (num_heads % num_kv_heads != 0)
    fail("num_attention_heads " + std::to_string(num_heads) +
         " is not divisible by num_key_value_heads " + std::to_string(num_kv_heads));
  if (head_dim % 2 != 0) fail("head_dim " + std::to_string(head_dim) + " is odd");
  if (!(rms_norm_eps > 0)) fail("rms_norm_eps must be positive");
  if (!(rope_theta > 1)) fail("rope_theta must be > 1");
  if (rotary == RotaryKind::kMrope) {
    int64_t sum = 0;
    for (int32_t s : mrope_section) {
      if (s < 0) fail("mrope_section has a negative entry");
      sum += s;
    }
    if (mrope_section.empty() || mrope_section.size() > 4 || sum != head_dim / 2)
      fail("mrope_section must have 1 to 4 entries summing to head_dim/2 = " +
           std::to_string(head_dim / 2) + ", sums to " + std::to_string(sum));
  }
  if (fused_qkv && num_kv_heads != num_heads)
    fail("a fused per-head q/k/v weight needs as many key/value heads as heads (" +
         std::to_string(num_kv_heads) + " of " + std::to_string(num_heads) + ")");
  if (rotary == RotaryKind::kPartial &&
      (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim))
    fail("rotary_dim " + std::to_string(rotary_dim) + " must be even, in [2, head_dim " +
         std::to_string(head_dim) + "]");
}

std::vector<DecoderTensor> decoder_tensors(const DecoderConfig& c) {
  const int64_t H = c.hidden_size, hd = c.head_dim;
  std::vector<DecoderTensor> v;
  v.push_back({"model.embed_tokens.weight", {c.vocab_size, H}});
  const bool ln = c.norm == NormKind::kLayer;
  auto norm = [&](const std::string& base, int64_t d) {
    v.push_back({base + ".weight", {d}});
    if (ln) v.push_back({base + ".bias", {d}});
  };
  auto linear = [&](const std::string& base, int64_t out, int64_t in, bool bias) {
    v.push_back({base + ".weight", {out, in}});
    if (bias) v.push_back({base + ".bias", {out}});
  };
  const int64_t I = c.intermediate_size;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    norm(p + "input_layernorm", H);
    if (c.fused_qkv) {
      linear(p + "self_attn.qkv_proj", 3 * c.num_heads * hd, H, c.qkv_bias);
    } else {
      linear(p + "self_attn.q_proj", c.num_heads * hd, H, c.qkv_bias);
      linear(p + "self_attn.k_proj", c.num_kv_heads * hd, H, c.qkv_bias);
      linear(p + "self_attn.v_proj", c.num_kv_heads * hd, H, c.qkv_bias);
    }
    if (c.qk_norm) {
      v.push_back({p + "self_attn.q_norm.weight", {hd}});
      v.push_back({p + "self_attn.q_norm.bias", {hd}});
      v.push_back({p + "self_attn.k_norm.weight", {hd}});
      v.push_back({p + "self_attn.k_norm.bias", {hd}});
    }
    linear(p + "self_attn.o_proj", H, c.num_heads * hd, c.o_bias);
    norm(p + "post_attention_layernorm", H);
    if (c.mlp == MlpKind::kSwiGlu) linear(p + "mlp.gate_proj", I, H, c.mlp_bias);
    linear(p + "mlp.up_proj", I, H, c.mlp_bias);
    linear(p + "mlp.down_proj", H, I, c.mlp_bias);
  }
  norm("model.norm", H);
  if (!c.tied_embeddings) v.push_back({"lm_head.weight", {c.vocab_size, H}});
  return v;
}

std::unique_ptr<Decoder> Decoder::load(const kernels::Backend& be, const io::SafeTensors& st,
                                       const DecoderConfig& cfg, const LoadOptions& opts) {
  cfg.validate(st.path());
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.cfg = cfg;
  m.be = &be;
  m.hidden = cfg.hidden_size;
  m.n_heads = cfg.num_heads;
  m.n_kv = cfg.num_kv_heads;
  m.head_dim = cfg.head_dim;
  m.inter = cfg.intermediate_size;
  m.vocab = cfg.vocab_size;
  m.rows = cfg.position_rows();

  auto name = [&](const std::string& canonical) {
    return cfg.tensor_name ? cfg.tensor_name(canonical) : canonical;
  };
  auto get = [&](const std::string& canonical) { return st.get(name(canonical)); };
  // A tensor the ops read as it is (norms, the embedding table), in the backend's memory (on the
  // CPU: the mapping itself, no copy).
  auto weight = [&](const std::string& canonical) { return be.upload(get(canonical)); };

  m.embed_tokens = weight("model.embed_tokens.weight");
  const bool ln = cfg.norm == NormKind::kLayer;
  m.final_norm = weight("model.norm.weight");
  if (ln) m.final_norm_b = weight("model.norm.bias");
  if (opts.weight_format) {
    m.fmt = *opts.weight_format;
  } else {
    m.fmt = m.embed_tokens.dtype() == DType::kF32 ? kernels::WeightFormat::kF32
                                                  : kernels::WeightFormat::kBF16;
  }
  if (opts.encoders_only) {  // an encode worker: the embedding table (mapped) and nothing else
    m.encoders_only = true;
    return std::unique_ptr<Decoder>(new Decoder(std::move(impl)));
  }
  const kernels::WeightPlacement place = opts.weight_placement;
  Tensor lm = cfg.tied_embeddings ? m.embed_tokens : get("lm_head.weight");
  m.lin.int8_x = opts.int8_activations;
  m.lin.int8_gemm = opts.int8_prefill;
  m.residual = m.lin;
  m.residual.accumulate = true;
  m.lm_head = kernels::PackedLinear::pack(be, lm, nullptr, m.fmt, place);

  m.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& L = m.layers[static_cast<size_t>(i)];
    L.input_norm = weight(p + "input_layernorm.weight");
    L.post_norm = weight(p + "post_attention_layernorm.weight");
    if (ln) {
      L.input_norm_b = weight(p + "input_layernorm.bias");
      L.post_norm_b = weight(p + "post_attention_layernorm.bias");
    }
    // q | k | v, one output block each: separate weights, or the rows of a fused weight grouped
    // per head ([q_h, k_h, v_h] for each head h) picked out head by head.
    std::vector<Tensor> w, b;
    if (cfg.fused_qkv) {
      const Tensor fw = get(p + "self_attn.qkv_proj.weight");  // [heads * 3 * head_dim, hidden]
      const Tensor fb = cfg.qkv_bias ? get(p + "self_attn.qkv_proj.bias") : Tensor();
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t hh = 0; hh < m.n_heads; ++hh) {
          const int64_t r = (hh * 3 + part) * m.head_dim;
          w.push_back(fw.slice(0, r, r + m.head_dim));
          if (cfg.qkv_bias) b.push_back(fb.slice(0, r, r + m.head_dim));
        }
    } else {
      for (const char* n : {"q_proj", "k_proj", "v_proj"}) {
        w.push_back(get(p + "self_attn." + n + ".weight"));
        if (cfg.qkv_bias) b.push_back(get(p + "self_attn." + n + ".bias"));
      }
    }
    std::vector<const Tensor*> ws, bs;
    for (const Tensor& t : w) ws.push_back(&t);
    for (const Tensor& t : b) bs.push_back(&t);
    L.qkv = kernels::PackedLinear::pack_concat(be, ws, bs, m.fmt, place);
    if (cfg.qk_norm) {
      L.q_norm = weight(p + "self_attn.q_norm.weight");
      L.q_norm_b = weight(p + "self_attn.q_norm.bias");
      L.k_norm = weight(p + "self_attn.k_norm.weight");
      L.k_norm_b = weight(p + "self_attn.k_norm.bias");
    }
    auto lin = [&](const std::string& base, bool bias) {
      const Tensor wt = get(base + ".weight");
      if (!bias) return kernels::PackedLinear::pack(be, wt, nullptr, m.fmt, place);
      const Tensor bt = get(base + ".bias");
      return kernels::PackedLinear::pack(be, wt, &bt, m.fmt, place);
    };
    L.o = lin(p + "self_attn.o_proj", cfg.o_bias);
    if (cfg.mlp == MlpKind::kSwiGlu) {
      Tensor gw = get(p + "mlp.gate_proj.weight"), uw = get(p + "mlp.up_proj.weight");
      const Tensor* gu[] = {&gw, &uw};
      L.gate_up = kernels::PackedLinear::pack_concat(be, gu, {}, m.fmt, place);
    } else {
      L.gate_up = lin(p + "mlp.up_proj", cfg.mlp_bias);
    }
    L.down = lin(p + "mlp.down_proj", cfg.mlp_bias);
  }

  const auto hd = static_cast<int32_t>(m.head_dim);
  switch (cfg.rotary) {
    case RotaryKind::k1D:
      m.rope = kernels::make_rope_table(hd, cfg.rope_theta);
      break;
    case RotaryKind::kMrope:
      m.rope = kernels::make_mrope_table(hd, cfg.rope_theta, cfg.mrope_section);
      break;
    case RotaryKind::kPartial:
      m.rope = kernels::make_rope_table(static_cast<int32_t>(cfg.rotary_dim), cfg.rope_theta);
      break;
  }
  return std::unique_ptr<Decoder>(new Decoder(std::move(impl)));
}

void Decoder::embed(std::span<const int32_t> ids, float* out) const {
  kernels::embedding(*impl_->be, impl_->embed_tokens, ids.data(), static_cast<int64_t>(ids.size()),
                     out);
}

Tensor Decoder::forward(std::span<const SeqStep> batch, kernels::KvCache& kv) {
  Impl& m = *impl_;
  if (m.encoders_only)
    throw FailedPrecondition(
        "this model was loaded for its encoders only (an encode worker): it "
        "has no language model to run");
  const kernels::Backend& be = *m.be;
  const int64_t H = m.hidden, hd = m.head_dim;
  const int64_t q_width = m.n_heads * hd, kv_width = m.n_kv * hd;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const kernels::KvCacheConfig& kc = kv.config();
  if (kc.n_layers != m.cfg.num_layers || kc.n_kv_heads != m.n_kv || kc.head_dim != m.head_dim)
    throw InvalidArgument("forward: the KV cache holds " + std::to_string(kc.n_layers) +
                          " layers x " + std::to_string(kc.n_kv_heads) + " heads x " +
                          std::to_string(kc.head_dim) + ", the model needs " +
                          std::to_string(m.cfg.num_layers) + " x " + std::to_string(m.n_kv) +
                          " x " + std::to_string(m.head_dim));
  const int32_t bs = kc.block_size;
  const int32_t R = m.rows;

  // Gather tokens, positions and cache slots of every sequence.
  int64_t N = 0, n_want = 0;
  for (const auto& s : batch) {
    if (s.tokens.empty()) throw InvalidArgument("forward: a sequence has no new tokens");
    N += static_cast<int64_t>(s.tokens.size());
    n_want += s.want_logits ? 1 : 0;
  }
  if (N == 0) return Tensor::empty(DType::kF32, {0, m.vocab});
  m.tokens.resize(static_cast<size_t>(N));
  m.pos.resize(static_cast<size_t>(R * N));
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
    if (!s.positions.empty() && static_cast<int64_t>(s.positions.size()) != R * n)
      throw InvalidArgument("forward: positions must be [" + std::to_string(R) + ", n_tokens] (" +
                            std::to_string(R * n) + " values), got " +
                            std::to_string(s.positions.size()));
    for (int64_t i = 0; i < n; ++i) {
      const int32_t tok = s.tokens[static_cast<size_t>(i)];
      if (tok < 0 || tok >= m.vocab)
        throw InvalidArgument("forward: token id " + std::to_string(tok) +
                              " outside the vocabulary [0, " + std::to_string(m.vocab) + ")");
      m.tokens[static_cast<size_t>(row + i)] = tok;
      for (int c = 0; c < R; ++c) {
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

  float* x = m.x.get(be, static_cast<size_t>(N * H));                   // [N, hidden]
  float* h = m.h.get(be, static_cast<size_t>(N * H));                   // [N, hidden]
  float* qkv = m.qkv.get(be, static_cast<size_t>(N * qkv_width));       // [N, q | k | v]
  float* attn = m.attn.get(be, static_cast<size_t>(N * q_width));       // [N, n_heads * head_dim]
  float* gu = m.gate_up.get(be, static_cast<size_t>(N * 2 * m.inter));  // [N, 2 * inter]
  float* act = m.act.get(be, static_cast<size_t>(N * m.inter));         // [N, inter]

  kernels::embedding(be, m.embed_tokens, m.tokens.data(), N, x);
  row = 0;
  for (const auto& s : batch) {
    if (!s.embed_rows.empty()) {
      if (!s.embeds) throw InvalidArgument("forward: embed_rows given without embeds");
      for (int32_t r : s.embed_rows)
        if (r < 0 || r >= static_cast<int32_t>(s.tokens.size()))
          throw InvalidArgument("forward: embed row " + std::to_string(r) + " out of range");
      // The media rows over their tokens' embeddings, one copy per run of consecutive rows.
      for (size_t j = 0, e; j < s.embed_rows.size(); j = e) {
        for (e = j + 1; e < s.embed_rows.size() && s.embed_rows[e] == s.embed_rows[e - 1] + 1;) ++e;
        kernels::copy2d(be, x + (row + s.embed_rows[j]) * H, H,
                        s.embeds + static_cast<int64_t>(j) * H, H, static_cast<int64_t>(e - j), H);
      }
    }
    row += static_cast<int64_t>(s.tokens.size());
  }

  const int64_t L = static_cast<int64_t>(m.layers.size());
  if (capture_) {
    *capture_ = be.empty(DType::kF32, {L + 1, N, H});
    kernels::copy2d(be, capture_->data<float>(), H, x, H, N, H);
  }

  // The M-RoPE table reads one position row per section; a plain table reads row 0.
  kernels::RopeAngles angles = kernels::rope_angles(be, m.rope, m.pos.data(), N);
  const float eps = static_cast<float>(m.cfg.rms_norm_eps);

  kernels::PagedAttentionArgs pa;
  pa.q = qkv;
  pa.q_stride = qkv_width;
  pa.out = attn;
  pa.n_tokens = N;
  pa.n_heads = static_cast<int32_t>(m.n_heads);
  pa.bf16 = m.fmt != kernels::WeightFormat::kF32;  // not an f32 model: bf16 products for prefill

  const bool ln = m.cfg.norm == NormKind::kLayer;
  auto norm = [&](const float* in, const Tensor& w, const Tensor& b, float* out, int64_t n) {
    if (ln)
      kernels::layer_norm(be, in, w, b, eps, out, n, H);
    else
      kernels::rms_norm(be, in, w, eps, out, n, H);
  };
  for (int64_t li = 0; li < L; ++li) {
    const Layer& ly = m.layers[static_cast<size_t>(li)];
    norm(x, ly.input_norm, ly.input_norm_b, h, N);
    kernels::linear(be, h, N, ly.qkv, qkv, m.lin);
    if (m.cfg.qk_norm) {  // each head's q and k over head_dim, in the strided qkv rows
      kernels::layer_norm_heads(be, qkv, N, qkv_width, m.n_heads, hd, ly.q_norm, ly.q_norm_b, eps);
      kernels::layer_norm_heads(be, qkv + q_width, N, qkv_width, m.n_kv, hd, ly.k_norm, ly.k_norm_b,
                                eps);
    }
    // q's and k's heads are adjacent in each qkv row: one rotation over both.
    kernels::apply_rope(be, angles, qkv, m.n_heads + m.n_kv, qkv_width, hd);
    kv.write(static_cast<int32_t>(li), qkv + q_width, qkv + q_width + kv_width, m.slots.data(), N,
             qkv_width, qkv_width);
    kernels::paged_attention(be, pa, kv.layer(static_cast<int32_t>(li)), m.seqs);
    kernels::linear(be, attn, N, ly.o, x, m.residual);  // x += o(attn)
    norm(x, ly.post_norm, ly.post_norm_b, h, N);
    kernels::linear(be, h, N, ly.gate_up, gu, m.lin);
    if (m.cfg.mlp == MlpKind::kSwiGlu)
      kernels::silu_mul_fused(be, gu, act, N, m.inter);
    else
      kernels::relu_squared(be, gu, act, N * m.inter);
    kernels::linear(be, act, N, ly.down, x, m.residual);  // x += down(act)
    if (capture_) kernels::copy2d(be, capture_->data<float>() + (li + 1) * N * H, H, x, H, N, H);
  }

  // Final norm and lm_head for the last token of each sequence that wants logits (in a decode
  // step, every row of x as it is: nothing to gather).
  float* last =
      m.logits_in.get(be, static_cast<size_t>(std::max<int64_t>(n_want, 1) * H));  // [n_want, H]
  const float* last_in = x;
  if (n_want != N) {
    int64_t w = 0;
    row = 0;
    for (const auto& s : batch) {
      row += static_cast<int64_t>(s.tokens.size());
      if (s.want_logits) kernels::copy2d(be, last + (w++) * H, H, x + (row - 1) * H, H, 1, H);
    }
    last_in = last;
  }
  norm(last_in, m.final_norm, m.final_norm_b, last, n_want);
  float* logits = m.logits.get(be, static_cast<size_t>(std::max<int64_t>(n_want, 1) * m.vocab));
  if (n_want > 0) kernels::linear(be, last, n_want, m.lm_head, logits, m.lin);
  return Tensor::on_device(logits, DType::kF32, {n_want, m.vocab}, nullptr, be.device());
}

}  // namespace mmrt::models

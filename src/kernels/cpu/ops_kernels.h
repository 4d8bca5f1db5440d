// Internal: element-wise and rotary kernels written once against the ops_simd.h wrappers and
// instantiated per ISA (ops.cpp / ops_avx2.cpp / ops_avx512.cpp). Anonymous namespace: each
// including file gets its own copy compiled with its own flags.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/ops_simd.h"

namespace mmrt::kernels::simd {
namespace {

template <class V>
float sum_squares(const float* x, int64_t d) {
  constexpr int W = V::W;
  auto a0 = V::set1(0.f), a1 = V::set1(0.f), a2 = V::set1(0.f), a3 = V::set1(0.f);
  int64_t i = 0;
  for (; i + 4 * W <= d; i += 4 * W) {
    auto x0 = V::load(x + i), x1 = V::load(x + i + W);
    auto x2 = V::load(x + i + 2 * W), x3 = V::load(x + i + 3 * W);
    a0 = V::fma(x0, x0, a0);
    a1 = V::fma(x1, x1, a1);
    a2 = V::fma(x2, x2, a2);
    a3 = V::fma(x3, x3, a3);
  }
  for (; i + W <= d; i += W) a0 = V::fma(V::load(x + i), V::load(x + i), a0);
  float s = V::hsum(V::add(V::add(a0, a1), V::add(a2, a3)));
  for (; i < d; ++i) s += x[i] * x[i];
  return s;
}

template <class V>
float sum(const float* x, int64_t d) {
  constexpr int W = V::W;
  auto a0 = V::set1(0.f), a1 = V::set1(0.f);
  int64_t i = 0;
  for (; i + 2 * W <= d; i += 2 * W) {
    a0 = V::add(a0, V::load(x + i));
    a1 = V::add(a1, V::load(x + i + W));
  }
  for (; i + W <= d; i += W) a0 = V::add(a0, V::load(x + i));
  float s = V::hsum(V::add(a0, a1));
  for (; i < d; ++i) s += x[i];
  return s;
}

// HF Qwen2RMSNorm: y = w * (x * rsqrt(mean(x^2) + eps)), all fp32.
template <class V>
void rms_norm_row(const float* x, const float* w, float eps, float* y, int64_t d) {
  constexpr int W = V::W;
  float r = 1.0f / std::sqrt(sum_squares<V>(x, d) / static_cast<float>(d) + eps);
  auto vr = V::set1(r);
  int64_t i = 0;
  for (; i + W <= d; i += W) V::store(y + i, V::mul(V::load(w + i), V::mul(V::load(x + i), vr)));
  for (; i < d; ++i) y[i] = w[i] * (x[i] * r);
}

template <class V>
void layer_norm_row(const float* x, const float* w, const float* b, float eps, float* y,
                    int64_t d) {
  constexpr int W = V::W;
  const float mean = sum<V>(x, d) / static_cast<float>(d);
  auto vm = V::set1(mean);
  auto acc = V::set1(0.f);
  int64_t i = 0;
  for (; i + W <= d; i += W) {
    auto c = V::sub(V::load(x + i), vm);
    acc = V::fma(c, c, acc);
  }
  float ss = V::hsum(acc);
  for (; i < d; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  auto vr = V::set1(rstd);
  for (i = 0; i + W <= d; i += W) {
    auto n = V::mul(V::sub(V::load(x + i), vm), vr);
    V::store(y + i, V::fma(n, V::load(w + i), V::load(b + i)));
  }
  for (; i < d; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

template <class V>
void add(float* acc, const float* x, int64_t n) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(acc + i, V::add(V::load(acc + i), V::load(x + i)));
  for (; i < n; ++i) acc[i] += x[i];
}

// x * sigmoid(a * x) = x / (1 + exp(-a x)). (A reciprocal estimate and a Newton step instead of
// the division measured the same on an AMX Xeon's encoder block: kept exact.)
template <class V>
typename V::R x_sigmoid(typename V::R x, float a) {
  auto e = V::exp(V::mul(x, V::set1(-a)));
  return V::div(x, V::add(V::set1(1.0f), e));
}

inline float x_sigmoid_scalar(float x, float a) {
  return x / (1.0f + std::exp(-a * x));
}

template <class V>
void silu_mul(const float* g, const float* u, float* out, int64_t n) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W)
    V::store(out + i, V::mul(x_sigmoid<V>(V::load(g + i), 1.0f), V::load(u + i)));
  for (; i < n; ++i) out[i] = x_sigmoid_scalar(g[i], 1.0f) * u[i];
}

template <class V>
void quick_gelu(const float* x, float* y, int64_t n) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, x_sigmoid<V>(V::load(x + i), 1.702f));
  for (; i < n; ++i) y[i] = x_sigmoid_scalar(x[i], 1.702f);
}

// gelu(x) = x/2 * (1 + erf(x/sqrt2)); 1 + erf(z) = erfc(-z), computed from erfc(|z|) so that the
// negative tail keeps its relative precision.
constexpr float kInvSqrt2 = 0.70710678118654752f;
template <class V>
typename V::R gelu_erf_v(typename V::R v) {
  auto c = V::erfc(V::abs(V::mul(v, V::set1(kInvSqrt2))));
  auto one_plus_erf = V::select_neg(v, c, V::sub(V::set1(2.0f), c));
  return V::mul(V::mul(v, V::set1(0.5f)), one_plus_erf);
}
inline float gelu_erf_scalar(float x) {
  return 0.5f * x * std::erfc(-x * kInvSqrt2);
}

template <class V>
void gelu_erf(const float* x, float* y, int64_t n) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, gelu_erf_v<V>(V::load(x + i)));
  for (; i < n; ++i) y[i] = gelu_erf_scalar(x[i]);
}

// One row of a GEMM tile's epilogue in one pass (detail::OpsFns::gemm_row_*): the same values as
// the separate scale / bias, activation and add passes, lane by lane.
template <class V>
typename V::R gemm_act(typename V::R v, int act) {
  return act == 1 ? x_sigmoid<V>(v, 1.702f) : act == 2 ? gelu_erf_v<V>(v) : v;
}
inline float gemm_act_scalar(float v, int act) {
  return act == 1 ? x_sigmoid_scalar(v, 1.702f) : act == 2 ? gelu_erf_scalar(v) : v;
}
// v = load(i) (W lanes) / load_one(i) (the tail), then * sw, + bias, the activation, and stored
// or added to y.
template <class V, class Load, class LoadOne>
void gemm_row(Load load, LoadOne load_one, const float* sw, const float* bias, int act,
              bool accumulate, float* y, int64_t n) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    auto v = load(i);
    if (sw) v = V::mul(v, V::load(sw + i));
    if (bias) v = V::add(v, V::load(bias + i));
    v = gemm_act<V>(v, act);
    V::store(y + i, accumulate ? V::add(V::load(y + i), v) : v);
  }
  for (; i < n; ++i) {
    float v = load_one(i);
    if (sw) v = v * sw[i];
    if (bias) v = v + bias[i];
    v = gemm_act_scalar(v, act);
    y[i] = accumulate ? y[i] + v : v;
  }
}
template <class V>
void gemm_row_i32(const int32_t* t, const int32_t* off, float sx, const float* sw,
                  const float* bias, int act, bool accumulate, float* y, int64_t n) {
  const auto vsx = V::set1(sx);
  gemm_row<V>([&](int64_t i) { return V::mul(V::load_i32(t + i, off ? off + i : nullptr), vsx); },
              [&](int64_t i) { return static_cast<float>(off ? t[i] - off[i] : t[i]) * sx; }, sw,
              bias, act, accumulate, y, n);
}
template <class V>
void gemm_row_f32(const float* t, const float* sw, const float* bias, int act, bool accumulate,
                  float* y, int64_t n) {
  gemm_row<V>([&](int64_t i) { return V::load(t + i); }, [&](int64_t i) { return t[i]; }, sw, bias,
              act, accumulate, y, n);
}

// Largest element; NaN if any element is NaN (like torch.max).
template <class V>
float max_val(const float* x, int64_t n) {
  constexpr int W = V::W;
  int64_t i = 0;
  float m = x[0];
  bool special = false;  // an inf or NaN was seen by the vector loop: recheck for NaN below
  if (n >= W) {
    auto a = V::load(x);
    auto probe = V::mul(a, V::set1(0.f));  // NaN iff some lane was inf or NaN
    for (i = W; i + W <= n; i += W) {
      auto v = V::load(x + i);
      a = V::max(v, a);
      probe = V::fma(v, V::set1(0.f), probe);
    }
    m = V::hmax(a);
    special = std::isnan(V::hsum(probe));
  }
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    if (x[i] > m) m = x[i];
  }
  if (special)
    for (int64_t k = 0; k < n; ++k)
      if (std::isnan(x[k])) return x[k];
  return m;
}

template <class V>
void softmax_row(const float* x, float* y, int64_t d) {
  constexpr int W = V::W;
  const float m = max_val<V>(x, d);
  auto vm = V::set1(m);
  auto acc = V::set1(0.f);
  int64_t i = 0;
  for (; i + W <= d; i += W) {
    auto e = V::exp(V::sub(V::load(x + i), vm));
    V::store(y + i, e);
    acc = V::add(acc, e);
  }
  float s = V::hsum(acc);
  for (; i < d; ++i) {
    y[i] = std::exp(x[i] - m);
    s += y[i];
  }
  auto inv = V::set1(1.0f / s);
  for (i = 0; i + W <= d; i += W) V::store(y + i, V::mul(V::load(y + i), inv));
  for (; i < d; ++i) y[i] *= 1.0f / s;
}

// rotate_half in the HF order: out1 = x1*cos - x2*sin, out2 = x2*cos + x1*sin (no FMA, so the
// products round exactly as PyTorch's q*cos + rotate_half(q)*sin do).
// Heads are head_stride floats apart; the first rot_dim of each are rotated (partial rotary when
// rot_dim < head_stride), the rest left as they are.
template <class V>
void rope_rotate_row(float* x, int64_t n_heads, int64_t head_stride, int64_t rot_dim,
                     const float* cos, const float* sin) {
  constexpr int W = V::W;
  const int64_t half = rot_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* x1 = x + h * head_stride;
    float* x2 = x1 + half;
    int64_t j = 0;
    for (; j + W <= half; j += W) {
      auto a = V::load(x1 + j), b = V::load(x2 + j), c = V::load(cos + j), s = V::load(sin + j);
      V::store(x1 + j, V::sub(V::mul(a, c), V::mul(b, s)));
      V::store(x2 + j, V::add(V::mul(b, c), V::mul(a, s)));
    }
    for (; j < half; ++j) {
      float a = x1[j], b = x2[j];
      x1[j] = a * cos[j] - b * sin[j];
      x2[j] = b * cos[j] + a * sin[j];
    }
  }
}

template <class V>
detail::OpsFns make_ops_fns(const char* isa) {
  return detail::OpsFns{isa,         rms_norm_row<V>, layer_norm_row<V>, add<V>,
                        silu_mul<V>, gelu_erf<V>,     quick_gelu<V>,     softmax_row<V>,
                        max_val<V>,  gemm_row_i32<V>, gemm_row_f32<V>};
}

template <class V>
detail::RopeFns make_rope_fns(const char* isa) {
  return detail::RopeFns{isa, rope_rotate_row<V>};
}

}  // namespace
}  // namespace mmrt::kernels::simd

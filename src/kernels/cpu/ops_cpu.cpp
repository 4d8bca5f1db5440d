// The CPU backend's element-wise kernels: validation, threading and run-time ISA selection (see
// ops_kernels.h for the math). The portable table is instantiated here with the one-lane wrapper.
#include "kernels/ops.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/convert.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/ops_kernels.h"
#include "kernels/cpu/parallel.h"

namespace mmrt::kernels {

namespace detail {
const OpsFns& ops_fns_scalar() {
  static const OpsFns f = simd::make_ops_fns<simd::VecScalar>("scalar");
  return f;
}

const OpsFns& ops_fns(Isa cap) {
  static const IsaVariants<OpsFns> v{
      {Isa::kAvx512, ops_fns_avx512}, {Isa::kAvx2, ops_fns_avx2}, {Isa::kPortable, ops_fns_scalar}};
  return v.at_most(cap);
}
}  // namespace detail

namespace {

// A [d] parameter vector as f32 (the dispatcher checked its shape and type): points into `t`
// when it already is f32, else into `buf`.
const float* param_f32(const char* op, const char* what, const Tensor& t, int64_t d,
                       std::vector<float>& buf) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>();
    case DType::kBF16:
      buf.resize(static_cast<size_t>(d));
      bf16_to_f32(static_cast<const uint16_t*>(t.raw()), buf.data(), buf.size());
      return buf.data();
    case DType::kF16:
      buf.resize(static_cast<size_t>(d));
      f16_to_f32(static_cast<const uint16_t*>(t.raw()), buf.data(), buf.size());
      return buf.data();
    default:
      throw InvalidArgument(std::string(op) + ": " + what + " must be f32, bf16 or f16, got " +
                            t.describe());
  }
}

}  // namespace

namespace cpu {

void rms_norm(const CpuBackend& be, const float* x, const Tensor& weight, float eps, float* y,
              int64_t n, int64_t d) {
  std::vector<float> wbuf;
  const float* w = param_f32("rms_norm", "weight", weight, d, wbuf);  // [d]
  const auto& f = detail::ops_fns(be.isa());
  for_rows(be.pool(), n, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) f.rms_norm_row(x + r * d, w, eps, y + r * d, d);
  });
}

void layer_norm(const CpuBackend& be, const float* x, const Tensor& weight, const Tensor& bias,
                float eps, float* y, int64_t n, int64_t d) {
  std::vector<float> wbuf, bbuf;
  const float* w = param_f32("layer_norm", "weight", weight, d, wbuf);  // [d]
  const float* bs = param_f32("layer_norm", "bias", bias, d, bbuf);     // [d]
  const auto& f = detail::ops_fns(be.isa());
  for_rows(be.pool(), n, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) f.layer_norm_row(x + r * d, w, bs, eps, y + r * d, d);
  });
}

void layer_norm_heads(const CpuBackend& be, float* x, int64_t n, int64_t stride, int64_t n_heads,
                      int64_t d, const Tensor& weight, const Tensor& bias, float eps) {
  std::vector<float> wbuf, bbuf;
  const float* w = param_f32("layer_norm_heads", "weight", weight, d, wbuf);  // [d]
  const float* bs = param_f32("layer_norm_heads", "bias", bias, d, bbuf);     // [d]
  const auto& f = detail::ops_fns(be.isa());
  for_rows(be.pool(), n * n_heads, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* head = x + (r / n_heads) * stride + (r % n_heads) * d;
      f.layer_norm_row(head, w, bs, eps, head, d);
    }
  });
}

void add(const CpuBackend& be, float* acc, const float* x, int64_t n) {
  const auto& f = detail::ops_fns(be.isa());
  for_flat(be.pool(), n, [&](int64_t b, int64_t e) { f.add(acc + b, x + b, e - b); });
}

void silu_mul(const CpuBackend& be, const float* gate, const float* up, float* out, int64_t n,
              int64_t inter, int64_t in_stride) {
  if (in_stride == 0) in_stride = inter;
  const auto& f = detail::ops_fns(be.isa());
  if (in_stride == inter && n * inter >= kParallelMin) {  // contiguous: split flat
    for_flat(be.pool(), n * inter,
             [&](int64_t b, int64_t e) { f.silu_mul(gate + b, up + b, out + b, e - b); });
    return;
  }
  for_rows(be.pool(), n, inter, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      f.silu_mul(gate + r * in_stride, up + r * in_stride, out + r * inter, inter);
  });
}

void gelu_erf(const CpuBackend& be, const float* x, float* y, int64_t n) {
  const auto& f = detail::ops_fns(be.isa());
  for_flat(be.pool(), n, [&](int64_t b, int64_t e) { f.gelu_erf(x + b, y + b, e - b); });
}

void quick_gelu(const CpuBackend& be, const float* x, float* y, int64_t n) {
  const auto& f = detail::ops_fns(be.isa());
  for_flat(be.pool(), n, [&](int64_t b, int64_t e) { f.quick_gelu(x + b, y + b, e - b); });
}

void relu_squared(const CpuBackend& be, const float* x, float* y, int64_t n) {
  // One multiply and a max: the compiler vectorises it at every ISA level.
  for_flat(be.pool(), n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float r = x[i] > 0.0f ? x[i] : 0.0f;
      y[i] = r * r;
    }
  });
}

void softmax(const CpuBackend& be, const float* x, float* y, int64_t n, int64_t d) {
  const auto& f = detail::ops_fns(be.isa());
  for_rows(be.pool(), n, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) f.softmax_row(x + r * d, y + r * d, d);
  });
}

void embedding(const CpuBackend&, const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t d = table.dim(1);
  const DType dt = table.dtype();
  const char* base = static_cast<const char*>(table.raw());
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) {
    const void* row = base + static_cast<size_t>(ids[i]) * row_bytes;
    float* o = out + i * d;  // [d]
    if (dt == DType::kF32)
      std::memcpy(o, row, row_bytes);
    else if (dt == DType::kBF16)
      bf16_to_f32(static_cast<const uint16_t*>(row), o, static_cast<size_t>(d));
    else
      f16_to_f32(static_cast<const uint16_t*>(row), o, static_cast<size_t>(d));
  }
}

}  // namespace cpu

int64_t argmax(const float* x, int64_t n) {
  if (n < 1) throw InvalidArgument("argmax: empty input");
  if (!x) throw InvalidArgument("argmax: null input");
  const float m = detail::ops_fns(Isa::kAvx512Bf16).max(x, n);
  if (std::isnan(m)) {
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(x[i])) return i;
  }
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == m) return i;
  throw InternalError("argmax: maximum not found");
}

const char* ops_isa(Isa cap) {
  return detail::ops_fns(cap).isa;
}

}  // namespace mmrt::kernels

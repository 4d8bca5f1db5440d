// PackedLinear's device-independent half and the dispatchers of the linear op.
#include "kernels/linear.h"

#include <cstdint>
#include <string>

#include "core/error.h"

namespace mmrt::kernels {

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kFp8:
      return "fp8";
  }
  return "?";
}

size_t weight_format_bytes(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return 4;
    case WeightFormat::kBF16:
      return 2;
    case WeightFormat::kInt8:
    case WeightFormat::kFp8:
      return 1;
  }
  return 0;
}

PackedLinear::PackedLinear(Parts p)
    : fmt_(p.fmt),
      in_(p.in),
      out_(p.out),
      w_(p.w),
      w_owner_(std::move(p.w_owner)),
      scale_(std::move(p.scale)),
      bias_(std::move(p.bias)),
      zero_copy_(p.zero_copy),
      blocked_(p.blocked),
      x_offset_sums_(std::move(p.x_offset_sums)),
      device_(p.device) {}

PackedLinear PackedLinear::pack(const Backend& be, const Tensor& w, const Tensor* bias,
                                WeightFormat fmt, WeightPlacement place) {
  const Tensor* ws[1] = {&w};
  const Tensor* bs[1] = {bias};
  return pack_concat(be, ws,
                     bias ? std::span<const Tensor* const>(bs) : std::span<const Tensor* const>(),
                     fmt, place);
}

PackedLinear PackedLinear::pack_concat(const Backend& be, std::span<const Tensor* const> ws,
                                       std::span<const Tensor* const> biases, WeightFormat fmt,
                                       WeightPlacement place) {
  return detail::entry(be, be.ops().linear, &LinearOps::pack, Op::kLinear)(be, ws, biases, fmt,
                                                                           place);
}

size_t PackedLinear::weight_bytes() const {
  return static_cast<size_t>(out_ * in_) * weight_format_bytes(fmt_) +
         (scale_ ? static_cast<size_t>(out_) * sizeof(float) : 0);
}

namespace {
// Blocked weights back to row-major [out, in] host memory; `offset` is the layout's
// PackedLinear::blocked_offset(_i8) for `in` padded to kp.
template <typename T>
Tensor unblock(const void* w, DType dt, int64_t out, int64_t in, int64_t kp,
               int64_t (*offset)(int64_t, int64_t, int64_t)) {
  Tensor t = Tensor::empty(dt, {out, in});
  auto* dst = static_cast<T*>(t.raw());
  const auto* src = static_cast<const T*>(w);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) dst[o * in + k] = src[offset(o, k, kp)];
  return t;
}
}  // namespace

Tensor PackedLinear::weight() const {
  if (blocked_ && fmt_ == WeightFormat::kInt8)
    return unblock<int8_t>(w_, DType::kI8, out_, in_, blocked_in_i8(in_), &blocked_offset_i8);
  if (blocked_)
    return unblock<uint16_t>(w_, DType::kBF16, out_, in_, blocked_in(in_), &blocked_offset);
  const DType t = fmt_ == WeightFormat::kF32    ? DType::kF32
                  : fmt_ == WeightFormat::kBF16 ? DType::kBF16
                  : fmt_ == WeightFormat::kFp8  ? DType::kU8  // E4M3 codes
                                                : DType::kI8;
  return Tensor::on_device(const_cast<void*>(w_), t, {out_, in_}, w_owner_, device_);
}

void linear(const Backend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
            const LinearOptions& opt) {
  const auto fn = detail::entry(be, be.ops().linear, &LinearOps::linear, Op::kLinear);
  if (w.empty()) throw InvalidArgument("linear: the PackedLinear is empty (not packed)");
  if (w.device() != be.device())
    throw InvalidArgument("linear: these weights were packed for " + device_str(w.device()) +
                          ", the backend computes on " + device_str(be.device()));
  if (n < 0) throw InvalidArgument("linear: negative row count " + std::to_string(n));
  if (n == 0) return;
  if (!x || !y) throw InvalidArgument("linear: null input or output pointer");
  const auto xb = reinterpret_cast<uintptr_t>(x), yb = reinterpret_cast<uintptr_t>(y);
  if (xb < yb + static_cast<uintptr_t>(n * w.out()) * 4 &&
      yb < xb + static_cast<uintptr_t>(n * w.in()) * 4)
    throw InvalidArgument("linear: input and output overlap");
  fn(be, x, n, w, y, opt);
}

Tensor linear(const Backend& be, const Tensor& x, const PackedLinear& w, const LinearOptions& opt) {
  if (x.dtype() != DType::kF32 || x.rank() != 2 || x.dim(1) != w.in())
    throw InvalidArgument("linear: x must be f32 [n, " + std::to_string(w.in()) + "], got " +
                          x.describe());
  const Tensor xc = x.is_contiguous() ? x : x.contiguous();
  Tensor y = be.empty(DType::kF32, {x.dim(0), w.out()});  // [n, out]
  linear(be, xc.data<float>(), x.dim(0), w, y.data<float>(), opt);
  return y;
}

LinearPlan linear_plan(const Backend& be, int64_t n, const PackedLinear& w,
                       const LinearOptions& opt) {
  return detail::entry(be, be.ops().linear, &LinearOps::plan, Op::kLinear)(be, n, w, opt);
}

}  // namespace mmrt::kernels

#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/convert.h"

namespace mmrt {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = size_t{4} << 20;  // smaller blocks would waste too much rounding
}  // namespace

std::shared_ptr<void> aligned_alloc_shared(size_t bytes, bool zero) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = nullptr;
  if (rounded >= kHugeFrom) {
    rounded = (rounded + kHugePage - 1) / kHugePage * kHugePage;
    p = std::aligned_alloc(kHugePage, rounded);
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure keeps 4 KiB pages
  } else {
    p = std::aligned_alloc(64, rounded);
  }
  if (!p) throw ResourceExhausted("out of memory allocating " + std::to_string(bytes) + " bytes");
  if (zero) std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

namespace {
std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}
void check_shape(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) throw InvalidArgument("negative dimension in shape " + shape_str(s));
}
}  // namespace

Tensor Tensor::empty(DType dtype, Shape shape) {
  check_shape(shape);
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.owner_ = aligned_alloc_shared(t.nbytes());
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::view(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                    std::vector<int64_t> strides) {
  check_shape(shape);
  Tensor t;
  t.dtype_ = dtype;
  if (strides.empty()) strides = contiguous_strides(shape);
  if (strides.size() != shape.size())
    throw InvalidArgument("strides rank does not match shape " + shape_str(shape));
  t.strides_ = std::move(strides);
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::on_device(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                         Device device, std::vector<int64_t> strides) {
  Tensor t = view(data, dtype, std::move(shape), std::move(owner), std::move(strides));
  t.device_ = device;
  return t;
}

Tensor Tensor::alias(void* data, Shape shape, std::vector<int64_t> strides) const {
  return on_device(data, dtype_, std::move(shape), owner_, device_, std::move(strides));
}

void Tensor::check_host(const char* what) const {
  if (!device_.is_host())
    throw FailedPrecondition(std::string(what) + " of " + describe() + " on " +
                             device_str(device_) + ": copy it through its backend");
}

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

void Tensor::check_type(DType want) const {
  if (want != dtype_)
    throw InvalidArgument("tensor " + describe() + " accessed as " + std::string(dtype_name(want)));
}

std::string Tensor::describe() const {
  std::string n(dtype_name(dtype_));
  for (auto& c : n) c = static_cast<char>(std::tolower(c));
  return n + shape_str(shape_);
}

Tensor Tensor::reshape(Shape shape) const {
  if (!is_contiguous()) throw InvalidArgument("reshape of a non-contiguous tensor " + describe());
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw InvalidArgument("reshape: more than one -1 in " + shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known != 0) shape[infer] = numel() / known;
  if (shape_numel(shape) != numel())
    throw InvalidArgument("reshape " + describe() + " to " + shape_str(shape) +
                          ": element count differs");
  return alias(data_, std::move(shape), {});
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  if (d < 0) d += rank();
  if (d < 0 || d >= rank()) throw InvalidArgument("slice: bad dim for " + describe());
  if (begin < 0 || end < begin || end > shape_[d])
    throw InvalidArgument("slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") out of range for dim " + std::to_string(d) + " of " + describe());
  Shape s = shape_;
  s[d] = end - begin;
  char* p =
      static_cast<char*>(data_) + begin * strides_[d] * static_cast<int64_t>(dtype_size(dtype_));
  return alias(p, std::move(s), strides_);
}

Tensor Tensor::select(int64_t index) const {
  if (rank() == 0) throw InvalidArgument("select on a scalar tensor");
  Tensor t = slice(0, index, index + 1);
  Shape s(shape_.begin() + 1, shape_.end());
  std::vector<int64_t> st(strides_.begin() + 1, strides_.end());
  return alias(t.data_, std::move(s), std::move(st));
}

namespace {
// Copies a strided tensor into contiguous dst (element size esz).
void strided_copy(const char* src, char* dst, const Shape& shape, const std::vector<int64_t>& st,
                  size_t esz) {
  if (shape.empty()) {
    std::memcpy(dst, src, esz);
    return;
  }
  int r = static_cast<int>(shape.size());
  std::vector<int64_t> idx(r, 0);
  int64_t n = shape_numel(shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int k = 0; k < r; ++k) off += idx[k] * st[k];
    std::memcpy(dst + i * esz, src + off * static_cast<int64_t>(esz), esz);
    for (int k = r - 1; k >= 0; --k) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::clone() const {
  check_host("clone");
  Tensor t = empty(dtype_, shape_);
  if (is_contiguous())
    std::memcpy(t.data_, data_, nbytes());
  else
    strided_copy(static_cast<const char*>(data_), static_cast<char*>(t.data_), shape_, strides_,
                 dtype_size(dtype_));
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  check_host("contiguous copy");
  return clone();
}

Tensor Tensor::to(DType target) const {
  check_host("dtype conversion");
  Tensor src = contiguous();
  if (target == dtype_) return src.clone();
  Tensor out = empty(target, shape_);
  size_t n = static_cast<size_t>(numel());
  auto is_float = [](DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; };
  if (!is_float(dtype_) || !is_float(target))
    throw Unimplemented("conversion " + describe() + " -> " + std::string(dtype_name(target)));
  // Go through f32 when neither side is f32.
  Tensor f32 = dtype_ == DType::kF32 ? src : empty(DType::kF32, shape_);
  if (dtype_ == DType::kF16)
    f16_to_f32(static_cast<const uint16_t*>(src.data_), f32.data<float>(), n);
  if (dtype_ == DType::kBF16)
    bf16_to_f32(static_cast<const uint16_t*>(src.data_), f32.data<float>(), n);
  if (target == DType::kF32) return dtype_ == DType::kF32 ? src.clone() : f32;
  if (target == DType::kF16) f32_to_f16(f32.data<float>(), static_cast<uint16_t*>(out.data_), n);
  if (target == DType::kBF16) f32_to_bf16(f32.data<float>(), static_cast<uint16_t*>(out.data_), n);
  return out;
}

}  // namespace mmrt

// Tensor: a typed, shaped, strided view over memory of one device, optionally owning it.
// Owning tensors allocate 64-byte aligned host storage; views share ownership of whatever keeps
// their memory alive (an mmap'd file, another tensor's buffer, a backend's device allocation)
// through a type-erased shared_ptr. A tensor on another device than the host is made by its
// backend (kernels::Backend::empty / upload); its data pointers are device pointers, and the
// host-side copies here (clone, contiguous, to) refuse it: copies between devices go through the
// backend, which counts them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace mmrt {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);

// 64-byte aligned allocation (zeroed when `zero`), freed by the returned shared_ptr. Blocks of
// 4 MiB and more are 2 MiB aligned and advised for transparent huge pages: weights, KV cache
// and activations are streamed, and 4 KiB pages cost a TLB miss every 4 KiB.
std::shared_ptr<void> aligned_alloc_shared(size_t bytes, bool zero = false);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Non-owning view over `data` (contiguous unless strides given, in elements). `owner` keeps
  // the memory alive for the view's lifetime; pass nullptr when the caller guarantees it.
  static Tensor view(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner = nullptr,
                     std::vector<int64_t> strides = {});
  // The same over memory of `device` (a backend's allocation).
  static Tensor on_device(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                          Device device, std::vector<int64_t> strides = {});

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool on_host() const { return device_.is_host(); }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + rank() : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  bool is_contiguous() const;

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // Typed pointer; throws InvalidArgument if T does not match dtype().
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(data_);
  }

  // Views sharing this tensor's memory (on its device).
  Tensor reshape(Shape shape) const;                        // contiguous only
  Tensor slice(int dim, int64_t begin, int64_t end) const;  // [begin, end) along dim
  Tensor select(int64_t index) const;                       // index along dim 0, rank - 1
  // Host copies; FailedPrecondition for a tensor on another device.
  Tensor contiguous() const;  // copy if not contiguous
  Tensor clone() const;       // always a contiguous owning copy
  // Element-wise dtype conversion (floats round to nearest even); returns a new host tensor.
  Tensor to(DType dtype) const;

  const std::shared_ptr<void>& owner() const { return owner_; }
  std::string describe() const;  // "bf16[2, 3]"

 private:
  void check_type(DType want) const;
  void check_host(const char* what) const;
  // A view of this tensor's memory (same dtype, owner and device) with another shape.
  Tensor alias(void* data, Shape shape, std::vector<int64_t> strides) const;

  DType dtype_ = DType::kF32;
  Device device_;
  Shape shape_;
  std::vector<int64_t> strides_;  // in elements
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

}  // namespace mmrt

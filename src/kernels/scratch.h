// Activation memory in a backend's memory: Scratch, a model's grow-only per-step buffers
// ([tokens, hidden] and the like) reused across steps; Buffer, n floats for one call (an
// encoder's activations) or for good (a model's constant rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace mmrt::kernels {

class Scratch {
 public:
  // At least n floats of `be`'s memory (zeroed when it grows; earlier contents are not kept).
  float* get(const Backend& be, size_t n) {
    if (!mem_ || n_ < n) {
      mem_ = be.allocate(n * sizeof(float), /*zero=*/true);
      n_ = n;
    }
    return static_cast<float*>(mem_.get());
  }

 private:
  std::shared_ptr<void> mem_;
  size_t n_ = 0;
};

// n floats of a backend's memory, zeroed; movable, freed with the last owner.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Backend& be, int64_t n)
      : mem_(be.allocate(static_cast<size_t>(n > 0 ? n : 0) * sizeof(float), /*zero=*/true)),
        n_(static_cast<size_t>(n > 0 ? n : 0)) {}
  float* data() { return static_cast<float*>(mem_.get()); }
  const float* data() const { return static_cast<const float*>(mem_.get()); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  std::shared_ptr<void> mem_;
  size_t n_ = 0;
};

}  // namespace mmrt::kernels

// Grow-only activation scratch in a backend's memory: a model's per-step buffers ([tokens,
// hidden] and the like), allocated from the backend it computes on and reused across steps.
#pragma once

#include <cstddef>
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

}  // namespace mmrt::kernels

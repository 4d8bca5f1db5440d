// The host's side of an engine, apart from the compute backend (whatever device that is): the
// cache of large buffers media preprocessing recycles and the CPU kernel cap the media code
// (resize, normalise, the log-mel) runs at. The engine owns one; media workers and the media
// sandbox get theirs through media_context().
#pragma once

#include <cstddef>

#include "core/buffer_cache.h"
#include "core/isa.h"
#include "media/image.h"

namespace mmrt::media {

struct HostOptions {
  Isa max_isa = Isa::kAvx512Bf16;                 // media kernels up to this (and this CPU's best)
  size_t buffer_cache_bytes = size_t{512} << 20;  // idle media buffers kept (0: none)
};

class HostContext {
 public:
  explicit HostContext(const HostOptions& opts = {});
  Isa isa() const { return isa_; }
  const BufferCache& buffers() const { return buffers_; }
  // For media code on its own thread (no pool): this context's cap and buffers.
  MediaContext media_context() const { return {.pool = nullptr, .isa = isa_, .buffers = buffers_}; }

 private:
  Isa isa_;
  BufferCache buffers_;
};

}  // namespace mmrt::media

#include "media/host_context.h"

#include <algorithm>

namespace mmrt::media {

HostContext::HostContext(const HostOptions& opts)
    : isa_(std::min(opts.max_isa, best_isa())),
      buffers_(BufferCache::create(opts.buffer_cache_bytes)) {}

}  // namespace mmrt::media

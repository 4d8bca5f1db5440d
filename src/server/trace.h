// One request's timeline as Chrome-trace / Perfetto JSON ({"traceEvents":[...]}, microseconds):
// complete events for its stages (media download, media decode, queue, each encoder job, each
// prefill chunk, decode) on the request's own track, instant events for its tokens.
#pragma once

#include <cstdint>
#include <string>

#include "engine/handle.h"

namespace mmrt::server {

// `id` names the track (the response id); `download_ns` (0: none) is the time spent fetching
// media before submission, drawn just before the request's arrival.
std::string chrome_trace(const engine::RequestResult& r, const std::string& id,
                         int64_t download_ns);

}  // namespace mmrt::server

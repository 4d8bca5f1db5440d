// A loaded model with a KV cache of its own, for the benchmarks that drive the runner directly
// (bench-model, bench-video): models::Session, no engine, no scheduler, every step timed as it is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/executor.h"
#include "kernels/backend.h"
#include "models/session.h"

namespace mmrt::cli {

using Lm = models::Session;

// Loads `dir` with a KV cache of kvo.bytes (at least 64 MiB) in kvo.dtype, grown to at least
// `min_blocks` blocks when that is more (what the benchmark's sequences need).
std::unique_ptr<Lm> load_lm(const kernels::Backend& be, const std::string& dir,
                            const models::LoadOptions& o, const engine::KvOptions& kvo,
                            int64_t min_blocks = 0);

}  // namespace mmrt::cli

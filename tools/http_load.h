// `mmrt bench --url`: the bench's arrival trace sent to a running `mmrt serve` over HTTP (open
// loop: each request leaves at its scheduled time whatever the others do; latency counts from
// that time), as OpenAI streamed chat requests, and the answers turned into the same results
// the in-process bench reports on.
#pragma once

#include <string>
#include <vector>

#include "bench_workload.h"
#include "engine/handle.h"

namespace mmrt::cli {

// Sends `warmup` requests first (not returned), then the trace. Results in trace order; their
// timelines hold the client's view: kReceived at the scheduled send time, kFirstToken and
// kToken as content arrives, kFinished at the end of the stream.
std::vector<engine::RequestResult> run_http_trace(const std::string& base_url,
                                                  const std::vector<TraceItem>& trace, int warmup,
                                                  bool progress);

}  // namespace mmrt::cli

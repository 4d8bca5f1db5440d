// Decode steps as step graphs (kernels::Backend::capture_step: CUDA graphs on a GPU): one graph
// per decode batch size from 1 to max_rows, captured at load and never on a request's path. A
// step whose every sequence decodes one token (no media rows, logits wanted) and whose size has
// a graph runs the runner's host code against the graph (the metadata changes, the launches
// may not) and then the graph as one launch; any other step, and one whose launches differ from
// the recorded ones (block tables longer than the capture's, of max_context tokens a sequence;
// a buffer that had to grow), runs eagerly.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "models/model.h"

namespace mmrt::engine {

struct StepGraphOptions {
  int32_t max_rows = 64;       // decode batch sizes 1..max_rows get a graph (0: none)
  int32_t max_context = 8192;  // tokens a sequence may hold and still replay its size's graph
  // Run eagerly before capture, so that the model's buffers have their final size: the largest
  // step's tokens (the step budget) and most sequences (the running requests' cap).
  int32_t warm_tokens = 512, warm_rows = 64;
};

class StepGraphs {
 public:
  StepGraphs(const kernels::Backend& be, models::Runner& runner, kernels::KvCache& kv,
             const StepGraphOptions& o);
  ~StepGraphs();

  // Captures the graphs; first runs the largest step shapes once, eagerly, on a KV cache that
  // holds no sequence yet, and every decode size on the graphs' own buffers (Backend::
  // size_step), so that every buffer has its final size before a graph records its address.
  // Nothing is captured where the backend records no graphs. Returns one line for the log
  // ("step graphs: 64 captured (decode rows 1-64, contexts to 8192) in 212 ms", or why none).
  std::string capture();

  // runner.forward(batch, kv): replayed where the batch is a decode step with a graph.
  Tensor forward(std::span<const models::SeqStep> batch);

  struct Stats {
    int64_t captured = 0;  // graphs held
    int64_t replayed = 0;  // steps run as a graph
    int64_t eager = 0;     // decode steps of a captured size that ran eagerly (launches differed)
    // Host time of the replayed steps: the runner's host code against the graph, and the
    // metadata copy and graph launch queued (the device's time not included).
    int64_t replay_host_ns = 0;
  };
  Stats stats() const { return stats_; }

 private:
  std::string capture_all();  // capture()'s work, which may throw
  // The dummy decode step of `rows` sequences at max_context (block 0 for every block).
  std::vector<models::SeqStep> dummy_decode(int32_t rows);

  const kernels::Backend& be_;
  models::Runner& runner_;
  kernels::KvCache& kv_;
  StepGraphOptions opt_;
  std::vector<std::unique_ptr<kernels::Backend::StepGraph>> graphs_;  // [rows - 1]
  std::vector<int32_t> dummy_tokens_, dummy_table_;
  Stats stats_;
};

// For logs: "<what capture() said>; decode steps replayed N, eager M".
std::string step_graphs_text(const std::string& capture_line, const StepGraphs::Stats& s);

}  // namespace mmrt::engine

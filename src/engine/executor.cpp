#include "engine/executor.h"

#include <algorithm>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "kernels/layout.h"

namespace mmrt::engine {

ModelExecutor::ModelExecutor(const kernels::Backend& be, models::Runner& runner, int64_t embed_dim,
                             const KvOptions& kv)
    : be_(be),
      runner_(runner),
      embed_dim_(embed_dim),
      kv_(std::make_unique<kernels::KvCache>(be, models::kv_cache_config(be, runner, kv))),
      store_(be) {
  be.require({kernels::Op::kCopy2d}, "the engine's media rows");
  be.require({kernels::Op::kEditLogits, kernels::Op::kArgmaxRows, kernels::Op::kTopKRows},
             "the engine's sampling");
}

std::string ModelExecutor::capture_step_graphs(const StepGraphOptions& o) {
  graphs_.reset();
  auto g = std::make_unique<StepGraphs>(be_, runner_, *kv_, o);
  std::string line = g->capture();
  if (g->stats().captured > 0) graphs_ = std::move(g);
  return line;
}

StepOutput ModelExecutor::execute(const StepPlan& plan) {
  const int64_t t0 = now_ns();
  const int64_t H = embed_dim_;
  StepOutput out;
  for (const Hash128& k : plan.encoder_frees) store_.erase(k);
  for (const Hash128& k : plan.encoder_drops) partial_.erase(k);
  // Encoder jobs: whole items (their attention is bidirectional), or some of their parts.
  std::unordered_map<Hash128, Tensor, Hash128Hasher> step_only;  // outputs not kept
  for (const EncoderJob& job : plan.encoder_jobs) {
    EncoderTiming t;
    t.start_ns = now_ns();
    // [n_tokens, embed_dim] in the backend's memory, where the store keeps it too; an output
    // computed elsewhere (an encode worker) is copied there once.
    Tensor feats = job.input.encoded_elsewhere() ? be_.upload(job.input.encoded) : run_encoder(job);
    if (feats.rank() > 0) {
      if (feats.dim(0) != job.input.n_tokens || feats.dim(1) != H)
        throw InternalError("encoder produced " + feats.describe() + " for an item of " +
                            std::to_string(job.input.n_tokens) + " tokens x " + std::to_string(H));
      if (job.keep)
        store_.put(job.key, feats);
      else
        step_only.emplace(job.key, std::move(feats));
    }
    // The encoder's own time for the cost model: a GPU's queued work waited for (its ops return
    // before they have run; without this the decoder step after it would be charged).
    be_.synchronize();
    t.end_ns = now_ns();
    out.encoder.push_back(t);
  }

  const size_t nc = plan.chunks.size();
  if (nc == 0) {  // a step of encoder parts alone
    out.step_ns = now_ns() - t0;
    return out;
  }
  rows_.resize(nc);
  embeds_.resize(nc);
  std::vector<models::SeqStep> steps(nc);
  for (size_t k = 0; k < nc; ++k) {
    const ScheduledChunk& c = plan.chunks[k];
    auto& rows = rows_[k];
    rows.clear();
    int64_t n_rows = 0;
    for (const ChunkMedia& m : c.media) n_rows += m.n;
    // The chunk's media rows, gathered in the backend's memory from this step's encoder outputs
    // and the store.
    float* emb = n_rows > 0 ? embeds_[k].get(be_, static_cast<size_t>(n_rows * H)) : nullptr;
    int64_t off = 0;
    for (const ChunkMedia& m : c.media) {
      auto it = step_only.find(m.key);
      if (it != step_only.end())
        kernels::copy2d(be_, emb + off * H, H, it->second.data<float>() + m.item_row * H, H, m.n,
                        H);
      else
        store_.read_rows(m.key, m.item_row, m.n, emb + off * H);
      off += m.n;
      for (int64_t i = 0; i < m.n; ++i) rows.push_back(static_cast<int32_t>(m.chunk_row + i));
    }
    models::SeqStep& s = steps[k];
    s.tokens = c.tokens;
    s.positions = c.positions;
    s.rope_delta = c.rope_delta;
    s.kv_before = static_cast<int32_t>(c.start);
    s.block_table = c.block_table;
    s.embed_rows = rows;
    s.embeds = rows.empty() ? nullptr : emb;
    s.want_logits = c.sample;
  }
  // [n_sample, vocab] in the backend's memory: drawn there (only ids and candidates come back).
  Tensor logits = graphs_ ? graphs_->forward(steps) : runner_.forward(steps, *kv_);
  specs_.clear();
  for (const ScheduledChunk& c : plan.chunks)
    if (c.sample) specs_.push_back(&c.sampling);
  sampler_.sample(be_, logits, specs_, out.sampled, out.logprobs);
  be_.synchronize();  // a step without sampled rows still ends when its work has run
  out.step_ns = now_ns() - t0;
  return out;
}

Tensor ModelExecutor::run_encoder(const EncoderJob& job) {
  if (job.parts == 1) return runner_.encode(job.input);
  if (job.first()) {
    auto p = std::make_unique<Partial>();
    p->input = job.input;
    p->job = runner_.encode_job(p->input);
    if (p->job->parts() != job.parts)
      throw InternalError("encoder job planned in " + std::to_string(job.parts) +
                          " parts, the model runs it in " + std::to_string(p->job->parts()));
    partial_[job.key] = std::move(p);
  }
  auto it = partial_.find(job.key);
  if (it == partial_.end() || it->second->job->done() != job.part_begin)
    throw InternalError("encoder job: parts from " + std::to_string(job.part_begin) +
                        " planned, the item's encode is not there");
  models::EncodeJob& j = *it->second->job;
  j.run(job.part_end - job.part_begin);
  if (!job.last()) return {};
  Tensor out = j.result();
  partial_.erase(it);
  return out;
}

}  // namespace mmrt::engine

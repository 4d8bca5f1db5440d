#include "engine/executor.h"

#include <algorithm>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "models/qwen2_vl/language_model.h"
#include "models/qwen2_vl/vision_tower.h"

namespace mmrt::engine {

ModelExecutor::ModelExecutor(models::LanguageModel& lm, models::VisionTower* vision, KvBlockManager& kv,
                             EncoderCache& enc)
    : lm_(lm), vision_(vision), kv_(kv), enc_(enc) {}

StepOutput ModelExecutor::execute(const StepPlan& plan) {
  const int64_t t0 = now_ns();
  const int64_t H = lm_.config().text.hidden_size;
  // Keep every cached encoder output this step reads alive while new ones are stored.
  std::vector<Hash128> pinned;
  for (const auto& c : plan.chunks)
    for (const auto& m : c.req->media)
      if (m.begin < c.start + c.n && m.begin + m.n_tokens > c.start && enc_.contains(m.key)) {
        enc_.pin(m.key);
        pinned.push_back(m.key);
      }
  // Hit-rate books: an image whose span starts in this step either has a job (miss) or not (hit).
  for (const auto& c : plan.chunks)
    for (size_t i = 0; i < c.req->media.size(); ++i) {
      const MediaItem& m = c.req->media[i];
      if (m.begin < c.start || m.begin >= c.start + c.n) continue;
      bool job = std::any_of(plan.encoder_jobs.begin(), plan.encoder_jobs.end(),
                             [&](const EncoderJob& j) { return j.req == c.req && j.media == i; });
      if (!job) enc_.lookup(m.key);
    }
  for (const auto& job : plan.encoder_jobs) enc_.lookup(job.req->media[job.media].key);
  // Encoder jobs: whole images (their attention is bidirectional).
  std::unordered_map<Hash128, Tensor, Hash128Hasher> uncached;  // outputs the cache could not take
  for (const auto& job : plan.encoder_jobs) {
    MediaItem& m = job.req->media[job.media];
    job.req->timeline.add(Event::kEncoderStart, now_ns(), static_cast<int64_t>(job.media));
    if (!vision_) throw FailedPrecondition("this model has no vision tower");
    Tensor feats = vision_->forward(m.pixel_values, {&m.grid, 1});  // [n_tokens, hidden]
    if (feats.dim(0) != m.n_tokens)
      throw InternalError("vision tower produced " + std::to_string(feats.dim(0)) + " rows for an image of " +
                          std::to_string(m.n_tokens) + " tokens");
    if (enc_.put(m.key, feats)) {
      enc_.pin(m.key);
      pinned.push_back(m.key);
    } else {
      uncached.emplace(m.key, feats);
    }
    job.req->timeline.add(Event::kEncoderEnd, now_ns(), static_cast<int64_t>(job.media));
  }

  const size_t nc = plan.chunks.size();
  tokens_.resize(nc);
  positions_.resize(nc);
  rows_.resize(nc);
  embeds_.resize(nc);
  std::vector<models::SeqStep> steps(nc);
  for (size_t k = 0; k < nc; ++k) {
    const ScheduledChunk& c = plan.chunks[k];
    const Request& r = *c.req;
    auto& tok = tokens_[k];
    auto& pos = positions_[k];
    auto& rows = rows_[k];
    auto& emb = embeds_[k];
    tok.resize(static_cast<size_t>(c.n));
    pos.resize(static_cast<size_t>(3 * c.n));
    rows.clear();
    for (int64_t i = 0; i < c.n; ++i) {
      tok[static_cast<size_t>(i)] = r.token_at(c.start + i);
      for (int row = 0; row < 3; ++row) pos[static_cast<size_t>(row * c.n + i)] = r.position_at(row, c.start + i);
    }
    for (const auto& m : r.media) {
      int64_t b = std::max(m.begin, c.start), e = std::min(m.begin + m.n_tokens, c.start + c.n);
      if (b >= e) continue;
      size_t off = emb.size();
      emb.resize(off + static_cast<size_t>((e - b) * H));
      auto it = uncached.find(m.key);
      if (it != uncached.end()) {
        std::copy_n(it->second.data<float>() + (b - m.begin) * H, (e - b) * H, emb.data() + off);
      } else {
        enc_.read_rows(m.key, b - m.begin, e - b, emb.data() + off);
      }
      for (int64_t i = b; i < e; ++i) rows.push_back(static_cast<int32_t>(i - c.start));
    }
    models::SeqStep& s = steps[k];
    s.tokens = tok;
    s.positions = pos;
    s.kv_before = static_cast<int32_t>(c.start);
    s.block_table = kv_.block_table(r);
    s.embed_rows = rows;
    s.embeds = rows.empty() ? nullptr : emb.data();
    s.want_logits = c.sample;
  }
  StepOutput out;
  Tensor logits = lm_.forward(steps);  // [n_sample, vocab]
  int64_t w = 0;
  const int64_t V = logits.dim(1);
  for (size_t k = 0; k < nc; ++k) {
    const ScheduledChunk& c = plan.chunks[k];
    embeds_[k].clear();
    if (!c.sample) continue;
    std::span<float> row(logits.data<float>() + w * V, static_cast<size_t>(V));
    ++w;
    out.sampled.push_back(c.req->sampler->sample(row, c.req->prompt));
  }
  for (const auto& k : pinned) enc_.unpin(k);
  out.step_ns = now_ns() - t0;
  return out;
}

}  // namespace mmrt::engine

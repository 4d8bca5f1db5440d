// Executes a StepPlan on the model: encoder jobs first (vision tower -> encoder cache), then one
// language-model forward over every scheduled chunk, then sampling. The executor owns the
// memory (KV tensors inside the model, encoder outputs in the cache); the managers keep books.
#pragma once

#include <memory>
#include <vector>

#include "engine/encoder_cache.h"
#include "engine/kv_manager.h"
#include "engine/scheduler.h"

namespace mmrt::models {
class LanguageModel;
class VisionTower;
}  // namespace mmrt::models

namespace mmrt::engine {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual StepOutput execute(const StepPlan& plan) = 0;
};

class ModelExecutor : public Executor {
 public:
  ModelExecutor(models::LanguageModel& lm, models::VisionTower* vision, KvBlockManager& kv, EncoderCache& enc);
  StepOutput execute(const StepPlan& plan) override;

 private:
  models::LanguageModel& lm_;
  models::VisionTower* vision_;
  KvBlockManager& kv_;
  EncoderCache& enc_;
  // Per-chunk buffers, reused across steps.
  std::vector<std::vector<int32_t>> tokens_, positions_, rows_;
  std::vector<std::vector<float>> embeds_;
};

}  // namespace mmrt::engine

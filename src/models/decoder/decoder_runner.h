// A Runner whose language model is the shared decoder as it is: the decoder's five methods
// forwarded once here, so a family's runner adds only its encoder (encode, encode_flops).
#pragma once

#include <memory>
#include <span>
#include <utility>

#include "io/safetensors.h"
#include "kernels/backend.h"
#include "models/decoder/decoder.h"
#include "models/model.h"

namespace mmrt::models {

class DecoderRunner : public Runner {
 public:
  kernels::KvCacheConfig kv_config() const override { return lm_->kv_config(); }
  Tensor forward(std::span<const SeqStep> batch, kernels::KvCache& kv) override {
    return lm_->forward(batch, kv);
  }
  void capture_hidden_states(Tensor* out) override { lm_->capture_hidden_states(out); }
  size_t weight_bytes() const override { return lm_->weight_bytes(); }
  kernels::WeightFormat weight_format() const override { return lm_->weight_format(); }

 protected:
  // `st` keeps the mapped weights the decoder's (and the encoder's) views read alive; `be` is
  // the backend both compute on (it must outlive the runner).
  DecoderRunner(const kernels::Backend& be, io::SafeTensors st, std::unique_ptr<Decoder> lm)
      : st_(std::move(st)), lm_(std::move(lm)), be_(be) {}

  io::SafeTensors st_;
  std::unique_ptr<Decoder> lm_;
  const kernels::Backend& be_;
};

}  // namespace mmrt::models

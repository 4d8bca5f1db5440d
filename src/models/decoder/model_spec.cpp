#include "models/decoder/model_spec.h"

#include <algorithm>
#include <filesystem>

#include "io/generation_config.h"

namespace mmrt::models {

ModelSpec decoder_model_spec(const Decoder& lm, const std::string& checkpoint_dir,
                             const DecoderSpecFacts& facts) {
  const io::GenerationConfig gen = io::load_generation_config(
      (std::filesystem::path(checkpoint_dir) / "generation_config.json").string());
  ModelSpec spec;
  spec.family = facts.family;
  spec.architecture = facts.architecture;
  spec.vocab_size = lm.config().vocab_size;
  spec.stop_ids = gen.eos_token_ids;
  const auto eos = static_cast<int32_t>(facts.eos_token_id);
  if (facts.eos_token_id >= 0 &&
      std::find(spec.stop_ids.begin(), spec.stop_ids.end(), eos) == spec.stop_ids.end())
    spec.stop_ids.push_back(eos);
  const kernels::KvCacheConfig kc = lm.kv_config();
  spec.kv_layers.assign(static_cast<size_t>(kc.n_layers), {kc.n_kv_heads, kc.head_dim});
  spec.position_rows = lm.config().position_rows();
  spec.context_length = facts.context_length;
  spec.modalities = facts.modalities;
  spec.embed_dim = lm.config().hidden_size;
  spec.config_key = facts.config_key;
  return spec;
}

}  // namespace mmrt::models

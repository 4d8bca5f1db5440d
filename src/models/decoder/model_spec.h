// The ModelSpec of a family whose language model is the shared decoder: the fields every such
// family fills alike, in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/decoder/decoder.h"
#include "models/model.h"

namespace mmrt::models {

struct DecoderSpecFacts {
  const char* family = "";
  std::string architecture;
  int64_t eos_token_id = -1;   // config.json's; joins generation_config.json's eos ids
  int64_t context_length = 0;  // max_position_embeddings, or what the family cuts it to
  std::vector<Modality> modalities;
  Hash128 config_key;
};

// vocab_size, kv_layers, position_rows and embed_dim from the decoder; stop_ids from
// `checkpoint_dir`/generation_config.json (its eos ids, then facts.eos_token_id); the rest from
// `facts`.
ModelSpec decoder_model_spec(const Decoder& lm, const std::string& checkpoint_dir,
                             const DecoderSpecFacts& facts);

}  // namespace mmrt::models

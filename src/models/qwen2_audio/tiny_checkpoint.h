// Writes a complete random Qwen2-Audio checkpoint folder in the exact Hugging Face layout
// (config.json with audio_config / text_config / audio_token_index, generation_config.json,
// preprocessor_config.json for WhisperFeatureExtractor, tokenizer.json + tokenizer_config.json
// with the chat template, model.safetensors) on the shared tiny writer (models/tiny_common.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model.h"
#include "models/qwen2_audio/config.h"
#include "models/qwen2_audio/feature_extractor.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::models::qwen2_audio {

enum class TinySize {
  // 128 mels, d_model 32, 4 heads, ffn 64, 2 layers, max_source_positions 1500 (a full 30 s
  // window of 480000 samples); text hidden 64, 2 layers, 4 heads, 4 KV heads (MHA).
  kTiny,
  // HF's own tester encoder (test_modeling_qwen2_audio.py): 80 mels, d_model 16, 4 heads, ffn
  // 16, 2 layers, max_source_positions 30 (windows of 9600 samples = 0.6 s); its text model
  // (intermediate 36, 4 heads, 2 KV heads) at hidden 64, since the decoder's attention needs a
  // head_dim multiple of 16 (HF's hidden 32 gives 8).
  kHfTester,
  // For benchmarks where prefill must cost real time (a streamed utterance stalling other
  // streams, where the encoder's share stays small): a full 30 s window, encoder d_model 64,
  // 4 heads, ffn 256, 2 layers; text hidden 512, 12 layers, 8 heads, 8 KV heads (MHA, as
  // Qwen2-Audio-7B), intermediate 1408, tied head.
  kSmall,
  // For the audio-encoder benchmark: the REAL Qwen2-Audio-7B audio tower and projector geometry
  // (128 mels, d_model 1280, 32 layers, 20 heads, ffn 5120, max_source_positions 1500, projector
  // 1280 -> text hidden) on a small stand-in LLM that is NOT Qwen2-Audio-7B's (hidden 512, 2
  // layers, 8 heads, 8 KV heads (MHA), intermediate 1408, tied head; the real one is 4096 x 32
  // layers), so the checkpoint stays ~1.4 GB in bf16 (722 M parameters, 77.7 M of them the
  // embedding of the 151680-row vocabulary). Its encoder figures are the 7B's up to the
  // projector (1280 x 512 here; the 7B's 1280 x 4096 adds ~0.3 % to a 30 s clip's FLOPs); its
  // LLM figures are not.
  kTower7bShape,
};
// "tiny" | "hf-tester" | "small" | "tower-7b-shape"; InvalidArgument else
TinySize parse_tiny_size(const std::string& s);
const char* tiny_size_name(TinySize s);

struct TinyOptions {
  TinySize size = TinySize::kTiny;
  uint64_t seed = 0;
  DType dtype = DType::kBF16;  // kBF16 or kF32
  std::string tokenizer_path;  // a tokenizer.json to copy in; empty: train one
  std::optional<bool> tied;    // unset: the preset's (untied, as Qwen2-Audio-7B, for tiny)
  uint64_t max_shard_bytes = 2'000'000'000;
  ThreadPool* pool = nullptr;
  bool progress = false;
};

struct TinyResult {
  Config config;                    // as written to config.json
  FeatureExtractorConfig features;  // as written to preprocessor_config.json
  TinyModelResult info;             // files (relative to the folder), counts, sizes, time
};

// The preset's dimensions (vocabulary and token ids come from the tokenizer).
Config tiny_base_config(TinySize size);
FeatureExtractorConfig tiny_feature_config(TinySize size);

TinyResult make_tiny_checkpoint(const std::string& out_dir, const TinyOptions& opts);

// Qwen2-Audio's special tokens in id order: <|endoftext|>, <|im_start|>, <|im_end|>, <|AUDIO|>,
// <|audio_bos|>, <|audio_eos|> (151643..151648 in the real tokenizer, and in a trained one).
const std::vector<std::string>& special_tokens();

// make-tiny-model's entry (models/tiny_registry.h): the common options mapped to this family's.
TinyModelResult make_tiny_model(const std::string& out_dir, const TinyModelOptions& opts);

}  // namespace mmrt::models::qwen2_audio

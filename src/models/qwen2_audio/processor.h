// Qwen2-Audio's request side: the chat template, audio estimates from the file header,
// decoding + the Whisper log-mel per window (media/audio.h, media/mel.h), <|AUDIO|> expansion
// (plain 1-D positions) and content keys.
//
// A prepared audio item: features f32 [n_windows, n_mels, n_frames] (each window padded as the
// feature extractor pads a clip), dims {n_mels, n_frames, L_0, L_1, ...} (L_k: valid mel frames
// of window k), n_tokens = sum of audio_tokens(L_k), encoder_cost = n_windows * n_frames / 2
// (encoder rows). Audio longer than one window is split (LoadOptions::LongAudio::kSplit) into
// consecutive windows encoded independently and concatenated into one placeholder run, or
// refused (kRefuse).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "models/model.h"
#include "models/qwen2_audio/config.h"
#include "models/qwen2_audio/feature_extractor.h"

namespace mmrt::models::qwen2_audio {

// The valid mel frames of each window of a prepared (or estimated) item, checked against its
// dims and token count; InvalidArgument naming what disagrees.
std::vector<int64_t> window_frames(const PreparedMedia& item, const AudioConfig& audio);

std::unique_ptr<Processor> make_processor(const Config& cfg, const FeatureExtractorConfig& fe,
                                          const Hash128& config_key,
                                          LoadOptions::LongAudio long_audio);

}  // namespace mmrt::models::qwen2_audio

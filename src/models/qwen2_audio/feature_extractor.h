// Qwen2-Audio's preprocessor_config.json (WhisperFeatureExtractor settings), the window plan of
// a clip (how many 30 s windows, how many valid mel frames and audio tokens each) and the token
// count formula of the HF processor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/qwen2_audio/config.h"

namespace mmrt::models::qwen2_audio {

// WhisperFeatureExtractor's settings; the defaults are the class defaults (used for fields and
// files that are absent).
struct FeatureExtractorConfig {
  int64_t feature_size = 80;  // mel bins
  int64_t sampling_rate = 16000;
  int64_t hop_length = 160;
  int64_t n_fft = 400;
  double chunk_length = 30;    // seconds of one window
  int64_t n_samples = 480000;  // chunk_length * sampling_rate

  int64_t n_frames() const { return n_samples / hop_length; }  // 3000
  double seconds(int64_t samples) const { return static_cast<double>(samples) / sampling_rate; }

  // Parses preprocessor_config.json text (n_samples follows chunk_length, as the HF class
  // computes it; a stored n_samples / nb_max_frames must agree) and range-checks every value;
  // FormatError naming `origin` and the field.
  static FeatureExtractorConfig from_json(const std::string& text, const std::string& origin);
  // The file, or the class defaults when `path` does not exist.
  static FeatureExtractorConfig load(const std::string& path);
  // FormatError unless the features fit the encoder: feature_size == num_mel_bins and
  // n_samples / hop_length == 2 * max_source_positions.
  void check_against(const AudioConfig& audio, const std::string& origin) const;
};

// Audio tokens of one window with `mel_frames` valid mel frames (the feature attention mask's
// sum): ((L - 1) // 2 + 1 - 2) // 2 + 1 with Python's floor division, as
// _get_feat_extract_output_lengths computes it: 750 for a full 30 s window, 0 below 3 frames
// (321 samples).
int64_t audio_tokens(int64_t mel_frames);
// Valid mel frames of a window of `samples` samples (ceil(samples / hop), at most n_frames).
int64_t valid_frames(const FeatureExtractorConfig& fe, int64_t samples);

// How a clip of `total_samples` samples (at the extractor's rate) is encoded: consecutive
// windows of n_samples samples (the last one partial), each exactly as the HF processor encodes
// a clip of that length. A trailing window too short for one token is dropped (it adds
// nothing). InvalidArgument when the clip gives no token at all, and, with kRefuse, when it is
// longer than one window (both durations named).
struct WindowPlan {
  std::vector<int64_t> samples;  // per window
  std::vector<int64_t> frames;   // valid mel frames per window
  int64_t n_tokens = 0;          // sum of audio_tokens(frames)
};
WindowPlan plan_windows(int64_t total_samples, const FeatureExtractorConfig& fe,
                        LoadOptions::LongAudio long_audio);

}  // namespace mmrt::models::qwen2_audio

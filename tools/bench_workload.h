// The `mmrt bench` workloads: a seeded Poisson arrival trace of mixed requests (text chat, one
// image + question, multi-turn conversations that repeat an image), with SLA classes mixed, and
// synthetic PNG images, so every policy sees exactly the same load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mmrt::cli {

struct WorkloadOptions {
  // mixed | text | image | audio-stall | audio-stream (bench_workload_audio.cpp: 8 platinum
  // text streams decode while a 12 s utterance arrives for prefill, whole at its end or cut by
  // the VAD and prefilled while it is spoken: their inter-token gaps show the stalls)
  std::string name = "mixed";
  double rate = 2.0;  // requests per second (Poisson)
  double duration_s = 10.0;
  uint64_t seed = 1;
  int32_t max_tokens = 24;
  int image_side = 224;  // synthetic images are image_side x image_side
  std::vector<std::pair<std::string, double>> class_mix{
      {"platinum", 0.3}, {"gold", 0.3}, {"silver", 0.4}};
};

struct TraceItem {
  double t_s = 0;  // arrival time from the start
  std::string sla_class;
  engine::GenerateRequest request;
  std::string kind;  // "text", "image", "multiturn"
};

std::vector<TraceItem> make_trace(const WorkloadOptions& opts);
// A w x h RGB PNG of smooth colour fields and noise, seeded.
std::vector<uint8_t> synthetic_png(int w, int h, uint64_t seed);
// A mono 16 kHz PCM16 WAV of `seconds` of gliding tones and noise, seeded.
std::vector<uint8_t> synthetic_wav(double seconds, uint64_t seed);
// 16 kHz speech-like samples: phrases of 1.5-3.5 s (voiced harmonics at a syllable rhythm)
// separated by 0.6-0.9 s pauses of faint noise, which the VAD cuts on; seeded.
std::vector<int16_t> synthetic_speech(double seconds, uint64_t seed);
// The audio workloads, both over the same synthetic utterance and the same final prompt.
std::vector<TraceItem> audio_trace(const WorkloadOptions& opts);

}  // namespace mmrt::cli

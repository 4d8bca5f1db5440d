// The audio workloads of `mmrt bench`: 8 platinum text streams start together and decode for
// the whole run; 0.4 s in, a 12 s utterance starts. The prompt that answers it (gold: a TTFT
// promise) holds the utterance as the items /v1/realtime would cut: the VAD's segments with the
// session's settings (400 ms of silence ends one, cuts on 40 ms). Two ways to get there:
//   audio-stall   whole buffer: nothing happens until the utterance ends; then every item is
//                 decoded, encoded and prefilled at once;
//   audio-stream  segmented: each item is prefilled (silver, one token) when the VAD closes it,
//                 so at the end only the last item is left.
// Under slo:plain the prefill runs in the step budget's fixed chunks; under slo in slices the
// batch controller sizes to the streams' TPOT target. The streams' inter-token gaps show the
// stalls; gold's TTFT is the latency after the end of speech.
#include <algorithm>
#include <cmath>
#include <random>

#include "bench_workload.h"
#include "core/error.h"
#include "media/audio.h"
#include "media/vad.h"

namespace mmrt::cli {

namespace {

constexpr int32_t kRate = 16000;
constexpr double kStart = 0.4, kSeconds = 12.0;

// The chat of a prompt over the first n items: one user turn of audio parts (as the Realtime
// session builds it, so each prompt is a prefix of the next one's).
engine::GenerateRequest over_items(const std::vector<std::vector<uint8_t>>& items, size_t n) {
  engine::GenerateRequest g;
  models::ChatMessage m;
  m.role = "user";
  for (size_t i = 0; i < n; ++i) {
    m.content.push_back({models::ContentPart::Kind::kAudio, ""});
    g.media.push_back({models::Modality::kAudio, items[i], {}});
  }
  g.messages.push_back(std::move(m));
  g.sampling.ignore_eos = true;
  return g;
}

}  // namespace

std::vector<int16_t> synthetic_speech(double seconds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int16_t> pcm(static_cast<size_t>(seconds * kRate));
  const double two_pi = 6.283185307179586;
  size_t at = static_cast<size_t>(0.3 * kRate);  // lead-in silence
  double phase = 0;
  while (at < pcm.size()) {
    const size_t phrase = static_cast<size_t>((1.5 + 2.0 * u(rng)) * kRate);
    const double f0 = 110 + 80 * u(rng), syllable_hz = 3.5 + 2 * u(rng);
    for (size_t i = 0; i < phrase && at + i < pcm.size(); ++i) {
      const double t = static_cast<double>(i) / kRate;
      const double f = f0 * (1 + 0.1 * std::sin(two_pi * 0.7 * t));
      phase += two_pi * f / kRate;
      // Syllables: a raised-sine envelope that never reaches silence inside a phrase.
      const double env = 0.25 + 0.75 * std::pow(std::sin(two_pi * syllable_hz * t / 2), 2);
      double v = 0;
      for (int h = 1; h <= 6; ++h) v += std::sin(h * phase) / h;
      pcm[at + i] = static_cast<int16_t>(std::clamp(0.25 * env * v, -1.0, 1.0) * 32767);
    }
    at += phrase;
    const size_t pause = static_cast<size_t>((0.6 + 0.3 * u(rng)) * kRate);
    for (size_t i = 0; i < pause && at + i < pcm.size(); ++i)
      pcm[at + i] = static_cast<int16_t>((u(rng) - 0.5) * 20);  // about -70 dBFS
    at += pause;
  }
  return pcm;
}

std::vector<TraceItem> audio_trace(const WorkloadOptions& o) {
  if (o.name != "audio-stall" && o.name != "audio-stream")
    throw InternalError("not an audio workload: " + o.name);
  const bool streamed = o.name == "audio-stream";
  std::vector<TraceItem> trace;
  std::mt19937_64 rng(o.seed);
  const char* words[] = {"tell", "me", "about", "the", "river", "signal", "market", "and", "sky"};
  for (int i = 0; i < 8; ++i) {
    TraceItem it;
    it.t_s = 0.01 * i;
    it.sla_class = "platinum";
    it.kind = "text";
    std::string text;
    for (int w = 0; w < 12; ++w) text += std::string(w ? " " : "") + words[rng() % 9];
    it.request.messages.push_back(models::ChatMessage::text("user", text + "?"));
    // Long enough to decode through the utterance at a TPOT of 12 ms or more.
    it.request.sampling.max_tokens = std::max(o.max_tokens, 1024);
    it.request.sampling.ignore_eos = true;
    trace.push_back(std::move(it));
  }
  // The items, as the Realtime session cuts them with turn detection off.
  const std::vector<int16_t> pcm = synthetic_speech(kSeconds, o.seed);
  std::vector<float> f(pcm.size());
  for (size_t i = 0; i < pcm.size(); ++i) f[i] = static_cast<float>(pcm[i]) / 32768.0f;
  media::VadConfig vc;
  vc.sample_rate = kRate;
  vc.grid_samples = kRate / 25;
  vc.prefix_padding_ms = 0;
  std::vector<int64_t> cuts;  // item ends
  for (const media::VadSegment& s : media::detect_segments(f, vc))
    if (s.end < static_cast<int64_t>(pcm.size())) cuts.push_back(s.end);
  cuts.push_back(static_cast<int64_t>(pcm.size()));
  std::vector<std::vector<uint8_t>> items;
  int64_t begin = 0;
  for (int64_t end : cuts) {
    items.push_back(media::encode_wav_pcm16(
        std::span(pcm).subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)),
        kRate));
    begin = end;
  }
  if (streamed)
    for (size_t k = 0; k + 1 < items.size(); ++k) {  // the VAD closes item k min_silence later
      TraceItem it;
      it.t_s = kStart + static_cast<double>(cuts[k]) / kRate + vc.min_silence_ms / 1000.0;
      it.sla_class = "silver";
      it.kind = "audio";
      it.request = over_items(items, k + 1);
      it.request.sampling.max_tokens = 1;
      trace.push_back(std::move(it));
    }
  TraceItem answer;
  answer.t_s = kStart + kSeconds;
  answer.sla_class = "gold";
  answer.kind = "audio";
  answer.request = over_items(items, items.size());
  answer.request.sampling.max_tokens = 8;
  trace.push_back(std::move(answer));
  for (auto& it : trace) it.request.sla_class = it.sla_class;
  return trace;
}

}  // namespace mmrt::cli

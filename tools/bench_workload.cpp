#include "bench_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/error.h"
#include "media/audio.h"
#include "media/image.h"

namespace mmrt::cli {

std::vector<uint8_t> synthetic_png(int w, int h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  double fx[3], fy[3], ph[3];
  for (int c = 0; c < 3; ++c) {
    fx[c] = 1 + 6 * u(rng);
    fy[c] = 1 + 6 * u(rng);
    ph[c] = 6.28 * u(rng);
  }
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        double v = 127.5 +
                   100 * std::sin(fx[c] * x / w * 6.28 + ph[c]) * std::cos(fy[c] * y / h * 6.28) +
                   20 * (u(rng) - 0.5);
        px[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return media::encode_png_rgb8(px, w, h);
}

std::vector<uint8_t> synthetic_wav(double seconds, uint64_t seed) {
  const int32_t rate = 16000;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<int16_t> pcm(static_cast<size_t>(seconds * rate));
  double phase = 0;
  for (size_t i = 0; i < pcm.size(); ++i) {
    const double t = static_cast<double>(i) / rate;
    phase += 6.283185307179586 * (300 + 200 * std::sin(t * 1.7)) / rate;
    pcm[i] = static_cast<int16_t>((0.3 * std::sin(phase) + 0.05 * u(rng)) * 32767);
  }
  return media::encode_wav_pcm16(pcm, rate);
}

namespace {

const char* kWords[] = {"the",   "model", "image",  "latency", "river",  "signal", "market",
                        "risk",  "car",   "route",  "camera",  "defect", "weld",   "sky",
                        "green", "quick", "answer", "why",     "how",    "large",  "small",
                        "price", "trend", "noise",  "sensor",  "part",   "line"};

std::string sentence(std::mt19937_64& rng, int words) {
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i) s += ' ';
    s += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
  }
  return s + "?";
}

}  // namespace

std::vector<TraceItem> make_trace(const WorkloadOptions& o) {
  if (o.name == "audio-stall" || o.name == "audio-stream") return audio_trace(o);
  if (o.rate <= 0 || o.duration_s <= 0)
    throw InvalidArgument("bench needs --rate > 0 and --duration > 0");
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate);
  std::uniform_real_distribution<double> u(0, 1);
  // A few images that conversations keep coming back to (cache hits), and fresh ones.
  std::vector<std::vector<uint8_t>> shared;
  for (int i = 0; i < 3; ++i)
    shared.push_back(
        synthetic_png(o.image_side, o.image_side, o.seed * 1000 + static_cast<uint64_t>(i)));
  double total_mix = 0;
  for (const auto& [c, p] : o.class_mix) total_mix += p;
  std::vector<TraceItem> trace;
  double t = gap(rng);
  int n = 0;
  while (t < o.duration_s) {
    TraceItem it;
    it.t_s = t;
    double pick = u(rng) * total_mix;
    for (const auto& [c, p] : o.class_mix) {
      it.sla_class = c;
      if ((pick -= p) <= 0) break;
    }
    double k = u(rng);
    std::string kind = o.name == "text"    ? "text"
                       : o.name == "image" ? "image"
                       : k < 0.4           ? "text"
                       : k < 0.7           ? "image"
                                           : "multiturn";
    it.kind = kind;
    auto& g = it.request;
    g.sampling.max_tokens = o.max_tokens;
    g.sampling.ignore_eos = true;  // the same amount of decode work under every policy
    if (kind == "text") {
      g.messages.push_back(
          models::ChatMessage::text("user", sentence(rng, 10 + static_cast<int>(rng() % 30))));
    } else if (kind == "image") {
      models::ChatMessage m;
      m.role = "user";
      m.content.push_back({models::ContentPart::Kind::kImage, ""});
      m.content.push_back({models::ContentPart::Kind::kText, sentence(rng, 8)});
      g.messages.push_back(m);
      g.add_image(
          synthetic_png(o.image_side, o.image_side, o.seed * 7919 + static_cast<uint64_t>(n)));
    } else {
      // Second turn of a conversation about one of the shared images.
      size_t which = rng() % shared.size();
      std::mt19937_64 conv(o.seed * 31 + which);  // the first turn is the same for this image
      models::ChatMessage m;
      m.role = "user";
      m.content.push_back({models::ContentPart::Kind::kImage, ""});
      m.content.push_back({models::ContentPart::Kind::kText, sentence(conv, 8)});
      g.messages.push_back(m);
      g.messages.push_back(models::ChatMessage::text("assistant", sentence(conv, 12)));
      g.messages.push_back(models::ChatMessage::text("user", sentence(rng, 6)));
      g.add_image(shared[which]);
    }
    g.sla_class = it.sla_class;
    trace.push_back(std::move(it));
    t += gap(rng);
    ++n;
  }
  return trace;
}

}  // namespace mmrt::cli

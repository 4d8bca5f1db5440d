#include "models/qwen2_audio/processor.h"

#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "core/thread_pool.h"
#include "media/audio.h"
#include "media/image.h"
#include "media/mel.h"
#include "models/qwen2_audio/chat_template.h"

namespace mmrt::models::qwen2_audio {

std::vector<int64_t> window_frames(const PreparedMedia& item, const AudioConfig& audio) {
  if (item.modality != Modality::kAudio)
    throw InvalidArgument(std::string("qwen2-audio: expected an audio item, got ") +
                          modality_name(item.modality));
  const std::vector<int64_t>& d = item.dims;
  if (d.size() < 3 || d[0] != audio.num_mel_bins || d[1] != audio.n_frames())
    throw InvalidArgument("qwen2-audio: an audio item's dims must be {" +
                          std::to_string(audio.num_mel_bins) + ", " +
                          std::to_string(audio.n_frames()) + ", L_0, ...} (" +
                          std::to_string(d.size()) + " values given)");
  std::vector<int64_t> frames(d.begin() + 2, d.end());
  int64_t tokens = 0;
  for (int64_t L : frames) {
    if (L < 1 || L > audio.n_frames())
      throw InvalidArgument("qwen2-audio: a window's valid mel frames " + std::to_string(L) +
                            " are outside [1, " + std::to_string(audio.n_frames()) + "]");
    tokens += audio_tokens(L);
  }
  if (tokens != item.n_tokens)
    throw InvalidArgument("qwen2-audio: an audio item of " + std::to_string(frames.size()) +
                          " windows gives " + std::to_string(tokens) + " tokens, not the " +
                          std::to_string(item.n_tokens) + " it claims");
  return frames;
}

namespace {

media::MelConfig mel_config(const FeatureExtractorConfig& fe) {
  media::MelConfig m;
  m.n_mels = static_cast<int32_t>(fe.feature_size);
  m.n_fft = static_cast<int32_t>(fe.n_fft);
  m.hop_length = static_cast<int32_t>(fe.hop_length);
  m.sample_rate = static_cast<int32_t>(fe.sampling_rate);
  m.n_samples = fe.n_samples;
  m.validate("preprocessor_config.json");
  return m;
}

class Qwen2AudioProcessor final : public Processor {
 public:
  Qwen2AudioProcessor(const Config& cfg, const FeatureExtractorConfig& fe, const Hash128& key,
                      LoadOptions::LongAudio long_audio)
      : cfg_(cfg), fe_(fe), long_audio_(long_audio), mel_(mel_config(fe)) {
    decode_.target_rate = static_cast<int32_t>(fe.sampling_rate);
    Hasher h;
    h.update(key)
        .update_pod(fe.feature_size)
        .update_pod(fe.sampling_rate)
        .update_pod(fe.hop_length)
        .update_pod(fe.n_fft)
        .update_pod(fe.n_samples)
        .update_pod(long_audio)
        .update(std::string_view("qwen2-audio whisper log-mel"));
    settings_ = h.digest();
  }

  std::string render_chat(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const override {
    return qwen2_audio::render_chat(messages, add_generation_prompt);
  }

  // MediaOptions hold video settings only: audio ignores them (and its keys do not depend on them).
  MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes,
                         const MediaOptions&) const override {
    check_modality(m);
    const media::AudioInfo info = media::probe_audio(bytes, decode_);
    const WindowPlan plan = plan_windows(info.frames_at(decode_.target_rate), fe_, long_audio_);
    MediaEstimate e;
    e.dims = dims_of(plan);
    e.n_tokens = plan.n_tokens;
    e.encoder_cost = cost_of(plan);
    e.source_pixels = info.frames * info.channels;  // samples to decode
    e.feature_bytes = static_cast<int64_t>(plan.frames.size()) * window_floats() * 4;
    // An MP3 header's length is an estimate (no sample count is stored).
    e.exact = info.format != media::AudioFormat::kMp3;
    return e;
  }

  PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                           const media::MediaContext& ctx, const MediaOptions&) const override {
    check_modality(m);
    media::AudioDecodeTimes times;
    const std::vector<float> samples = media::decode_audio(bytes, decode_, &times);
    const WindowPlan plan = plan_windows(static_cast<int64_t>(samples.size()), fe_, long_audio_);
    const int64_t W = static_cast<int64_t>(plan.frames.size()), n = window_floats();
    std::shared_ptr<uint8_t> mem =
        media::features_buffer(ctx, static_cast<size_t>(W * n) * sizeof(float));
    PreparedMedia p;
    p.modality = m;
    p.decode_ns = times.decode_ns;
    p.resample_ns = times.resample_ns;
    p.features = Tensor::view(mem.get(), DType::kF32, {W, fe_.feature_size, fe_.n_frames()},
                              mem);  // [n_windows, n_mels, n_frames]
    float* out = p.features.data<float>();
    auto window = [&](int64_t k) {
      const std::span<const float> in(samples.data() + k * fe_.n_samples,
                                      static_cast<size_t>(plan.samples[static_cast<size_t>(k)]));
      mel_.compute(in, {out + k * n, static_cast<size_t>(n)});
    };
    if (ctx.pool && W > 1)
      ctx.pool->parallel_for(W, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) window(k);
      });
    else
      for (int64_t k = 0; k < W; ++k) window(k);
    p.dims = dims_of(plan);
    p.n_tokens = plan.n_tokens;
    p.encoder_cost = cost_of(plan);
    return p;
  }

  ExpandedPrompt expand(std::span<const int32_t> ids,
                        std::span<const PreparedMedia> media) const override {
    const int32_t audio = static_cast<int32_t>(cfg_.audio_token_index);
    return expand_placeholders_1d(ids, audio, media, "<|AUDIO|>", "audio items",
                                  [&](const PreparedMedia& p, std::vector<int32_t>& out) {
                                    window_frames(p, cfg_.audio);  // checks the item
                                    out.insert(out.end(), static_cast<size_t>(p.n_tokens), audio);
                                  });
  }

  Hash128 content_key(Modality m, std::span<const uint8_t> bytes,
                      const MediaOptions&) const override {
    return media_content_key(bytes, settings_, m);
  }

 private:
  static void check_modality(Modality m) {
    if (m != Modality::kAudio)
      throw Unimplemented(std::string("Qwen2-Audio takes audio; ") + modality_name(m) +
                          " input is not supported");
  }
  int64_t window_floats() const { return fe_.feature_size * fe_.n_frames(); }
  std::vector<int64_t> dims_of(const WindowPlan& plan) const {
    std::vector<int64_t> d{fe_.feature_size, fe_.n_frames()};
    d.insert(d.end(), plan.frames.begin(), plan.frames.end());
    return d;
  }
  int64_t cost_of(const WindowPlan& plan) const {
    return static_cast<int64_t>(plan.frames.size()) * (fe_.n_frames() / 2);
  }

  Config cfg_;
  FeatureExtractorConfig fe_;
  LoadOptions::LongAudio long_audio_;
  media::MelExtractor mel_;
  media::AudioDecodeOptions decode_;
  Hash128 settings_;
};

}  // namespace

std::unique_ptr<Processor> make_processor(const Config& cfg, const FeatureExtractorConfig& fe,
                                          const Hash128& config_key,
                                          LoadOptions::LongAudio long_audio) {
  return std::make_unique<Qwen2AudioProcessor>(cfg, fe, config_key, long_audio);
}

}  // namespace mmrt::models::qwen2_audio

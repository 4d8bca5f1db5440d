#include "models/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "io/tokenizer.h"

namespace mmrt::models {

std::vector<kernels::Op> ops_of(std::initializer_list<std::span<const kernels::Op>> parts) {
  std::vector<kernels::Op> out;
  for (std::span<const kernels::Op> p : parts)
    for (kernels::Op op : p)
      if (std::find(out.begin(), out.end(), op) == out.end()) out.push_back(op);
  return out;
}

const char* modality_name(Modality m) {
  switch (m) {
    case Modality::kImage:
      return "image";
    case Modality::kVideo:
      return "video";
    case Modality::kAudio:
      return "audio";
  }
  return "?";
}

ChatMessage ChatMessage::text(std::string role, std::string text) {
  ChatMessage m;
  m.role = std::move(role);
  m.content.push_back({ContentPart::Kind::kText, std::move(text)});
  return m;
}

Hash128 media_content_key(std::span<const uint8_t> bytes, const Hash128& settings, Modality m) {
  Hasher h;
  h.update(hash128(bytes.data(), bytes.size())).update(settings).update_pod(m);
  return h.digest();
}

PreparedMedia layout_shell(Modality m, const MediaEstimate& e) {
  PreparedMedia p;
  p.modality = m;
  p.dims = e.dims;
  p.n_tokens = e.n_tokens;
  p.encoder_cost = e.encoder_cost;
  p.slice_seconds = e.slice_seconds;
  return p;
}

std::vector<int32_t> Processor::chat_ids(const io::Tokenizer& tok,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const {
  return tok.encode(render_chat(messages, add_generation_prompt));
}

Modality modality_of(ContentPart::Kind kind) {
  switch (kind) {
    case ContentPart::Kind::kImage:
      return Modality::kImage;
    case ContentPart::Kind::kVideo:
      return Modality::kVideo;
    case ContentPart::Kind::kAudio:
      return Modality::kAudio;
    case ContentPart::Kind::kText:
      break;
  }
  throw InvalidArgument("a text content part has no media modality");
}

bool MediaOptions::samples_video() const {
  return video_fps != 0 || video_nframes != 0 || video_min_frames != 0 || video_max_frames != 0 ||
         video_min_pixels != 0 || video_max_pixels != 0 || video_total_pixels != 0;
}

void validate(const MediaOptions& o) {
  const double t = o.video_prune_threshold;
  if (!std::isfinite(t) || t < 0 || t > 255)
    throw InvalidArgument(
        "video_prune_threshold must be a mean pixel difference in 8-bit levels "
        "between 0 (off) and 255, not " +
        std::to_string(t));
  if (!(o.video_fps == 0 || (o.video_fps >= 1e-3 && o.video_fps <= 1000)))
    throw InvalidArgument(
        "video_fps must be in [0.001, 1000] frames per second (0: the model's), not " +
        std::to_string(o.video_fps));
  const struct {
    const char* name;
    int64_t v, hi;
  } counts[] = {{"video_nframes", o.video_nframes, 100000},
                {"video_min_frames", o.video_min_frames, 100000},
                {"video_max_frames", o.video_max_frames, 100000},
                {"video_min_pixels", o.video_min_pixels, 1'000'000'000},
                {"video_max_pixels", o.video_max_pixels, 1'000'000'000},
                {"video_total_pixels", o.video_total_pixels, 1'000'000'000'000}};
  for (const auto& c : counts)
    if (c.v < 0 || c.v > c.hi)
      throw InvalidArgument(std::string(c.name) + " must be in [0, " + std::to_string(c.hi) +
                            "] (0: the model's), not " + std::to_string(c.v));
  if (o.video_fps != 0 && o.video_nframes != 0)
    throw InvalidArgument("give video_fps or video_nframes, not both (as qwen-vl-utils)");
}

bool ModelSpec::takes(Modality m) const {
  return std::find(modalities.begin(), modalities.end(), m) != modalities.end();
}

namespace {

// encode() as one part.
class WholeEncode final : public EncodeJob {
 public:
  WholeEncode(Runner& r, const PreparedMedia& item) : runner_(r), item_(item) {}
  int64_t parts() const override { return 1; }
  int64_t done() const override { return done_ ? 1 : 0; }
  void run(int64_t n) override {
    if (n <= 0) return;
    if (done_ || n > 1) throw InternalError("encode job: more parts run than it has (1)");
    out_ = runner_.encode(item_);
    done_ = true;
  }
  Tensor result() override {
    if (!done_) throw InternalError("encode job: the result asked before its part ran");
    return std::move(out_);
  }

 private:
  Runner& runner_;
  const PreparedMedia& item_;
  Tensor out_;
  bool done_ = false;
};

}  // namespace

void EncodeJob::check_run(int64_t n) const {
  if (n < 0 || n > parts() - done())
    throw InternalError("encoder job: " + std::to_string(n) + " parts asked, " +
                        std::to_string(parts() - done()) + " left");
}

void EncodeJob::check_finished() const {
  if (done() != parts()) throw InternalError("encoder job: the result asked before its last part");
}

std::unique_ptr<EncodeJob> Runner::encode_job(const PreparedMedia& item) {
  return std::make_unique<WholeEncode>(*this, item);
}

std::string ModelSpec::encoder_identity() const {
  return config_key.hex() + "/" + weights_key.hex() + "/" + encoder_precision;
}

ExpandedPrompt expand_placeholders_1d(
    std::span<const int32_t> ids, int32_t placeholder, std::span<const PreparedMedia> media,
    const std::string& placeholder_name, const std::string& items_name,
    const std::function<void(const PreparedMedia& item, std::vector<int32_t>& out)>& run) {
  ExpandedPrompt e;
  size_t item = 0;
  for (int32_t t : ids) {
    if (t != placeholder) {
      e.ids.push_back(t);
      continue;
    }
    if (item >= media.size())
      throw InvalidArgument("the prompt has more " + placeholder_name + " placeholders than the " +
                            std::to_string(media.size()) + " " + items_name + " given");
    const auto begin = static_cast<int64_t>(e.ids.size());
    run(media[item++], e.ids);
    e.spans.push_back({begin, static_cast<int64_t>(e.ids.size()) - begin});
  }
  if (item != media.size())
    throw InvalidArgument("the prompt has " + std::to_string(item) + " " + placeholder_name +
                          " placeholders but " + std::to_string(media.size()) + " " + items_name +
                          " were given");
  return e;
}

}  // namespace mmrt::models

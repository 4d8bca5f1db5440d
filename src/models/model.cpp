#include "models/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace mmrt::models {

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

void validate(const MediaOptions& o) {
  const double t = o.video_prune_threshold;
  if (!std::isfinite(t) || t < 0 || t > 255)
    throw InvalidArgument(
        "video_prune_threshold must be a mean pixel difference in 8-bit levels "
        "between 0 (off) and 255, not " +
        std::to_string(t));
}

bool ModelSpec::takes(Modality m) const {
  return std::find(modalities.begin(), modalities.end(), m) != modalities.end();
}

}  // namespace mmrt::models

#include "cluster/stream_relay.h"
#include "io/json_fields.h"

#include <nlohmann/json.hpp>

namespace mmrt::cluster {

using nlohmann::json;

namespace {

// Never throws: a string cut inside a UTF-8 character (a replay that differs from the answer it
// continues) gets U+FFFD for the broken bytes.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string StreamRelay::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t end = pending_.find("\n\n", start);
    if (end == std::string::npos) break;
    out += event(std::string_view(pending_).substr(start, end - start));
    start = end + 2;
  }
  pending_.erase(0, start);
  return out;
}

void StreamRelay::replay() {
  pending_.clear();
  replaying_ = true;
  skip_ = sent_.size();
}

std::string StreamRelay::event(std::string_view block) {
  const std::string whole = std::string(block) + "\n\n";
  if (block.rfind("data: ", 0) != 0) return replaying_ ? "" : whole;  // comments (pings)
  const std::string_view payload = block.substr(6);
  if (payload == "[DONE]") {
    done_ = true;
    return whole;
  }
  json j = io::parse_json_or_discard(payload);
  if (j.is_discarded() || !j.is_object()) return whole;  // not ours to judge: relayed as is
  if (auto it = j.find("id"); it != j.end() && it->is_string()) {
    if (id_.empty())
      id_ = it->get<std::string>();
    else
      *it = id_;
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object())
    return "data: " + dump(j) + "\n\n";  // usage, errors, mmrt's own chunk
  json& c = (*choices)[0];
  json* delta = c.contains("delta") && c["delta"].is_object() ? &c["delta"] : nullptr;
  json* text = c.contains("text") && c["text"].is_string() ? &c["text"] : nullptr;  // completions
  json* content = delta && delta->contains("content") && (*delta)["content"].is_string()
                      ? &(*delta)["content"]
                      : text;
  const bool finish = c.contains("finish_reason") && !c["finish_reason"].is_null();
  if (replaying_ && delta) delta->erase("role");  // the client has its role chunk
  std::string s = content ? content->get<std::string>() : "";
  if (skip_ > 0) {
    const size_t drop = std::min(skip_, s.size());
    s.erase(0, drop);
    skip_ -= drop;
  }
  if (replaying_ && s.empty() && !finish) return "";  // nothing the client lacks
  if (content) *content = s;
  sent_ += s;
  return "data: " + dump(j) + "\n\n";
}

}  // namespace mmrt::cluster

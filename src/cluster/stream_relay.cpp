#include "cluster/stream_relay.h"

#include <nlohmann/json.hpp>

#include "io/json_fields.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

// Never throws: a string cut inside a UTF-8 character gets U+FFFD for the broken bytes.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string splice_member(const std::string& body, std::string_view name, std::string_view value) {
  const size_t brace = body.find('{');
  return body.substr(0, brace + 1) + "\"" + std::string(name) + "\":" + std::string(value) + "," +
         body.substr(brace + 1);
}

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

void StreamRelay::resume() {
  pending_.clear();
  resuming_ = true;
  resumed_ = static_cast<int64_t>(ids_.size());
}

std::string StreamRelay::event(std::string_view block) {
  const std::string whole = std::string(block) + "\n\n";
  if (block.rfind("data: ", 0) != 0) return resuming_ ? "" : whole;  // comments (pings)
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
  if (auto it = j.find("mmrt_ids"); it != j.end()) {
    if (it->is_array())
      for (const json& t : *it)
        if (t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() <= INT32_MAX)
          ids_.push_back(static_cast<int32_t>(t.get<int64_t>()));
    if (!keep_ids_) j.erase(it);
  }
  if (auto u = j.find("usage"); resumed_ > 0 && u != j.end() && u->is_object()) {
    // The new worker counts what it generated; the client's answer holds the resumed tokens too.
    for (const char* k : {"completion_tokens", "total_tokens"})
      if (auto v = u->find(k); v != u->end() && v->is_number_integer())
        *v = v->get<int64_t>() + resumed_;
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
  bool role = delta && delta->contains("role");
  if (role && role_sent_) {
    delta->erase("role");  // the client has its role chunk
    role = false;
  }
  role_sent_ = role_sent_ || role;
  const std::string s = content ? content->get<std::string>() : "";
  if (resuming_ && s.empty() && !finish && !role) return "";  // nothing the client lacks
  sent_ += s;
  return "data: " + dump(j) + "\n\n";
}

}  // namespace mmrt::cluster

#include "io/json_fields.h"

#include <cmath>

#include "core/error.h"
#include "io/file.h"

namespace mmrt::io {

using nlohmann::json;

std::string json_excerpt(const json& v) {
  constexpr size_t kMax = 80;
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMax) s = s.substr(0, kMax) + "... (" + std::to_string(s.size()) + " chars)";
  return s;
}

std::string json_error_text(const std::exception& e) {
  std::string_view m = e.what();
  if (m.starts_with("[json.exception.")) {
    const size_t tag = m.find("] ");
    if (tag != std::string_view::npos) m.remove_prefix(tag + 2);
  }
  constexpr std::string_view kRead = "last read: '";
  constexpr size_t kKeep = 40, kMaxMessage = 240;
  const size_t at = m.find(kRead);
  if (at != std::string_view::npos && m.size() > at + kRead.size() + kKeep + 40)
    return std::string(m.substr(0, at + kRead.size() + kKeep)) + "...' (cut)";
  if (m.size() > kMaxMessage) return std::string(m.substr(0, kMaxMessage)) + "... (cut)";
  return std::string(m);
}

void check_json_depth(std::string_view text, const std::string& origin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw FormatError(origin + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels (at byte " + std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

json parse_json(std::string_view text, const std::string& origin, size_t max_values) {
  check_json_depth(text, origin);
  try {
    if (max_values == 0) return json::parse(text);
    size_t values = 0;
    struct TooMany {};
    try {
      return json::parse(text, [&](int, json::parse_event_t ev, json&) {
        if ((ev == json::parse_event_t::value || ev == json::parse_event_t::object_start ||
             ev == json::parse_event_t::array_start) &&
            ++values > max_values)
          throw TooMany{};
        return true;
      });
    } catch (const TooMany&) {
      throw FormatError(origin + ": more than " + std::to_string(max_values) +
                        " JSON values (arrays, objects and scalars together)");
    }
  } catch (const json::exception& e) {
    throw FormatError(origin + ": not valid JSON: " + json_error_text(e));
  }
}

json parse_json_or_discard(std::string_view text, size_t max_values) {
  try {
    return parse_json(text, "", max_values);
  } catch (const FormatError&) {
    return json(json::value_t::discarded);
  }
}

json parse_json_object(std::string_view text, const std::string& origin) {
  json root = parse_json(text, origin);
  if (!root.is_object()) throw FormatError(origin + ": top level is not a JSON object");
  return root;
}

std::string read_text_file(const std::string& path) {
  return read_file(path, {.what = "JSON file", .max_bytes = kMaxJsonFileBytes});
}

JsonFields::JsonFields(const json* primary, const json* fallback, std::string prefix,
                       const std::string& origin)
    : primary_(primary), fallback_(fallback), prefix_(std::move(prefix)), origin_(origin) {}

const json* JsonFields::find(const std::string& key, std::string* where) const {
  if (primary_ && primary_->contains(key)) {
    if (where) *where = prefix_ + key;
    return &(*primary_)[key];
  }
  if (fallback_ && fallback_->contains(key)) {
    if (where) *where = key;
    return &(*fallback_)[key];
  }
  return nullptr;
}

std::optional<int64_t> JsonFields::opt_int(const std::string& key) const {
  std::string where;
  const json* j = find(key, &where);
  if (!j || j->is_null()) return std::nullopt;
  if (j->is_number_integer()) return j->get<int64_t>();
  if (j->is_number_float()) {
    const double d = j->get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d)))
      return static_cast<int64_t>(d);
  }
  throw FormatError(origin_ + ": field \"" + where + "\" must be an integer, got " +
                    json_excerpt(*j));
}

int64_t JsonFields::req_int(const std::string& key) const {
  auto v = opt_int(key);
  if (!v)
    throw FormatError(origin_ + ": missing required field \"" + (primary_ ? prefix_ : "") + key +
                      "\"");
  return *v;
}

int64_t JsonFields::int_or(const std::string& key, int64_t def) const {
  return opt_int(key).value_or(def);
}

double JsonFields::num_or(const std::string& key, double def) const {
  std::string where;
  const json* j = find(key, &where);
  if (!j || j->is_null()) return def;
  if (!j->is_number())
    throw FormatError(origin_ + ": field \"" + where + "\" must be a number, got " +
                      json_excerpt(*j));
  return j->get<double>();
}

bool JsonFields::bool_or(const std::string& key, bool def) const {
  std::string where;
  const json* j = find(key, &where);
  if (!j || j->is_null()) return def;
  if (!j->is_boolean())
    throw FormatError(origin_ + ": field \"" + where + "\" must be true or false, got " +
                      json_excerpt(*j));
  return j->get<bool>();
}

std::string JsonFields::str_or(const std::string& key, const std::string& def) const {
  std::string where;
  const json* j = find(key, &where);
  if (!j || j->is_null()) return def;
  if (!j->is_string())
    throw FormatError(origin_ + ": field \"" + where + "\" must be a string, got " +
                      json_excerpt(*j));
  return j->get<std::string>();
}

int64_t JsonFields::token_or(const std::string& key, int64_t def) const {
  std::string where;
  const json* j = find(key, &where);
  if (!j || j->is_null()) return def;
  if (j->is_array() && !j->empty() && (*j)[0].is_number_integer()) return (*j)[0].get<int64_t>();
  if (j->is_number_integer()) return j->get<int64_t>();
  throw FormatError(origin_ + ": field \"" + where + "\" must be a token id, got " +
                    json_excerpt(*j));
}

std::vector<int64_t> JsonFields::token_list(const std::string& key) const {
  std::string where;
  const json* j = find(key, &where);
  if (!j || j->is_null()) return {};
  if (j->is_number_integer()) return {j->get<int64_t>()};
  std::vector<int64_t> ids;
  if (j->is_array()) {
    for (const auto& v : *j) {
      if (!v.is_number_integer()) break;
      ids.push_back(v.get<int64_t>());
    }
    if (ids.size() == j->size()) return ids;
  }
  throw FormatError(origin_ + ": field \"" + where +
                    "\" must be a token id or a list of them, got " + json_excerpt(*j));
}

ConfigIdentity config_identity(const json& root, const std::string& origin) {
  ConfigIdentity id;
  if (root.contains("architectures") && !root["architectures"].is_null()) {
    const json& a = root["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string())
      throw FormatError(origin + ": field \"architectures\" must be a non-empty list of strings");
    id.architecture = a[0].get<std::string>();
  }
  if (root.contains("model_type") && !root["model_type"].is_null()) {
    if (!root["model_type"].is_string())
      throw FormatError(origin + ": field \"model_type\" must be a string, got " +
                        json_excerpt(root["model_type"]));
    id.model_type = root["model_type"].get<std::string>();
  }
  return id;
}

int64_t json_int_value(const nlohmann::json& v, const std::string& key, const std::string& origin) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::abs(d) < 9e15) return static_cast<int64_t>(d);
  }
  throw FormatError(origin + ": \"" + key + "\" must be an integer, got " + json_excerpt(v));
}

double json_number_value(const nlohmann::json& v, const std::string& key,
                         const std::string& origin) {
  if (!v.is_number())
    throw FormatError(origin + ": \"" + key + "\" must be a number, got " + json_excerpt(v));
  return v.get<double>();
}

std::array<double, 3> json_rgb_value(const nlohmann::json& v, const std::string& key,
                                     const std::string& origin) {
  if (v.is_number()) {
    double d = v.get<double>();
    return {d, d, d};
  }
  if (!v.is_array() || v.size() != 3)
    throw FormatError(origin + ": \"" + key + "\" must be a number or 3 numbers (one per RGB " +
                      "channel), got " + json_excerpt(v));
  return {json_number_value(v[0], key + "[0]", origin),
          json_number_value(v[1], key + "[1]", origin),
          json_number_value(v[2], key + "[2]", origin)};
}

}  // namespace mmrt::io

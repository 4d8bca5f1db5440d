#include "cluster/wire_fields.h"

#include <cmath>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::cluster {

using nlohmann::json;

WireFields::WireFields(const json& obj, std::string what) : obj_(obj), what_(std::move(what)) {
  if (!obj_.is_object()) fail("not a JSON object");
}

json WireFields::parse(std::string_view text, size_t max_values, const std::string& what) {
  json j = io::parse_json_or_discard(text, max_values);
  if (j.is_discarded() || !j.is_object()) throw FormatError(what + ": not a JSON object");
  return j;
}

void WireFields::fail(const std::string& why) const {
  throw FormatError(what_ + ": " + why);
}

const json* WireFields::find(const char* name) const {
  auto it = obj_.find(name);
  return it == obj_.end() ? nullptr : &*it;
}

const json& WireFields::get(const char* name) const {
  const json* v = find(name);
  if (!v) fail(std::string("'") + name + "' is missing");
  return *v;
}

std::string WireFields::text(const char* name, bool required, size_t max) const {
  const json* v = find(name);
  if (!v) {
    if (required) fail(std::string("'") + name + "' is missing");
    return "";
  }
  if (!v->is_string() || v->get_ref<const std::string&>().size() > max)
    fail(std::string("'") + name + "' is not a string of at most " + std::to_string(max) +
         " bytes");
  return v->get<std::string>();
}

int64_t WireFields::count(const char* name, int64_t max) const {
  const json& v = get(name);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
      v.get<int64_t>() < 0 || v.get<int64_t>() > max)
    fail(std::string("'") + name + "' is not a count" +
         (max < std::numeric_limits<int64_t>::max() ? " up to " + std::to_string(max) : ""));
  return v.get<int64_t>();
}

int64_t WireFields::count_or(const char* name, int64_t def, int64_t max) const {
  return find(name) ? count(name, max) : def;
}

double WireFields::number(const char* name, double lo, double hi) const {
  const json& v = get(name);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi)
    fail(std::string("'") + name + "' is not a number in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "]");
  return v.get<double>();
}

double WireFields::number_or(const char* name, double def, double lo, double hi) const {
  return find(name) ? number(name, lo, hi) : def;
}

bool WireFields::boolean(const char* name) const {
  const json& v = get(name);
  if (!v.is_boolean()) fail(std::string("'") + name + "' is not a boolean");
  return v.get<bool>();
}

}  // namespace mmrt::cluster

#include "engine/sla.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"
#include "io/json_fields.h"

namespace mmrt::engine {

const char* on_miss_name(OnMiss m) {
  switch (m) {
    case OnMiss::kDowngrade:
      return "downgrade";
    case OnMiss::kAccept:
      return "accept";
    case OnMiss::kRefuse:
      break;
  }
  return "refuse";
}

SlaConfig SlaConfig::defaults() {
  SlaConfig c;
  c.classes = {
      {"platinum", 300'000'000, 50'000'000, 4.0, OnMiss::kRefuse},
      {"gold", 800'000'000, 100'000'000, 2.0, OnMiss::kDowngrade},
      {"silver", 5'000'000'000, 0, 1.0, OnMiss::kRefuse},
  };
  c.default_class = "silver";
  return c;
}

SlaConfig SlaConfig::from_json(const std::string& text, const std::string& origin) {
  const nlohmann::json j = io::parse_json(text, origin);
  if (!j.is_object() || !j.contains("classes") || !j["classes"].is_array() || j["classes"].empty())
    throw FormatError(origin + ": expected an object with a non-empty \"classes\" list");
  SlaConfig c;
  c.classes.clear();
  for (size_t i = 0; i < j["classes"].size(); ++i) {
    const auto& x = j["classes"][i];
    std::string where = origin + ": classes[" + std::to_string(i) + "]";
    if (!x.is_object() || !x.contains("name") || !x["name"].is_string())
      throw FormatError(where + ": needs a string \"name\"");
    SlaClass s;
    s.name = x["name"].get<std::string>();
    auto num = [&](const char* k, double def) {
      if (!x.contains(k)) return def;
      if (!x[k].is_number() || x[k].get<double>() < 0)
        throw FormatError(where + "." + k + ": expected a number >= 0");
      return x[k].get<double>();
    };
    s.ttft_ns = static_cast<int64_t>(num("ttft_ms", 0) * 1e6);
    s.tpot_ns = static_cast<int64_t>(num("tpot_ms", 0) * 1e6);
    s.weight = num("weight", 1.0);
    const std::string m = x.value("on_miss", "refuse");
    bool known = false;
    for (OnMiss o : {OnMiss::kRefuse, OnMiss::kDowngrade, OnMiss::kAccept})
      if (m == on_miss_name(o)) s.on_miss = o, known = true;
    if (!known)
      throw FormatError(where + ".on_miss: '" + m + "' is not refuse, downgrade or accept");
    if (c.index_of(s.name) >= 0) throw FormatError(where + ": class '" + s.name + "' listed twice");
    c.classes.push_back(s);
  }
  c.default_class = j.value("default_class", c.classes.back().name);
  if (c.index_of(c.default_class) < 0)
    throw FormatError(origin + ": default_class '" + c.default_class +
                      "' is not one of the classes");
  if (j.contains("max_starvation_ms")) {
    if (!j["max_starvation_ms"].is_number() || j["max_starvation_ms"].get<double>() <= 0)
      throw FormatError(origin + ": max_starvation_ms must be a number > 0");
    c.max_starvation_ns = static_cast<int64_t>(j["max_starvation_ms"].get<double>() * 1e6);
  }
  return c;
}

SlaConfig SlaConfig::load(const std::string& path) {
  return from_json(io::read_file(path, {.what = "SLA config", .max_bytes = 1 << 20}), path);
}

int SlaConfig::index_of(const std::string& name) const {
  for (size_t i = 0; i < classes.size(); ++i)
    if (classes[i].name == name) return static_cast<int>(i);
  return -1;
}

int64_t SlaConfig::ttft_budget_ns(const std::string& cls, int64_t explicit_ns) const {
  const int64_t own = cls.empty() ? 0 : get(cls).ttft_ns;
  if (explicit_ns <= 0 || cls.empty()) return explicit_ns > 0 ? explicit_ns : own;
  int64_t cap = own;
  if (!cap)
    for (const SlaClass& c : classes) cap = std::max(cap, c.ttft_ns);
  return cap ? std::min(explicit_ns, cap) : explicit_ns;
}

SlaConfig::MissAction SlaConfig::on_miss(const std::string& cls, int64_t ttft_ns) const {
  const int idx = index_of(cls);
  if (idx < 0) return {};
  const OnMiss rule = classes[static_cast<size_t>(idx)].on_miss;
  if (rule != OnMiss::kDowngrade) return {rule, -1};
  for (size_t j = static_cast<size_t>(idx) + 1; j < classes.size(); ++j)
    if (classes[j].ttft_ns == 0 || ttft_ns <= classes[j].ttft_ns)
      return {OnMiss::kDowngrade, static_cast<int>(j)};
  return {};
}

const SlaClass& SlaConfig::get(const std::string& name) const {
  int i = index_of(name);
  if (i < 0) {
    std::string known;
    for (const auto& c : classes) known += (known.empty() ? "" : ", ") + c.name;
    throw InvalidArgument("unknown SLA class '" + name + "' (known: " + known + ")");
  }
  return classes[static_cast<size_t>(i)];
}

}  // namespace mmrt::engine

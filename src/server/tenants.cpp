#include "server/tenants.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::server {

std::unique_ptr<Tenants> Tenants::load(const std::string& path, const engine::SlaConfig& sla) {
  return from_json(io::read_text_file(path), path, sla);
}

std::unique_ptr<Tenants> Tenants::from_json(const std::string& text, const std::string& origin,
                                            const engine::SlaConfig& sla) {
  const nlohmann::json root = io::parse_json_object(text, origin);
  auto t = std::make_unique<Tenants>();
  if (!root.contains("keys") || !root["keys"].is_array() || root["keys"].empty())
    throw FormatError(origin + ": \"keys\" must be a non-empty list");
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < root["keys"].size(); ++i) {
    const nlohmann::json& k = root["keys"][i];
    const std::string where = origin + ": keys[" + std::to_string(i) + "]";
    if (!k.is_object()) throw FormatError(where + " must be an object");
    const io::JsonFields f(&k, nullptr, "", where);
    const std::string key = f.str_or("key", "");
    const std::string name = f.str_or("tenant", "");
    if (key.size() < 8) throw FormatError(where + ".key must hold at least 8 characters");
    if (name.empty()) throw FormatError(where + ".tenant is missing");
    Tenant tn;
    tn.name = name;
    if (k.contains("classes")) {
      if (!k["classes"].is_array()) throw FormatError(where + ".classes must be a list");
      for (const auto& c : k["classes"]) {
        if (!c.is_string() || sla.index_of(c.get<std::string>()) < 0)
          throw FormatError(where + ".classes: " + io::json_excerpt(c) +
                            " is not an SLA class of the configuration");
        tn.classes.push_back(c.get<std::string>());
      }
    }
    tn.default_class = f.str_or("default_class", "");
    if (!tn.default_class.empty() &&
        (sla.index_of(tn.default_class) < 0 || !allows(tn, tn.default_class)))
      throw FormatError(where + ".default_class '" + tn.default_class +
                        "' is not one of its classes");
    if (tn.default_class.empty() && !allows(tn, sla.default_class))
      tn.default_class = tn.classes.front();  // the configured default is not allowed
    tn.requests_per_second = f.num_or("requests_per_second", 0);
    if (!std::isfinite(tn.requests_per_second) || tn.requests_per_second < 0 ||
        tn.requests_per_second > 1e6)
      throw FormatError(where + ".requests_per_second must be in [0, 1e6]");
    const double max_tokens = f.num_or("max_prompt_tokens_in_flight", 0);
    if (!(max_tokens >= 0 && max_tokens <= 1e12) || max_tokens != std::floor(max_tokens))
      throw FormatError(where + ".max_prompt_tokens_in_flight must be a whole number in [0, 1e12]");
    tn.max_prompt_tokens = static_cast<int64_t>(max_tokens);
    // Keys of one tenant share its settings: the first entry's must equal the later ones'.
    auto it = by_name.find(name);
    size_t index = 0;
    if (it == by_name.end()) {
      index = t->tenants_.size();
      by_name.emplace(name, index);
      t->tenants_.push_back(tn);
    } else {
      index = it->second;
      const Tenant& a = t->tenants_[index];
      if (a.classes != tn.classes || a.default_class != tn.default_class ||
          a.requests_per_second != tn.requests_per_second ||
          a.max_prompt_tokens != tn.max_prompt_tokens)
        throw FormatError(where + ": tenant '" + name +
                          "' appears with different settings under another key");
    }
    if (!t->by_key_.emplace(hash128(key), index).second)
      throw FormatError(where + ": the key appears twice");
  }
  return t;
}

const Tenant* Tenants::authenticate(const std::string* authorization) const {
  if (open()) return &open_;
  if (!authorization) return nullptr;
  const std::string& h = *authorization;
  if (h.size() < 8 || h.compare(0, 7, "Bearer ") != 0) return nullptr;
  auto it = by_key_.find(hash128(std::string_view(h).substr(7)));
  return it == by_key_.end() ? nullptr : &tenants_[it->second];
}

bool Tenants::allows(const Tenant& t, const std::string& cls) {
  return t.classes.empty() || std::find(t.classes.begin(), t.classes.end(), cls) != t.classes.end();
}

bool Tenants::admit_rate(const Tenant& t, int64_t now_ns, double& retry_after_s) {
  if (t.requests_per_second <= 0) return true;
  const double burst = std::max(1.0, t.requests_per_second);
  std::lock_guard<std::mutex> lk(mu_);
  Bucket& b = buckets_[t.name];
  if (b.t_ns == 0) b = {burst, now_ns};
  b.tokens = std::min(
      burst, b.tokens + static_cast<double>(now_ns - b.t_ns) * 1e-9 * t.requests_per_second);
  b.t_ns = now_ns;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  retry_after_s = (1 - b.tokens) / t.requests_per_second;
  return false;
}

}  // namespace mmrt::server

// API keys and tenants (--api-keys FILE): each key names a tenant, the SLA classes it may use,
// its default class and an optional request rate. Without a key file the server is open and
// every request belongs to the tenant "default". The tenant salts the prefix and encoder
// caches (no tenant sees another's cached prompts or images).
//
// {"keys": [{"key": "sk-...", "tenant": "acme", "classes": ["gold", "silver"],
//            "default_class": "silver", "requests_per_second": 5}]}
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "engine/sla.h"

namespace mmrt::server {

struct Tenant {
  std::string name = "default";
  std::vector<std::string> classes;  // empty: every class
  std::string default_class;         // "": the SLA config's default
  double requests_per_second = 0;    // 0: no limit (bursts of up to max(1, rate) requests)
  // Prompt tokens (text and media) its unfinished requests may hold (0: the server's
  // --tenant-max-tokens); a request over it is refused with 429.
  int64_t max_prompt_tokens = 0;
};

class Tenants {
 public:
  Tenants() = default;  // open: one tenant, no keys
  // FormatError naming the file and field (unknown classes, duplicate keys, bad rates).
  static std::unique_ptr<Tenants> load(const std::string& path, const engine::SlaConfig& sla);
  static std::unique_ptr<Tenants> from_json(const std::string& text, const std::string& origin,
                                            const engine::SlaConfig& sla);

  bool open() const { return by_key_.empty(); }
  // The tenant of an Authorization header ("Bearer KEY"); nullptr for a missing or unknown
  // key (the caller answers 401). Open servers give the default tenant.
  const Tenant* authenticate(const std::string* authorization) const;
  // A named class the tenant may use.
  static bool allows(const Tenant& t, const std::string& cls);
  // The class a request of `t` asks for: the one it names (`chosen`: sla_class or service_tier),
  // else the tenant's default, else `requested` (the config's default).
  static std::string class_of(const Tenant& t, const std::string& requested, bool chosen) {
    return chosen || t.default_class.empty() ? requested : t.default_class;
  }
  // One request of `t` at `now_ns` under its rate: false (and the wait) when over it.
  bool admit_rate(const Tenant& t, int64_t now_ns, double& retry_after_s);

 private:
  std::vector<Tenant> tenants_;
  std::unordered_map<Hash128, size_t, Hash128Hasher> by_key_;  // hash of the key -> tenant
  Tenant open_;
  struct Bucket {
    double tokens = 0;
    int64_t t_ns = 0;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace mmrt::server

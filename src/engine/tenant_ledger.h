// The prompt tokens each tenant's admitted, unfinished requests hold, against a cap per tenant
// (EngineConfig::tenant_max_prompt_tokens, or the request's own): one tenant cannot fill the
// engine and get the others' requests refused. Plain books; the engine keeps them under its
// books lock.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace mmrt::engine {

class TenantLedger {
 public:
  // Charges `tokens` to `tenant` unless that passes `cap` (<= 0: no cap). A tenant holding
  // nothing is always charged (a request larger than the cap still runs alone). False, with the
  // reason, when refused.
  bool charge(const std::string& tenant, int64_t tokens, int64_t cap, std::string& why);
  // Gives back what an ended request was charged.
  void release(const std::string& tenant, int64_t tokens);
  int64_t held(const std::string& tenant) const;

 private:
  std::unordered_map<std::string, int64_t> held_;
};

}  // namespace mmrt::engine

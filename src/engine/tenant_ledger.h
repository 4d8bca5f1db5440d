// What each tenant's unfinished requests hold (the engine: prompt tokens; the server: media
// bytes), against a cap per tenant: one tenant cannot fill the server and get the others'
// requests refused. Plain books; the owner keeps them under its lock.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

namespace mmrt::engine {

class TenantLedger {
 public:
  explicit TenantLedger(std::string unit) : unit_(std::move(unit)) {}  // "prompt tokens"
  // Charges `tokens` to `tenant` unless that passes `cap` (<= 0: no cap). A tenant holding
  // nothing is always charged (a request larger than the cap still runs alone). False, with the
  // reason, when refused.
  bool charge(const std::string& tenant, int64_t tokens, int64_t cap, std::string& why);
  // Gives back what an ended request was charged.
  void release(const std::string& tenant, int64_t tokens);
  int64_t held(const std::string& tenant) const;

 private:
  std::string unit_;
  std::unordered_map<std::string, int64_t> held_;
};

}  // namespace mmrt::engine

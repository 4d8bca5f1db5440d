#include "engine/tenant_ledger.h"

#include <cstdio>

namespace mmrt::engine {

bool TenantLedger::charge(const std::string& tenant, int64_t tokens, int64_t cap,
                          std::string& why) {
  int64_t& held = held_[tenant];
  if (cap > 0 && held > 0 && held + tokens > cap) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "tenant '%.64s' has %lld %s in flight, and this request's %lld would pass its "
                  "cap of %lld: retry when some of its requests have finished",
                  tenant.c_str(), static_cast<long long>(held), unit_.c_str(),
                  static_cast<long long>(tokens), static_cast<long long>(cap));
    why = buf;
    if (held == 0) held_.erase(tenant);
    return false;
  }
  held += tokens;
  return true;
}

void TenantLedger::release(const std::string& tenant, int64_t tokens) {
  auto it = held_.find(tenant);
  if (it != held_.end() && (it->second -= tokens) <= 0) held_.erase(it);
}

int64_t TenantLedger::held(const std::string& tenant) const {
  auto it = held_.find(tenant);
  return it == held_.end() ? 0 : it->second;
}

}  // namespace mmrt::engine

// The slo policy. Placeholder ordering until the SLA work lands: earliest deadline first, then
// arrival. Requests without a deadline sort after those with one.
#include <algorithm>

#include "engine/policy.h"

namespace mmrt::engine {

namespace {
class SloPolicy : public Policy {
 public:
  const char* name() const override { return "slo"; }
  static bool cmp(const Request* a, const Request* b) {
    int64_t da = a->deadline_ns ? a->deadline_ns : INT64_MAX, db = b->deadline_ns ? b->deadline_ns : INT64_MAX;
    if (da != db) return da < db;
    return a->arrival_ns != b->arrival_ns ? a->arrival_ns < b->arrival_ns : a->id < b->id;
  }
  void order_waiting(std::vector<Request*>& w, int64_t) override { std::stable_sort(w.begin(), w.end(), cmp); }
  void order_running(std::vector<Request*>& r, int64_t) override { std::stable_sort(r.begin(), r.end(), cmp); }
};
}  // namespace

std::unique_ptr<Policy> make_slo_policy() { return std::make_unique<SloPolicy>(); }

}  // namespace mmrt::engine

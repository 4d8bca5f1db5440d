#include "engine/policy.h"

#include <algorithm>

#include "core/error.h"

namespace mmrt::engine {

namespace {

bool by_arrival(const Request* a, const Request* b) {
  return a->arrival_ns != b->arrival_ns ? a->arrival_ns < b->arrival_ns : a->id < b->id;
}

class FcfsPolicy : public Policy {
 public:
  const char* name() const override { return "fcfs"; }
  void order_waiting(std::vector<Request*>& w, int64_t) const override {
    std::stable_sort(w.begin(), w.end(), by_arrival);
  }
  void order_running(std::vector<Request*>& r, int64_t) const override {
    std::stable_sort(r.begin(), r.end(), by_arrival);
  }
};

class PriorityPolicy : public Policy {
 public:
  const char* name() const override { return "priority"; }
  static bool cmp(const Request* a, const Request* b) {
    return a->priority != b->priority ? a->priority > b->priority : by_arrival(a, b);
  }
  void order_waiting(std::vector<Request*>& w, int64_t) const override {
    std::stable_sort(w.begin(), w.end(), cmp);
  }
  void order_running(std::vector<Request*>& r, int64_t) const override {
    std::stable_sort(r.begin(), r.end(), cmp);
  }
  bool serves_first(const Request& q, const Request& in, int64_t) const override {
    return q.priority >= in.priority;
  }
};

}  // namespace

std::unique_ptr<Policy> make_slo_policy(const PolicyContext& ctx);  // policy_slo.cpp

std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyContext& ctx) {
  if (name == "fcfs") return std::make_unique<FcfsPolicy>();
  if (name == "priority") return std::make_unique<PriorityPolicy>();
  if (name == "slo") return make_slo_policy(ctx);
  throw InvalidArgument("unknown scheduling policy '" + name + "' (fcfs, priority or slo)");
}

std::vector<std::string> policy_names() {
  return {"fcfs", "priority", "slo"};
}

}  // namespace mmrt::engine

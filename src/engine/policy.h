// Scheduling policies: small swappable objects behind one interface (fcfs, priority, slo).
// A policy only orders requests; the scheduler does the admitting, budgeting and preempting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"

namespace mmrt::engine {

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  // Front first: the order in which prompts get step budget: waiting requests are admitted in
  // it, and running requests still in their prefill get their next chunk in it.
  virtual void order_waiting(std::vector<Request*>& waiting, int64_t now_ns) const = 0;
  // Front first: the order in which running requests decode (get step budget first); the back
  // is preempted first when KV memory runs out.
  virtual void order_running(std::vector<Request*>& running, int64_t now_ns) const = 0;
  // Admission's queue model: whether `queued` (waiting, or running its prefill) is served
  // before `incoming`, a request arriving now. Default: everything queued goes first.
  virtual bool serves_first(const Request& queued, const Request& incoming, int64_t now_ns) const {
    (void)queued, (void)incoming, (void)now_ns;
    return true;
  }
};

class CostModel;

struct PolicyContext {
  const CostModel* cost = nullptr;             // slo: estimates each request's remaining work
  int64_t max_starvation_ns = 10'000'000'000;  // slo: the aging bound
  int32_t step_tokens = 512;  // slo: the step budget (a full step is the urgency guard)
};

// "fcfs" (arrival order), "priority" (Request::priority, then arrival), "slo" (weighted deadline
// slack with an aging bound, see policy_slo.cpp). InvalidArgument for other names.
std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyContext& ctx = {});
std::vector<std::string> policy_names();

}  // namespace mmrt::engine

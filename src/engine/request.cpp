#include "engine/request.h"

#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"

namespace mmrt::engine {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kNone:
      return "none";
    case Outcome::kFinished:
      return "finished";
    case Outcome::kStopped:
      return "stopped";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kFailed:
      return "failed";
  }
  return "?";
}

void Request::resume(std::vector<int32_t> ids, int64_t vocab) {
  if (ids.empty()) return;
  if (static_cast<int64_t>(ids.size()) >= sampling.max_tokens)
    throw InvalidArgument("resume_ids holds " + std::to_string(ids.size()) +
                          " tokens: nothing left to generate within max_tokens " +
                          std::to_string(sampling.max_tokens));
  for (int32_t t : ids)
    if (t < 0 || t >= vocab)
      throw InvalidArgument("resume_ids: token id " + std::to_string(t) + " is outside [0, " +
                            std::to_string(vocab) + ")");
  output = std::move(ids);
  resumed = static_cast<int64_t>(output.size());
}

void start_clock(Request& r, int64_t arrival_ns, int64_t read_ns, int64_t now) {
  r.arrival_ns = arrival_ns > 0 && arrival_ns <= now ? arrival_ns : now;
  r.timeline.add(Event::kArrived, r.arrival_ns);
  if (read_ns >= r.arrival_ns && read_ns <= now) r.timeline.add(Event::kRequestRead, read_ns);
  r.timeline.add(Event::kReceived, now);
}

void apply_promise(Request& r, const GenerateRequest& g, const SlaConfig& sla) {
  r.sla_class = g.sla_class;
  r.priority = g.priority;
  if (!r.sla_class.empty()) {
    const SlaClass& cls = sla.get(r.sla_class);
    r.weight = cls.weight;
    r.deadline_ns = cls.ttft_ns ? r.arrival_ns + cls.ttft_ns : 0;
    r.tpot_target_ns = cls.tpot_ns;
  }
  if (g.ttft_deadline_ns < 0 || g.tpot_target_ns < 0)
    throw InvalidArgument("deadlines and TPOT targets must not be negative");
  if (g.ttft_deadline_ns) {  // (without a class, as from `mmrt generate`, it stands)
    r.deadline_ns = r.arrival_ns + sla.ttft_budget_ns(r.sla_class, g.ttft_deadline_ns);
    r.own_deadline = true;
  }
  if (g.tpot_target_ns) {  // tightens the class's, never loosens it
    r.tpot_target_ns =
        r.tpot_target_ns ? std::min(r.tpot_target_ns, g.tpot_target_ns) : g.tpot_target_ns;
    r.own_tpot = true;
  }
}

}  // namespace mmrt::engine

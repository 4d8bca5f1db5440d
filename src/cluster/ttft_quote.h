// The router's own prediction of a request's first token on each worker, and its admission
// decision (docs/scale-out.md, "Admission at the router"). Each worker publishes with its load
// gauge its admission's quote (engine::Quote): per class, the first token of a request of no
// work of its own (the queue its policy serves first, the step in flight, the class's learned
// bias), and the price of a request's own work. The router predicts
//   queue   = the quote's ahead_ms, less the time since it came (the worker drains its queue
//             meanwhile; not below its floor: an empty step and the margin), + the own work of
//             the requests this router sent it since;
//   own     = bias x (prompt tokens the worker's prefix cache does not hold x token price
//             + patches and items of media its encoder cache does not hold x their prices);
// sends the request to the first worker in its cost order whose queue + own meets the class's
// promise, and when every worker is quoted and none meets it, even by its quote alone (without
// the work sent since), and the class refuses a miss, it refuses at once, as a single server
// would (429, with the predicted time until the best worker could take it, or with no retry hint
// when the request's own work alone is over the promise). A false refusal costs a request; a
// missed one only a round trip to a worker that refuses it.
// The worker's own admission still decides the requests the router sends (it sees its queue as
// it is); the router's prediction orders them and spares the round trips of a hopeless one.
// Plain functions and one small ledger: unit-tested apart from any process.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/admission.h"
#include "engine/sla.h"

namespace mmrt::server {
class Tenants;
struct Tenant;
struct ApiOptions;
}  // namespace mmrt::server

namespace mmrt::cluster {

// A request's own work on one worker: what it would compute there before its first token.
struct OwnWork {
  double tokens = 0;   // prompt tokens past what the worker's prefix cache holds
  double patches = 0;  // encoder patches of media its encoder cache does not hold
  double items = 0;    // ... and how many such items
  double pairs = 0;    // the query-key pairs of those tokens' attention (engine::causal_pairs)
};

struct WorkerTtft {
  bool known = false;  // the worker quoted the class
  double queue_ms = 0, own_ms = 0;
  double sent_ms = 0;      // the work this router sent it since its quote (in no quote yet)
  double own_idle_ms = 0;  // own work on the worker idle (whether any wait could make it)
  double total_ms() const { return queue_ms + sent_ms + own_ms; }
  // What the worker's latest quote alone says: the work sent since may have been served
  // already, so only this decides a refusal at the router.
  double quoted_ms() const { return queue_ms + own_ms; }
};
// `age_ms`: how long ago the quote came; `sent_ms`: the own work of the requests this router
// sent the worker since.
WorkerTtft predict_ttft(const engine::Quote& q, const std::string& cls, double age_ms,
                        double sent_ms, const OwnWork& w);

// A request's promise as the worker will apply it: its class (named, or its tenant's or the
// config's default), the budget (the class's TTFT, tightened by an explicit ttft_deadline_ms),
// and whether a miss is refused (the class's rule at the best prediction; always for a deadline
// of the request's own).
struct Promise {
  std::string cls;
  double budget_ms = 0;
  bool own_deadline = false;
};

// The workers' keys, tenants and classes, as the router reads them.
class ClassBook {
 public:
  // `model_id`: the "model" requests name; the workers' key file ("": an open cluster) and SLA
  // classes ("": the built-in ones). FormatError / NotFound as `mmrt serve` would give them.
  ClassBook(const std::string& model_id, const std::string& api_keys_file,
            const std::string& sla_file);
  ~ClassBook();
  // The tenant of an Authorization header (nullptr: the worker answers 401).
  const server::Tenant* tenant(const std::string* authorization) const;
  // The API's options as a worker parses requests with them.
  const server::ApiOptions& api() const { return *api_; }
  // Nothing when there is no promise to keep or the worker will refuse the request anyway (an
  // unknown key, a class the tenant may not use, a malformed body): the worker answers it.
  std::optional<Promise> promise(const nlohmann::json& body,
                                 const std::string* authorization) const;
  // Whether the class refuses a request predicted at `ttft_ms` (past its promise).
  bool refuses(const Promise& p, double ttft_ms) const;

 private:
  engine::SlaConfig sla_;
  std::unique_ptr<server::ApiOptions> api_;
  std::unique_ptr<server::Tenants> tenants_;
};

// The router's decision. `moved`: the front changed; `refuse`: no worker can meet the promise
// and the class refuses (with `reason` and `retry_after_s`, -1: no retry helps); `front_ms`:
// the prediction on the worker now first (-1: not known).
struct TtftChoice {
  bool moved = false, refuse = false;
  int retry_after_s = 0;
  std::string reason;
  double front_ms = -1;
};
// `pred[i]` is worker i's prediction (`ids[i]` its id); `order` the cost order, in which the
// first worker not predicted to miss the promise (one that meets it, or one without a quote,
// whose own admission decides) moves to the front. When every worker is predicted to miss, the
// one whose quote alone comes lowest goes first; the router refuses only when even that misses
// by over kRefuseSlack (a burst it sent since the quotes never refuses by itself, nor does a
// near miss: the workers decide). `own_known`: the
// predictions count the request's own work (else they are its queue alone, as a worker's precheck,
// and say so).
// The router refuses only past the budget by this share (a borderline prediction goes to the
// worker, whose admission sees its queue as it is now).
inline constexpr double kRefuseSlack = 0.1;
TtftChoice ttft_order(std::vector<size_t>& order, const std::vector<WorkerTtft>& pred,
                      const std::vector<std::string>& ids, const Promise& p, const ClassBook& book,
                      bool own_known = true);

// The own work (ms) of the requests this router sent each worker, by when it sent them: those
// sent after the worker's latest quote came are not in it yet. Thread-safe.
class SentWork {
 public:
  void add(const std::string& id, int64_t at_ns, double own_ms);
  // The work sent to `id` after `since_ns`.
  double since(const std::string& id, int64_t since_ns);
  // The request sent at `at_ns` never queued there (the worker refused it).
  void take_back(const std::string& id, int64_t at_ns);

  static constexpr int64_t kKeepNs = 5'000'000'000;  // a worker without quotes: kept this long

 private:
  std::mutex mu_;
  std::map<std::string, std::deque<std::pair<int64_t, double>>> sent_;
};

}  // namespace mmrt::cluster
